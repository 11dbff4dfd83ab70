"""Advice a session was shown lately is a repeat (spark.advise, migration 0021), and the hook leaves it out.

Was: the same advice was injected on every call of a session (audit Y, left out in session 25), the same
lines again and again in the model's context."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors
from psycopg.types.json import Jsonb

from spark_pg.config import Settings
from spark_pg.embedding import Embedder
from spark_pg.hooks.protocol import PRE, HookEvent
from spark_pg.hooks.server import open_pool
from spark_pg.hooks.service import HookService
from spark_pg.ingest import ingest
from spark_pg.records import MemoryIn
from tests.conftest import seeded_database
from tests.test_outcomes_sql import add

Conn = psycopg.Connection[Any]
T = "repeats"
TEXTS = {
    "dump": "Run alembic upgrade head only after pg_dump of the database.",
    "bread": "Bake bread at 220 degrees for 30 minutes.",
}
QUERY = "alembic upgrade head pg_dump"


def advise(conn: Conn, session: str | None, tenant: str = T, **params: Any) -> tuple[int, dict[str, Any]]:
    """One spark.advise call: its retrieval id and the why of each memory it surfaced, by key."""
    rows = conn.execute(
        "SELECT retrieval_id, key, why FROM spark.advise(%s, %s, NULL, 5, %s, %s)",
        (tenant, QUERY, Jsonb({"include_system": False, **params}), session),
    ).fetchall()
    found = conn.execute("SELECT max(id) FROM spark.retrievals WHERE tenant = %s", (tenant,)).fetchone()
    assert found is not None
    return int(found[0]), {str(r[1]): r[2] for r in rows}


def repeat_of(conn: Conn, retrieval: int) -> list[Any]:
    rows = conn.execute(
        "SELECT repeat_of FROM spark.retrieval_items WHERE tenant = %s AND retrieval_id = %s", (T, retrieval)
    ).fetchall()
    return [r[0] for r in rows]


def test_advice_shown_to_the_session_is_a_repeat_until_the_window_passes(conn: Conn) -> None:
    add(conn, T, TEXTS)
    first, why = advise(conn, "S")
    assert "dump" in why and "repeat" not in why["dump"] and repeat_of(conn, first) == [None]
    second, why = advise(conn, "S")
    assert why["dump"]["repeat"]["shown_in"] == first and repeat_of(conn, second) == [first]
    # a repeat was not shown: the next call still repeats the first one, the one that showed it
    third, why = advise(conn, "S")
    assert why["dump"]["repeat"]["shown_in"] == first and repeat_of(conn, third) == [first]
    # another session, or a call without one, was shown nothing yet
    assert "repeat" not in advise(conn, "other")[1]["dump"]
    assert "repeat" not in advise(conn, None)[1]["dump"]
    # 31 minutes later (the default window is 30): shown again, and that call is the one repeated after
    conn.execute(
        "UPDATE spark.retrievals SET created_at = created_at - interval '31 minutes' WHERE tenant = %s", (T,)
    )
    fourth, why = advise(conn, "S")
    assert "repeat" not in why["dump"] and repeat_of(conn, fourth) == [None]
    assert advise(conn, "S")[1]["dump"]["repeat"]["shown_in"] == fourth
    # the window is a param: 0 never marks a repeat (that call showed it), and 60 minutes reaches back past
    # the 31 to the last call that showed it
    shown, why = advise(conn, "S", repeat_after_minutes=0)
    assert "repeat" not in why["dump"] and repeat_of(conn, shown) == [None]
    conn.execute("DELETE FROM spark.retrievals WHERE tenant = %s AND id >= %s", (T, fourth))
    assert advise(conn, "S", repeat_after_minutes=60)[1]["dump"]["repeat"]["shown_in"] == first
    assert "repeat" not in advise(conn, "S", repeat_after_minutes=20)[1]["dump"]


def test_critical_advice_is_never_a_repeat(conn: Conn) -> None:
    ids = add(conn, T, TEXTS)
    conn.execute("UPDATE spark.memories SET priority = 'critical' WHERE id = %s", (ids["dump"],))
    for _ in range(3):
        rid, why = advise(conn, "S")
        assert "repeat" not in why["dump"] and repeat_of(conn, rid) == [None]


@pytest.mark.parametrize(("value", "message"), [(-1, "repeat_after_minutes"), ("30", "repeat_after_minutes")])
def test_a_bad_window_is_refused_by_name_and_nothing_is_logged(conn: Conn, value: Any, message: str) -> None:
    add(conn, T, TEXTS)
    with pytest.raises(errors.InvalidParameterValue, match=message), conn.transaction():
        advise(conn, "S", repeat_after_minutes=value)
    assert conn.execute("SELECT count(*) FROM spark.retrievals WHERE tenant = %s", (T,)).fetchone() == (0,)


def test_a_window_past_doubles_is_refused_by_name_not_by_a_cast(conn: Conn) -> None:
    """1e400 is a JSON number that double precision cannot hold: the window is read without that cast."""
    add(conn, T, TEXTS)
    with pytest.raises(errors.InvalidParameterValue, match="repeat_after_minutes"), conn.transaction():
        params = '{"repeat_after_minutes": 1e400}'
        conn.execute("SELECT * FROM spark.advise(%s, %s, NULL, 5, %s, 'S')", (T, QUERY, params))


@pytest.fixture(scope="module")
def seeded(server_url: str, model_settings: Settings) -> Iterator[str]:
    with seeded_database(server_url, model_settings) as url:
        yield url


def test_the_hook_leaves_a_repeat_out_of_the_context_it_injects(seeded: str, embedder: Embedder) -> None:
    tenant = "hook-repeats"
    rule = "Run `make clean-build` to clear the build folder, never a bare rm of it."
    with psycopg.connect(seeded) as conn:
        ingest(conn, [MemoryIn(tenant, "r-clean", rule, kind="rule", actionability=0.9)], embedder)
        conn.commit()
    pool = open_pool(seeded, 1)
    try:
        service = HookService(pool.connection, lambda: embedder)

        def context(session: str) -> str:
            event = HookEvent(PRE, "Bash", {"command": "./scripts/clean_build.sh $BUILD_DIR"}, session)
            output = service.pre(tenant, event, interrupts=False)
            return "" if output is None else str(output["hookSpecificOutput"]["additionalContext"])

        assert "make clean-build" in context("H1")
        assert "make clean-build" not in context("H1")  # the same session, a minute later: in its context
        assert "make clean-build" in context("H2")
    finally:
        pool.close()
    with psycopg.connect(seeded) as conn:  # logged all the same (outcome inference reads the items)
        rows = conn.execute(
            "SELECT r.session_id, i.repeat_of IS NOT NULL FROM spark.retrieval_items i "
            "JOIN spark.retrievals r ON r.tenant = i.tenant AND r.id = i.retrieval_id "
            "JOIN spark.memories m ON m.tenant = i.memory_tenant AND m.id = i.memory_id "
            "WHERE i.tenant = %s AND m.key = 'r-clean' ORDER BY r.id",
            (tenant,),
        ).fetchall()
    assert rows == [("H1", False), ("H1", True), ("H2", False)]


def warnings(conn: Conn, session: str | None) -> tuple[int, dict[str, Any]]:
    """One spark.advise_with_warnings call: its retrieval id and the why of each warning, by key."""
    rows = conn.execute(
        "SELECT key, why FROM spark.advise_with_warnings(%s, %s, NULL, 5, %s, %s, "
        "warning_min_score => 0.01) WHERE warning",
        (T, QUERY, Jsonb({"include_system": False}), session),
    ).fetchall()
    found = conn.execute("SELECT max(id) FROM spark.retrievals WHERE tenant = %s", (T,)).fetchone()
    assert found is not None
    return int(found[0]), {str(r[0]): r[1] for r in rows}


def warned(conn: Conn, retrieval: int) -> Any:
    row = conn.execute(
        "SELECT warned FROM spark.retrievals WHERE tenant = %s AND id = %s", (T, retrieval)
    ).fetchone()
    assert row is not None
    return row[0]


def test_a_warning_shown_to_the_session_is_a_repeat_too(conn: Conn) -> None:
    """A past failure warned with on every call of a session was the same warning again and again; warnings
    are no items, so the call logs those it showed (spark.retrievals.warned)."""
    add(conn, T, TEXTS)
    row = conn.execute(
        """INSERT INTO spark.memories (tenant, key, text, kind, metadata, created_at)
           VALUES (%s, 'failed-upgrade', 'Intent: alembic upgrade head on prod without pg_dump. Outcome: '
                   'failure: the migration locked the users table for an hour', 'trace', %s,
                   now() - interval '1 day') RETURNING id""",
        (T, Jsonb({"outcome": "failure"})),
    ).fetchone()
    assert row is not None
    trace = int(row[0])
    first, why = warnings(conn, "S")
    assert "repeat" not in why["failed-upgrade"] and warned(conn, first) == [trace]
    second, why = warnings(conn, "S")
    assert why["failed-upgrade"]["repeat"]["shown_in"] == first and warned(conn, second) is None
    assert "repeat" not in warnings(conn, "other")[1]["failed-upgrade"]
    conn.execute("UPDATE spark.memories SET priority = 'critical' WHERE id = %s", (trace,))
    assert "repeat" not in warnings(conn, "S")[1]["failed-upgrade"]  # a critical failure: every call
