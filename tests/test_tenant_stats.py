"""Per-tenant statistics (lexeme counts) and vector indexes, and how spark.retrieve plans with them."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from spark_pg import schema
from spark_pg.db import connect
from spark_pg.embedding import Embedder
from spark_pg.ingest import ingest
from spark_pg.records import MemoryIn
from spark_pg.tenant_indexes import build_tenant_indexes
from spark_pg.traces.store import add_learning, add_trace
from tests.conftest import rolled_back, temp_database

Conn = psycopg.Connection[Any]
DIM = 384


@pytest.fixture(scope="module")
def stats_db(server_url: str) -> Iterator[str]:
    with temp_database(server_url, install=True) as url:
        yield url


@pytest.fixture
def conn(stats_db: str) -> Iterator[Conn]:
    """Work rolled back at the end of each test."""
    with rolled_back(stats_db) as connection:
        yield connection


def model(conn: Conn) -> int:
    row = conn.execute("SELECT spark.register_model('test-model', %s, 'mean', 256)", (DIM,)).fetchone()
    assert row is not None
    return int(row[0])


def add(conn: Conn, tenant: str, texts: list[str], model_id: int | None = None) -> list[int]:
    """Insert memories (keys t0, t1, ...) and, with a model, a distinct deterministic vector for each."""
    start = conn.execute("SELECT count(*) FROM spark.memories WHERE tenant = %s", (tenant,)).fetchone()
    assert start is not None
    rows = conn.execute(
        """INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash)
           SELECT %(tenant)s, 't' || (%(start)s + n), x, x, '\\x00'
           FROM unnest(%(texts)s::text[]) WITH ORDINALITY u(x, n)
           RETURNING id""",
        {"tenant": tenant, "texts": texts, "start": start[0]},
    ).fetchall()
    ids = [r[0] for r in rows]
    if model_id is not None:
        conn.execute(
            """INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding)
               SELECT m.tenant, m.id, %(model_id)s, m.created_at,
                      (SELECT array_agg(sin(m.id * 7.31 + g * 0.37))::vector
                       FROM generate_series(1, %(dim)s) g)
               FROM spark.memories m WHERE m.id = ANY(%(ids)s)""",
            {"model_id": model_id, "ids": ids, "dim": DIM},
        )
    return ids


def refresh(conn: Conn, tenant: str | None, force: bool = False, index_min: int = 1500) -> int:
    row = conn.execute("SELECT spark.refresh_tenant_stats(%s, %s, %s)", (tenant, force, index_min)).fetchone()
    assert row is not None
    return int(row[0])


def lexeme_counts(conn: Conn, tenant: str) -> dict[str, int]:
    rows = conn.execute("SELECT lexeme, df FROM spark.lexeme_stats WHERE tenant = %s", (tenant,)).fetchall()
    return dict(rows)


def test_refresh_counts_lexemes_held_by_at_least_20_memories(conn: Conn) -> None:
    add(conn, "lex", [f"deploy the service, step {n}" for n in range(25)] + ["kubernetes probes"] * 5)
    assert refresh(conn, "lex") == 1
    # "step" is in 25 memories, "kubernet" in 5: under the cut-off of 20, so not stored
    assert lexeme_counts(conn, "lex") == {"deploy": 25, "servic": 25, "step": 25}
    state = conn.execute(
        "SELECT memories, lexeme_min_df FROM spark.tenant_stats WHERE tenant = 'lex'"
    ).fetchone()
    assert state == (30, 20)


def test_refresh_rebuilds_only_when_the_tenant_moved_by_a_quarter(conn: Conn) -> None:
    add(conn, "grow", [f"deploy {n}" for n in range(24)])
    assert refresh(conn, "grow") == 1
    assert refresh(conn, "grow") == 0
    add(conn, "grow", ["deploy again"] * 6)  # 30 = 24 x 1.25: not more than a quarter
    assert refresh(conn, "grow") == 0
    assert lexeme_counts(conn, "grow") == {"deploy": 24}
    add(conn, "grow", ["deploy once more"])
    assert refresh(conn, "grow") == 1
    assert lexeme_counts(conn, "grow") == {"deploy": 31}
    assert refresh(conn, "grow", force=True) == 1


def test_refresh_of_every_tenant_and_of_an_emptied_one(conn: Conn) -> None:
    add(conn, "a", ["alpha release"] * 20)
    add(conn, "b", ["beta release"] * 20)
    assert refresh(conn, None) >= 2
    assert lexeme_counts(conn, "a") == {"alpha": 20, "releas": 20}
    assert lexeme_counts(conn, "b") == {"beta": 20, "releas": 20}
    conn.execute("DELETE FROM spark.memories WHERE tenant = 'a'")
    assert refresh(conn, None) == 1
    assert lexeme_counts(conn, "a") == {}
    assert conn.execute("SELECT count(*) FROM spark.tenant_stats WHERE tenant = 'a'").fetchone() == (0,)
    assert refresh(conn, "nobody") == 0  # an unknown tenant is not an error


@pytest.mark.parametrize(
    ("args", "error", "names"),
    [
        (("t", None, 10, True), errors.NullValueNotAllowed, "force"),
        (("t", False, None, True), errors.NullValueNotAllowed, "index_min_vectors"),
        (("t", False, 0, True), errors.InvalidParameterValue, "index_min_vectors"),
        (("", False, 10, True), errors.InvalidParameterValue, "tenant"),
        (("t", False, 10, None), errors.NullValueNotAllowed, "build_indexes"),
    ],
)
def test_refresh_rejects_bad_input(
    conn: Conn, args: tuple[Any, ...], error: type[Exception], names: str
) -> None:
    with pytest.raises(error, match=names):
        conn.execute("SELECT spark.refresh_tenant_stats(%s, %s, %s, %s)", args)


def test_keyword_plan_keys_match_the_index_and_never_cross_tenants(conn: Conn) -> None:
    row = conn.execute(
        """SELECT (spark._keyword_plan(ARRAY['a:b', 'a'], 'Rotating tokens', 0)).lexkeys,
                  spark._tenant_lexemes('a:b', to_tsvector('english', 'tokens rotate')),
                  spark._tenant_lexemes('a', to_tsvector('english', 'b:token'))"""
    ).fetchone()
    assert row is not None
    query_keys, stored_ab, stored_a = row
    assert sorted(stored_ab) == ["3:a:b:rotat", "3:a:b:token"]
    assert set(stored_ab) <= set(query_keys)
    # tenant "a" with a lexeme that starts like tenant "a:b" still spells a different key
    assert not set(stored_a) & set(stored_ab)
    empty = conn.execute("SELECT * FROM spark._keyword_plan(ARRAY['a'], 'the of and', 10)").fetchone()
    assert empty == ([], [], [], [])


def plan(conn: Conn, tenants: list[str], query: str, budget: int) -> dict[str, Any]:
    cur = conn.cursor(row_factory=dict_row)
    row = cur.execute(
        "SELECT lexq::text[] AS lexq, lexdf, lexkeys, skipped FROM spark._keyword_plan(%s, %s, %s)",
        (tenants, query, budget),
    ).fetchone()
    assert row is not None
    return row


def test_keyword_plan_spends_the_budget_on_the_rarest_lexemes(conn: Conn) -> None:
    conn.execute(
        """INSERT INTO spark.tenant_stats (tenant, memories, lexeme_min_df)
           VALUES ('t', 1000, 20), ('u', 10, 20);
           INSERT INTO spark.lexeme_stats (tenant, lexeme, df)
           VALUES ('t', 'deploy', 500), ('t', 'kubernet', 30), ('u', 'kubernet', 40)"""
    )
    p = plan(conn, ["t"], "Kubernetes deploy rollback", 100)
    assert p["lexq"] == ["'deploy'", "'kubernet'", "'rollback'"]
    # rollback (no count: rare) and kubernet (30) fit 100 together; deploy (500) does not
    assert p["skipped"] == ["deploy"]
    assert p["lexdf"] == [500, None, None]
    assert sorted(p["lexkeys"]) == ["1:t:kubernet", "1:t:rollback"]
    # counts add up over the tenants searched together: 70 for kubernet
    assert plan(conn, ["t", "u"], "Kubernetes deploy rollback", 60)["skipped"] == ["deploy", "kubernet"]
    assert plan(conn, ["t", "u"], "Kubernetes deploy rollback", 70)["skipped"] == ["deploy"]
    unlimited = plan(conn, ["t"], "Kubernetes deploy rollback", 0)
    assert unlimited["skipped"] == [] and unlimited["lexdf"] == [None, None, None]
    assert len(unlimited["lexkeys"]) == 3


def explain(
    conn: Conn, tenant: str, query: str, vector: str | None = None, **params: Any
) -> list[dict[str, Any]]:
    cur = conn.cursor(row_factory=dict_row)
    return cur.execute(
        "SELECT * FROM spark.explain(tenant => %s, query_text => %s, query_embedding => %s::vector, k => 5, "
        "params => %s)",
        (tenant, query, vector, Jsonb(params)),
    ).fetchall()


def test_retrieve_skips_common_lexemes_from_the_match_but_still_scores_them(conn: Conn) -> None:
    add(conn, "kw", [f"deploy step {n} of the release" for n in range(30)])
    add(conn, "kw", ["Kubernetes deploy needs liveness probes"])
    refresh(conn, "kw")
    budgeted = explain(conn, "kw", "kubernetes deploy", keyword_match_budget=10)
    full = explain(conn, "kw", "kubernetes deploy", keyword_match_budget=0)
    for rows in (budgeted, full):
        assert rows[0]["text"] == "Kubernetes deploy needs liveness probes"
        assert rows[0]["keyword_score"] == pytest.approx(1.0)
    assert budgeted[0]["why"]["keyword_skipped"] == ["deploy"]
    assert "keyword_skipped" not in full[0]["why"]
    # memories holding only the skipped lexeme leave the keyword pools ...
    deploy_only = [r for r in budgeted if r["text"].startswith("deploy step")]
    assert deploy_only, "the recent pool should still bring some of them"
    assert not any(p.startswith("keyword") for r in deploy_only for p in r["pools"])
    assert any(
        p.startswith("keyword") for r in full if r["text"].startswith("deploy step") for p in r["pools"]
    )
    # ... but keep a keyword score, weighted by the counted rarity of "deploy" (31 of 31 memories)
    full_scores = {r["memory_id"]: r["keyword_score"] for r in full}
    for r in deploy_only:
        assert 0 < r["keyword_score"] == pytest.approx(full_scores[r["memory_id"]], abs=0.02)


def test_a_lexeme_with_a_hyphen_quote_or_backslash_is_matched_as_stored(conn: Conn) -> None:
    # the parser keeps compounds and URLs as lexemes of their own ('follow-up', 'x.com/a''b''c'); written
    # back into a tsquery through to_tsquery they became phrases no stored tsvector holds
    texts = ["Schedule the follow-up review", "Docs live at http://x.com/a'b'c", "Path C:\\tmp\\x'y z"]
    add(conn, "lx", [*texts, "unrelated filler about lunch"])
    for text in texts:
        (top, *_) = explain(conn, "lx", text)
        assert (top["text"], top["keyword_score"]) == (text, pytest.approx(1.0))
        assert "keyword_recent" in top["pools"]
    row = conn.execute(
        """SELECT array_agg(numnode(q)), (SELECT array_agg(l) FROM unnest(to_tsvector('english', %(t)s)) l),
                  spark._or_tsquery(%(t)s) @@ to_tsvector('english', %(t)s),
                  numnode(spark._or_tsquery(%(t)s))
           FROM spark._keyword_plan(ARRAY['lx'], %(t)s, 0) p, unnest(p.lexq) q""",
        {"t": " ".join(texts)},
    ).fetchone()
    assert row is not None
    nodes, lexemes, matches, or_nodes = row
    assert nodes == [1] * len(lexemes)  # one lexeme each
    assert matches and or_nodes == 2 * len(lexemes) - 1  # an OR of them all


def test_tenant_index_is_built_used_and_dropped(conn: Conn) -> None:
    mid = model(conn)
    ids = add(conn, "big", [f"note {n}" for n in range(40)], mid)
    add(conn, "small", [f"note {n}" for n in range(5)], mid)
    assert refresh(conn, None, index_min=20) >= 2
    registry = conn.execute(
        "SELECT tenant, model_id, index_name, vectors FROM spark.tenant_vector_indexes"
    ).fetchall()
    assert [(t, m, v) for t, m, _, v in registry] == [("big", mid, 40)]
    name = registry[0][2]
    indexdef = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", (name,)).fetchone()
    assert indexdef is not None and "hnsw" in indexdef[0] and "'big'" in indexdef[0]

    conn.execute("SET LOCAL hnsw.ef_search = 100")
    target = conn.execute(
        "SELECT embedding::text FROM spark.embeddings WHERE memory_id = %s", (ids[7],)
    ).fetchone()
    assert target is not None

    def pool(exact_max: int) -> tuple[list[int], dict[str, str]]:
        row = conn.execute(
            "SELECT ids, scans FROM spark._semantic_pool(ARRAY['big', '_system'], %s::vector, now(), 10, %s, "
            "%s::smallint, %s)",
            (target[0], exact_max, mid, DIM),
        ).fetchone()
        assert row is not None
        return row[0], row[1]

    by_index, scans = pool(1000)
    assert scans == {"big": "tenant_hnsw", "_system": "exact"}
    assert by_index[0] == ids[7] and len(by_index) == 10
    rows = explain(conn, "big", "note", target[0])
    assert rows[0]["memory_id"] == ids[7]
    # the cold-start pack is empty in this database, so spark.retrieve leaves it out of the pools
    assert rows[0]["why"]["semantic_scan"] == {"big": "tenant_hnsw"}

    conn.execute("DELETE FROM spark.tenant_vector_indexes")  # unregistered: exact, then the shared graph
    exact, scans = pool(1000)
    assert scans["big"] == "exact" and exact == by_index
    shared, scans = pool(10)
    assert scans["big"] == "hnsw" and shared == by_index

    # registered but missing: rebuilt
    conn.execute(f'DROP INDEX spark."{name}"')
    conn.execute(
        "INSERT INTO spark.tenant_vector_indexes (tenant, model_id, index_name, vectors) "
        "VALUES ('big', %s, %s, 40)",
        (mid, name),
    )
    assert refresh(conn, "big", index_min=20) == 1
    assert conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"spark.{name}",)).fetchone() == (True,)

    # 15 left: under 20 but not under half of it, kept; 9 left: dropped
    conn.execute("DELETE FROM spark.memories WHERE id = ANY(%s)", (ids[:25],))
    refresh(conn, "big", index_min=20)
    assert conn.execute("SELECT count(*) FROM spark.tenant_vector_indexes").fetchone() == (1,)
    conn.execute("DELETE FROM spark.memories WHERE id = ANY(%s)", (ids[25:31],))
    # the refresh keeps it (its plain DROP INDEX held every tenant's reads until the commit): the plan's
    # drop is the builders' to run, CONCURRENTLY; then the refresh forgets it
    refresh(conn, "big", index_min=20)
    assert conn.execute("SELECT count(*) FROM spark.tenant_vector_indexes").fetchone() == (1,)
    [(action, drop)] = index_plan(conn, "big", 20, False)
    assert action == "drop"
    conn.execute(drop)
    assert refresh(conn, "big", index_min=20) == 1
    assert conn.execute("SELECT count(*) FROM spark.tenant_vector_indexes").fetchone() == (0,)
    assert conn.execute("SELECT to_regclass(%s)", (f"spark.{name}",)).fetchone() == (None,)


def test_only_the_active_models_tenant_indexes_are_built(conn: Conn) -> None:
    # after a switch the old model's vectors stay (a way back) but are never searched: a refresh used to
    # build their per-tenant indexes again right after reembed dropped them
    old = model(conn)
    add(conn, "big", [f"note {n}" for n in range(30)], old)
    assert refresh(conn, "big", index_min=20) == 1
    (old_index,) = conn.execute("SELECT index_name FROM spark.tenant_vector_indexes").fetchone() or ("",)
    new = conn.execute("SELECT spark.register_model('other-model', %s, 'mean', 256)", (DIM,)).fetchone()
    assert new is not None
    conn.execute(
        """INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding)
           SELECT tenant, memory_id, %s, created_at, embedding FROM spark.embeddings WHERE model_id = %s""",
        (new[0], old),
    )
    conn.execute("SELECT * FROM spark.activate_model('other-model')")
    refresh(conn, "big", index_min=20)
    # the old model's index is left alone (a plain DROP INDEX here would lock readers out), the new one built
    registry = conn.execute("SELECT model_id FROM spark.tenant_vector_indexes ORDER BY 1").fetchall()
    assert registry == [(old,), (new[0],)]
    # reembed drops the old one concurrently and forgets it: a refresh must not build it again
    conn.execute(f'DROP INDEX spark."{old_index}"')
    conn.execute("DELETE FROM spark.tenant_vector_indexes WHERE model_id = %s", (old,))
    refresh(conn, "big", force=True, index_min=20)
    assert conn.execute("SELECT model_id FROM spark.tenant_vector_indexes").fetchall() == [(new[0],)]
    assert conn.execute("SELECT to_regclass(%s)", (f"spark.{old_index}",)).fetchone() == (None,)


def test_ingest_refreshes_the_tenants_it_touched(conn: Conn, embedder: Embedder) -> None:
    records = [
        MemoryIn(tenant="ingested", key=f"k{n}", text=f"Rotate the API keys, reminder {n}") for n in range(21)
    ]
    ingest(conn, records, embedder)
    assert conn.execute("SELECT memories FROM spark.tenant_stats WHERE tenant = 'ingested'").fetchone() == (
        21,
    )
    assert lexeme_counts(conn, "ingested")["rotat"] == 21


def test_downgrade_drops_the_tenant_indexes(fresh_db: str) -> None:
    schema.install(fresh_db)
    with connect(fresh_db) as c:
        mid = model(c)
        add(c, "big", [f"note {n}" for n in range(12)], mid)
        refresh(c, "big", index_min=10)
        c.commit()
        row = c.execute("SELECT index_name FROM spark.tenant_vector_indexes").fetchone()
        assert row is not None
    schema.downgrade(fresh_db, "0004_embeddings_table")
    with connect(fresh_db) as c:
        assert c.execute("SELECT to_regclass(%s)", (f"spark.{row[0]}",)).fetchone() == (None,)
        assert c.execute("SELECT to_regclass('spark.tenant_stats')").fetchone() == (None,)


def index_plan(
    conn: Conn, tenant: str | None, index_min: int | None = 1500, concurrent: bool | None = True
) -> list[Any]:
    return conn.execute(
        "SELECT action, statement FROM spark.tenant_index_plan(%s::text, %s::integer, %s::boolean)",
        (tenant, index_min, concurrent),
    ).fetchall()


def test_the_index_plan_builds_keeps_drops_and_rebuilds_an_invalid_index(conn: Conn) -> None:
    mid = model(conn)
    assert index_plan(conn, "nobody") == []  # a tenant with nothing stored
    add(conn, "p", [f"note {n}" for n in range(30)], mid)
    assert index_plan(conn, "p", 31) == []  # under the threshold
    assert index_plan(conn, "p", 10**9) == []
    [(action, online)] = index_plan(conn, "p", 20)
    assert action == "build" and online.startswith(
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS embeddings_hnsw_m"
    )
    [(_, inline)] = index_plan(conn, "p", 20, False)
    assert inline == online.replace("CONCURRENTLY ", "") and "tenant = 'p'" in inline
    conn.execute(inline)
    name = inline.split()[5]
    assert index_plan(conn, "p", 20) == []
    assert index_plan(conn, "p", 60) == []  # 30 vectors: not under half of 60, kept
    assert index_plan(conn, "p", 61) == [("drop", f"DROP INDEX CONCURRENTLY IF EXISTS spark.{name}")]
    assert index_plan(conn, "p", 61, False) == [("drop", f"DROP INDEX IF EXISTS spark.{name}")]
    # what an interrupted CONCURRENTLY build leaves: dropped and built again
    conn.execute(
        "UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass(%s)", (f"spark.{name}",)
    )
    assert [a for a, _ in index_plan(conn, "p", 20)] == ["drop", "build"]
    assert refresh(conn, "p", index_min=20) == 1  # the refresh does the same, inline, and records it
    assert conn.execute(
        "SELECT i.indisvalid, v.index_name FROM pg_index i, spark.tenant_vector_indexes v "
        "WHERE i.indexrelid = to_regclass(%s) AND v.tenant = 'p'",
        (f"spark.{name}",),
    ).fetchone() == (True, name)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((None, 1500, True), errors.NullValueNotAllowed),
        (("", 1500, True), errors.InvalidParameterValue),
        (("x" * 129, 1500, True), errors.InvalidParameterValue),
        (("p", None, True), errors.NullValueNotAllowed),
        (("p", 0, True), errors.InvalidParameterValue),
        (("p", 1500, None), errors.NullValueNotAllowed),
    ],
)
def test_the_index_plan_refuses_bad_arguments(
    conn: Conn, args: tuple[Any, ...], error: type[Exception]
) -> None:
    with pytest.raises(error):
        index_plan(conn, *args)


def test_refresh_leaves_a_tenant_whose_builder_lock_is_held(conn: Conn, stats_db: str) -> None:
    mid = model(conn)
    add(conn, "held", [f"note {n}" for n in range(30)], mid)
    with connect(stats_db, autocommit=True) as builder:
        builder.execute("SELECT pg_advisory_lock(hashtextextended('spark.tenant_index:held', 0))")
        refresh(conn, "held", index_min=20)
        assert [a for a, _ in index_plan(conn, "held", 20)] == ["build"]  # left to the builder
        assert conn.execute("SELECT count(*) FROM spark.tenant_vector_indexes").fetchone() == (0,)
    refresh(conn, "held", index_min=20)  # the builder is gone (its lock with it): built here
    assert index_plan(conn, "held", 20) == []
    assert conn.execute("SELECT tenant FROM spark.tenant_vector_indexes").fetchall() == [("held",)]


def test_a_write_builds_the_tenants_index_concurrently_while_other_tenants_write(server_url: str) -> None:
    """Built by spark.refresh_tenant_stats, the index held every tenant's vector writes until it committed
    (40 s for a tenant the worker filled to 20,000 vectors). Built CONCURRENTLY, a writer goes on: here the
    build waits for an older transaction to end, and meanwhile another tenant stores a vector."""
    with temp_database(server_url, install=True) as url, connect(url, autocommit=True) as c:
        mid = model(c)
        add(c, "grown", [f"note {n}" for n in range(1500)], mid)  # the default threshold
        older = connect(url)
        older.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        older.execute("SELECT 1")  # a snapshot the build must wait out
        done: list[int] = []
        builder = threading.Thread(target=lambda: done.append(build_in(url, ["grown"])))
        builder.start()
        try:
            with connect(url, autocommit=True) as watch:
                waiting = None
                for _ in range(600):
                    waiting = watch.execute(
                        "SELECT wait_event_type FROM pg_stat_activity "
                        "WHERE query LIKE 'CREATE INDEX CONCURRENTLY%' AND wait_event_type = 'Lock'"
                    ).fetchone()
                    if waiting is not None or not builder.is_alive():
                        break
                    time.sleep(0.05)
                assert waiting is not None, "the build never waited for the older transaction"
                with connect(url) as writer, writer.transaction():
                    writer.execute("SET LOCAL lock_timeout = '2s'")
                    add(writer, "other", ["a vector stored while the index is built"], mid)
        finally:
            older.close()
            builder.join(60)
        assert done == [1]
        assert c.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class r ON r.oid = i.indexrelid "
            "WHERE r.relname LIKE 'embeddings_hnsw_m%%_t%%'"
        ).fetchall() == [(True,)]
        assert refresh(c, "grown") == 1
        assert c.execute("SELECT tenant, vectors FROM spark.tenant_vector_indexes").fetchall() == [
            ("grown", 1500)
        ]


def build_in(url: str, tenants: list[str]) -> int:
    with connect(url, statement_timeout_ms=1000) as conn:  # lifted for the build
        return build_tenant_indexes(conn, tenants).ran


def test_a_build_that_waits_too_long_for_an_older_transaction_gives_up_and_is_built_later(
    server_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Was (audit S): the build waited for every older transaction however long it lived (an idle REPEATABLE
    READ session, a pg_dump), so the write that set it off (its rows already committed) hung with no word.
    Now it gives up after the lock timeout, leaving an invalid index that the next build drops and redoes."""
    from spark_pg import tenant_indexes

    monkeypatch.setattr(tenant_indexes, "BUILD_LOCK_TIMEOUT_MS", 300)
    with temp_database(server_url, install=True) as url, connect(url, autocommit=True) as c:
        mid = model(c)
        add(c, "grown", [f"note {n}" for n in range(1500)], mid)
        with connect(url) as older:
            older.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            older.execute("SELECT 1")  # a snapshot the build would wait out for ever
            started = time.monotonic()
            assert build_in(url, ["grown"]) == 0
            assert time.monotonic() - started < 30
        assert "the HNSW index of tenant grown was not built" in caplog.text
        assert [a for a, _ in index_plan(c, "grown")] == ["drop", "build"]  # the invalid index it left
        assert build_in(url, ["grown"]) == 2  # the older transaction ended: dropped and built
        assert index_plan(c, "grown") == []
        with connect(url) as probe:  # the session's own lock_timeout is back as it was
            assert probe.execute("SHOW lock_timeout").fetchone() == ("0",)


