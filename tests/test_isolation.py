"""Tenant isolation as a property (issue 6, point 6): several tenants hold the same keys, texts and vectors
(and some have names that differ only by case, a trailing space, a zero-width character or a prefix); for
random queries and params, no read or advise function ever returns, logs or is steered by another tenant's
rows. Only the asking tenant's memories, and the cold-start pack's (tenant ``_system``) where the function
includes it, may come back. See docs/security.md."""

from __future__ import annotations

import os
import random
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from spark_pg.db import connect
from tests.conftest import temp_database

# hypothesis keeps its caches (unicode tables, constants) outside the repository; no example database
set_hypothesis_home_dir(
    os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY") or Path(tempfile.gettempdir()) / "spark_pg-hypothesis"
)
ISOLATION = settings(
    database=None,
    derandomize=True,  # the same examples on every run: a failure here is a finding, never a flake
    deadline=timedelta(seconds=10),
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow],
)

Conn = psycopg.Connection[Any]
SYSTEM = "_system"
DIM = 16
PER_TENANT = 24
TENANTS = ("alice", "Alice", "alice ", "alice\u200b", "ali", "3:ali", "x' OR '1'='1", "bob", SYSTEM)
ASKERS = (*TENANTS, "nobody-here")
VOCAB = (
    "deploy",
    "release",
    "alembic",
    "upgrade",
    "staging",
    "token",
    "login",
    "physics",
    "timestep",
    "docker",
    "image",
    "digest",
    "migration",
    "rollback",
    "secret",
)
CACHED_QUERY = "deploy the release to staging"  # only bob has its vector in the query cache
AGES_DAYS = (0, 1, 3, 10, 40, 400, 2000)


def vector(seed: int) -> str:
    rng = random.Random(seed)
    return "[" + ",".join(f"{rng.uniform(-1, 1):.4f}" for _ in range(DIM)) + "]"


def text_of(i: int) -> str:
    return (
        f"{VOCAB[i % 15]} {VOCAB[(i * 7 + 3) % 15]} {VOCAB[(i * 5 + 1) % 15]} before you commit, "
        f"note number {i}"
    )


def seed_tenant(conn: Conn, tenant: str, number: int, model_id: int) -> None:
    """The same keys, texts and vectors as every other tenant, plus one key only this tenant has."""
    rows: list[tuple[str, str, str, str, int, Jsonb, str]] = []
    for i in range(PER_TENANT):
        kind = "trace" if i % 6 == 0 else "learning" if i % 6 == 1 else "insight"
        meta = {"outcome": "failure" if i % 12 == 0 else "success", "learning_keys": [f"k{i + 1}", "only-0"]}
        rows.append(
            (
                f"k{i}",
                text_of(i),
                kind,
                "pinned" if i % 8 == 0 else "active",
                AGES_DAYS[i % len(AGES_DAYS)],
                Jsonb(meta if kind == "trace" else {}),
                vector(i),
            )
        )
    rows.append((f"only-{number}", text_of(number), "insight", "pinned", 0, Jsonb({}), vector(number)))
    with conn.cursor() as cur:
        for key, text, kind, tier, age, metadata, vec in rows:
            cur.execute(
                """WITH m AS (
                       INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash, kind, tier,
                                                   created_at, metadata)
                       VALUES (%(t)s, %(key)s, %(text)s, %(text)s, sha256(convert_to(%(text)s, 'UTF8')),
                               %(kind)s, %(tier)s, now() - make_interval(days => %(age)s), %(meta)s)
                       RETURNING tenant, id, created_at)
                   INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding)
                   SELECT tenant, id, %(model)s, created_at, %(vec)s::vector FROM m""",
                {
                    "t": tenant,
                    "key": key,
                    "text": text,
                    "kind": kind,
                    "tier": tier,
                    "age": age,
                    "meta": metadata,
                    "vec": vec,
                    "model": model_id,
                },
            )
    if tenant != SYSTEM:
        # a rule naming shared keys and a key that only another tenant has
        other = (number + 1) % len(TENANTS)
        conn.execute(
            "SELECT spark.put_trigger_rule(%s, 'r', 'deploy|docker|login', ARRAY['k1', 'k2', %s])",
            (tenant, f"only-{other}"),
        )
        conn.execute(
            "SELECT spark.put_trigger_rule(%s, 'shadow', 'deploy|token', ARRAY['k3', %s], shadow => true)",
            (tenant, f"only-{other}"),
        )
    else:
        with conn.transaction():  # as the pack loader does: nobody else writes the pack's tenant
            conn.execute("SET LOCAL spark.pack_writes = on")
            conn.execute("SELECT spark.put_trigger_rule(%s, 'pack', 'deploy|image', ARRAY['k3'])", (tenant,))


