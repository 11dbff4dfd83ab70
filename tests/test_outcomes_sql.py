"""spark.record_outcome and spark.advise's shadow-rule log, in SQL (sql/050-advise.sql, migration 0015).

An outcome naming an advise call must name a memory that call surfaced; one verdict per surfaced item and
source counts (a retry changes nothing, another verdict replaces the first); the outcome takes the call's
session. The shadow rules' hits obey what the live trigger pool obeys (as_of, pool_trigger)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import errors
from psycopg.types.json import Jsonb

from spark_pg import schema
from tests.conftest import Blocked

Conn = psycopg.Connection[Any]
T = "outcomes"
TEXTS = {
    "dump": "Run alembic upgrade head only after pg_dump of the database.",
    "bread": "Bake bread at 220 degrees for 30 minutes.",
    "tabs": "The user prefers tabs over spaces in Makefiles.",
}
DUMP_QUERY = "alembic upgrade head pg_dump"


def add(conn: Conn, tenant: str, texts: dict[str, str], created: datetime | None = None) -> dict[str, int]:
    """Memories keyed as given (created now, or at ``created``); their ids by key."""
    ids = {}
    for key, text in texts.items():
        row = conn.execute(
            """INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash, created_at)
               VALUES (%s, %s, %s, %s, sha256(convert_to(%s, 'UTF8')), coalesce(%s, now())) RETURNING id""",
            (tenant, key, text, text, tenant + text, created),
        ).fetchone()
        assert row is not None
        ids[key] = int(row[0])
    return ids


def advise(
    conn: Conn, tenant: str, query: str, session: str | None = None, **params: Any
) -> tuple[int, set[int]]:
    """One spark.advise call: its retrieval id (logged even when nothing surfaced) and what it surfaced."""
    rows = conn.execute(
        "SELECT memory_id FROM spark.advise(%s, %s, NULL, 5, %s, %s)",
        (tenant, query, Jsonb({"include_system": False, **params}), session),
    ).fetchall()
    found = conn.execute("SELECT max(id) FROM spark.retrievals WHERE tenant = %s", (tenant,)).fetchone()
    assert found is not None
    return int(found[0]), {int(r[0]) for r in rows}


def outcome(
    conn: Conn,
    memory: int,
    verdict: str,
    retrieval: int | None = None,
    *,
    tenant: str = T,
    session: str | None = None,
    source: str = "api",
) -> float:
    row = conn.execute(
        "SELECT spark.record_outcome(%s, %s, %s, %s, %s, %s)",
        (tenant, memory, verdict, retrieval, session, source),
    ).fetchone()
    assert row is not None
    return float(row[0])


def counters(conn: Conn, memory: int) -> tuple[Any, ...]:
    """helpful, followed, unhelpful, ignored, reliability."""
    row = conn.execute(
        "SELECT helpful_count, followed_count, unhelpful_count, ignored_count, reliability "
        "FROM spark.memories WHERE id = %s",
        (memory,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def logged(conn: Conn, tenant: str = T) -> list[tuple[Any, ...]]:
    """The tenant's outcome rows: memory, call, verdict, session, source."""
    return conn.execute(
        "SELECT memory_id, retrieval_id, outcome, session_id, source FROM spark.outcomes WHERE tenant = %s "
        "ORDER BY id",
        (tenant,),
    ).fetchall()


@pytest.fixture
def dump_call(conn: Conn) -> tuple[dict[str, int], int]:
    """The tenant's memories and an advise call (session S) that surfaced the pg_dump one and no other."""
    ids = add(conn, T, TEXTS)
    rid, surfaced = advise(conn, T, DUMP_QUERY, "S")
    assert surfaced == {ids["dump"]}
    return ids, rid


def test_an_outcome_for_a_memory_the_call_did_not_surface_is_refused(
    conn: Conn, dump_call: tuple[dict[str, int], int]
) -> None:
    """Was accepted: the bread recipe marked helpful against a call about alembic moved its reliability."""
    ids, rid = dump_call
    with (
        pytest.raises(errors.InvalidParameterValue, match=f"was not surfaced by advise call {rid}"),
        conn.transaction(),
    ):
        outcome(conn, ids["bread"], "helpful", rid)
    assert logged(conn) == []
    assert counters(conn, ids["bread"]) == (0, 0, 0, 0, 0.5)
    # naming no call, it is the caller's word, as before
    assert outcome(conn, ids["bread"], "helpful") == pytest.approx(2 / 3)


