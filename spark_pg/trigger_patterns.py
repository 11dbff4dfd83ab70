"""Trigger-rule patterns: whether PostgreSQL can compile and run one safely inside every retrieval, and how
Python reads PostgreSQL's regular-expression syntax (for the checks that run before the database's own,
``spark._trigger_pattern_problem``, which walks a pattern the same way)."""

from __future__ import annotations

import re
import warnings
from typing import NamedTuple

MAX_PATTERN = 500
# PostgreSQL compiles a bounded repetition x{m,n} by copying x n times, and its NFA clean-up grows faster
# than the copies (each optional copy can be skipped, so its empty transitions reach all those after it):
# '(a|b){0,255}' x 30 took ~1 s to compile. Written out, a pattern may be at most twice the length limit.
MAX_WRITTEN_OUT = 2 * MAX_PATTERN
# Compiling costs more than copies. The clean-up gives each state the transitions of every state it reaches
# through empty ones, and a part that can be skipped (x?, x*, x{0,n}) begins with such a state:
# '(a?){0,255}(b?){0,255}(c?){0,255}(d?){0,200}x' took 5 s, 'a?' x 240 then 'x{0,255}' x 2 170 ms (skips:
# see _walk). And the compiler splits the characters a pattern names into colours, a state having a
# transition for each colour it takes: '[^x]{0,255}' x 3 took 2 ms alone, 175 ms after '(' and 200 different
# characters ')' (see kinds). The estimate, skips + copies x kinds, took about 1 us a step at worst; under
# this budget the slowest patterns found compiled in about 45 ms (docs/advisor.md, Trigger rules).
MAX_COMPILE_STEPS = 40_000
_CAP = 10**9  # skips are counted up to this (past any budget; a product of two still fits 64 bits)
_SYNTAX = frozenset("()|*+?{}[]^$.\\")
_FOLD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_CLASS_NAMES = re.compile(r"\\[dswDSW]|\[:[a-z]+:\]")
_BOUND = re.compile(r"\{([0-9]+)(,([0-9]*))?\}")  # {m} {m,} {m,n}: PostgreSQL's bounds ({,n} is literal)
_HUGE = 100_000  # any bound count with more than 6 digits (PostgreSQL allows 255 at most)
_MAX_BOUND = 255  # PostgreSQL's largest repetition count (RE_DUPMAX)
_CHR_MAX = 0x7FFFFFFE  # PostgreSQL's largest character code in an escape
# PostgreSQL's ARE escapes that Python's re lacks or reads otherwise, as Python of the same shape: the
# constraint escapes \m (start of a word), \M (end of one), \y (either) and \Y (not a word boundary) are
# zero-width like Python's \b (which, like PostgreSQL, refuses a quantifier on one); \b, \B and \e are the
# characters backspace, backslash and escape in PostgreSQL
_CONSTRAINTS = {"m": r"(?=\w)\b", "M": r"(?<=\w)\b", "y": r"\b", "Y": r"\B", "A": r"\A", "Z": r"\Z"}
_CONSTRAINT_LETTERS = frozenset(_CONSTRAINTS)
_OLD_CONSTRAINTS = ("[[:<:]]", "[[:>:]]")  # PostgreSQL's older spellings of \m and \M
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
EMPTY_REPEATED = (
    "repeats something that can be empty (like (a?)+, (a|)*, (a?b?){2,9} or (\\m|x)+: \\m, ^ and $ match no "
    "character), so compiles slowly"
)


def _count(digits: str) -> int:
    return _HUGE if len(digits) > 6 else min(int(digits), _HUGE)


def written_out_size(pattern: str) -> int:
    """How many atoms (a character, an escape, a bracket expression) ``pattern`` has once every bounded
    repetition is written out: ``(a|b){0,255}`` is 510, ``((a|b){2}c){3}`` is 15. A group counts its atoms;
    ``{m}`` and ``{m,n}`` multiply what they follow by m and n, ``{m,}`` by m + 1; ``*``, ``+`` and ``?``
    copy nothing. Stops counting once past :data:`MAX_WRITTEN_OUT`. The database's copy of this count is
    spark._trigger_pattern_problem (sql/045-triggers.sql): change both together."""
    return _walk(pattern).size


def skips(pattern: str) -> int:
    """An estimate of the regex compiler's work on ``pattern``'s empty transitions (see :func:`_walk`):
    ``a?b?c?`` is 3, ``a?`` x 249 30,876. Exact only when the pattern is within :data:`MAX_WRITTEN_OUT`."""
    return _walk(pattern).skips