def test_a_role_that_cannot_build_the_index_leaves_it_to_the_owner(server_url: str) -> None:
    """Was (audit S): under row-level security a tenant role's write failed with 42501 "must be owner of
    table embeddings" once the tenant held 1,500 vectors, after its rows were stored."""
    with temp_database(server_url, install=True) as url, connect(url, autocommit=True) as c:
        mid = model(c)
        add(c, "grown", [f"note {n}" for n in range(1500)], mid)
        c.execute("DROP ROLE IF EXISTS spark_test_not_owner")
        c.execute("CREATE ROLE spark_test_not_owner")
        try:
            c.execute("GRANT USAGE ON SCHEMA spark TO spark_test_not_owner")
            c.execute("GRANT SELECT ON ALL TABLES IN SCHEMA spark TO spark_test_not_owner")
            c.execute("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA spark TO spark_test_not_owner")
            with connect(url) as tenant_role:
                tenant_role.execute("SET ROLE spark_test_not_owner")
                tenant_role.commit()
                assert build_tenant_indexes(tenant_role, ["grown"]).ran == 0
                assert tenant_role.execute("SELECT current_user").fetchone() == ("spark_test_not_owner",)
            assert [a for a, _ in index_plan(c, "grown")] == ["build"]  # nothing half-built
        finally:
            c.execute("DROP OWNED BY spark_test_not_owner")
            c.execute("DROP ROLE spark_test_not_owner")