@pytest.fixture(scope="module")
def iso_db(server_url: str) -> Iterator[str]:
    with temp_database(server_url, install=True) as url:
        with connect(url, autocommit=True) as conn:
            model_id = conn.execute("SELECT spark.register_model('iso-model', %s, 'mean', 256)", (DIM,))
            mid = model_id.fetchone()[0]  # type: ignore[index]
            for number, tenant in enumerate(TENANTS):
                seed_tenant(conn, tenant, number, mid)
            # bob's cached query vector and fitted weights must never reach another tenant's call
            conn.execute(
                "INSERT INTO spark.query_embeddings (tenant, model_id, query_hash, query_text, embedding) "
                "VALUES ('bob', %s, sha256(convert_to(%s, 'UTF8')), %s, %s::vector)",
                (mid, CACHED_QUERY, CACHED_QUERY, vector(99)),
            )
            conn.execute(
                "INSERT INTO spark.fusion_weights (tenant, weights, samples, in_use) "
                """VALUES ('bob', '{"w_keyword": 9, "w_similarity": 0}', 500, true)"""
            )
            conn.execute(
                "SELECT spark.refresh_tenant_stats(t, true) FROM unnest(%s::text[]) t", (list(TENANTS),)
            )
            # alice (only) searches through her own HNSW index, the others exactly or through the shared one
            conn.execute("SELECT spark.refresh_tenant_stats('alice', true, index_min_vectors => 5)")
            conn.execute("ANALYZE")
        yield url


@pytest.fixture(scope="module")
def iso_conn(iso_db: str) -> Iterator[Conn]:
    connection = connect(iso_db, statement_timeout_ms=5000)
    try:
        yield connection
    finally:
        connection.close()


@pytest.fixture(scope="module")
def owner_of(iso_conn: Conn) -> dict[int, str]:
    rows = iso_conn.execute("SELECT id, tenant FROM spark.memories").fetchall()
    iso_conn.rollback()
    assert len(rows) == len(TENANTS) * (PER_TENANT + 1)
    return {int(i): t for i, t in rows}


def test_the_fixture_has_one_tenant_index_and_the_names_are_distinct(iso_conn: Conn) -> None:
    indexed = iso_conn.execute("SELECT tenant FROM spark.tenant_vector_indexes").fetchall()
    tenants = iso_conn.execute("SELECT count(DISTINCT tenant) FROM spark.memories").fetchone()
    iso_conn.rollback()
    assert indexed == [("alice",)] and tenants == (len(TENANTS),)


@pytest.mark.parametrize("fn", ["retrieve", "explain", "advise", "advise_with_warnings", "reflect"])
def test_the_property_is_not_vacuous_every_function_finds_the_shared_corpus(
    iso_conn: Conn, owner_of: dict[int, str], fn: str
) -> None:
    """The same kind of call as the properties below, for tenants whose rows all look alike: each function
    returns rows, the tenant's own (and, where included, the pack's), none of the look-alike tenants'."""
    for asker in ("alice", "Alice", "alice\u200b"):
        with iso_conn.transaction(force_rollback=True), iso_conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(
                "SELECT * FROM " + ADVICE.format(fn=fn),
                (asker, "deploy release docker login", vector(1), 20, Jsonb({})),
            ).fetchall()
        owners = {owner_of[r["memory_id"]] for r in rows}
        assert asker in owners and owners <= {asker, SYSTEM}, (fn, asker, owners)
        if fn == "explain":
            assert SYSTEM in owners


def param_floats(low: float, high: float) -> st.SearchStrategy[float]:
    """A params number in [low, high] that a params object takes: 0, or at least 1e-9 in size
    (spark._check_param refuses smaller ones by name; the arithmetic under- or overflowed on them)."""
    return st.floats(low, high).map(lambda x: 0.0 if abs(x) < 1e-9 else x)


