"""spark.promote_triggers' evidence (sql/055-learned-triggers.sql): a shadow hit is right only by a judgement
of that hit, so one helpful mark counts once, not for every hit of its session."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

Conn = psycopg.Connection[Any]
RULE = "learned-flaky"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def memory(conn: Conn, tenant: str) -> int:
    """A memory of ``tenant`` and a learned shadow rule that surfaces it on "flaky"."""
    row = conn.execute(
        """INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash)
           VALUES (%(t)s, 'net', 'Retry flaky network calls with backoff.', 'x', '\\x00') RETURNING id""",
        {"t": tenant},
    ).fetchone()
    assert row is not None
    conn.execute(
        "SELECT spark.put_trigger_rule(%s, %s, '\\mflaky', ARRAY['net'], origin => 'learned', "
        "confidence => 0.5, shadow => true)",
        (tenant, RULE),
    )
    return int(row[0])


def advise(conn: Conn, tenant: str, text: str, session: str | None, at: datetime | None = None) -> int:
    """One spark.advise call (a shadow hit when ``text`` says flaky), dated ``at`` when given; its id."""
    conn.execute("SELECT count(*) FROM spark.advise(%s, %s, session_id => %s)", (tenant, text, session))
    # the call is logged whether or not it surfaced anything
    found = conn.execute("SELECT max(id) FROM spark.retrievals WHERE tenant = %s", (tenant,)).fetchone()
    assert found is not None
    rid = found[0]
    if at is not None:
        conn.execute(
            "UPDATE spark.retrievals SET created_at = %s WHERE tenant = %s AND id = %s", (at, tenant, rid)
        )
    return int(rid)


def mark(
    conn: Conn,
    tenant: str,
    memory: int,
    retrieval: int | None,
    session: str | None,
    at: datetime | None = None,
) -> None:
    """A helpful outcome for ``memory``, dated ``at`` when given. A mark naming a call is for an item that
    call surfaced (spark.record_outcome refuses any other): the item is logged first if it was not."""
    if retrieval is not None:
        conn.execute(
            "INSERT INTO spark.retrieval_items (tenant, retrieval_id, memory_id, memory_tenant, rank, score, "
            "signals, pools) VALUES (%s, %s, %s, %s, 1, 0.5, '{}', '{keyword_old}') ON CONFLICT DO NOTHING",
            (tenant, retrieval, memory, tenant),
        )
    conn.execute(
        "SELECT spark.record_outcome(%s, %s, 'helpful', %s, %s)", (tenant, memory, retrieval, session)
    )
    if at is not None:
        conn.execute(
            "UPDATE spark.outcomes SET created_at = %s WHERE tenant = %s AND id = (SELECT max(id) FROM "
            "spark.outcomes WHERE tenant = %s)",
            (at, tenant, tenant),
        )


def measured(conn: Conn, tenant: str, min_hits: int = 5, min_precision: float = 0.6) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT * FROM spark.promote_triggers(%s, %s, %s)", (tenant, min_hits, min_precision)
    ).fetchone()
    assert row is not None and row[0] == RULE
    return tuple(row[1:])


def test_one_mark_in_a_long_session_is_one_right_hit(conn: Conn, tenant: str, memory: int) -> None:
    """Was: five calls of one session hit the rule, one helpful mark followed, and every hit counted as right
    (5 of 5, precision 1.0): the rule was promoted on a single judgement."""
    for g in range(5):
        advise(conn, tenant, f"flaky network {g}", "long-session")
    mark(conn, tenant, memory, None, "long-session")
    assert measured(conn, tenant) == (5, 1, pytest.approx(0.2), False)
    shadow = conn.execute("SELECT shadow FROM spark.trigger_rules WHERE tenant = %s", (tenant,)).fetchone()
    assert shadow == (True,)


def test_a_mark_without_a_call_judges_the_latest_hit_before_it(conn: Conn, tenant: str, memory: int) -> None:
    """Within a session, a mark naming no call is evidence for the rule's last hit before it: none when it
    came before any hit; marks after two different hits count for both."""
    minute = timedelta(minutes=1)
    mark(conn, tenant, memory, None, "s", T0 - minute)  # before the first hit: judges none
    for n in range(4):
        advise(conn, tenant, f"flaky network {n}", "s", T0 + n * 10 * minute)
    mark(conn, tenant, memory, None, "s", T0 + 11 * minute)  # after hit 1: for hit 1
    mark(conn, tenant, memory, None, "s", T0 + 12 * minute)  # for hit 1 again: it counts once
    mark(conn, tenant, memory, None, "s", T0 + 35 * minute)  # after hit 3: for hit 3
    mark(conn, tenant, memory, None, "other", T0 + 35 * minute)  # another session: none
    assert measured(conn, tenant, 4, 0.5) == (4, 2, pytest.approx(0.5), True)


def test_a_mark_naming_a_call_judges_that_calls_hit_only(conn: Conn, tenant: str, memory: int) -> None:
    """A mark naming a call is evidence for that call's hit, also a call without a session; one naming a call
    where the rule did not fire judged that call, and counts for no hit, not even for the hits of its
    session before it."""
    minute = timedelta(minutes=1)
    advise(conn, tenant, "flaky network 0", "s", T0)
    advise(conn, tenant, "flaky network 1", "s", T0 + 10 * minute)
    quiet = advise(conn, tenant, "retry network calls", "s", T0 + 20 * minute)  # the rule does not fire
    mark(conn, tenant, memory, quiet, None, T0 + 21 * minute)  # its session is the call's, s
    alone = advise(conn, tenant, "flaky network 2", None, T0 + 30 * minute)
    mark(conn, tenant, memory, alone, None, T0 + 31 * minute)
    assert measured(conn, tenant, 3, 0.3) == (3, 1, pytest.approx(1 / 3), True)


def test_a_shadow_rule_without_hits_is_listed_with_its_figures(conn: Conn, tenant: str, memory: int) -> None:
    """A shadow rule that never fired was left out of the result (it was built from the hits alone), though
    spark.promote_triggers returns each shadow rule with its figures."""
    conn.execute(
        "SELECT spark.put_trigger_rule(%s, 'shadow-nohits', '\\mzebra', ARRAY['net'], origin => 'learned', "
        "confidence => 0.5, shadow => true)",
        (tenant,),
    )
    conn.execute(
        "SELECT spark.put_trigger_rule(%s, 'live', '\\mzebra', ARRAY['net'])", (tenant,)
    )  # not shadow
    for g in range(2):
        advise(conn, tenant, f"flaky network {g}", "s")
    rows = conn.execute("SELECT * FROM spark.promote_triggers(%s, 1, 0)", (tenant,)).fetchall()
    assert rows == [(RULE, 2, 0, 0.0, True), ("shadow-nohits", 0, 0, None, False)]
    # never promoted, whatever the thresholds: no evidence is not precision
    assert conn.execute("SELECT * FROM spark.promote_triggers(%s, 1, 0)", (tenant,)).fetchall() == [
        ("shadow-nohits", 0, 0, None, False)
    ]
    shadow = conn.execute(
        "SELECT shadow, confidence FROM spark.trigger_rules WHERE tenant = %s AND name = 'shadow-nohits'",
        (tenant,),
    ).fetchone()
    assert shadow == (True, 0.5)