class _Shape(NamedTuple):
    """What :func:`_walk` finds: the written-out size and skips (each counted up to where the walk stopped),
    and NESTED or EMPTY_REPEATED when the pattern has that."""

    size: int
    plain: int  # atoms as written (a bounded repetition's atoms once)
    skips: int
    problem: str | None


def _cap(value: int) -> int:
    return min(value, _CAP)


def _walk(pattern: str) -> _Shape:
    """The pattern's written-out size and skips, and whether it nests quantifiers or repeats something that
    can be empty, in one pass over its pieces. Stops once past :data:`MAX_WRITTEN_OUT` atoms.

    A piece is an atom (a character, an escape, a bracket expression, a group) and its quantifier, or a
    constraint, which no quantifier may follow: ``^``, ``$``, the constraint escapes ``\\m \\M \\y \\Y \\A
    \\Z`` or ``[[:<:]] [[:>:]]``. A constraint matches no character, so it is a piece that can be empty:
    ``(\\m|x)`` can be, as ``(|x)`` can (the escapes and ``[[:<:]]`` still count as one atom each in the
    size: the compiler gives each an arc). The pattern nests quantifiers when a group holding an unbounded
    repetition (``*``, ``+`` or ``{m,}``, at any depth) is itself repeated (``*``, ``+`` or a bound):
    ``(a+)+``, ``((a+))*``, ``(x(ab)*){2,5}``; not ``(a+)?``, nor ``((a|b){0,9}c){0,9}``, whose bounded
    repetitions the written-out size limits. Escapes and bracket expressions are characters
    (``(\\+)+`` does not nest). It repeats something that can be empty when ``*``, ``+`` or a bound allowing
    more than one copy follows a piece that can be empty (``x?``, ``x*``, ``x{0,n}``, or a group with an
    alternative made only of such pieces, or of constraints): ``(a?)+``, ``(a|)*``, ``(a?b?){2,9}``,
    ``(\\m|x){0,255}`` (nesting is checked first: ``(a*)*`` nests). The compiler's clean-up moves a
    constraint's arc along the paths around it much as it copies empty transitions: ``(\\m|x){0,255}y`` took
    about 0.25 s to compile, ``((\\m|x)(\\M|y)){0,166}(\\m|z){0,160}w`` 2.3 s, and
    ``(\\m|x){0,255}(\\m|z){0,100}w`` was "too complex" to compile at all.

    Skips estimate the work of the regex compiler's clean-up of empty transitions, which gives each state
    the transitions of every state it reaches through empty ones. A piece that can be empty begins with
    such a state (a skip start). It reaches the states of the pieces after it up to the next piece that
    cannot be empty, and into that piece as far as empty transitions go (its head): the start of each copy
    a bound fans out to, and what those copies begin with. That piece ends the run, and its own last pieces
    that can be empty (its tail) begin the next one. Skips add up, over every skip start, the states it
    reaches, with bounded repetitions written out: ``a?`` x 249 is 30,876, ``a{0,16}`` x 62 33,139. The
    database's copy is in the same walk of spark._trigger_pattern_problem (sql/045-triggers.sql): change
    both together."""
    # what an open group saves of what encloses it, in two tuples: see the variables below, in this order
    # (booleans as 0 or 1)
    frames: list[tuple[int, ...]] = []
    outer = 0  # atoms of the alternatives enclosing the innermost open group
    total = 0  # atoms so far in the innermost open group (all its alternatives) or the pattern
    last = 0  # atoms of the piece a bound would repeat (0: none, e.g. after | or ^)
    inner = False  # the innermost open group (or the pattern) holds an unbounded repetition so far
    closed = False  # the last piece is a group that holds one
    quantified = False  # the last token was a quantifier (so a ? makes it non-greedy)
    plain = 0
    # the current alternative: its open run (skip starts, states), its head once it has a piece that cannot
    # be empty (solid), and its skips so far
    run_s = run_a = head_s = head_a = cost = 0
    solid = False
    # the innermost group's finished alternatives: how many, whether one can be empty; the sum of their
    # parts (an alternative that can be empty: its run; one that cannot: its head and tail), of their heads
    # and tails, and of their skips
    alts = 0
    alt_empty = False
    g_ps = g_pa = g_hs = g_ha = g_ts = g_ta = g_cost = 0
    # the last piece, not yet added to its alternative (a quantifier may follow): whether there is one and
    # whether it can be empty; its part (starts, states) when it can be empty, else its head; its tail; its
    # own skips
    piece = empty = False
    p_s = p_a = t_s = t_a = p_cost = 0

    def fold() -> None:  # the last piece joins its alternative: the run's starts reach its part or head
        nonlocal run_s, run_a, head_s, head_a, cost, solid, piece
        if piece:
            cost = _cap(cost + _cap(run_s * p_a) + p_cost)
            run_s, run_a = _cap(run_s + p_s), _cap(run_a + p_a)
            if not empty:
                if not solid:
                    head_s, head_a, solid = run_s, run_a, True
                run_s, run_a = t_s, t_a
        piece = False

    def finish() -> None:  # the alternative joins its group
        nonlocal alts, alt_empty, g_ps, g_pa, g_hs, g_ha, g_ts, g_ta, g_cost
        fold()
        alts, alt_empty, g_cost = alts + 1, alt_empty or not solid, _cap(g_cost + cost)
        g_ps = _cap(g_ps + run_s + (head_s if solid else 0))
        g_pa = _cap(g_pa + run_a + (head_a if solid else 0))
        if solid:
            g_hs, g_ha = _cap(g_hs + head_s), _cap(g_ha + head_a)
            g_ts, g_ta = _cap(g_ts + run_s), _cap(g_ta + run_a)

    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        repeats, closed = closed, False
        after_quantifier, quantified = quantified, False
        bound = _BOUND.match(pattern, i - 1) if c == "{" else None
        if c == "(":
            i += 2 if pattern[i : i + 2] == "?:" else 0  # a non-capturing group
            fold()
            frames.append((total, int(inner), run_s, run_a, head_s, head_a, int(solid), cost, alts))
            frames.append((int(alt_empty), g_ps, g_pa, g_hs, g_ha, g_ts, g_ta, g_cost))
            outer, total, last, inner = outer + total, 0, 0, False
            run_s = run_a = head_s = head_a = cost = 0
            alts = g_ps = g_pa = g_hs = g_ha = g_ts = g_ta = g_cost = 0
            solid = alt_empty = False
        elif c == ")" and frames:
            finish()
            branches = alts if alts > 1 else 0  # the group's start reaches each alternative's start
            piece, empty, p_cost = True, alt_empty, g_cost
            if empty:  # its start is a skip start too, reaching every alternative
                p_s, p_a, t_s, t_a = _cap(g_ps + 1), _cap(g_pa + branches + 1), 0, 0
                p_cost = _cap(p_cost + g_pa + branches)
            else:
                p_s, p_a, t_s, t_a = g_hs, _cap(g_ha + branches), g_ts, g_ta
            last = total
            empties, g_ps, g_pa, g_hs, g_ha, g_ts, g_ta, g_cost = frames.pop()
            saved, held, run_s, run_a, head_s, head_a, solids, cost, alts = frames.pop()
            solid, alt_empty = bool(solids), bool(empties)
            outer, total = outer - saved, saved + total
            closed, inner = inner, bool(held) or inner
        elif c in "*+?" or bound:
            if c == "?" and after_quantifier:  # after a quantifier, ? makes it non-greedy
                continue
            if c != "?" and repeats:
                return _Shape(outer + total, plain, 0, NESTED)
            low = _count(bound.group(1)) if bound else 0 if c in "*?" else 1
            high = None if bound is None else bound.group(1) if bound.group(2) is None else bound.group(3)
            # how many copies: ? one, * and + and {m,} unbounded
            copies = 1 if c == "?" else _count(high) if high else _HUGE
            if piece and empty and copies > 1 and not after_quantifier:  # a*+ is a syntax error: not here
                return _Shape(outer + total, plain, 0, EMPTY_REPEATED)
            quantified = True
            inner = inner or c in "*+" or (bound is not None and not high)  # {m,}; {m,n} is in the size
            if bound:
                i = bound.end()
                times = max(_count(high) if high else low + 1, 1)  # {m,}: m + 1; x{0} still gets compiled
                total, last = total + last * (times - 1), last * times
            if not piece or after_quantifier:
                pass
            elif empty:  # (a?)? or (a?){0,1}: one copy; a further skip start when it can be skipped
                if low == 0:
                    p_s, p_a, p_cost = _cap(p_s + 1), _cap(p_a + 1), _cap(p_cost + p_a)
            elif c == "?":  # its start skips it, and reaches what it begins with
                p_cost = _cap(p_cost + p_a)
                p_s, p_a, t_s, t_a, empty = _cap(1 + p_s + t_s), _cap(1 + p_a + t_a), 0, 0, True
            elif c == "*":  # a loop state: the start reaches it, it reaches the head, the tail reaches it
                p_cost = _cap(p_cost + _cap((2 + t_s) * (1 + p_a)))
                p_s, p_a, t_s, t_a, empty = _cap(2 + p_s + t_s), _cap(2 + p_a + t_a), 0, 0, True
            elif c == "+":  # its end loops back to its start: the tail reaches the head
                p_cost = _cap(p_cost + _cap((1 + t_s) * (1 + p_a)))
                p_a, t_s, t_a = _cap(1 + p_a), _cap(1 + t_s), _cap(1 + t_a)
            else:  # copies: each one's tail reaches the next one's head; the start fans out to every copy
                fan = _cap(times * (1 + p_a))
                p_cost = _cap(_cap(times * p_cost) + _cap((times - 1) * _cap(t_s * (1 + p_a))))
                if low == 0:  # the start is a skip start, reaching every copy
                    p_s, p_a, p_cost = _cap(1 + t_s), _cap(1 + fan + t_a), _cap(p_cost + fan)
                    t_s, t_a, empty = 0, 0, True
                else:
                    p_a = fan
        elif c == "|":
            finish()
            run_s = run_a = head_s = head_a = cost = last = 0
            solid = False
        else:  # an atom (a character, an escape, a bracket expression) or a constraint
            # a constraint: ^ $, the escapes \m \M \y \Y \A \Z, or [[:<:]] [[:>:]] (older spellings of \m \M)
            spelled = c == "[" and pattern.startswith(_OLD_CONSTRAINTS, i - 1)
            constraint = c in "^$" or spelled or (c == "\\" and pattern[i : i + 1] in _CONSTRAINT_LETTERS)
            if c == "\\":
                i += 1
            elif spelled:  # past [[:<:]]
                i += 6
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
            fold()
            piece, empty, p_s, p_a, t_s, t_a, p_cost = True, constraint, 0, 0, 0, 0, 0
            if constraint:  # zero-width, so it can be empty; nothing a quantifier may repeat
                fold()
                last = 0
                if c not in "^$":  # an escape or [[:<:]]: an atom (the compiler gives it an arc)
                    total, plain = total + 1, plain + 1
            else:
                total, last, plain = total + 1, 1, plain + 1
        if outer + total > MAX_WRITTEN_OUT:
            break
    finish()
    # groups left open (an invalid pattern): their alternatives' and their own skips so far
    skips = _cap(g_cost + sum(_cap(frames[k][7] + frames[k + 1][7]) for k in range(0, len(frames), 2)))
    return _Shape(outer + total, plain, skips, None)