def test_a_past_failure_the_call_may_have_warned_with_can_be_marked(
    conn: Conn, dump_call: tuple[dict[str, int], int]
) -> None:
    """spark.advise_with_warnings shows past failures (traces) as warnings without logging them as items: a
    failure trace that existed at the call may be marked against it; a success trace, or one created after
    the call, may not."""
    _, rid = dump_call
    traces = {}
    for key, result, created in (
        ("failed", "failure", "now() - interval '1 day'"),
        ("worked", "success", "now() - interval '1 day'"),
        ("later", "failure", "now() + interval '1 hour'"),
    ):
        row = conn.execute(
            f"""INSERT INTO spark.memories (tenant, key, text, kind, metadata, created_at)
                VALUES (%s, %s, 'Intent: fix the migration. Outcome: ' || %s, 'trace', %s, {created})
                RETURNING id""",
            (T, key, result, Jsonb({"outcome": result})),
        ).fetchone()
        assert row is not None
        traces[key] = int(row[0])
    assert outcome(conn, traces["failed"], "helpful", rid) == pytest.approx(2 / 3)
    for key in ("worked", "later"):
        with pytest.raises(errors.InvalidParameterValue, match="was not surfaced"), conn.transaction():
            outcome(conn, traces[key], "helpful", rid)


def test_a_repeated_verdict_counts_once(conn: Conn, dump_call: tuple[dict[str, int], int]) -> None:
    """Was counted twice (a retried call): unhelpful 2, reliability 0.25."""
    ids, rid = dump_call
    first = outcome(conn, ids["dump"], "unhelpful", rid)
    assert outcome(conn, ids["dump"], "unhelpful", rid) == first == pytest.approx(1 / 3)
    assert counters(conn, ids["dump"]) == (0, 0, 1, 0, pytest.approx(1 / 3))
    assert logged(conn) == [(ids["dump"], rid, "unhelpful", "S", "api")]


def test_another_verdict_from_the_same_source_replaces_the_first(
    conn: Conn, dump_call: tuple[dict[str, int], int]
) -> None:
    """A mistaken mark can be corrected: its count is taken back, the new one counted, one row kept."""
    ids, rid = dump_call
    outcome(conn, ids["dump"], "unhelpful", rid)
    assert outcome(conn, ids["dump"], "helpful", rid) == pytest.approx(2 / 3)
    assert counters(conn, ids["dump"]) == (1, 0, 0, 0, pytest.approx(2 / 3))
    assert outcome(conn, ids["dump"], "ignored", rid) == pytest.approx(1 / 2.25)
    assert counters(conn, ids["dump"]) == (0, 0, 0, 1, pytest.approx(1 / 2.25))
    assert logged(conn) == [(ids["dump"], rid, "ignored", "S", "api")]


def test_each_source_and_each_call_has_its_own_verdict(
    conn: Conn, dump_call: tuple[dict[str, int], int]
) -> None:
    ids, rid = dump_call
    outcome(conn, ids["dump"], "followed", rid, source="hook")
    outcome(conn, ids["dump"], "helpful", rid, source="user")
    again, surfaced = advise(conn, T, DUMP_QUERY, "S")
    assert surfaced == {ids["dump"]}
    outcome(conn, ids["dump"], "helpful", again, source="user")
    assert counters(conn, ids["dump"])[:4] == (2, 1, 0, 0)
    assert len(logged(conn)) == 3


def test_outcomes_naming_no_call_count_each_time(conn: Conn) -> None:
    """Nothing ties them to one surfaced item: each is a verdict of its own, as before."""
    ids = add(conn, T, TEXTS)
    outcome(conn, ids["tabs"], "helpful", session="S")
    outcome(conn, ids["tabs"], "helpful", session="S")
    assert counters(conn, ids["tabs"])[:4] == (2, 0, 0, 0)


