"""What a post-tool-use event says about advice surfaced earlier in the same session (docs/hooks.md).

Advice a PreToolUse hook injects reaches the model together with the call it was given for, which was
already decided and runs unchanged: advice can only shape the session's *later* calls. So when call C has
run, its post hook judges the items surfaced for earlier calls of the session (the last 30 minutes), never
C's own, and records at most one verdict per surfaced item (source ``hook``):

* **followed**: a distinctive token of the advice (a backticked span, a ``--flag``, a code-like word such
  as ``pg_dump`` or ``settings.py``, an upper-case keyword such as ``CONCURRENTLY``; a short flag such as
  ``-x`` only together with another word of its sentence) appears in C's input and did not appear in the
  call the advice was surfaced for. Tokens the advice warns against (after never / don't / avoid /
  instead of / rather than ... in the same clause) do not count.
* **ignored**: C failed, the advisor surfaced the same memory again for C (it was still relevant), the
  advice has at least one distinctive token (so that C *could* have been seen to apply it) and C did not
  apply it; at most once per memory per session, so that a failing retry loop costs a memory one
  ``ignored``, not one per retry.
* helpful and unhelpful are never inferred here: a successful call says nothing about the advice.

Only the latest unjudged surfacing of a memory is judged; a verdict also settles the memory's earlier
surfacings in the session.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import psycopg

from spark_pg import queries
from spark_pg.advisor import trigger_text
from spark_pg.hooks.protocol import HookEvent

SOURCE = "hook"
WINDOW_MINUTES = 30
MAX_PENDING = 200  # surfaced items looked at per event
MAX_CALL_TEXT = 50_000  # characters of a call's input searched for tokens

CURRENT_CALL = """
SELECT max(r.id) FROM spark.retrievals r
WHERE r.tenant = %(tenant)s AND r.session_id = %(session)s AND r.tool_name = %(tool)s
  AND r.trigger_text = %(trigger)s AND r.created_at >= now() - make_interval(mins => %(window)s)
"""
SURFACED = """
SELECT i.memory_id FROM spark.retrieval_items i WHERE i.tenant = %(tenant)s AND i.retrieval_id = %(id)s
"""
# the memories this session already judged ignored (by any source): one ignored per memory per session
IGNORED = """
SELECT DISTINCT o.memory_id FROM spark.outcomes o
WHERE o.tenant = %(tenant)s AND o.session_id = %(session)s AND o.outcome = 'ignored'
"""
# the session's recent surfaced items that no hook verdict covers yet (one on this call or a later one)
PENDING = """
SELECT r.id, i.memory_id, m.text, coalesce(r.trigger_text, '')
FROM spark.retrievals r
JOIN spark.retrieval_items i ON i.tenant = r.tenant AND i.retrieval_id = r.id
JOIN spark.memories m ON m.tenant = i.memory_tenant AND m.id = i.memory_id
WHERE r.tenant = %(tenant)s AND r.session_id = %(session)s
  AND r.created_at >= now() - make_interval(mins => %(window)s)
  AND NOT EXISTS (
      SELECT 1 FROM spark.outcomes o
      WHERE o.tenant = r.tenant AND o.session_id = r.session_id AND o.source = %(source)s
        AND o.memory_tenant = i.memory_tenant AND o.memory_id = i.memory_id AND o.retrieval_id >= r.id)
ORDER BY r.id DESC, i.rank
LIMIT %(limit)s
"""

_CLAUSE = re.compile(r"[.!?](?:\s|$)|[;\n]|:\s|,\s|\s[-\u2013\u2014]\s")  # dash, en or em dash
# (?<![\w-]): a word, not part of a flag (--no-ff, --warn-unused-ignores, --leak-check recommend those flags);
# the apostrophe straight or typographic (U+2019)
_NEGATION = re.compile(
    r"(?<![\w-])(?:never|not|no|avoid\w*|without|instead\s+of|rather\s+than|stop|"
    r"(?:don|doesn|won|can|shouldn|mustn|isn|aren)['\u2019]?t|cannot|forbid\w*|prohibit\w*|over)\b",
    re.IGNORECASE,
)
# a clause that warns about something names it anywhere ("DROP TABLE is dangerous"): none of it counts.
# Not fail* or break*: they mostly describe the situation the advice is for ("when pytest fails, re-run
# only the failed tests with --lf", "if the build breaks, ..."), and would drop the recommendation itself.
_WARNING = re.compile(
    r"(?<![\w-])(?:danger\w*|unsafe|risk\w*|bad|careful|beware|warn\w*|destructive|harmful|deprecated|"
    r"broken|error-prone|leak\w*|mistake\w*|wrong)\b",
    re.IGNORECASE,
)
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


class Pending(NamedTuple):
    """A surfaced item without a hook verdict: its call, its memory and the call's logged trigger text."""

    retrieval_id: int
    memory_id: int
    text: str
    call_text: str


class Verdict(NamedTuple):
    retrieval_id: int
    memory_id: int
    outcome: str  # followed | ignored
    evidence: str  # the token that was applied, or why it was ignored


