"""spark.retrieve / spark.explain over a small real corpus embedded by the real model."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import errors
from psycopg.types.json import Jsonb

from spark_pg.client import SparkClient
from spark_pg.config import Settings
from spark_pg.db import connect
from spark_pg.embedding import Embedder
from spark_pg.ingest import ingest
from spark_pg.records import MemoryIn
from tests.conftest import rolled_back, temp_database

Conn = psycopg.Connection[Any]
NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
T = "acme"
PENDING = "Kubernetes pods need liveness probes"

CORPUS: list[tuple[str, str, str, int]] = [
    # key, category, text, age in days
    (
        "jwt",
        "security",
        "Verify JWT tokens on the server in auth/middleware.py before trusting any claim.",
        3,
    ),
    ("alembic", "database", "Schema changes go through Alembic revisions; never edit staging by hand.", 40),
    (
        "physics",
        "debugging",
        "Game physics jitter came from a variable timestep; a fixed 1/60 s step fixed it.",
        90,
    ),
    ("pytest", "testing", "The user prefers pytest fixtures and plain asserts over unittest classes.", 10),
    ("docker", "ci", "Order the Dockerfile so dependencies install before the source is copied.", 200),
    ("stripe", "deployment", "The release failed because STRIPE_API_URL was missing in production.", 5),
    ("dark", "ui", "The user likes dark mode in every editor.", 1),
    ("backup", "database", "Take a database backup before running a destructive migration.", 400),
    # five paraphrases of one insight
    ("para1", "git", "Run the full test suite before you push to the main branch.", 20),
    ("para2", "git", "Before pushing to main, always run all the tests.", 21),
    ("para3", "git", "Always run the tests prior to pushing commits to main.", 22),
    ("para4", "git", "Make sure every test passes before a push to the main branch.", 23),
    ("para5", "git", "Never push to main without running the test suite first.", 24),
    ("review", "git", "Ask for a code review on risky changes before merging them.", 25),
    ("hooks", "git", "A pre-push git hook can run the linter automatically.", 26),
]


@pytest.fixture(scope="module")
def rdb(server_url: str, model_settings: Settings, embedder: Embedder) -> Iterator[str]:
    with temp_database(server_url, install=True) as url:
        records = [
            MemoryIn(tenant=T, key=k, text=t, category=c, created_at=NOW - timedelta(days=age))
            for k, c, t, age in CORPUS
        ]
        records.append(
            MemoryIn(
                tenant="other", key="secret", text="Verify JWT tokens: other tenant's note.", created_at=NOW
            )
        )
        with connect(url) as conn:
            ingest(conn, records, embedder)
            conn.commit()
        with SparkClient(model_settings, url=url) as client:
            client.load_seed_pack()
        yield url


@pytest.fixture
def conn(rdb: str) -> Iterator[Conn]:
    with rolled_back(rdb) as connection:
        yield connection


def retrieve(
    conn: Conn, embedder: Embedder | None, query: str, k: int = 5, tenant: str = T, **params: Any
) -> list[dict[str, Any]]:
    params.setdefault("as_of", NOW.isoformat())
    vector = embedder.embed_query(query) if embedder else None
    cur = conn.cursor(row_factory=psycopg.rows.dict_row)
    return cur.execute(
        "SELECT * FROM spark.retrieve(tenant => %s, query_text => %s, query_embedding => %s, k => %s, "
        "params => %s)",
        (tenant, query, vector, k, Jsonb(params)),
    ).fetchall()


def keys(rows: list[dict[str, Any]]) -> list[str]:
    return [r["key"] for r in rows]


def test_finds_the_relevant_memory_with_separate_signals(conn: Conn, embedder: Embedder) -> None:
    rows = retrieve(conn, embedder, "Edit src/auth/login.py to check the token")
    assert rows[0]["key"] == "jwt"
    top = rows[0]
    assert 0 < top["semantic_sim"] <= 1 and 0 <= top["keyword_score"] < 1
    assert 0.1 <= top["recency"] <= 1 and top["outcome"] == pytest.approx(0.5)
    assert top["trigger_conf"] == 0 and top["priority"] == 0
    assert "semantic" in top["pools"]
    why = top["why"]
    assert why["status"] == "surfaced" and why["rank"] == 1
    assert set(why["terms"]) >= {"similarity", "keyword", "recency", "outcome", "priority_factor"}
    assert why["gates"]["min_similarity"]["passed"] and why["gates"]["min_fusion_score"]["passed"]


def test_paraphrases_collapse_to_one_plus_other_useful_items(conn: Conn, embedder: Embedder) -> None:
    rows = retrieve(conn, embedder, "git push origin main", k=5, include_system=False)
    paraphrases = [k for k in keys(rows) if k.startswith("para")]
    assert len(paraphrases) == 1, keys(rows)
    assert len(rows) >= 2  # plus other useful items
    explained = conn.execute(
        "SELECT key, status FROM spark.explain(%s, %s, %s, 5, %s) WHERE key LIKE 'para%%'",
        (
            T,
            "git push origin main",
            embedder.embed_query("git push origin main"),
            Jsonb({"as_of": NOW.isoformat(), "include_system": False}),
        ),
    ).fetchall()
    dropped = [s for _, s in explained if s.startswith(("dropped: near-duplicate", "dropped: restates"))]
    assert len(dropped) == 4, explained
    # and the surfaced one names them (design.md: why names what was suppressed)
    [kept] = [r for r in rows if r["key"].startswith("para")]
    assert sorted(kept["why"]["suppressed"]) == sorted(k for k, s in explained if s in dropped)
    assert all(r["why"]["suppressed"] == [] for r in rows if r is not kept)


def test_nonsense_query_returns_nothing(conn: Conn, embedder: Embedder) -> None:
    assert retrieve(conn, embedder, "purple giraffe orbit sandwich") == []


def test_a_nonsense_query_returns_no_pinned_memory_under_either_fusion(
    conn: Conn, embedder: Embedder
) -> None:
    """Was (audit U): with fusion rrf every pinned memory was returned for any query: a pin passed the
    evidence gate, and the pinned pool's rank plus any semantic rank scored about 0.5, over
    min_fusion_score."""
    conn.execute("UPDATE spark.memories SET tier = 'pinned' WHERE tenant = %s", (T,))
    for fusion in ("weighted", "rrf"):
        assert retrieve(conn, embedder, "purple giraffe orbit sandwich", fusion=fusion) == [], fusion
    found = retrieve(conn, embedder, "STRIPE_API_URL production release", fusion="rrf")
    assert found and found[0]["key"] == "stripe"  # a pin with evidence still counts


def test_a_rule_of_confidence_0_is_a_match_all_the_same(conn: Conn, embedder: Embedder) -> None:
    """Was (audit U): a matching rule of confidence 0 raised the memory's priority, but the memory then failed
    the similarity gate as if no rule had matched, and its why said nothing of the rule."""
    conn.execute(
        "SELECT spark.put_trigger_rule(%s, 'zero', 'tokens', ARRAY['pytest'], priority => 'critical', "
        "confidence => 0)",
        (T,),
    )
    row = conn.execute(
        "SELECT status, why FROM spark.explain(%s, 'rotate the tokens', NULL, 8, %s) WHERE key = 'pytest'",
        (T, Jsonb({"as_of": NOW.isoformat()})),
    ).fetchone()
    assert row is not None
    status, why = row
    # past the similarity gate (it has no similarity, no keyword match): a confidence of 0 adds nothing to
    # the score, which the fusion gate then judges
    assert status.startswith("dropped: gate min_fusion_score"), status
    assert why["trigger"]["rules"] == ["zero"] and why["trigger"]["confidence"] == 0


def test_lexical_mode_without_an_embedding(conn: Conn) -> None:
    rows = retrieve(conn, None, "STRIPE_API_URL production release")
    assert rows and rows[0]["key"] == "stripe"
    assert rows[0]["semantic_sim"] is None
    assert rows[0]["why"]["query_embedding"].startswith("none")


def test_rows_awaiting_their_embedding_are_found_by_keyword(conn: Conn, embedder: Embedder) -> None:
    conn.execute(
        """INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash, created_at)
           VALUES (%s, 'pending', %s, %s, '\\x00', %s)""",
        (T, PENDING, PENDING, NOW - timedelta(days=1)),
    )
    rows = retrieve(conn, embedder, "configure kubernetes liveness probes")
    assert "pending" in keys(rows)


def test_tenant_isolation_and_cold_start(conn: Conn, embedder: Embedder) -> None:
    rows = retrieve(conn, embedder, "verify JWT tokens", k=20)
    assert "secret" not in keys(rows)
    now = datetime.now(UTC).isoformat()  # the pack was loaded today
    fresh = retrieve(conn, embedder, "git push --force to main", tenant="brand-new", as_of=now)
    assert fresh and all(r["system_default"] for r in fresh)
    assert (
        retrieve(
            conn, embedder, "git push --force to main", tenant="brand-new", as_of=now, include_system=False
        )
        == []
    )


def test_as_of_hides_later_memories(conn: Conn, embedder: Embedder) -> None:
    early = (NOW - timedelta(days=30)).isoformat()
    assert "jwt" not in keys(retrieve(conn, embedder, "verify JWT tokens on the server", as_of=early))
    assert "jwt" in keys(retrieve(conn, embedder, "verify JWT tokens on the server"))


def test_week_cap_limits_one_week_before_filling(conn: Conn, embedder: Embedder) -> None:
    strict = {
        "include_system": False,
        "dup_similarity": 1.01,
        "restate_similarity": 1.01,
        "mmr_lambda": 1,
        "min_fusion_score": 0,
        "precision_mode": "high_recall",
        "cap_yield": 0,
    }
    query = "git tests review hooks push main"
    uncapped = retrieve(conn, embedder, query, k=4, week_cap=0, **strict)
    uncapped_weeks = [r["why"]["week"] for r in uncapped]
    assert len(set(uncapped_weeks)) < len(uncapped_weeks)  # the corpus has a week with several matches
    capped = retrieve(conn, embedder, query, k=6, week_cap=1, **strict)
    weeks = [r["why"]["week"] for r in capped]
    distinct = len(set(weeks))
    assert distinct >= 2
    assert len(set(weeks[:distinct])) == distinct, weeks  # one per week first ...
    assert len(capped) == 6  # ... then the rest fill the remaining places


def test_rrf_fusion_and_huge_k(conn: Conn, embedder: Embedder) -> None:
    rows = retrieve(conn, embedder, "Edit src/auth/login.py to check the token", fusion="rrf", k=1000)
    assert rows[0]["key"] == "jwt"
    assert rows[0]["why"]["fusion"] == "rrf"
    terms = rows[0]["why"]["terms"]
    assert set(rows[0]["pools"]) <= set(terms)  # one reciprocal-rank contribution per pool that found it
    # rrf_w_semantic / (rrf_k + rank), over the normaliser: (semantic 1 + keyword 1 + recent 0.2 + pinned 0.5)
    # / (rrf_k + 1), what an item first in every kind of pool would get
    norm = (1 + 1 + 0.2 + 0.5) / 61
    assert terms["semantic"] == pytest.approx(1 / (60 + rows[0]["why"]["pools"]["semantic"]) / norm, abs=1e-4)
    heavy = retrieve(
        conn, embedder, "Edit src/auth/login.py to check the token", fusion="rrf", rrf_w_semantic=3
    )
    assert heavy[0]["score"] > rows[0]["score"]  # per-pool weights move the fused score
    assert len(rows) < 1000


def test_query_cache_lets_psql_replay_the_agent_query(conn: Conn, embedder: Embedder) -> None:
    query = "fixing game physics that stutters"
    conn.execute(
        """INSERT INTO spark.query_embeddings (tenant, model_id, query_hash, query_text, embedding)
           SELECT %s, id, sha256(convert_to(%s, 'UTF8')), %s, %s FROM spark.active_model()""",
        (T, query, query, embedder.embed_query(query)),
    )
    rows = retrieve(conn, None, query)
    assert rows[0]["key"] == "physics"
    assert rows[0]["why"]["query_embedding"] == "cache"


@pytest.mark.parametrize(
    ("tenant", "query", "k", "params", "error", "names"),
    [
        (None, "q", 5, {}, errors.NullValueNotAllowed, "tenant"),
        ("", "q", 5, {}, errors.InvalidParameterValue, "tenant"),
        (T, None, 5, {}, errors.NullValueNotAllowed, "query_text"),
        (T, "   ", 5, {}, errors.InvalidParameterValue, "query_text"),
        (T, "q", 0, {}, errors.InvalidParameterValue, "k must be"),
        (T, "q", 1001, {}, errors.InvalidParameterValue, "k must be"),
        (T, "q", None, {}, errors.NullValueNotAllowed, "k"),
        (T, "q", 5, {"colour": 1}, errors.InvalidParameterValue, 'unknown params key "colour"'),
        (T, "q", 5, {"pool_semantic": "lots"}, errors.InvalidParameterValue, "params.pool_semantic"),
        (
            T,
            "q",
            5,
            {"pool_semantic": 2.5},
            errors.InvalidParameterValue,
            "params.pool_semantic must be an integer",
        ),
        (T, "q", 5, {"mmr_lambda": 2}, errors.InvalidParameterValue, "params.mmr_lambda"),
        (T, "q", 5, {"fusion": "magic"}, errors.InvalidParameterValue, "params.fusion"),
        (T, "q", 5, {"precision_mode": 1}, errors.InvalidParameterValue, "params.precision_mode"),
        (T, "q", 5, {"as_of": "not a time"}, errors.InvalidParameterValue, "params.as_of"),
        (T, "q", 5, {"as_of": 20240101}, errors.InvalidParameterValue, "params.as_of"),
        (T, "q", 5, {"include_system": "yes"}, errors.InvalidParameterValue, "params.include_system"),
    ],
)
def test_bad_input_names_the_parameter(
    conn: Conn,
    tenant: str | None,
    query: str | None,
    k: Any,
    params: dict[str, Any],
    error: type[Exception],
    names: str,
) -> None:
    with pytest.raises(error, match=names), conn.transaction():
        conn.execute("SELECT * FROM spark.retrieve(%s, %s, NULL, %s, %s)", (tenant, query, k, Jsonb(params)))


def test_every_boolean_param_takes_only_true_or_false(conn: Conn) -> None:
    """Checked by the default's type, so that a boolean key added later is checked too."""
    row = conn.execute("SELECT spark.retrieve_defaults()").fetchone()
    assert row is not None
    flags = sorted(key for key, value in row[0].items() if isinstance(value, bool))
    assert {"include_system", "keep_interrupts", "use_cache", "fitted_weights"} <= set(flags)
    for key in flags:
        for bad in ("yes", 1, None):
            refused = pytest.raises(errors.InvalidParameterValue, match=f"params.{key} must be true or false")
            with refused, conn.transaction():
                conn.execute("SELECT * FROM spark.retrieve(%s, 'q', NULL, 5, %s)", (T, Jsonb({key: bad})))