def test_a_pack_memory_keeps_one_verdict_per_item_and_its_reliability(conn: Conn) -> None:
    pack = add(conn, "_system", {"seed:dump": "Before alembic upgrade head, run pg_dump of the database."})
    ids = add(conn, T, TEXTS)
    rid, surfaced = advise(conn, T, DUMP_QUERY, "S", include_system=True)
    assert {ids["dump"], pack["seed:dump"]} <= surfaced
    for verdict in ("unhelpful", "unhelpful", "helpful"):
        assert outcome(conn, pack["seed:dump"], verdict, rid) == pytest.approx(0.5)
    assert counters(conn, pack["seed:dump"]) == (0, 0, 0, 0, 0.5)
    assert logged(conn) == [(pack["seed:dump"], rid, "helpful", "S", "api")]


def test_an_outcome_takes_the_session_of_its_call(conn: Conn, dump_call: tuple[dict[str, int], int]) -> None:
    """Was the caller's: an advisor of session OTHER naming a call of session S logged (call, OTHER), which
    the hooks' "one ignored per memory per session" read as another session."""
    ids, rid = dump_call
    outcome(conn, ids["dump"], "helpful", rid, session="OTHER")
    no_session, _ = advise(conn, T, DUMP_QUERY)
    outcome(conn, ids["dump"], "helpful", no_session, session="X")
    outcome(conn, ids["tabs"], "helpful", session="Y")  # naming no call: its own session
    assert [(r[1], r[3]) for r in logged(conn)] == [(rid, "S"), (no_session, None), (None, "Y")]
    with pytest.raises(errors.InvalidParameterValue, match="session_id"), conn.transaction():
        outcome(conn, ids["dump"], "helpful", rid, session="")  # still checked


def test_a_verdict_sent_twice_at_once_counts_once(installed_db: str) -> None:
    """Two sessions send the same verdict at the same time: the second waits for the first to commit, then
    changes nothing."""
    with psycopg.connect(installed_db, autocommit=True) as conn:
        ids = add(conn, T, TEXTS)
        rid, _ = advise(conn, T, DUMP_QUERY, "S")
        sql = "SELECT spark.record_outcome(%s, %s, 'unhelpful', %s)"
        with conn.transaction():
            conn.execute(sql, (T, ids["dump"], rid))
            second = Blocked(installed_db, sql, (T, ids["dump"], rid)).start()
            waiting = conn.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (second.pid,)
            ).fetchone()
            assert waiting == ("Lock",)
        assert second.join() is None
        assert second.result is None  # (Blocked keeps a callable's result only)
        assert counters(conn, ids["dump"])[:4] == (0, 0, 1, 0)
        assert len(logged(conn)) == 1


def test_shadow_hits_obey_as_of(conn: Conn) -> None:
    """Was: replayed at a past time, the call logged a shadow hit for a memory created since (a live rule on
    the same pattern surfaced nothing), and that hit counted toward the rule's promotion."""
    ids = add(conn, T, {"backup": "Take a backup before rm -rf."})
    conn.execute(
        "SELECT spark.put_trigger_rule(%s, 'shadowrule', 'rm -rf', ARRAY['backup'], shadow => true)", (T,)
    )
    conn.execute("SELECT spark.put_trigger_rule(%s, 'liverule', 'rm -rf', ARRAY['backup'])", (T,))
    _, surfaced = advise(conn, T, "Bash rm -rf build", as_of="2020-01-01T00:00:00Z")
    assert surfaced == set()
    now, surfaced = advise(conn, T, "Bash rm -rf build")
    assert surfaced == {ids["backup"]}
    hits = conn.execute(
        "SELECT retrieval_id, rule_name, memory_id FROM spark.trigger_shadow_hits WHERE tenant = %s", (T,)
    ).fetchall()
    assert hits == [(now, "shadowrule", ids["backup"])]


def test_shadow_hits_obey_pool_trigger(conn: Conn) -> None:
    """As the live pool: none with pool_trigger 0, at most pool_trigger a rule (lowest id first)."""
    ids = add(
        conn, T, {"a": "Take a backup first.", "b": "Check the current directory first.", "c": "Use trash."}
    )
    conn.execute(
        "SELECT spark.put_trigger_rule(%s, 'shadowrule', 'rm -rf', ARRAY['a', 'b', 'c'], shadow => true)",
        (T,),
    )
    off, _ = advise(conn, T, "Bash rm -rf build", pool_trigger=0)
    two, _ = advise(conn, T, "Bash rm -rf build", pool_trigger=2)
    every, _ = advise(conn, T, "Bash rm -rf build")
    hits = conn.execute(
        "SELECT retrieval_id, memory_id FROM spark.trigger_shadow_hits WHERE tenant = %s ORDER BY 1, 2", (T,)
    ).fetchall()
    assert hits == [(two, ids["a"]), (two, ids["b"]), (every, ids["a"]), (every, ids["b"]), (every, ids["c"])]
    assert off not in {r for r, _ in hits}