def _clauses(text: str) -> Iterator[str]:
    """The parts of the advice that recommend something: each clause up to its first negation."""
    for clause in _CLAUSE.split(text):
        if _WARNING.search(clause):
            continue
        negated = _NEGATION.search(clause)
        yield clause[: negated.start()] if negated else clause


def advice_tokens(text: str) -> list[Token]:
    """The distinctive tokens a call that applies this advice would contain."""
    tokens: dict[str, Token] = {}
    spans: list[str] = []

    def keep(span: str) -> str:
        spans.append(" ".join(span.split()))
        return f" \x00{len(spans) - 1}\x00 "

    masked = _SPAN.sub(lambda m: keep(m.group(1)), text)  # a span may hold a "." or a "never" of its own
    for clause in _clauses(masked):
        words: list[str] = []
        for raw in clause.split():
            word = raw.strip(_STRIP).rstrip(".")
            if word.startswith("\x00") and word.endswith("\x00") and word.strip("\x00").isdigit():
                span = spans[int(word.strip("\x00"))]
                tokens.setdefault(span, Token(span))
                words.extend(w.strip(_STRIP) for w in span.split())  # its flags and code words count too
            elif word:
                words.append(word)
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
    return list(tokens.values())


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


def call_text(tool_input: Mapping[str, Any] | str | None) -> str:
    """Every string in a tool input (command, new_string, content, ...), for token matching."""
    parts: list[str] = []

    def walk(value: Any, depth: int) -> None:
        if isinstance(value, str):
            parts.append(value)
        elif depth < 4 and isinstance(value, Mapping):
            for item in value.values():
                walk(item, depth + 1)
        elif depth < 4 and isinstance(value, list):
            for item in value[:100]:
                walk(item, depth + 1)

    walk(tool_input, 0)
    return "\n".join(parts)[:MAX_CALL_TEXT]


def judge(
    pending: Iterable[Pending],
    call: str,
    *,
    failed: bool,
    current: int | None,
    resurfaced: Iterable[int],
    ignored: Iterable[int] = (),
) -> list[Verdict]:
    """The verdicts a call (its input text ``call``, whether it ``failed``, the retrieval logged for it and
    the memories that retrieval surfaced again) allows on the session's pending items, newest first.
    ``ignored``: the memories the session already judged ignored, which are not judged ignored again."""
    again = set(resurfaced)
    already_ignored = set(ignored)
    judged: set[int] = set()
    verdicts: list[Verdict] = []
    for item in pending:
        if current is not None and item.retrieval_id >= current:
            continue  # advice given with this call (or after it) cannot have shaped it
        if item.memory_id in judged:
            continue  # only the latest surfacing of a memory is judged
        judged.add(item.memory_id)
        tokens = advice_tokens(item.text)
        if not tokens:
            continue  # nothing could show it followed, so nothing may show it ignored either
        token = next((t for t in tokens if applied(t, call, item.call_text)), None)
        if token is not None:
            verdicts.append(Verdict(item.retrieval_id, item.memory_id, "followed", token.text))
        elif failed and item.memory_id in again and item.memory_id not in already_ignored:
            why = "surfaced again for a call that failed"
            verdicts.append(Verdict(item.retrieval_id, item.memory_id, "ignored", why))
    return verdicts


def record(conn: psycopg.Connection[Any], tenant: str, event: HookEvent) -> list[Verdict]:
    """Judge the session's pending advice against a finished call and record the verdicts, in one
    transaction serialised per session (parallel tool calls cannot record an item twice)."""
    if not event.session_id:
        return []  # nothing ties the call to earlier advice
    args: dict[str, Any] = {
        "tenant": tenant,
        "session": event.session_id,
        "tool": event.tool_name,
        "trigger": trigger_text(event.tool_name, event.tool_input),
        "window": WINDOW_MINUTES,
        "source": SOURCE,
        "limit": MAX_PENDING,
    }
    with conn.transaction():
        conn.execute(queries.ADVISORY_XACT_LOCK, (f"spark_pg.hooks\x1f{tenant}\x1f{event.session_id}",))
        row = conn.execute(CURRENT_CALL, args).fetchone()
        current = None if row is None or row[0] is None else int(row[0])
        again: Sequence[int] = []
        if current is not None:
            again = [int(r[0]) for r in conn.execute(SURFACED, {"tenant": tenant, "id": current})]
        pending = [Pending(int(r[0]), int(r[1]), str(r[2]), str(r[3])) for r in conn.execute(PENDING, args)]
        ignored: Sequence[int] = []
        if event.failed and again:
            ignored = [int(r[0]) for r in conn.execute(IGNORED, args)]
        verdicts = judge(
            pending,
            call_text(event.tool_input),
            failed=event.failed,
            current=current,
            resurfaced=again,
            ignored=ignored,
        )
        for v in verdicts:
            conn.execute(
                queries.RECORD_OUTCOME,
                {
                    "tenant": tenant,
                    "memory_id": v.memory_id,
                    "outcome": v.outcome,
                    "retrieval_id": v.retrieval_id,
                    "session": event.session_id,
                    "source": SOURCE,
                },
            )
    return verdicts