queries = st.one_of(
    st.just(CACHED_QUERY),
    st.lists(
        st.sampled_from((*VOCAB, "the", "note", "number", "alice", "bob", "only", "k1", "commit")),
        min_size=1,
        max_size=6,
    ).map(" ".join),
)
retrieve_params = st.fixed_dictionaries(
    {},
    optional={
        "include_system": st.booleans(),
        "fusion": st.sampled_from(["weighted", "rrf"]),
        "precision_mode": st.sampled_from(["high_recall", "adaptive", "high_precision"]),
        "min_similarity": param_floats(-1, 1),
        "min_fusion_score": param_floats(0, 0.5),
        "adaptive_ratio": param_floats(0, 1),
        "pool_semantic": st.integers(0, 60),
        "pool_keyword_recent": st.integers(0, 30),
        "pool_keyword_old": st.integers(0, 30),
        "pool_recent": st.integers(0, 20),
        "pool_random": st.integers(0, 30),
        "pool_pinned": st.integers(0, 20),
        "pool_trigger": st.integers(0, 20),
        "recent_days": st.integers(0, 3650),
        "trigger_text": st.sampled_from(["Bash: docker build .", "deploy now", "login page", "nothing"]),
        "domains": st.sampled_from([None, ["code"], ["general", "system"]]),
        "week_cap": st.integers(0, 4),
        "category_cap": st.integers(0, 3),
        "mmr_lambda": param_floats(0, 1),
        "seed": st.integers(-1000, 1000),
        "keyword_match_budget": st.sampled_from([0, 10, 1000]),
        "exact_scan_max": st.sampled_from([0, 7000]),
        "use_cache": st.booleans(),
        "fitted_weights": st.booleans(),
        "pack_yield": st.sampled_from([1, 100, 10000]),
        "as_of": st.sampled_from([None, "2030-01-01T00:00:00Z"]),
    },
)
reflect_params = st.fixed_dictionaries(
    {},
    optional={
        "min_score": param_floats(0, 1),
        "kinds": st.sampled_from([["trace"], ["learning"], ["trace", "learning"]]),
        "outcome": st.sampled_from([None, "success", "failure"]),
        "linked_per_trace": st.integers(0, 5),
        "pool": st.integers(1, 60),
        "exact_scan_max": st.sampled_from([0, 7000]),
        "recency_floor": param_floats(0, 1),
    },
)

ADVICE = "spark.{fn}(tenant => %s, query_text => %s, query_embedding => %s::vector, k => %s, params => %s)"


def allowed(asker: str, params: dict[str, Any]) -> set[str]:
    return {asker, SYSTEM} if params.get("include_system", True) else {asker}


def check_rows(rows: list[dict[str, Any]], owner_of: dict[int, str], ok: set[str], asker: str) -> None:
    for row in rows:
        owner = owner_of[row["memory_id"]]
        assert owner in ok, f"{asker!r} was shown {row['key']!r} of {owner!r}"
        if asker != SYSTEM and row.get("system_default") is not None:
            assert row["system_default"] == (owner == SYSTEM), row["key"]


@pytest.mark.parametrize("fn", ["retrieve", "explain", "advise", "advise_with_warnings"])
@ISOLATION
@given(
    asker=st.sampled_from(ASKERS),
    query=queries,
    vec_seed=st.one_of(st.none(), st.integers(0, PER_TENANT)),
    k=st.integers(1, 30),
    params=retrieve_params,
)
def test_retrieval_never_returns_or_logs_another_tenants_memory(
    iso_conn: Conn,
    owner_of: dict[int, str],
    fn: str,
    asker: str,
    query: str,
    vec_seed: int | None,
    k: int,
    params: dict[str, Any],
) -> None:
    ok = allowed(asker, params)
    embedding = None if vec_seed is None else vector(vec_seed)
    if fn.startswith("advise") and asker == SYSTEM:  # advise logs: the pack's tenant is nobody's to write
        with (
            iso_conn.transaction(force_rollback=True),
            pytest.raises(psycopg.errors.InvalidParameterValue, match="cold-start pack"),
        ):
            iso_conn.execute(
                "SELECT * FROM " + ADVICE.format(fn=fn), (asker, query, embedding, k, Jsonb(params))
            )
        return
    with iso_conn.transaction(force_rollback=True), iso_conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT * FROM " + ADVICE.format(fn=fn), (asker, query, embedding, k, Jsonb(params))
        ).fetchall()
        for row in rows:
            if row.get("warning"):  # past-failure warnings come from spark.reflect: the tenant's own only
                assert owner_of[row["memory_id"]] == asker
            why = row["why"]
            if asker != "bob":
                assert why.get("query_embedding") != "cache" or query != CACHED_QUERY
                assert "fitted_weights" not in why
        check_rows(rows, owner_of, ok, asker)
        if fn.startswith("advise"):
            rid = rows[0]["retrieval_id"] if rows else _last_retrieval(cur)
            logged = cur.execute(
                """SELECT r.tenant, i.memory_tenant, i.memory_id FROM spark.retrievals r
                   LEFT JOIN spark.retrieval_items i ON i.tenant = r.tenant AND i.retrieval_id = r.id
                   WHERE r.id = %s""",
                (rid,),
            ).fetchall()
            shadow = cur.execute(
                "SELECT tenant, memory_id FROM spark.trigger_shadow_hits WHERE retrieval_id = %s",
                (rid,),
            ).fetchall()
            assert {r["tenant"] for r in logged} == {asker}
            for r in logged:
                if r["memory_id"] is not None:
                    assert owner_of[r["memory_id"]] == r["memory_tenant"] and r["memory_tenant"] in ok
            assert all(s["tenant"] == asker and owner_of[s["memory_id"]] == asker for s in shadow)