def kinds(pattern: str) -> int:
    """An estimate of how many kinds of character the regex compiler tells ``pattern``'s characters apart
    into (its colours): one for every other character, plus each different character the pattern names
    (its characters but the syntax ``( ) | * + ? { } [ ] ^ $ . \\``, once bounds are removed, ASCII
    letters case-folded), plus 8 for each different class escape or named class (``\\w``, ``[:punct:]``):
    those split the others. Each state of a bounded repetition's copies carries up to that many
    transitions, so each copy a bounded repetition adds costs that many steps (:data:`MAX_COMPILE_STEPS`).
    The database's copy is in spark._trigger_pattern_problem: change both together."""
    named = {c for c in _BOUND.sub("", pattern).translate(_FOLD) if c not in _SYNTAX}
    return 1 + len(named) + 8 * len(set(_CLASS_NAMES.findall(pattern)))


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
    out: list[str] = []
    where: list[int] = []

    def put(text: str, at: int) -> None:
        out.append(text)
        where.extend([at] * len(text))

    def literal(start: int) -> tuple[str, list[int]]:  # the rest is text
        for at in range(start, len(pattern)):
            put(re.escape(pattern[at]), at)
        where.append(len(pattern))
        return "".join(out), where

    if pattern.startswith("***="):
        return literal(4)

    i, n = (4, len(pattern)) if pattern.startswith("***:") else (0, len(pattern))
    if options := _OPTIONS.match(pattern, i):
        letters = options.group(1)
        if "q" in letters:  # the rest is text
            return literal(options.end())
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
    shape = _walk(pattern)
    if shape.problem:
        return shape.problem
    if shape.size > MAX_WRITTEN_OUT:
        return (
            f"repeats too much: with its bounded repetitions ({{m,n}}) written out it is over "
            f"{MAX_WRITTEN_OUT} atoms long, which compiles slowly"
        )
    copies, named = shape.size - shape.plain, kinds(pattern)
    if shape.skips + copies * named > MAX_COMPILE_STEPS:
        return (
            f"repeats too much: compiling it takes about {shape.skips + copies * named} steps (the limit is "
            f"{MAX_COMPILE_STEPS}): {shape.skips} for the places its optional parts (x?, x*, x{{0,n}}) can "
            f"skip to, and {copies} x {named} for the atoms its bounded repetitions ({{m,n}}) add times the "
            f"kinds of character it names"
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
