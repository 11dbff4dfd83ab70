"""Advice a session was shown lately is a repeat (spark.advise, migration 0022); the hook leaves it out.

Was: the same advice was injected on every call of a session (audit Y, left out in session 25), the same
lines again and again in the model's context."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.types.json import Jsonb

from spark_pg import schema
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
    back = "UPDATE spark.advice_shown SET shown_at = shown_at - interval '31 minutes' WHERE tenant = %s"
    conn.execute(back, (T,))
    fourth, why = advise(conn, "S")
    assert "repeat" not in why["dump"] and repeat_of(conn, fourth) == [None]
    assert advise(conn, "S")[1]["dump"]["repeat"]["shown_in"] == fourth
    # the window is a param: 0 never marks a repeat (that call showed it); 31 minutes on, a window of 60
    # still finds it, one of 20 does not (and that call shows it again)
    shown, why = advise(conn, "S", repeat_after_minutes=0)
    assert "repeat" not in why["dump"] and repeat_of(conn, shown) == [None]
    conn.execute(back, (T,))
    assert advise(conn, "S", repeat_after_minutes=60)[1]["dump"]["repeat"]["shown_in"] == shown
    again, why = advise(conn, "S", repeat_after_minutes=20)
    assert "repeat" not in why["dump"] and repeat_of(conn, again) == [None]
    # what each session was last shown: one row a memory, however many calls
    rows = conn.execute(
        "SELECT session_id, retrieval_id FROM spark.advice_shown WHERE tenant = %s ORDER BY session_id", (T,)
    ).fetchall()
    assert [r[0] for r in rows] == ["S", "other"] and rows[0][1] == again


def test_critical_advice_is_never_a_repeat(conn: Conn) -> None:
    ids = add(conn, T, TEXTS)
    conn.execute("UPDATE spark.memories SET priority = 'critical' WHERE id = %s", (ids["dump"],))
    for _ in range(3):
        rid, why = advise(conn, "S")
        assert "repeat" not in why["dump"] and repeat_of(conn, rid) == [None]


def test_taking_a_call_back_restores_what_an_earlier_call_showed(conn: Conn) -> None:
    """Was (second review): Advisor.forget_shown deleted the row the taken-back call had overwritten, so what
    an earlier call of the session showed was forgotten and shown again (a critical item, rewritten by every
    call, or a parallel call's)."""
    from spark_pg.advisor import Advice, Advisor

    ids = add(conn, T, TEXTS)
    conn.execute("UPDATE spark.memories SET priority = 'critical' WHERE id = %s", (ids["dump"],))
    first, _ = advise(conn, "S")
    second, _ = advise(conn, "S")
    row = (
        "SELECT retrieval_id, prev_retrieval_id FROM spark.advice_shown WHERE tenant = %s AND memory_id = %s"
    )
    assert conn.execute(row, (T, ids["dump"])).fetchone() == (second, first)

    def taken_back(call: int) -> None:
        item = Advice(ids["dump"], "dump", TEXTS["dump"], 1.0, "critical", "user", "general", {}, call)
        Advisor(conn, None, T, session_id="S").forget_shown([item])

    taken_back(second)  # the deny of the second call: the first one's record is back
    assert conn.execute(row, (T, ids["dump"])).fetchone() == (first, None)
    taken_back(first)  # nothing before it: the row goes
    assert conn.execute(row, (T, ids["dump"])).fetchone() is None


@pytest.mark.parametrize("value", ["-1", '"30"', "1e-330", "100001", "1e400"])
def test_a_bad_window_is_refused_by_name_and_nothing_is_logged(conn: Conn, value: str) -> None:
    """As JSON text: 1e-330 underflowed the window's cast to double precision (a raw 22003 that named
    nothing), and 1e400 would overflow it."""
    add(conn, T, TEXTS)
    params = f'{{"include_system": false, "repeat_after_minutes": {value}}}'
    with pytest.raises(errors.InvalidParameterValue, match="repeat_after_minutes"), conn.transaction():
        conn.execute("SELECT * FROM spark.advise(%s, %s, NULL, 5, %s, 'S')", (T, QUERY, params))
    assert conn.execute("SELECT count(*) FROM spark.retrievals WHERE tenant = %s", (T,)).fetchone() == (0,)


@pytest.fixture(scope="module")
def seeded(server_url: str, model_settings: Settings) -> Iterator[str]:
    with seeded_database(server_url, model_settings) as url:
        yield url


def hook_answers(
    url: str, embedder: Embedder, memory: MemoryIn, command: str, sessions: list[str], *, interrupts: bool
) -> list[dict[str, Any] | None]:
    """``memory`` stored, then the PreToolUse answer to ``command`` for each session in turn."""
    with psycopg.connect(url) as conn:
        ingest(conn, [memory], embedder)
        conn.commit()
    pool = open_pool(url, 1)
    try:
        service = HookService(pool.connection, lambda: embedder)
        events = [HookEvent(PRE, "Bash", {"command": command}, session) for session in sessions]
        return [service.pre(memory.tenant, event, interrupts=interrupts) for event in events]
    finally:
        pool.close()


def context(answer: dict[str, Any] | None) -> str:
    return "" if answer is None else str(answer["hookSpecificOutput"].get("additionalContext", ""))


def test_the_hook_leaves_a_repeat_out_of_the_context_it_injects(seeded: str, embedder: Embedder) -> None:
    tenant = "hook-repeats"
    rule = "Run `make clean-build` to clear the build folder, never a bare rm of it."
    memory = MemoryIn(tenant, "r-clean", rule, kind="rule", actionability=0.9)
    command = "./scripts/clean_build.sh $BUILD_DIR"
    answers = hook_answers(seeded, embedder, memory, command, ["H1", "H1", "H2"], interrupts=False)
    assert "make clean-build" in context(answers[0])
    assert "make clean-build" not in context(answers[1])  # the same session, a minute later: in its context
    assert "make clean-build" in context(answers[2])
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


def shown_in(conn: Conn, session: str, memory: int) -> Any:
    """The call that last showed ``memory`` to ``session`` (None: never)."""
    row = conn.execute(
        "SELECT retrieval_id FROM spark.advice_shown "
        "WHERE tenant = %s AND session_id = %s AND memory_id = %s",
        (T, session, memory),
    ).fetchone()
    return None if row is None else row[0]


def test_a_warning_shown_to_the_session_is_a_repeat_too(conn: Conn) -> None:
    """A past failure warned with on every call of a session was the same warning again and again."""
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
    assert "repeat" not in why["failed-upgrade"] and shown_in(conn, "S", trace) == first
    # shown twice by that call, as advice and as a warning: the record it replaced is none, not its own
    prev = "SELECT prev_retrieval_id FROM spark.advice_shown WHERE tenant = %s AND memory_id = %s"
    assert conn.execute(prev, (T, trace)).fetchone() == (None,)
    why = warnings(conn, "S")[1]
    assert why["failed-upgrade"]["repeat"]["shown_in"] == first and shown_in(conn, "S", trace) == first
    assert "repeat" not in warnings(conn, "other")[1]["failed-upgrade"]
    conn.execute("UPDATE spark.memories SET priority = 'critical' WHERE id = %s", (trace,))
    assert "repeat" not in warnings(conn, "S")[1]["failed-upgrade"]  # a critical failure: every call


def test_advice_a_deny_kept_from_the_model_is_shown_on_the_retry(seeded: str, embedder: Embedder) -> None:
    """Was (review): with --interrupts, a denied call shows only the deny's reason, yet its other advice was
    recorded as shown, so the retry, which the deny lets through, left that advice out as a repeat: the
    tenant's own advice for a DROP TABLE never reached the model."""
    archive = "Before you DROP TABLE orders, copy it: CREATE TABLE orders_archive AS SELECT * FROM orders."
    memory = MemoryIn("deny-repeats", "orders-archive", archive, kind="rule", actionability=0.9)
    command = "psql -c 'DROP TABLE orders'"
    answers = hook_answers(seeded, embedder, memory, command, ["D1"] * 3, interrupts=True)
    assert answers[0] is not None and answers[0]["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "orders_archive" not in answers[0]["hookSpecificOutput"]["permissionDecisionReason"]
    assert "orders_archive" in context(answers[1])
    # shown by the retry: a repeat now; the critical pack item comes every time
    assert "orders_archive" not in context(answers[2]) and "destructive" in context(answers[2])


def test_the_upgrade_gives_the_table_the_policies_and_grants_of_a_deployment_with_rls(fresh_db: str) -> None:
    """Was (second review): the first form of the migration wrote a current_user policy, which refused
    every advise of the shared-pool variant (policies on the spark.tenant setting: docs/security.md); it
    missed grants another role made, and a grant to PUBLIC made the upgrade fail."""
    suffix = uuid.uuid4().hex[:8]
    pool, dba, tenant = (f"rls_{name}_{suffix}" for name in ("pool", "dba", "tenant"))
    schema.upgrade(fresh_db, "0021_advice_repeats")
    with psycopg.connect(fresh_db, autocommit=True) as admin:
        for role in (pool, dba, tenant):
            admin.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
        try:
            setting = "tenant = current_setting('spark.tenant', true)"
            admin.execute("ALTER TABLE spark.retrievals ENABLE ROW LEVEL SECURITY")
            admin.execute(
                f"CREATE POLICY tenant_own ON spark.retrievals USING ({setting}) WITH CHECK ({setting})"
            )
            grants = [
                sql.SQL("GRANT INSERT ON spark.retrieval_items TO {}").format(sql.Identifier(pool)),
                sql.SQL("GRANT USAGE ON SCHEMA spark TO {}").format(sql.Identifier(dba)),
                sql.SQL("GRANT INSERT ON spark.retrieval_items TO {} WITH GRANT OPTION").format(
                    sql.Identifier(dba)
                ),
                sql.SQL("SET ROLE {}").format(sql.Identifier(dba)),
                sql.SQL("GRANT INSERT ON spark.retrieval_items TO {}").format(sql.Identifier(tenant)),
                sql.SQL("RESET ROLE"),
                sql.SQL("GRANT INSERT ON spark.retrieval_items TO PUBLIC"),
            ]
            for grant in grants:
                admin.execute(grant)
            schema.upgrade(fresh_db, "0022_advice_shown")
            secured = "SELECT relrowsecurity FROM pg_class WHERE oid = 'spark.advice_shown'::regclass"
            assert admin.execute(secured).fetchone() == (True,)
            policies = admin.execute(
                "SELECT policyname, qual, with_check FROM pg_policies WHERE tablename = 'advice_shown'"
            ).fetchall()
            assert [p[0] for p in policies] == ["tenant_own"]
            assert all("current_setting('spark.tenant'" in str(p[1]) + str(p[2]) for p in policies)
            for role in (pool, tenant, "public"):
                can = admin.execute("SELECT has_table_privilege(%s, 'spark.advice_shown', 'INSERT')", (role,))
                assert can.fetchone() == (True,), role
        finally:
            admin.execute(
                sql.SQL("DROP OWNED BY {}").format(
                    sql.SQL(", ").join(map(sql.Identifier, (tenant, dba, pool)))
                )
            )
            for role in (tenant, dba, pool):
                admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
