"""`spark-pg maintain`: per-tenant HNSW indexes and statistics brought up to date after changes made in SQL,
which no write through spark-pg followed (spark_pg.maintain)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from spark_pg.cli import main
from spark_pg.db import connect
from spark_pg.errors import InputError
from spark_pg.ingest import refresh_after_write
from spark_pg.maintain import LEFT_TO_OWNER, MaintainReport, maintain
from spark_pg.tenant_indexes import build_tenant_indexes
from tests.conftest import point_cli, temp_database
from tests.test_rls import as_role, doc_block, renamed, roles_db

Conn = psycopg.Connection[Any]
DIM = 8  # small vectors: an index over 1,500 of them builds in a fraction of a second
INDEX_MIN = 1500  # spark.tenant_index_plan's default threshold, which spark-pg always uses


@pytest.fixture
def url(server_url: str) -> Iterator[str]:
    """A fresh install with an active model of DIM dimensions (maintain visits every tenant of the
    database: no other test's rows)."""
    with temp_database(server_url, install=True) as url:
        with connect(url, autocommit=True) as c:
            c.execute("SELECT spark.register_model('maintain-model', %s, 'mean', 256)", (DIM,))
        yield url


@pytest.fixture
def admin(url: str) -> Iterator[Conn]:
    with connect(url, autocommit=True) as c:
        yield c


@pytest.fixture
def cli(url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """The CLI pointed at ``url`` (and no user config file)."""
    return point_cli(url, monkeypatch, tmp_path)


def fill(c: Conn, tenant: str, n: int, *, vectors: bool = True) -> None:
    """``n`` more memories for ``tenant`` written in SQL (as a bulk load or a restore would), each with a
    distinct vector of the active model; nothing refreshed."""
    c.execute(
        """WITH m AS (INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash)
                      SELECT %(t)s, 'k' || (s.n + g), 'deploy note ' || (s.n + g), 'd', '\\x00'
                      FROM generate_series(1, %(n)s) g,
                           (SELECT count(*) AS n FROM spark.memories WHERE tenant = %(t)s) s
                      RETURNING tenant, id, created_at)
           INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding)
           SELECT tenant, id, (SELECT id FROM spark.embedding_models WHERE active), created_at,
                  (SELECT array_agg(sin(id * 7.31 + d * 0.37))::vector FROM generate_series(1, %(dim)s) d)
           FROM m WHERE %(vectors)s""",
        {"t": tenant, "n": n, "dim": DIM, "vectors": vectors},
    )


def index_name(c: Conn, tenant: str) -> str:
    row = c.execute(
        "SELECT spark._tenant_index_name(%s, (SELECT id FROM spark.embedding_models WHERE active))", (tenant,)
    ).fetchone()
    assert row is not None
    return str(row[0])


def index_state(c: Conn, tenant: str) -> bool | None:
    """Whether the tenant's index is valid; None without one."""
    row = c.execute("SELECT spark._index_valid(%s)", (index_name(c, tenant),)).fetchone()
    assert row is not None
    return None if row[0] is None else bool(row[0])


def registry(c: Conn) -> list[tuple[str, int]]:
    return [(str(r[0]), int(r[1])) for r in c.execute(
        "SELECT tenant, vectors FROM spark.tenant_vector_indexes ORDER BY tenant"
    ).fetchall()]  # fmt: skip


def stats(c: Conn, tenant: str) -> int | None:
    row = c.execute("SELECT memories FROM spark.tenant_stats WHERE tenant = %s", (tenant,)).fetchone()
    return None if row is None else int(row[0])


def plan(c: Conn, tenant: str) -> list[str]:
    return [str(r[0]) for r in c.execute("SELECT action FROM spark.tenant_index_plan(%s)", (tenant,))]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["maintain", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_an_index_of_a_tenant_emptied_by_sql_is_dropped_with_its_registry_row_and_statistics(
    admin: Conn,
) -> None:
    fill(admin, "gone", INDEX_MIN)
    fill(admin, "kept", 40)
    first = maintain(admin)
    assert first.built == [index_name(admin, "gone")] and first.ok
    assert registry(admin) == [("gone", INDEX_MIN)] and stats(admin, "gone") == INDEX_MIN
    admin.execute("DELETE FROM spark.memories WHERE tenant = 'gone'")  # no write through spark-pg follows
    done = maintain(admin)
    assert done.dropped == [index_name(admin, "gone")] and done.built == []
    assert index_state(admin, "gone") is None  # the index itself, not only its registry row
    assert registry(admin) == []
    assert stats(admin, "gone") is None
    assert admin.execute("SELECT count(*) FROM spark.lexeme_stats WHERE tenant = 'gone'").fetchone() == (0,)
    assert done.touched == 1 and stats(admin, "kept") == 40  # the other tenant was visited, unchanged
    assert (done.tenants, done.ok) == (2, True)  # "gone" still had its statistics and index: visited


def test_an_index_of_a_tenant_shrunk_under_half_the_threshold_is_dropped(admin: Conn) -> None:
    fill(admin, "shrunk", INDEX_MIN)
    maintain(admin)
    keep = INDEX_MIN // 2  # at half the threshold the index stays (no flapping near the line)
    admin.execute(
        "DELETE FROM spark.memories WHERE tenant = 'shrunk' AND id NOT IN "
        "(SELECT id FROM spark.memories WHERE tenant = 'shrunk' ORDER BY id LIMIT %s)",
        (keep,),
    )
    assert maintain(admin).dropped == [] and index_state(admin, "shrunk") is True
    admin.execute("DELETE FROM spark.memories WHERE id = (SELECT max(id) FROM spark.memories)")
    done = maintain(admin)
    assert done.dropped == [index_name(admin, "shrunk")] and index_state(admin, "shrunk") is None
    assert registry(admin) == [] and stats(admin, "shrunk") == keep  # moved by less than a quarter: kept


def test_a_tenant_filled_by_sql_gets_its_index_built_and_registered(admin: Conn) -> None:
    fill(admin, "loaded", INDEX_MIN - 1)
    assert maintain(admin).built == []  # not due yet
    fill(admin, "loaded", 1)
    assert plan(admin, "loaded") == ["build"]
    done = maintain(admin)
    assert done.built == [index_name(admin, "loaded")] and done.touched == 1
    assert index_state(admin, "loaded") is True and plan(admin, "loaded") == []
    assert registry(admin) == [("loaded", INDEX_MIN)]
    assert stats(admin, "loaded") == INDEX_MIN - 1  # counted at the first run; moved by less than a quarter


def test_an_invalid_index_of_an_interrupted_build_is_dropped_and_built_again(
    url: str, admin: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build that waits past the lock timeout for an older transaction gives up and leaves an invalid
    index; that run leaves the tenant whole to the next (its refresh would build the index inline, holding
    every tenant's writers), which drops the invalid index and builds it again."""
    from spark_pg import tenant_indexes

    monkeypatch.setattr(tenant_indexes, "BUILD_LOCK_TIMEOUT_MS", 300)
    fill(admin, "cut", INDEX_MIN)
    with connect(url) as older:
        older.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        older.execute("SELECT 1")  # a snapshot CREATE INDEX CONCURRENTLY waits out
        cut = maintain(admin)
        assert (cut.failed, cut.ok, cut.built) == (["cut"], False, [])
        assert index_state(admin, "cut") is False  # what an interrupted build leaves
        assert registry(admin) == [] and stats(admin, "cut") is None  # the refresh was left too
    assert plan(admin, "cut") == ["drop", "build"]
    done = maintain(admin)
    name = index_name(admin, "cut")
    assert (done.dropped, done.built, done.failed) == ([name], [name], [])
    assert index_state(admin, "cut") is True and registry(admin) == [("cut", INDEX_MIN)]


def test_tenant_limits_the_work_to_that_tenant(admin: Conn) -> None:
    fill(admin, "one", INDEX_MIN)
    fill(admin, "two", INDEX_MIN)
    done = maintain(admin, "one")
    assert (done.tenants, done.built, done.touched) == (1, [index_name(admin, "one")], 1)
    assert registry(admin) == [("one", INDEX_MIN)]
    assert plan(admin, "two") == ["build"] and stats(admin, "two") is None
    assert maintain(admin, "nobody").tenants == 1  # a tenant with nothing is no error, and nothing to do


def test_json_output_parses_and_its_counts_match(
    cli: str, admin: Conn, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(admin, "big", INDEX_MIN)
    fill(admin, "small", 30, vectors=False)
    code, out, err = run(capsys, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["tenants"] == 2 and report["built"] == 1 and report["dropped"] == 0
    assert report["touched"] == 2 and report["ok"] is True and report["index_work"] == "done"
    assert report["built_indexes"] == [index_name(admin, "big")] and report["failed"] == []
    assert registry(admin) == [("big", INDEX_MIN)] and stats(admin, "small") == 30
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # as on a terminal
    assert "maintain" not in run(capsys, "--json")[2]  # no progress bar with --json
    assert "maintain: 100%" in run(capsys)[2]  # one without, on a terminal
    code, out, _ = run(capsys, "--json", "--tenant", "small", "--force")
    assert code == 0 and json.loads(out) | {"seconds": 0} == {
        **MaintainReport(tenants=1, touched=1).as_json(),
        "seconds": 0,
    }


def test_running_it_twice_is_a_no_op_the_second_time(
    cli: str, admin: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    fill(admin, "big", INDEX_MIN)
    fill(admin, "small", 30)
    code, out, _ = run(capsys)
    assert code == 0
    assert out.startswith("tenants visited: 2; HNSW indexes built: 1, dropped: 0; tenants whose statistics "
                          "were refreshed: 2 (")  # fmt: skip
    state = (registry(admin), stats(admin, "big"), stats(admin, "small"), index_state(admin, "big"))
    code, out, _ = run(capsys)
    assert code == 0
    assert out.startswith("tenants visited: 2; HNSW indexes built: 0, dropped: 0; tenants whose statistics "
                          "were refreshed: 0 (")  # fmt: skip
    assert (registry(admin), stats(admin, "big"), stats(admin, "small"), index_state(admin, "big")) == state
    again = maintain(admin, force=True)  # the lexeme counts rebuilt all the same; the indexes untouched
    assert (again.touched, again.built, again.dropped) == (2, [], [])


@pytest.mark.parametrize("tenant", ["", "   ", "x" * 129])
def test_a_bad_tenant_is_refused_with_exit_2(
    cli: str, admin: Conn, capsys: pytest.CaptureFixture[str], tenant: str
) -> None:
    fill(admin, "big", INDEX_MIN)
    code, out, err = run(capsys, "--tenant", tenant)
    assert code == 2 and out == ""
    assert err.startswith("spark-pg: error: --tenant ") and ("empty" in err or "limit is 128" in err), err
    assert index_state(admin, "big") is None  # nothing ran
    with pytest.raises(InputError, match=r"^tenant "):
        maintain(admin, tenant)


def test_a_connection_inside_a_transaction_is_refused(url: str) -> None:
    with connect(url) as c:
        c.execute("SELECT 1")
        with pytest.raises(InputError, match="outside a transaction"):
            maintain(c)
    with connect(url) as c:  # outside one, a connection not in autocommit mode is left as it was
        assert maintain(c).ok and not c.autocommit


def test_a_tenant_another_builder_or_refresher_holds_is_skipped_not_failed(
    url: str, admin: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_pg import tenant_indexes

    monkeypatch.setattr(tenant_indexes, "BUILD_LOCK_TIMEOUT_MS", 300)
    fill(admin, "held", INDEX_MIN)
    with connect(url, autocommit=True) as other:  # another maintain (or ingest) building the tenant's index
        other.execute("SELECT pg_advisory_lock(hashtextextended('spark.tenant_index:held', 0))")
        done = maintain(admin)
        assert (done.busy, done.failed, done.built, done.ok) == (["held"], [], [], True)
        assert stats(admin, "held") == INDEX_MIN  # the statistics were refreshed all the same
        assert registry(admin) == []
    with connect(url) as other:  # another refresher of the tenant, longer than the lock timeout
        other.execute("SELECT pg_advisory_xact_lock(hashtextextended('spark.refresh_tenant_stats:held', 0))")
        done = maintain(admin)
        assert (done.busy, done.failed, done.ok) == (["held"], [], True)
        assert done.built == [index_name(admin, "held")] and registry(admin) == []  # not recorded yet
    assert registry(admin) == [] and maintain(admin).touched == 1 and registry(admin) == [("held", INDEX_MIN)]


def test_two_maintains_at_once_both_succeed(url: str, admin: Conn) -> None:
    for tenant in ("a", "b", "c"):
        fill(admin, tenant, INDEX_MIN)
    reports: list[MaintainReport] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            with connect(url, autocommit=True) as c:
                reports.append(maintain(c))
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == [] and len(reports) == 2 and all(r.ok for r in reports)
    built = sorted(name for r in reports for name in r.built)
    assert built == sorted(index_name(admin, t) for t in "abc")  # each once
    maintain(admin)  # what a tenant held by the other run left unrecorded
    assert registry(admin) == [(t, INDEX_MIN) for t in "abc"]


def test_builders_of_two_tenants_take_turns(url: str, admin: Conn, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two CONCURRENTLY builds of partial indexes on spark.embeddings side by side deadlock (each waits for
    the other's transaction; the server cancels one): a builder polls for the others' to end, a write's for
    up to the lock timeout (then the tenant is queued, nothing half-built), maintain's as long as it takes."""
    from spark_pg import tenant_indexes

    monkeypatch.setattr(tenant_indexes, "BUILD_LOCK_TIMEOUT_MS", 300)
    fill(admin, "next", INDEX_MIN)
    with connect(url, autocommit=True) as other:  # another tenant's build under way
        other.execute("SELECT pg_advisory_lock(hashtextextended('spark.tenant_index_ddl', 0))")
        work = build_tenant_indexes(admin, ["next"])
        assert (work.queued, work.built, work.failed) == (["next"], [], [])
        assert build_tenant_indexes(admin, ["next"]).ran == 0 and index_state(admin, "next") is None
        threading.Timer(1.0, other.close).start()  # the other build ends
        started = time.monotonic()
        done = build_tenant_indexes(admin, ["next"], patient=True)
        assert done.built == [index_name(admin, "next")] and time.monotonic() - started >= 0.9
    held = admin.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    ).fetchone()
    assert held == (0,)  # every lock given back


def test_a_write_whose_build_waits_its_turn_out_leaves_the_tenant_whole_to_the_next(
    url: str, admin: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was (review): the write's refresh then ran the plan itself, a plain CREATE INDEX that holds every
    tenant's vector writes for the build (or, behind a real CONCURRENTLY build, waited 5 s more and
    failed)."""
    from spark_pg import tenant_indexes

    monkeypatch.setattr(tenant_indexes, "BUILD_LOCK_TIMEOUT_MS", 300)
    fill(admin, "due", INDEX_MIN)
    with connect(url, autocommit=True) as other:  # another build under way
        other.execute("SELECT pg_advisory_lock(hashtextextended('spark.tenant_index_ddl', 0))")
        refresh_after_write(admin, ["due"])
        assert index_state(admin, "due") is None and stats(admin, "due") is None  # left whole
    refresh_after_write(admin, ["due"])  # the next write's turn
    assert index_state(admin, "due") is True and registry(admin) == [("due", INDEX_MIN)]


def test_reembed_says_which_tenants_its_refresh_left(
    url: str, admin: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """reembed's refresh is maintain's: a tenant it left undone (a lock timeout) is returned, for the
    decision to name spark-pg maintain (it was only logged, and the decision said "statistics refreshed")."""
    from spark_pg import reembed, tenant_indexes

    monkeypatch.setattr(tenant_indexes, "BUILD_LOCK_TIMEOUT_MS", 300)
    fill(admin, "cut", INDEX_MIN)
    with connect(url) as older:
        older.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        older.execute("SELECT 1")  # a snapshot CREATE INDEX CONCURRENTLY waits out
        left = reembed._refresh_tenants(admin, progress=False)
    assert left == ["cut"]
    report = reembed.ReembedReport(model="m", previous=None, tenants_left=left)
    assert reembed._left(report).endswith(
        "1 tenants were left undone (a lock timeout): run spark-pg maintain"
    )
    assert reembed._refresh_tenants(admin, progress=False) == []


def test_reembeds_shared_index_takes_its_turn_too(url: str, admin: Conn) -> None:
    """reembed builds a model's shared index CONCURRENTLY on the same table: it waits for the builders' turn
    like the others (side by side with a tenant's build it deadlocked, and one of them was cancelled)."""
    from spark_pg.reembed import build_index

    model_id = admin.execute("SELECT spark.register_model('turns-model', 8, 'mean', 256)").fetchone()[0]
    shared = f"embeddings_hnsw_m{model_id}"
    admin.execute(sql.SQL("DROP INDEX spark.{}").format(sql.Identifier(shared)))
    exists = "SELECT spark._index_valid(%s)"
    with connect(url, autocommit=True) as other:  # another build under way
        other.execute("SELECT pg_advisory_lock(hashtextextended('spark.tenant_index_ddl', 0))")
        with connect(url, autocommit=True) as builder:
            thread = threading.Thread(target=build_index, args=(builder, model_id))
            thread.start()
            time.sleep(1.0)
            assert thread.is_alive() and admin.execute(exists, (shared,)).fetchone() == (None,)
            other.close()  # the other build ends
            thread.join(30)
            assert not thread.is_alive()
    assert admin.execute(exists, (shared,)).fetchone() == (True,)


def test_a_tenant_role_refreshes_its_statistics_and_leaves_the_indexes_to_the_owner(
    server_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with roles_db(server_url) as (url, roles):
        with connect(url, autocommit=True) as owner:
            owner.execute(renamed(doc_block("rls-grants"), roles))
            owner.execute(renamed(doc_block("rls-tenant"), roles))
            owner.execute(renamed(doc_block("rls-policies"), roles))
            owner.execute(sql.SQL("ALTER ROLE {} PASSWORD 'rls-test'").format(sql.Identifier(roles.alice)))
            owner.execute("SELECT spark.register_model('maintain-model', %s, 'mean', 256)", (DIM,))
            fill(owner, roles.alice, INDEX_MIN)
            fill(owner, "_system", 25)  # the pack: the role reads it, and may not write its statistics
        with connect(url) as conn, as_role(conn, roles.alice):
            conn.commit()
            done = maintain(conn)
            assert done.index_work == LEFT_TO_OWNER and done.ok
            assert (done.built, done.dropped, done.failed) == ([], [], [])
            assert done.touched == 1 and done.refused == ["_system"] and done.tenants == 2
        with connect(url, autocommit=True) as owner:
            assert stats(owner, roles.alice) == INDEX_MIN and stats(owner, "_system") is None
            assert plan(owner, roles.alice) == ["build"]  # nothing half-built
        point_cli(make_conninfo(url, user=roles.alice, password="rls-test"), monkeypatch, tmp_path)
        code, out, err = run(capsys)
        assert code == 0, err
        assert "index work left to the owner of spark.embeddings" in out
        assert "statistics this role may not write, left to the owner (1): _system" in out
        with connect(url, autocommit=True) as owner:
            done = maintain(owner)
            assert done.built == [index_name(owner, roles.alice)] and done.index_work == "done"
            assert registry(owner) == [(roles.alice, INDEX_MIN)] and stats(owner, "_system") == 25


def test_the_summary_shows_a_tenants_control_characters_as_escapes() -> None:
    """Found in review: tenant names are any text (SQL takes an ESC sequence), and the summary printed them
    raw, as search printed memories."""
    from spark_pg.maintain_cli import _names

    assert _names(["ok", "evil\x1b[2J\u202e"]) == "ok, evil\\x1b[2J\\u202e"