def test_a_trace_written_inside_a_transaction_leaves_the_index_work_until_it_commits(server_url: str) -> None:
    """Was (audit X): trace and learning writes run ingest inside their own transaction, where the refresh
    built the due index itself (a plain DROP of an invalid one first), holding every tenant's vector writes,
    or reads, until the commit: seconds at 6,000 vectors."""
    locks = """SELECT l.mode FROM pg_locks l
               WHERE l.pid = pg_backend_pid() AND l.relation = 'spark.embeddings'::regclass"""
    with temp_database(server_url, install=True) as url, connect(url) as conn:
        mid = model(conn)
        add(conn, "big", [f"note {n}" for n in range(1500)], mid)
        conn.commit()
        with conn.transaction():  # a caller's transaction: the index stays due until a write outside one
            add_trace(conn, None, "big", "Fix auth token refresh", "failure", issue="expiry in local time")
            held = {mode for (mode,) in conn.execute(locks).fetchall()}
            assert held <= {"AccessShareLock", "RowShareLock", "RowExclusiveLock"}, held
            assert [a for a, _ in index_plan(conn, "big")] == ["build"]
        # committed and idle: the trace's own write, and then the index built CONCURRENTLY, and registered
        add_learning(conn, None, "big", "compare token expiry in UTC")
        assert index_plan(conn, "big") == []
        registered = conn.execute("SELECT count(*) FROM spark.tenant_vector_indexes WHERE tenant = 'big'")
        assert registered.fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM spark.memories WHERE tenant = 'big'").fetchone() == (1502,)