def test_params_must_be_an_object_and_vectors_must_fit(conn: Conn) -> None:
    with (
        pytest.raises(errors.InvalidParameterValue, match="params must be a JSON object"),
        conn.transaction(),
    ):
        conn.execute("SELECT * FROM spark.retrieve('t', 'q', NULL, 5, '[1]'::jsonb)")
    with pytest.raises(errors.DataException, match="3 dimensions"), conn.transaction():
        conn.execute("SELECT * FROM spark.retrieve('t', 'q', '[1,2,3]'::vector)")
    zero = "[" + ",".join(["0"] * 384) + "]"
    with pytest.raises(errors.InvalidParameterValue, match="zero vector"), conn.transaction():
        conn.execute("SELECT * FROM spark.retrieve('t', 'q', %s::vector)", (zero,))


def test_retrieve_writes_nothing(conn: Conn, embedder: Embedder) -> None:
    before = conn.execute("SELECT pg_current_xact_id_if_assigned()").fetchone()
    retrieve(conn, embedder, "verify JWT tokens")
    assert conn.execute("SELECT pg_current_xact_id_if_assigned()").fetchone() == before == (None,)


def test_the_random_pool_samples_the_whole_old_range(conn: Conn) -> None:
    """Pool C, "a random sample of old memories": over many queries its picks spread across the tenant's old
    memories. It once kept the lowest ids among 3 x pool_random probes, so the newer half of the old memories
    (by id) was almost never sampled (~2% of picks); a uniform sample puts about half there."""
    tenant = "sampled"
    conn.execute(
        """INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash, created_at)
           SELECT %s, 'm' || i, 'plain note ' || i, 'plain note ' || i, sha256(convert_to('n' || i, 'UTF8')),
                  %s::timestamptz - interval '30 days' - i * interval '1 minute'
           FROM generate_series(1, 200) i""",
        (tenant, NOW),
    )
    ids = [
        r[0] for r in conn.execute("SELECT id FROM spark.memories WHERE tenant = %s ORDER BY id", (tenant,))
    ]
    upper = set(ids[len(ids) // 2 :])
    picks: list[int] = []
    for n in range(40):
        rows = conn.execute(
            "SELECT memory_id, pools FROM spark.explain(%s, %s, NULL, 8, %s)",
            (tenant, f"zebra quartz {n}", Jsonb({"as_of": NOW.isoformat(), "include_system": False})),
        ).fetchall()
        picks += [mid for mid, pools in rows if "random" in pools]
    assert len(picks) >= 40 * 8  # most queries fill the pool (pool_random 10)
    share = sum(p in upper for p in picks) / len(picks)
    assert 0.3 < share < 0.7, share


def test_the_random_pool_does_not_depend_on_the_tenant_statistics(conn: Conn) -> None:
    """The random pool's probes read the tenant's id range, not its statistics (a window sized from the
    statistics, until 2026-11-24): the picks must be the same with no statistics, true ones, and stale ones
    that would have made every window empty or the whole range. Only one memory in ten is old here."""
    tenant = "sparse"
    conn.execute(
        """INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash, created_at)
           SELECT %s, 'm' || i, 'plain note ' || i, 'plain note ' || i, sha256(convert_to('s' || i, 'UTF8')),
                  %s::timestamptz - CASE WHEN i %% 10 = 0 THEN interval '30 days' ELSE interval '1 day' END
                                  - i * interval '1 minute'
           FROM generate_series(1, 300) i""",
        (tenant, NOW),
    )
    old = {
        r[0]
        for r in conn.execute(
            "SELECT id FROM spark.memories WHERE tenant = %s AND created_at < %s",
            (tenant, NOW - timedelta(days=7)),
        )
    }
    assert len(old) == 30

    def picks() -> list[list[int]]:
        out = []
        for n in range(12):
            rows = conn.execute(
                "SELECT memory_id, pools FROM spark.explain(%s, %s, NULL, 8, %s)",
                (tenant, f"zebra quartz {n}", Jsonb({"as_of": NOW.isoformat(), "include_system": False})),
            ).fetchall()
            out.append(sorted(mid for mid, pools in rows if "random" in pools))
        return out

    runs = {}
    for label, memories in (("none", None), ("true", 300), ("stale high", 10**9), ("stale low", 1)):
        conn.execute("DELETE FROM spark.tenant_stats WHERE tenant = %s", (tenant,))
        if memories is not None:
            conn.execute(
                "INSERT INTO spark.tenant_stats (tenant, memories, lexeme_min_df, refreshed_at) "
                "VALUES (%s, %s, 20, now())",
                (tenant, memories),
            )
        runs[label] = picks()
    assert all(run == runs["none"] for run in runs.values()), runs
    sampled = [mid for query in runs["none"] for mid in query]
    assert len(sampled) >= 12 * 8 and set(sampled) <= old  # old memories only, the pool mostly filled


# --- the pools are the same on every call: ties broken by id -------------------------------------------


def add_in_descending_id_order(conn: Conn, tenant: str, n: int, created_at: datetime, tier: str) -> list[int]:
    """``n`` memories alike but for their ids, written highest id first (so the table's order is not the
    ids' order, which a scan without the id tie-break followed); returns their ids, lowest first."""
    conn.execute(
        """INSERT INTO spark.memories (id, tenant, key, text, descriptor, content_hash, created_at, tier)
           OVERRIDING SYSTEM VALUE
           SELECT g.id, %(t)s, 'm' || g.id, 'plain note ' || g.id, 'plain note ' || g.id,
                  sha256(convert_to('tie' || g.id, 'UTF8')), %(at)s, %(tier)s
           FROM (SELECT nextval(pg_get_serial_sequence('spark.memories', 'id')) AS id
                 FROM generate_series(1, %(n)s)) g
           ORDER BY g.id DESC""",
        {"t": tenant, "at": created_at, "tier": tier, "n": n},
    )
    return [
        r[0] for r in conn.execute("SELECT id FROM spark.memories WHERE tenant = %s ORDER BY id", (tenant,))
    ]


def pool_members(conn: Conn, tenant: str, pool: str, params: dict[str, Any]) -> set[int]:
    rows = conn.execute(
        "SELECT memory_id, pools FROM spark.explain(%s, 'zzz qqq', NULL, 20, %s)",
        (tenant, Jsonb({"as_of": NOW.isoformat(), "include_system": False} | params)),
    ).fetchall()
    return {mid for mid, pools in rows if pool in pools}


def touch(conn: Conn, ids: list[int]) -> None:
    """A new row version for each (it moves in the table, its id stays)."""
    conn.execute("UPDATE spark.memories SET metadata = '{\"touched\": true}' WHERE id = ANY(%s)", (ids,))


def test_the_pinned_pool_breaks_importance_ties_by_id(conn: Conn) -> None:
    tenant = "pinned-ties"
    ids = add_in_descending_id_order(conn, tenant, 15, NOW - timedelta(days=30), "pinned")
    params = {"pool_pinned": 10}
    assert pool_members(conn, tenant, "pinned", params) == set(ids[:10])  # not the 10 written first
    touch(conn, ids[:5])
    assert pool_members(conn, tenant, "pinned", params) == set(ids[:10])


def test_the_recent_pool_breaks_created_at_ties_by_id(conn: Conn) -> None:
    row = conn.execute("SELECT (spark.retrieve_defaults() ->> 'pool_recent')::integer").fetchone()
    assert row is not None
    pool = int(row[0])
    tenant = "recent-ties"
    ids = add_in_descending_id_order(conn, tenant, pool + 5, NOW - timedelta(days=1), "active")
    assert pool_members(conn, tenant, "recent", {}) == set(ids[:pool])
    touch(conn, ids[:5])
    assert pool_members(conn, tenant, "recent", {}) == set(ids[:pool])


def test_why_lists_every_matching_trigger_rule_and_each_counts(conn: Conn) -> None:
    tenant = "rule-order"
    conn.execute(
        """INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash, created_at)
           VALUES (%s, 'backup', %s, %s, '\\x00', %s)""",
        (
            tenant,
            "Take a snapshot of the cluster state first.",
            "Take a snapshot first.",
            NOW - timedelta(days=2),
        ),
    )
    # written in another order than the expected one: confidence, then interrupt, then name
    for name, confidence, interrupt in (
        ("low", 0.2, False),
        ("mid-b", 0.5, False),
        ("high", 0.9, False),
        ("mid-a", 0.5, False),
        ("mid-stop", 0.5, True),
    ):
        conn.execute(
            "SELECT spark.put_trigger_rule(%s, %s, 'rm -rf', ARRAY['backup'], confidence => %s::real,"
            " interrupt => %s)",
            (tenant, name, confidence, interrupt),
        )
    rows = retrieve(conn, None, "Bash rm -rf ./build", tenant=tenant, include_system=False)
    assert keys(rows) == ["backup"]
    trigger = rows[0]["why"]["trigger"]
    assert trigger["rules"] == ["high", "mid-stop", "mid-a", "mid-b", "low"]
    # the surest rule's confidence, and the interrupt of a less sure one, which the surest used to hide
    assert trigger["confidence"] == pytest.approx(0.9) and trigger["interrupt"] is True
    assert trigger["interrupt_confidence"] == pytest.approx(0.5)
    assert rows[0]["why"]["priority"] == "normal"  # no rule raised it


def test_why_priority_is_the_priority_applied(conn: Conn) -> None:
    """A rule raised the memory to critical (priority 0.3), and why.priority still said normal."""
    tenant = "raised"
    conn.execute(
        """INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash, created_at, priority)
           VALUES (%s, 'backup', 'Take a snapshot first.', 'Take a snapshot first.', '\\x00', %s, 'high')""",
        (tenant, NOW - timedelta(days=2)),
    )
    conn.execute(
        "SELECT spark.put_trigger_rule(%s, 'r', 'rm -rf', ARRAY['backup'], priority => 'critical')", (tenant,)
    )
    [row] = retrieve(conn, None, "Bash rm -rf ./build", tenant=tenant, include_system=False)
    assert row["why"]["priority"] == "critical" and row["why"]["trigger"]["priority"] == "critical"
    conn.execute("UPDATE spark.trigger_rules SET priority = 'background' WHERE tenant = %s", (tenant,))
    [row] = retrieve(conn, None, "Bash rm -rf ./build", tenant=tenant, include_system=False)
    assert row["why"]["priority"] == "high"  # never lowered


@pytest.mark.parametrize("fusion", ["weighted", "rrf"])
def test_why_terms_add_up_to_the_score_under_either_fusion(
    conn: Conn, embedder: Embedder, fusion: str
) -> None:
    """Under rrf the terms left out the normaliser: they summed to a twentieth of the score."""
    rows = retrieve(
        conn, embedder, "git push origin main deploy token", k=8, fusion=fusion, min_fusion_score=0
    )
    assert len(rows) >= 3
    for row in rows:
        terms = dict(row["why"]["terms"])
        factor = terms.pop("priority_factor") * terms.pop("pack_factor", 1)
        terms.pop("mmr_penalty")  # what MMR weighed the pick by, not part of the score
        assert sum(terms.values()) * factor == pytest.approx(row["score"], abs=2e-3), (row["key"], terms)


def test_a_tiny_fitted_weight_written_by_hand_is_left_out_not_an_error(
    conn: Conn, embedder: Embedder
) -> None:
    """Fitted weights skip the params checks (only numbers from 0 to 10 are taken): a w_recency of 1e-300 in
    a row written by hand underflowed every call of the tenant (22003)."""
    conn.execute(
        "INSERT INTO spark.fusion_weights (tenant, weights, samples, in_use) "
        """VALUES (%s, '{"w_recency": 1e-300, "w_keyword": 0.5}', 50, true)""",
        (T,),
    )
    rows = retrieve(conn, embedder, "deploy the release", half_life_days=0.001, recency_floor=0)
    assert rows and rows[0]["why"]["fitted_weights"] == {"w_keyword": 0.5, "_samples": 50}
