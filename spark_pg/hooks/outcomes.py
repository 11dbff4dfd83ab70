"""What a post-tool-use event says about advice surfaced earlier in the same session (docs/hooks.md).

Advice a PreToolUse hook injects reaches the model together with the call it was given for, which was
already decided and runs unchanged: advice can only shape the session's *later* calls. So when call C has
run, its post hook judges the items surfaced for earlier calls of the session (the last 30 minutes), never
C's own, and records at most one verdict per surfaced item (source ``hook``):

* **followed**: a distinctive token of the advice (a backticked span, a ``--flag``, a code-like word such
  as ``pg_dump`` or ``settings.py``, an upper-case keyword such as ``CONCURRENTLY``; a short flag such as
  ``-x`` only together with another word of its sentence) appears in C's input and did not appear in the
  call the advice was surfaced for. Tokens the advice warns against do not count: those after never /
  don't / avoid / instead of / before ... in the same clause, all of a clause that warns (dangerous,
  destructive, "is not allowed" ...), and any token the advice also names where it warns. A warning or a
  negation covers its whole list ("avoid X, Y and Z", "(rm -rf, DROP TABLE, TRUNCATE)"): see _clauses.
* **ignored**: C failed, the advisor surfaced the same memory again for C (it was still relevant), the
  advice has at least one distinctive token (so that C *could* have been seen to apply it) and C did not
  apply it; at most once per memory per session, so that a failing retry loop costs a memory one
  ``ignored``, not one per retry.
* helpful and unhelpful are never inferred here: a successful call says nothing about the advice.
* failures and traces are not judged: their text tells what went wrong, and the command it names is as
  likely the one that failed as the fix (running it again was recorded as following the memory).

Only the latest unjudged surfacing of a memory is judged; a verdict also settles the memory's earlier
surfacings in the session.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import psycopg

from spark_pg import queries
from spark_pg.advisor import trigger_text
from spark_pg.hooks.advice_tokens import advice_tokens, applied
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
  -- a failure (or a trace) tells what went wrong: the command it names is as likely the one that failed as
  -- the fix, and running it again was recorded as following the memory
  AND m.kind NOT IN ('failure', 'trace')
  AND NOT EXISTS (
      SELECT 1 FROM spark.outcomes o
      WHERE o.tenant = r.tenant AND o.session_id = r.session_id AND o.source = %(source)s
        AND o.memory_tenant = i.memory_tenant AND o.memory_id = i.memory_id AND o.retrieval_id >= r.id)
ORDER BY r.id DESC, i.rank
LIMIT %(limit)s
"""


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