def _last_retrieval(cur: psycopg.Cursor[Any]) -> int:
    row = cur.execute("SELECT currval(pg_get_serial_sequence('spark.retrievals', 'id')) AS id").fetchone()
    assert row is not None
    return int(row["id"])


@ISOLATION
@given(
    asker=st.sampled_from(ASKERS),
    query=queries,
    vec_seed=st.one_of(st.none(), st.integers(0, PER_TENANT)),
    k=st.integers(0, 30),
    params=reflect_params,
)
def test_reflection_only_ever_returns_the_tenants_own_traces_and_learnings(
    iso_conn: Conn,
    owner_of: dict[int, str],
    asker: str,
    query: str,
    vec_seed: int | None,
    k: int,
    params: dict[str, Any],
) -> None:
    embedding = None if vec_seed is None else vector(vec_seed)
    with iso_conn.transaction(force_rollback=True), iso_conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT * FROM " + ADVICE.format(fn="reflect"), (asker, query, embedding, k, Jsonb(params))
        ).fetchall()
    check_rows(rows, owner_of, {asker}, asker)
    assert all(r["kind"] in ("trace", "learning") for r in rows)


@ISOLATION
@given(
    asker=st.sampled_from(ASKERS),
    vec_seed=st.integers(0, 200),
    k=st.integers(1, 300),
    min_similarity=st.floats(-1, 1),
)
def test_semantic_search_returns_the_tenant_and_the_pack_only(
    iso_conn: Conn, owner_of: dict[int, str], asker: str, vec_seed: int, k: int, min_similarity: float
) -> None:
    with iso_conn.transaction(force_rollback=True), iso_conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT * FROM spark.search_semantic(%s, %s::vector, %s, %s)",
            (asker, vector(vec_seed), k, min_similarity),
        ).fetchall()
    check_rows(rows, owner_of, {asker, SYSTEM}, asker)
    if asker in TENANTS and min_similarity <= -1 and k >= 2 * (PER_TENANT + 1):
        # everything of both, and nothing else: same vectors in every tenant, so ties cannot hide a leak
        assert len(rows) == (PER_TENANT + 1) * (1 if asker == SYSTEM else 2)


# What the write functions may touch, of every tenant but one: a call as that tenant leaves it as it was.
OTHERS = """
SELECT md5(string_agg(x, E'\\n' ORDER BY x)) FROM (
    SELECT 'm ' || m::text FROM spark.memories m WHERE tenant <> %(t)s
    UNION ALL SELECT 'r ' || r::text FROM spark.trigger_rules r WHERE tenant <> %(t)s
    UNION ALL SELECT 'l ' || l::text FROM spark.retrievals l WHERE tenant <> %(t)s
    UNION ALL SELECT 'i ' || i::text FROM spark.retrieval_items i WHERE tenant <> %(t)s
    UNION ALL SELECT 'o ' || o::text FROM spark.outcomes o WHERE tenant <> %(t)s
    UNION ALL SELECT 'v ' || v::text FROM spark.revaluations v WHERE tenant <> %(t)s
    UNION ALL SELECT 's ' || s::text FROM spark.tenant_stats s WHERE tenant <> %(t)s
    UNION ALL SELECT 'h ' || h::text FROM spark.trigger_shadow_hits h WHERE tenant <> %(t)s) o(x)
"""
WRITES = {
    "record_outcome": "SELECT spark.record_outcome(%(t)s, %(id)s, 'unhelpful')",
    "record_outcome_logged": "SELECT spark.record_outcome(%(t)s, %(id)s, 'unhelpful', %(rid)s)",
    "revalue_apply": "SELECT * FROM spark.revalue_apply(%(t)s, jsonb_build_array(jsonb_build_object("
    "'id', %(id)s, 'importance', 0.01)))",
    "put_trigger_rule": "SELECT spark.put_trigger_rule(%(t)s, 'r', 'deploy', ARRAY[%(key)s], "
    "priority => 'critical', interrupt => true)",
    "propose_triggers": "SELECT spark.propose_triggers(%(t)s, 1)",
    "promote_triggers": "SELECT * FROM spark.promote_triggers(%(t)s, 1, 0)",
    "assign_tiers": "SELECT * FROM spark.assign_tiers(%(t)s, now() + interval '5 years')",
    "advise": "SELECT * FROM spark.advise(%(t)s, 'deploy image token', NULL, 8, '{}', 'sess')",
}


