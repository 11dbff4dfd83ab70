"""The tokens of a piece of advice that would show it applied, and whether a call applies one
(spark_pg.hooks.outcomes judges with them; the rules: docs/hooks.md, Outcome inference).

A distinctive token is a backticked span, a ``--flag``, a code-like word such as ``pg_dump`` or
``settings.py``, an upper-case keyword such as ``CONCURRENTLY``, or a short flag such as ``-x`` together
with another word of its sentence. What the advice warns against never counts: the tokens after never /
don't / avoid / instead of / before ... in the same clause, all of a clause that warns (dangerous,
destructive, "is not allowed" ...), and any token the advice also names where it warns. A warning or a
negation covers its whole list ("avoid X, Y and Z", "(rm -rf, DROP TABLE, TRUNCATE)"): see _clauses.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Sequence
from typing import NamedTuple

# Where advice text divides. A hard boundary (a sentence end, ";", a line break) ends every scope. A soft one
# (", ", ": ", a spaced dash, the "." of e.g. / i.e. / etc.) may sit inside a list that a warning or a
# negation governs ("avoid X, Y and Z"): _starts_clause decides. A "." on its own ("git checkout -- .") or
# in "..." ends nothing.
_BOUNDARY = re.compile(
    r"(?<![\s.])(?P<end>[.!?])(?:[^\S\n]+|$)|(?P<hard>[;\n])|(?P<soft>[:,]\s|\s[-\u2013\u2014]\s)"
)
_DASH = re.compile(r"\s[-\u2013\u2014]\s")  # dash, en or em dash
_ABBREVIATION = re.compile(r"(?<![\w.])(?:e\.g|i\.e|etc|vs|cf)$", re.IGNORECASE)
_PAREN = re.compile(r"[()]")
_ASIDE = re.compile(r"\x01(\d+)\x01")  # an aside in parentheses or between dashes, masked
MAX_ASIDE_DEPTH = 4  # asides inside asides are split in turn down to this depth, deeper ones read as text
# What follows these in a clause is what the advice warns against, or (before) the moment it is for:
# "run `git status` before `git reset --hard`" recommends nothing about git reset --hard.
# (?<![\w-]): a word, not part of a flag (--no-ff, --warn-unused-ignores, --leak-check recommend those flags);
# the apostrophe straight or typographic (U+2019)
_NEGATION = re.compile(
    r"(?<![\w-])(?:never|not|no|avoid\w*|without|instead\s+of|rather\s+than|stop|before|"
    r"(?:don|doesn|won|can|shouldn|mustn|isn|aren)['\u2019]?t|cannot|over)\b",
    re.IGNORECASE,
)
# a clause that warns about something names it anywhere ("DROP TABLE is dangerous", "`any` is not
# allowed", "ADD VALUE can't be used"): none of it counts.
# Not fail* or break*: they mostly describe the situation the advice is for ("when pytest fails, re-run
# only the failed tests with --lf", "if the build breaks, ..."), and would drop the recommendation itself.
_WARNING = re.compile(
    r"(?<![\w-])(?:danger\w*|unsafe|risk\w*|bad|careful|beware|warn\w*|destructive|harmful|deprecated|"
    r"broken|error-prone|leak\w*|mistake\w*|wrong|forbid\w*|prohibit\w*|banned|disallowed|discouraged)\b"
    r"|(?:(?<![\w-])(?:not|never)|n['\u2019]t)\s+"
    r"(?:be\s+(?:used|run)|(?:be\s+)?(?:allowed|permitted|safe|acceptable|recommended))\b",
    re.IGNORECASE,
)
# Words that open a new clause after a soft boundary: verbs advice starts with, pronouns, conjunctions and
# adverbs. Not the verbs that name destructive or history-rewriting commands (drop, delete, remove, reset,
# push, rebase ...): a warned-about list may go on with them ("never rm -rf, drop tables or ...").
_OPENERS = frozenset(
    re.findall(
        r"\S+",
        # verbs
        "add adjust annotate apply ask assert audit back backfill batch bind build bump cache call catch "
        "change check choose close commit compare configure confirm consider copy create debug declare "
        "define deploy describe disable document enable ensure escape explain export extract fetch fix "
        "follow format freeze generate give go group handle import inspect install keep label leave let "
        "limit lint load log look make mark measure migrate mock move name narrow note open pass patch "
        "pick pin prefer prepare print profile protect publish put quote raise read record reduce "
        "refactor regenerate reload rename replace report reproduce require restart restore retry return "
        "review revert rotate run save say search see send separate set show sign skip sort split stage "
        "start stash store stub switch tag take tell test throw trim try turn update upgrade use validate "
        "verify wait watch wrap write "
        # pronouns
        "i you we they it he she this that these those there everything nothing "
        # conjunctions and adverbs
        "if when whenever unless before after because since while once until so but yet though although "
        "otherwise then where whereas instead rather also always only just still first next finally "
        "ideally preferably",
    )
)
_AUXILIARIES = frozenset(
    re.findall(
        r"\S+",
        "is are was were has have had do does did will would can could should must may might shall cannot "
        "isn't aren't wasn't weren't hasn't haven't hadn't don't doesn't didn't won't wouldn't can't "
        "couldn't shouldn't mustn't",
    )
)
_LIST_WORDS = frozenset(("and", "or", "nor"))
_SPAN = re.compile(r"`([^`\n]{3,120})`")
_LONG_FLAG = re.compile(r"--[A-Za-z][\w-]+")
_SHORT_FLAG = re.compile(r"-[A-Za-z]{1,3}")
_CODE_WORD = re.compile(r"[\w@+./:=~-]+")
_CAPS_WORD = re.compile(r"[A-Z][A-Z0-9_]{2,}")
_STRIP = "\"'()[]{}<>,;:!?*"
_CAPS_STOP = frozenset(
    ("NEVER", "ALWAYS", "IMPORTANT", "NOTE", "WARNING", "CRITICAL", "TODO", "FIXME", "MUST")
)
_STOP = frozenset(
    re.findall(
        r"\w+",
        "with when that this then than from into before after always each every your have make sure only "
        "also over first should must will what which where there their they been being does done just like "
        "more most some such them these those very",
    )
)


class Token(NamedTuple):
    text: str
    caseless: bool = False
    companions: tuple[str, ...] = ()  # a short flag counts only with one of these words


def _clauses(text: str, asides: list[str] | None = None, depth: int = 0) -> Iterator[tuple[str, str]]:
    """Each clause of the advice as (what it recommends, what it warns against): the clause up to its first
    negation and the rest, or nothing and all of it for a clause that warns. A clause is a sentence or a
    part of one (_starts_clause); an aside in parentheses or between two dashes goes with the clause around
    it, and is split in turn when that part of the clause recommends (down to MAX_ASIDE_DEPTH). ``asides``:
    the masked asides of the text the caller split (an aside between dashes can hold one in parentheses)."""
    asides = [] if asides is None else asides
    for sentence in _split(_mask_parentheses(text, asides), hard_only=True):
        clauses: list[list[str]] = []
        complete: list[bool] = []  # whether each clause has its verb (_has_verb)
        for part in _split(_mask_dash_pairs(sentence, asides), hard_only=False):
            if clauses and not _starts_clause(part, complete[-1]):
                clauses[-1].append(part)
                complete[-1] = complete[-1] or _has_verb(part)
            else:
                clauses.append([part])
                complete.append(_has_verb(part))
        for parts in clauses:
            clause = " | ".join(parts)  # "|" ends a run of upper-case words: no phrase spans a comma
            cut = _cut(clause)
            warned = [_unmask(clause[cut:], asides)]
            read = functools.partial(_read_aside, asides=asides, depth=depth + 1, warned=warned)
            yield _ASIDE.sub(read, clause[:cut]), " | ".join(warned)


def _read_aside(m: re.Match[str], *, asides: list[str], depth: int, warned: list[str]) -> str:
    """What the aside ``m`` refers to recommends, in a part of a clause that recommends; what it warns
    against goes to ``warned``."""
    content = asides[int(m.group(1))]
    if depth >= MAX_ASIDE_DEPTH:  # too deep to split: one clause
        plain = _unmask(content, asides)
        cut = _cut(plain)
        warned.append(plain[cut:])
        return f" {plain[:cut]} "
    inner = list(_clauses(content, asides, depth))
    warned.extend(w for _, w in inner)
    return " " + " | ".join(r for r, _ in inner) + " "


def _cut(clause: str) -> int:
    """Where what a clause recommends ends: at its first negation; at its start if it warns."""
    negated = _NEGATION.search(clause)
    return 0 if _WARNING.search(clause) else negated.start() if negated else len(clause)


def _unmask(text: str, asides: Sequence[str]) -> str:
    """``text`` with its masked asides put back."""
    return _ASIDE.sub(lambda m: " " + _unmask(asides[int(m.group(1))], asides) + " ", text)


def _split(text: str, *, hard_only: bool) -> list[str]:
    """``text`` cut at its hard boundaries, or at all its boundaries."""
    parts: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        if hard_only and not _is_hard(text, m):
            continue
        parts.append(text[start : m.start()])
        start = m.end()
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def _is_hard(text: str, m: re.Match[str]) -> bool:
    if m.group("hard"):
        return True
    if not m.group("end"):
        return False
    # "e.g. DROP TABLE": the sentence goes on
    return _ABBREVIATION.search(text, max(0, m.start() - 3), m.start()) is None


def _mask_parentheses(text: str, asides: list[str]) -> str:
    """``text`` with each outermost aside in parentheses (one that follows a space or starts the text, not
    the arguments of a call such as ``f(x, y)``) replaced by a reference into ``asides``."""
    out: list[str] = []
    start, depth, opened = 0, 0, -1
    for m in _PAREN.finditer(text):
        i = m.start()
        if m.group() == "(":
            if depth == 0:
                opened = i if i == 0 or text[i - 1].isspace() else -1
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0 and opened >= 0:
                asides.append(text[opened + 1 : i])
                out.append(f"{text[start:opened]}\x01{len(asides) - 1}\x01")  # "(...)." ends a sentence
                start = i + 1
    out.append(text[start:])
    return "".join(out)


def _mask_dash_pairs(sentence: str, asides: list[str]) -> str:
    """``sentence`` with the text between each two spaced dashes ("X - a, b, c - Y") replaced by a
    reference into ``asides``; a dash without a partner stays a soft boundary."""
    dashes = list(_DASH.finditer(sentence))
    out: list[str] = []
    start = 0
    for first, second in zip(dashes[0::2], dashes[1::2], strict=False):
        asides.append(sentence[first.end() : second.start()])
        out.append(f"{sentence[start : first.start()]} \x01{len(asides) - 1}\x01 ")
        start = second.end()
    out.append(sentence[start:])
    return "".join(out)


def _starts_clause(part: str, complete: bool) -> bool:
    """Whether the text after a soft boundary starts a clause of its own, or goes on with the clause before
    it (``complete``: that clause has its verb), whose warning or negation then governs it too. It starts
    one when it opens with a verb, a pronoun or a conjunction ("instead of X, use Y"; "never X, it ..."), or
    when it has a subject and a verb of its own after a clause that has its verb ("don't X - uv.lock is
    ..."). It goes on when it continues a list ("avoid X, Y and Z"), or when it warns about a clause still
    without its verb ("X, Y and Z are dangerous")."""
    words = [w for w in (raw.strip(_STRIP) for raw in part.split()) if w]
    while words and words[0].lower() in _LIST_WORDS:
        words.pop(0)
    if not words:
        return False
    if _opens(words[0]):
        return True
    if _WARNING.search(part):
        return complete  # "use `pg_dump`, DROP TABLE is destructive" keeps `pg_dump`
    verb = next((i for i, w in enumerate(words) if _is_auxiliary(w)), None)
    if verb is None or any(w.lower() in _LIST_WORDS for w in words[:verb]):
        return False  # "DROP TABLE and TRUNCATE must ...": the list goes on, with its verb
    return complete


def _has_verb(part: str) -> bool:
    """Whether a part of a clause has a verb (or a word that opens one). What follows a clause without one
    after a comma is its subject list going on: "destructive commands such as rm -rf, DROP TABLE must ..."."""
    if _NEGATION.search(part):
        return True
    return any(_opens(w) or _is_auxiliary(w) for w in (raw.strip(_STRIP) for raw in part.split()))


def _opens(word: str) -> bool:
    if word.isupper() and len(word) > 1:
        return False  # an upper-case keyword (DELETE, UPDATE) is an item, not a verb
    word = word.lower().replace("\u2019", "'")
    return word.removeprefix("re-") in _OPENERS  # re-run


def _is_auxiliary(word: str) -> bool:
    return not (word.isupper() and len(word) > 1) and word.lower().replace("\u2019", "'") in _AUXILIARIES


def advice_tokens(text: str) -> list[Token]:
    """The distinctive tokens a call that applies this advice would contain: those of the parts that
    recommend, except any that the parts that warn contain too ("prefer `pg_restore --list` over
    `pg_restore`" yields `pg_restore --list` and `--list`, not `pg_restore`)."""
    spans: list[str] = []

    def keep(span: str) -> str:
        spans.append(" ".join(span.split()))
        return f" \x00{len(spans) - 1}\x00 "

    text = text.replace("\x01", " ")  # the mark of a masked aside (_ASIDE)
    masked = _SPAN.sub(lambda m: keep(m.group(1)), text)  # a span may hold a "." or a "never" of its own
    recommended: dict[str, Token] = {}
    warned: dict[str, Token] = {}
    for good, bad in _clauses(masked):
        _collect(good, spans, recommended)
        _collect(bad, spans, warned)
    return [token for key, token in recommended.items() if key not in warned]


def _collect(clause: str, spans: Sequence[str], tokens: dict[str, Token]) -> None:
    """Add the distinctive tokens of one clause to ``tokens`` (keyed by their text; lower case for a run of
    upper-case words)."""
    words: list[str] = []
    for raw in clause.split():
        word = raw.strip(_STRIP).rstrip(".")
        if word.startswith("\x00") and word.endswith("\x00") and word.strip("\x00").isdigit():
            span = spans[int(word.strip("\x00"))]
            tokens.setdefault(span, Token(span))
            words.extend(w.strip(_STRIP) for w in span.split())  # its flags and code words count too
        else:
            words.append(word or "|")  # "..." ends a run of upper-case words like a comma
    plain = tuple(w.lower() for w in words if w.isalpha() and len(w) >= 4 and w.lower() not in _STOP)
    caps: list[str] = []
    for word in [*words, ""]:  # "" ends the last run of upper-case words
        if _CAPS_WORD.fullmatch(word) and word not in _CAPS_STOP:
            caps.append(word)
            continue
        if len(caps) >= 2 or (caps and len(caps[0]) >= 8):  # CREATE INDEX, CONCURRENTLY; not INDEX
            phrase = " ".join(caps)
            tokens.setdefault(phrase.lower(), Token(phrase, caseless=True))
        caps = []
        flag = word.split("=", 1)[0]
        if _LONG_FLAG.fullmatch(flag):
            tokens.setdefault(flag, Token(flag))
        elif _SHORT_FLAG.fullmatch(word):
            if plain:
                tokens.setdefault(word, Token(word, companions=plain))
        elif _is_code_word(flag):
            tokens.setdefault(flag, Token(flag))


def _is_code_word(word: str) -> bool:
    """pg_dump, settings.py, src/auth/login.py, os.path.join; not e.g., and/or, read/write."""
    if len(word) < 4 or _CODE_WORD.fullmatch(word) is None or not any(c.isalpha() for c in word):
        return False
    if word.count("/") == 1 and word.replace("/", "").isalpha():
        return False  # prose (and/or), or a path too vague to tell
    return "_" in word or re.search(r"\w[./=:]+\w", word) is not None


def _present(token: str, text: str, caseless: bool = False) -> bool:
    pattern = r"(?<![\w-])" + re.escape(token).replace(r"\ ", r"\s+") + r"(?![\w-])"
    return re.search(pattern, text, re.IGNORECASE if caseless else 0) is not None


def applied(token: Token, call: str, before: str) -> bool:
    """Whether ``call`` shows the token and the call the advice was given for (``before``) did not."""
    if not _present(token.text, call, token.caseless) or _present(token.text, before, token.caseless):
        return False
    return not token.companions or any(_present(w, call, True) for w in token.companions)