def test_the_migration_keeps_the_latest_verdict_and_takes_back_the_rest(fresh_db: str) -> None:
    """0015 on a database holding repeats: the latest of each (call, memory, source) stays, the others go and
    their counts come off the memory's counters (not a pack memory's, never moved); each outcome naming a call
    takes its session. Downgrade drops the key and keeps the rows."""
    schema.upgrade(fresh_db, "0014_follow_text_marker")
    old = datetime(2026, 1, 1, tzinfo=UTC)
    with psycopg.connect(fresh_db) as conn:
        ids = add(conn, T, {"dump": TEXTS["dump"], "tabs": TEXTS["tabs"]}, old)
        pack = add(conn, "_system", {"seed:dump": TEXTS["dump"]}, old)
        rid = conn.execute(
            "INSERT INTO spark.retrievals (tenant, session_id, query_text) VALUES (%s, 'S', 'q') "
            "RETURNING id",
            (T,),
        ).fetchone()[0]  # type: ignore[index]
        # as the old record_outcome left them, every call counted: the api said unhelpful twice, then
        # helpful (from another session), the hook helpful; a pack memory's repeats (its counters never
        # moved); two outcomes naming no call
        for n, (memory, owner, verdict, session, source) in enumerate(
            [
                (ids["dump"], T, "unhelpful", "S", "api"),
                (ids["dump"], T, "unhelpful", "S", "api"),
                (ids["dump"], T, "helpful", "OTHER", "api"),
                (ids["dump"], T, "helpful", "S", "hook"),
                (pack["seed:dump"], "_system", "helpful", "S", "api"),
                (pack["seed:dump"], "_system", "helpful", "S", "api"),
                (ids["tabs"], T, "helpful", "Y", "api"),
                (ids["tabs"], T, "helpful", "Y", "api"),
            ]
        ):
            conn.execute(
                """INSERT INTO spark.outcomes (tenant, retrieval_id, memory_id, memory_tenant, session_id,
                                               outcome, source, created_at)
                   VALUES (%s, %s, %s, %s, %s, %s, %s, %s)""",
                (
                    T,
                    None if memory == ids["tabs"] else rid,
                    memory,
                    owner,
                    session,
                    verdict,
                    source,
                    old + timedelta(minutes=n),
                ),
            )
        conn.execute(
            "UPDATE spark.memories SET helpful_count = 2, unhelpful_count = 2, reliability = 0.5 "
            "WHERE id = %s",
            (ids["dump"],),
        )
        conn.execute(
            "UPDATE spark.memories SET helpful_count = 2, reliability = 0.75 WHERE id = %s", (ids["tabs"],)
        )
    schema.upgrade(fresh_db, "0015_outcome_per_item")
    with psycopg.connect(fresh_db) as conn:
        assert logged(conn) == [
            (ids["dump"], rid, "helpful", "S", "api"),
            (ids["dump"], rid, "helpful", "S", "hook"),
            (pack["seed:dump"], rid, "helpful", "S", "api"),
            (ids["tabs"], None, "helpful", "Y", "api"),
            (ids["tabs"], None, "helpful", "Y", "api"),
        ]
        assert counters(conn, ids["dump"]) == (2, 0, 0, 0, pytest.approx(3 / 4))
        assert counters(conn, ids["tabs"]) == (2, 0, 0, 0, 0.75)
        assert counters(conn, pack["seed:dump"]) == (0, 0, 0, 0, 0.5)
        with pytest.raises(errors.UniqueViolation):
            conn.execute(
                "INSERT INTO spark.outcomes (tenant, retrieval_id, memory_id, memory_tenant, outcome, "
                "source) VALUES (%s, %s, %s, %s, 'ignored', 'hook')",
                (T, rid, ids["dump"], T),
            )
    schema.downgrade(fresh_db, "0014_follow_text_marker")
    with psycopg.connect(fresh_db) as conn:
        assert len(logged(conn)) == 5
        keys = conn.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = 'spark.outcomes'::regclass AND contype = 'u'"
        ).fetchall()
        assert keys == []