@ISOLATION
@given(
    asker=st.sampled_from(ASKERS),
    write=st.sampled_from(sorted(WRITES)),
    target=st.integers(0, len(TENANTS) * (PER_TENANT + 1) - 1),
)
def test_no_write_reaches_another_tenant_or_the_pack(
    iso_conn: Conn, owner_of: dict[int, str], asker: str, write: str, target: int
) -> None:
    """Any tenant, naming any memory (its own, another tenant's, the pack's) or any advise call of another
    tenant: a write function changes nothing of another tenant, the pack included; as the pack's tenant
    itself, every write is refused (only the pack loader writes it)."""
    memory_id = sorted(owner_of)[target]
    args = {"t": asker, "id": memory_id, "key": f"only-{target % len(TENANTS)}"}
    with iso_conn.transaction(force_rollback=True), iso_conn.cursor() as cur:
        # an advise call of the memory's owner, which the asker then names as its own
        owner = owner_of[memory_id]
        args["rid"] = None
        if owner != SYSTEM:
            advised = cur.execute(
                "SELECT retrieval_id FROM spark.advise(%s, 'deploy image token', NULL, 8, '{}', 'other')",
                (owner,),
            ).fetchone()
            assert advised is not None  # every tenant of the fixture has memories that match
            args["rid"] = advised[0]
        before = cur.execute(OTHERS, args).fetchone()
        try:
            with iso_conn.transaction():
                cur.execute(WRITES[write], args)
        except psycopg.errors.InvalidParameterValue as exc:
            refused = str(exc)
        else:
            refused = ""
        after = cur.execute(OTHERS, args).fetchone()
    assert before == after, (asker, write, owner)
    if asker == SYSTEM:
        assert "cold-start pack" in refused, write
    elif write.startswith("record_outcome") or write == "revalue_apply":
        # another tenant's memory or advise call is refused, without saying whether it exists
        assert bool(refused) == (owner not in (asker, SYSTEM)), (asker, write, owner, refused)


def test_revaluation_counts_only_the_tenants_own_advise_log(iso_conn: Conn) -> None:
    """How often a memory surfaced, as spark.revalue_sample reports it, counts the tenant's own advise calls:
    a row naming the memory in another tenant's log (possible under RLS: foreign keys are checked as the
    owner) is not the tenant's business and does not count."""
    with iso_conn.transaction(force_rollback=True), iso_conn.cursor() as cur:
        mid = cur.execute("SELECT min(id) FROM spark.memories WHERE tenant = 'bob'").fetchone()[0]  # type: ignore[index]
        cur.execute(
            "UPDATE spark.memories SET importance = 0.1, created_at = now() - interval '30 days' "
            "WHERE tenant = 'bob' AND id = %s",
            (mid,),
        )
        rid = cur.execute(
            "INSERT INTO spark.retrievals (tenant, query_text) VALUES ('alice', 'x') RETURNING id"
        )
        cur.execute(
            "INSERT INTO spark.retrieval_items (tenant, retrieval_id, memory_id, memory_tenant, rank, score, "
            "signals, pools) VALUES ('alice', %s, %s, 'bob', 1, 1, '{}', '{}')",
            (rid.fetchone()[0], mid),  # type: ignore[index]
        )
        rows = cur.execute(
            "SELECT id, times_surfaced FROM spark.revalue_sample('bob', 1000, 0.3, '1 day', '0', 1)"
            " WHERE id = %s",
            (mid,),
        ).fetchall()
    assert rows == [(mid, 0)]
