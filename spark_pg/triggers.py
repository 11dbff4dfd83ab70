"""Trigger rules: read and validate the YAML file, and write the rules to ``spark.trigger_rules``.

The file format follows the seeds::

    version: 1
    rules:
      - name: destructive_commands
        pattern: "rm -rf|drop table|truncate"      # case-insensitive POSIX regular expression
        context_pattern: "bash|sql"                # optional: must match too
        surface: [seed:safety-destructive-ops]     # memory keys (the tenant's or the cold-start pack's)
        priority: critical                         # critical | high | normal | background
        interrupt: true                            # may block the call (advisor, opt-in)
    learned: []                                    # written by the system, not by hand

Patterns run inside every retrieval, so a pattern that could be slow to run or to compile is refused here,
with the rule's name, before it reaches the database (which checks again: ``spark._trigger_pattern_problem``).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import yaml
from psycopg.types.json import Jsonb

from spark_pg import queries
from spark_pg.errors import InputError
from spark_pg.records import MAX_KEY, PRIORITIES, json_problem
from spark_pg.refusals import one_line
from spark_pg.rowfiles import StrictYamlLoader, yaml_error_line, yaml_error_message

RULE_KEYS = frozenset(
    {
        "name",
        "pattern",
        "context_pattern",
        "surface",
        "priority",
        "interrupt",
        "confidence",
        "shadow",
        "metadata",
    }
)
FILE_KEYS = frozenset({"version", "rules", "learned"})
NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
MAX_PATTERN = 500
# PostgreSQL compiles a bounded repetition x{m,n} by copying x n times, and its NFA clean-up grows faster
# than the copies (each optional copy can be skipped, so its empty transitions reach all those after it):
# '(a|b){0,255}' x 30 took ~1 s to compile. Written out, a pattern may be at most twice the length limit.
MAX_WRITTEN_OUT = 2 * MAX_PATTERN
_BOUND = re.compile(r"\{([0-9]+)(,([0-9]*))?\}")  # {m} {m,} {m,n}: PostgreSQL's bounds ({,n} is literal)
_HUGE = 100_000  # any bound count with more than 6 digits (PostgreSQL allows 255 at most)
_MAX_BOUND = 255  # PostgreSQL's largest repetition count (RE_DUPMAX)
_CHR_MAX = 0x7FFFFFFE  # PostgreSQL's largest character code in an escape
# PostgreSQL's ARE escapes that Python's re lacks or reads otherwise, as Python of the same shape: the
# constraint escapes \m (start of a word), \M (end of one), \y (either) and \Y (not a word boundary) are
# zero-width like Python's \b (which, like PostgreSQL, refuses a quantifier on one); \b, \B and \e are the
# characters backspace, backslash and escape in PostgreSQL
_CONSTRAINTS = {"m": r"(?=\w)\b", "M": r"(?<=\w)\b", "y": r"\b", "Y": r"\B", "A": r"\A", "Z": r"\Z"}
_CHARACTERS = {"b": 0x08, "B": 0x5C, "e": 0x1B}
# PostgreSQL's [:class:] names
_CLASSES = frozenset({"alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print"})
_CLASSES |= {"punct", "space", "upper", "xdigit", "word"}
_OPTIONS = re.compile(r"\(\?([bceimnpqstwx]+)\)")  # PostgreSQL's embedded options (only at the start)
_SAME = frozenset("afnrtvdswDSW0123456789")  # \0: octal alike; \1 to \9 are refused before (backreferences)
_DIGITS = {
    "x": re.compile(r"[0-9A-Fa-f]{1,255}"),
    "u": re.compile(r"[0-9A-Fa-f]{4}"),
    "U": re.compile(r"[0-9A-Fa-f]{8}"),
}
_UNSAFE = (
    (re.compile(r"\\[1-9]"), "uses a backreference (\\1 ... \\9), which can take exponential time"),
    (re.compile(r"\(\?[=!<]"), "uses a lookaround ((?=, (?!, (?<), which is not allowed"),
)
NESTED = "nests quantifiers (like (a+)+), which can take exponential time"


class TriggerRuleError(InputError):
    """A trigger rule file or rule is invalid; nothing from that file was written."""

    def __init__(self, source: str, rule: str, message: str) -> None:
        self.source = source
        self.rule = rule
        super().__init__(f"{source}: {rule}: {message}")


@dataclass(frozen=True)
class TriggerRule:
    name: str
    pattern: str
    surface: tuple[str, ...]
    context_pattern: str | None = None
    priority: str = "normal"
    interrupt: bool = False
    origin: str = "static"
    confidence: float = 1.0
    shadow: bool = False
    metadata: Mapping[str, Any] | None = None


def _count(digits: str) -> int:
    return _HUGE if len(digits) > 6 else min(int(digits), _HUGE)


def written_out_size(pattern: str) -> int:
    """How many atoms (a character, an escape, a bracket expression) ``pattern`` has once every bounded
    repetition is written out: ``(a|b){0,255}`` is 510, ``((a|b){2}c){3}`` is 15. A group counts its atoms;
    ``{m}`` and ``{m,n}`` multiply what they follow by m and n, ``{m,}`` by m + 1; ``*``, ``+`` and ``?``
    copy nothing. Stops counting once past :data:`MAX_WRITTEN_OUT`. The database's copy of this count is
    spark._trigger_pattern_problem (sql/045-triggers.sql): change both together."""
    return _walk(pattern)[0]


def _walk(pattern: str) -> tuple[int, bool]:
    """(written_out_size, whether it nests quantifiers), in one pass over the pattern's pieces.

    It nests them when a group holding an unbounded repetition (``*``, ``+`` or ``{m,}``, at any depth) is
    itself repeated (``*``, ``+`` or a bound): ``(a+)+``, ``((a+))*``, ``(x(ab)*){2,5}``; not ``(a+)?``,
    nor ``((a|b){0,9}c){0,9}``, whose bounded repetitions the written-out size limits. Escapes and bracket
    expressions are characters (``(\\+)+`` does not nest). The database's copy is in the same walk of
    spark._trigger_pattern_problem."""
    saved: list[int] = []  # the count before each open group
    total = 0  # atoms so far in the innermost open group (or the pattern)
    last = 0  # atoms of the piece a bound would repeat (0: none, e.g. after | or ^)
    held: list[bool] = []  # for each open group: whether what encloses it holds an unbounded repetition
    inner = False  # the innermost open group (or the pattern) holds an unbounded repetition so far
    closed = False  # the last piece is a group that holds one
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        repeats = closed
        closed = False
        if c == "\\":
            i += 1
            total, last = total + 1, 1
        elif c == "[":  # to its closing ], past [:class:] [=x=] [.x.], escapes, and a leading ] or ^]
            i += 1 if pattern[i : i + 1] == "^" else 0
            i += 1 if pattern[i : i + 1] == "]" else 0
            while i < n and pattern[i] != "]":
                if pattern[i] == "[" and pattern[i + 1 : i + 2] in (":", "=", "."):
                    end = pattern.find(pattern[i + 1] + "]", i + 2)
                    i = n if end < 0 else end + 2
                else:
                    i += 2 if pattern[i] == "\\" else 1
            i += 1
            total, last = total + 1, 1
        elif c == "(":
            saved.append(total)
            held.append(inner)
            total, last, inner = 0, 0, False
        elif c == ")" and saved:
            last = total
            total = saved.pop() + total
            closed = inner
            inner = held.pop() or inner
        elif c == "{" and (bound := _BOUND.match(pattern, i - 1)):
            if repeats:
                return total + sum(saved), True
            low, comma, high = bound.groups()
            inner = inner or (comma is not None and not high)  # {m,} is unbounded; {m,n} is counted above
            times = _count(low) if comma is None else _count(high) if high else _count(low) + 1
            times = max(times, 1)  # x{0} still gets compiled
            total, last = total + last * (times - 1), last * times
            i = bound.end()
            if total + sum(saved) > MAX_WRITTEN_OUT:
                break
        elif c in "*+":
            if repeats:
                return total + sum(saved), True
            inner = True
        elif c == "?":
            pass
        elif c in "|^$":
            last = 0
        else:
            total, last = total + 1, 1
    return total + sum(saved), False


def _python_char(code: int) -> str:
    return f"\\U{min(code, 0x10FFFF):08x}"  # past Unicode: only the syntax is checked, any character will do


def as_python_pattern(pattern: str) -> tuple[str, list[int]] | str:
    r"""``pattern`` (a PostgreSQL ARE) rewritten for Python's ``re``, to check its syntax there, and where
    each character of the rewrite came from in ``pattern`` (plus its end); or, as a str, why PostgreSQL
    refuses it where Python would not.

    One walk, escape by escape (``\\m`` is a backslash, then an m). Outside a bracket expression the
    constraint escapes ``\m \M \y \Y`` (and ``[[:<:]] [[:>:]]``, older spellings of ``\m \M``) become
    zero-width Python of the same shape (_CONSTRAINTS); inside one PostgreSQL refuses them (and ``\A \Z``).
    ``\b \B \e \cX \xhhh \uhhhh \Uhhhhhhhh`` become the character they stand for; any other escaped ASCII
    letter or digit PostgreSQL does not know is refused (Python reads some, like ``\N{...}``). A ``{`` not
    followed by a digit is text, as in PostgreSQL (Python reads ``{,5}`` as a bound); one followed by a
    digit must be a bound with counts up to 255. In a bracket expression ``[:class:]`` must name a class
    and ``[=x=]`` hold one character. Python's own syntax that PostgreSQL lacks is refused: ``(?`` groups
    other than ``(?:`` and ``(?#comment)`` (options only at the start), possessive quantifiers (``a*+``).
    The directors ``***=`` (the rest is text) and ``***:`` are read. Not mirrored (the database refuses
    them): a range chained to another (``[a-c-e]``), an unknown named character (``[[.ab.]]``)."""
    if pattern.startswith("***="):
        return "", [len(pattern)]
    out: list[str] = []
    where: list[int] = []

    def put(text: str, at: int) -> None:
        out.append(text)
        where.extend([at] * len(text))

    i, n = (4, len(pattern)) if pattern.startswith("***:") else (0, len(pattern))
    if options := _OPTIONS.match(pattern, i):
        letters = options.group(1)
        if "q" in letters:  # the rest is text
            return "", [n]
        if "b" in letters or "e" in letters:
            return f"has the embedded option {options.group()}, which leaves the advanced syntax checked here"
        if letters.rfind("x") > letters.rfind("t"):  # expanded syntax (t: tight, the default), as Python's
            put("(?x)", i)
        i = options.end()
    bracket = -1  # where the open bracket expression's contents start, or -1 outside one
    quantified = False  # the last piece was a quantifier (so a + would make it possessive)
    while i < n:
        at, c = i, pattern[i]
        i += 1
        if c == "\\" and i < n:
            e = pattern[i]
            i += 1
            if e in _CONSTRAINTS:
                if bracket >= 0:
                    return f"has the constraint escape \\{e} inside a bracket expression (at position {at})"
                put(_CONSTRAINTS[e], at)
            elif e in _CHARACTERS:
                put(_python_char(_CHARACTERS[e]), at)
            elif e == "c" and i < n:
                put(_python_char(ord(pattern[i]) & 0o37), at)
                i += 1
            elif e in _DIGITS and (digits := _DIGITS[e].match(pattern, i)):
                code = int(digits.group(), 16) & 0xFFFFFFFF  # PostgreSQL's count wraps at 32 bits
                if code > _CHR_MAX:
                    return (
                        f"has the escape \\{e}{digits.group()} past the largest character (at position {at})"
                    )
                put(_python_char(code), at)
                i = digits.end()
            elif e.isascii() and e.isalnum() and e not in _SAME:
                return f"has the invalid escape \\{e} (at position {at})"
            else:
                put(c + e, at)
            quantified = False
        elif bracket >= 0:
            if c == "[" and pattern[i : i + 1] in (":", "=", "."):
                kind = pattern[i]
                end = pattern.find(kind + "]", i + 1)
                if end < 0:
                    return f"has an unclosed [{kind} in a bracket expression (at position {at})"
                name, i = pattern[i + 1 : end], end + 2
                if kind == ":" and name not in _CLASSES:
                    return f"has the unknown character class [:{name}:] (at position {at})"
                if not name or (kind == "=" and len(name) != 1):
                    return f"has the invalid collating element [{kind}{name}{kind}] (at position {at})"
                # a class (not a range's end, like \w in Python), or a character: [.space.] is one too
                put(_python_char(ord(name) if len(name) == 1 else 0) if kind == "." else r"\w", at)
                continue
            if c == "]" and at > bracket:
                bracket = -1
            put(c, at)
        elif c == "[" and pattern.startswith(("[[:<:]]", "[[:>:]]"), at):  # PostgreSQL's older \m and \M
            put(_CONSTRAINTS["m" if pattern[at + 4] == "<" else "M"], at)
            i = at + 7
            quantified = False
        elif c == "[":
            i += 1 if pattern[i : i + 1] == "^" else 0
            bracket = i  # a ] right after [ or [^ is a character
            put(pattern[at:i], at)
            quantified = False
        elif c == "(" and pattern[i : i + 1] == "?":
            if pattern[i + 1 : i + 2] == "#":  # a comment, to the next )
                end = pattern.find(")", i)
                i = n if end < 0 else end + 1
                put(pattern[at:i], at)
            elif pattern[i + 1 : i + 2] in (":", "=", "!", "<"):  # lookarounds are refused before
                put(pattern[at : i + 2], at)
                i += 2
            else:
                return f"has the group {pattern[at : i + 2]} PostgreSQL does not know (at position {at})"
            quantified = False
        elif c in "*+?":
            if c == "+" and quantified:
                return f"has a possessive quantifier (+ after a quantifier, at position {at})"
            put(c, at)
            quantified = True
        elif c == "{" and "0" <= pattern[i : i + 1] <= "9":  # a bound: {m} {m,} {m,n}, 0 <= m <= n <= 255
            bound = _BOUND.match(pattern, at)
            if bound is None and "}" not in pattern[i:]:
                return f"has an unclosed bound {{ (at position {at})"
            low, _, high = bound.groups() if bound else ("", None, None)
            if bound is None or int(low) > _MAX_BOUND or (high and not int(low) <= int(high) <= _MAX_BOUND):
                return (
                    f"has an invalid repetition count {{m,n}} (at position {at}; 0 <= m <= n <= {_MAX_BOUND})"
                )
            put(bound.group(), at)
            i = bound.end()
            quantified = True
        else:
            # a { is text, as in PostgreSQL; Python would read {,5} as a bound
            put("\\{" if c == "{" else c, at)
            quantified = False
    where.append(n)
    return "".join(out), where


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be a trigger pattern, or None when it can (mirrors the database's check)."""
    if not pattern:
        return "is empty"
    if len(pattern) > MAX_PATTERN:
        return f"is {len(pattern)} characters; the limit is {MAX_PATTERN}"
    for check, problem in _UNSAFE:
        if check.search(pattern):
            return problem
    size, nested = _walk(pattern)
    if nested:
        return NESTED
    if size > MAX_WRITTEN_OUT:
        return (
            f"repeats too much: with its bounded repetitions ({{m,n}}) written out it is over "
            f"{MAX_WRITTEN_OUT} atoms long, which compiles slowly"
        )
    python = as_python_pattern(pattern)
    if isinstance(python, str):
        return f"is not a valid regular expression: {python}"
    rewritten, where = python
    try:
        with warnings.catch_warnings():
            # Python's re reads a POSIX class ([[:alpha:]], valid where the pattern runs) as a possible
            # nested set and warns; the warning is about Python's future syntax, not this pattern
            warnings.simplefilter("ignore", FutureWarning)
            re.compile(rewritten)
    except re.error as exc:
        at = "" if exc.pos is None else f" at position {where[min(exc.pos, len(where) - 1)]}"
        return f"is not a valid regular expression: {exc.msg}{at}"
    except (OverflowError, RecursionError) as exc:  # Overflow: a count past Python's limit
        return f"is not a valid regular expression: {exc}"
    return None


def _rule(raw: Any, where: str, source: str, *, origin: str) -> TriggerRule:
    if not isinstance(raw, Mapping):
        raise TriggerRuleError(source, where, f"must be a mapping, not {type(raw).__name__}")
    name = raw.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise TriggerRuleError(
            source, where, f"name must be 1 to 64 letters, digits or _ . : -, got {name!r}"
        )
    where = f"rule {name!r}"
    unknown = sorted((k for k in raw if k not in RULE_KEYS), key=repr)
    if unknown:
        raise TriggerRuleError(
            source, where, f"unknown key {unknown[0]!r}; allowed: {', '.join(sorted(RULE_KEYS))}"
        )
    patterns: dict[str, str | None] = {}
    for key in ("pattern", "context_pattern"):
        value = raw.get(key)
        if value is None and key == "context_pattern":
            patterns[key] = None
            continue
        if not isinstance(value, str):
            raise TriggerRuleError(source, where, f"{key} must be a string, not {type(value).__name__}")
        problem = pattern_problem(value)
        if problem:
            raise TriggerRuleError(source, where, f"{key} {value!r} {problem}")
        if key == "pattern" and _matches_nothing_in_particular(value):
            raise TriggerRuleError(
                source, where, f"pattern {value!r} matches an empty text, so every call: say what it seeks"
            )
        patterns[key] = value
    surface = raw.get("surface")
    if isinstance(surface, str):
        surface = [surface]
    if (
        not isinstance(surface, list)
        or not 1 <= len(surface) <= 50
        or not all(isinstance(k, str) and k.strip() and len(k) <= MAX_KEY for k in surface)
    ):
        raise TriggerRuleError(
            source, where, f"surface must list 1 to 50 memory keys of 1 to {MAX_KEY} characters"
        )
    padded = next((k for k in surface if k != k.strip()), None)
    if padded is not None:  # " k " names no memory, and the rule would surface nothing without a word
        raise TriggerRuleError(source, where, f"surface key {padded!r} starts or ends with whitespace")
    priority = raw.get("priority", "normal")
    if priority not in PRIORITIES:
        raise TriggerRuleError(source, where, f"priority {priority!r} is not one of {', '.join(PRIORITIES)}")
    flags: dict[str, bool] = {}
    for key in ("interrupt", "shadow"):
        value = raw.get(key, origin == "learned" if key == "shadow" else False)
        if not isinstance(value, bool):
            raise TriggerRuleError(source, where, f"{key} must be true or false, got {value!r}")
        flags[key] = value
    confidence = raw.get("confidence", 1.0 if origin == "static" else 0.5)
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
        raise TriggerRuleError(source, where, f"confidence must be a number from 0 to 1, got {confidence!r}")
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise TriggerRuleError(source, where, "metadata must be a mapping")
    problem = json_problem(metadata)
    if problem:
        raise TriggerRuleError(source, where, f"metadata {problem}")
    pattern = patterns["pattern"]
    assert pattern is not None
    return TriggerRule(
        name=name,
        pattern=pattern,
        surface=tuple(surface),
        context_pattern=patterns["context_pattern"],
        priority=str(priority),
        interrupt=flags["interrupt"],
        origin=origin,
        confidence=float(confidence),
        shadow=flags["shadow"],
        metadata=dict(metadata),
    )


def _matches_nothing_in_particular(pattern: str) -> bool:
    """Whether ``pattern`` matches the empty text (``.*``, ``a|``, ``x?``): then it matches every call."""
    with warnings.catch_warnings():  # POSIX classes ([[:alpha:]]) warn in Python; valid in PostgreSQL
        warnings.simplefilter("ignore")
        try:
            return re.search(pattern, "") is not None
        except re.error:  # PostgreSQL's dialect where Python's differs: spark.put_trigger_rule checks it
            return False


def parse_rules(data: Any, source: str = "<rules>") -> list[TriggerRule]:
    """Validate a parsed YAML document; every rule is checked before any is returned."""
    if data is None:
        return []
    if not isinstance(data, Mapping):
        raise TriggerRuleError(source, "file", "must be a mapping with a 'rules' list")
    unknown = sorted((k for k in data if k not in FILE_KEYS), key=repr)
    if unknown:
        raise TriggerRuleError(
            source, "file", f"unknown key {unknown[0]!r}; allowed: {', '.join(sorted(FILE_KEYS))}"
        )
    version = data.get("version", 1)
    if isinstance(version, bool) or version != 1:  # True == 1 in Python
        raise TriggerRuleError(source, "file", f"version {version!r} is not supported (1 is)")
    rules: list[TriggerRule] = []
    for section, origin in (("rules", "static"), ("learned", "learned")):
        items = data.get(section)
        if items is None:  # absent or empty: no rules (loading then removes the tenant's static ones)
            items = []
        if not isinstance(items, list):  # `rules: {}` read as no rules, and loading removed them all
            raise TriggerRuleError(source, section, "must be a list")
        rules.extend(_rule(raw, f"{section}[{i}]", source, origin=origin) for i, raw in enumerate(items))
    names = [r.name for r in rules]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise TriggerRuleError(source, f"rule {duplicate!r}", "is defined twice")
    return rules


def load_rules(path: str | Path) -> list[TriggerRule]:
    """Read and validate a trigger rule YAML file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TriggerRuleError(str(path), "file", f"is not UTF-8 text: {exc.reason}") from None
    except OSError as exc:
        raise TriggerRuleError(str(path), "file", f"cannot be read: {exc.strerror}") from None
    # the memories files' loader: no aliases, bounded nesting, bad tagged values as YAML errors
    loader: StrictYamlLoader | None = None
    try:
        loader = StrictYamlLoader(text)
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        line = yaml_error_line(exc, text)
        raise TriggerRuleError(
            str(path), f"line {line}", f"is not valid YAML: {yaml_error_message(exc)}"
        ) from None
    finally:
        if loader is not None:
            loader.dispose()
    return parse_rules(data, str(path))


@dataclass(frozen=True)
class SyncResult:
    written: int
    removed: int


def sync_rules(conn: psycopg.Connection[Any], tenant: str, rules: Sequence[TriggerRule]) -> SyncResult:
    """Make the tenant's static rules exactly ``rules`` in one transaction; learned ones are only upserted.
    The tenant is checked first, as every write of spark.put_trigger_rule checks it: with no rules, the
    delete alone would otherwise empty the pack's rules (tenant _system) for every tenant."""
    with conn.transaction(), conn.cursor() as cur:
        try:
            cur.execute(queries.CHECK_WRITER, {"tenant": tenant})
        except (psycopg.errors.InvalidParameterValue, psycopg.errors.NullValueNotAllowed) as exc:
            raise TriggerRuleError("database", f"tenant {tenant!r}", one_line(exc)) from None
        for rule in rules:
            try:
                cur.execute(
                    queries.PUT_TRIGGER_RULE,
                    {
                        "tenant": tenant,
                        "name": rule.name,
                        "pattern": rule.pattern,
                        "surface": list(rule.surface),
                        "context_pattern": rule.context_pattern,
                        "priority": rule.priority,
                        "interrupt": rule.interrupt,
                        "origin": rule.origin,
                        "confidence": rule.confidence,
                        "shadow": rule.shadow,
                        "metadata": Jsonb(dict(rule.metadata or {})),
                    },
                )
            except (psycopg.errors.InvalidRegularExpression, psycopg.errors.InvalidParameterValue) as exc:
                raise TriggerRuleError("database", f"rule {rule.name!r}", one_line(exc)) from None
        static = [r.name for r in rules if r.origin == "static"]
        cur.execute(queries.DROP_OTHER_STATIC_RULES, {"tenant": tenant, "names": static})
        removed = cur.rowcount
    return SyncResult(written=len(rules), removed=removed)
