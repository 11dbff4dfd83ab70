"""Reflection (sql/070-reflect.sql, Advisor.reflect) and the advisor's past-failure warnings, on a real
database with the real model: recall across phrasings, outcomes, linked learnings, recency, the lexical
fallback, one model's vectors only, every edge of the SQL function, and one round trip per advise."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import errors
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from spark_pg import queries
from spark_pg.advisor import REFLECT_K, WARNING_MIN_SCORE, Advisor, AdvisorOptions
from spark_pg.config import KEY_BY_NAME, REFLECT_PARAM_KEYS, Settings
from spark_pg.db import connect
from spark_pg.embedding import Embedder
from spark_pg.errors import ArgumentRefused, InputError
from spark_pg.ingest import ingest
from spark_pg.intent import extract_intent
from spark_pg.records import MemoryIn
from spark_pg.traces import add_learning, add_trace
from spark_pg.traces.reflect import LEXICAL_WARNING_MIN_WORDS, from_row
from spark_pg.traces.reflect import reflect as reflect_py
from tests.conftest import rolled_back, temp_database

Conn = psycopg.Connection[Any]
T = "dev"
OLD = datetime.now(UTC) - timedelta(days=400)
KEYS: dict[str, str] = {}  # name -> key, filled by the module's database


TRACES: dict[str, dict[str, Any]] = {
    "auth": {
        "intent": "Fix auth token refresh",
        "outcome": "failure",
        "files": "src/auth/refresh.py",
        "issue": "refresh token reused after rotation",
        "tags": "auth",
    },
    "pages": {"intent": "Add pagination to the orders API", "outcome": "success", "files": "api/orders.py"},
    "ci": {
        "intent": "Speed up the CI pipeline cache",
        "outcome": "success",
        "files": ".github/workflows/ci.yml",
    },
    "ws": {
        "intent": "Fix flaky websocket reconnect test",
        "outcome": "failure",
        "files": "tests/test_ws.py",
        "issue": "race on server shutdown",
    },
    "old": {
        "intent": "Migrate the users table to add an email index",
        "outcome": "failure",
        "files": "alembic/versions/0042.py",
        "issue": "lock timeout on a big table",
        "created_at": OLD,
    },
}
LEARNINGS: dict[str, dict[str, Any]] = {
    "rotate": {
        "handle": "Rotate refresh tokens atomically: revoke the old one in the transaction that issues the "
        "new one",
        "from_trace": "auth",
        "category": "auth",
    },
    "cobra": {
        "handle": "When working with Cobra commands, use RunE instead of Run so errors propagate",
        "category": "go",
    },
    "concurrently": {
        "handle": "Build indexes on big tables with CREATE INDEX CONCURRENTLY so writes go on",
        "from_trace": "old",
        "category": "database",
        "created_at": OLD,
    },
}


@pytest.fixture(scope="module")
def rdb(server_url: str, model_settings: Settings, embedder: Embedder) -> Iterator[str]:
    with temp_database(server_url, install=True) as url:
        with connect(url) as conn:
            for name, fields in TRACES.items():
                KEYS[name] = add_trace(conn, embedder, T, **fields).key
            for name, fields in LEARNINGS.items():
                link = fields.get("from_trace")
                KEYS[name] = add_learning(
                    conn, embedder, T, **(fields | {"from_trace": KEYS[link] if link else None})
                ).key
            # an ordinary insight on the same subject: reflection never returns it
            jwt = "Verify JWT signatures on the server before trusting any claim"
            ingest(conn, [MemoryIn(tenant=T, key="jwt", category="security", text=jwt)], embedder)
            conn.commit()
        yield url


@pytest.fixture
def conn(rdb: str) -> Iterator[Conn]:
    with rolled_back(rdb) as connection:
        yield connection


def reflect(
    conn: Conn,
    query: str,
    embedding: Any = None,
    k: int | None = 5,
    params: Any = None,
    tenant: str | None = T,
) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT * FROM spark.reflect(%s, %s, %s, %s, %s)",
            (tenant, query, embedding, k, Jsonb(params if params is not None else {})),
        ).fetchall()


def names(rows: list[dict[str, Any]]) -> list[str]:
    by_key = {v: k for k, v in KEYS.items()}
    return [by_key.get(r["key"], r["key"]) for r in rows]


# --- recall ----------------------------------------------------------------------------------------------


def test_a_past_failure_is_recalled_for_a_paraphrase(conn: Conn, embedder: Embedder) -> None:
    rows = reflect(conn, "Repair login session expiry", embedder.embed_query("Repair login session expiry"))
    found = {n: r for n, r in zip(names(rows), rows, strict=True)}
    assert "auth" in found and "jwt" not in found and {r["kind"] for r in rows} <= {"trace", "learning"}
    auth = found["auth"]
    assert auth["outcome"] == "failure" and auth["similarity"] >= 0.25 and auth["why"]["match"] == "semantic"
    assert auth["why"]["query_embedding"] == "argument" and auth["why"]["semantic_scan"] == "exact"
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    assert "pages" not in found and "ci" not in found  # unrelated attempts stay out


def test_a_success_comes_back_with_its_outcome(conn: Conn, embedder: Embedder) -> None:
    rows = reflect(conn, "paginate the orders endpoint", embedder.embed_query("paginate the orders endpoint"))
    assert names(rows)[0] == "pages" and rows[0]["outcome"] == "success" and rows[0]["age_days"] < 1


def test_learnings_linked_to_a_trace_come_back_with_it(conn: Conn, embedder: Embedder) -> None:
    query = "edit the auth token refresh code"
    only_traces = reflect(conn, query, embedder.embed_query(query), params={"kinds": ["trace"]})
    assert names(only_traces)[:2] == ["auth", "rotate"]
    linked = only_traces[1]
    assert linked["kind"] == "learning" and linked["linked_to"] == KEYS["auth"] and linked["outcome"] is None
    assert linked["why"]["match"] == "linked" and linked["why"]["gate"].startswith("none: linked to trace")
    # matched on its own merit, a linked learning still says which returned trace it belongs to
    both = reflect(conn, query, embedder.embed_query(query))
    rotate = next(r for r in both if r["key"] == KEYS["rotate"])
    assert rotate["why"]["match"] == "semantic" and rotate["linked_to"] == KEYS["auth"]
    assert names(both).count("rotate") == 1
    none = reflect(
        conn, query, embedder.embed_query(query), params={"kinds": ["trace"], "linked_per_trace": 0}
    )
    assert "rotate" not in names(none)


def test_a_learning_matched_on_its_own_does_not_use_up_a_linked_place(conn: Conn) -> None:
    """The trace's linked_per_trace (3) learnings are counted without the ones already returned."""
    keys = [f"learning:lag{i}" for i in range(5)]
    conn.execute(
        """INSERT INTO spark.memories (tenant, key, kind, text, created_at, metadata)
           SELECT 'links', k, 'learning',
                  CASE WHEN i = 5 THEN 'Watch kafka consumer lag after a deploy' ELSE 'Note number ' || i END,
                  now() - (10 - i) * interval '1 day', '{}'
           FROM unnest(%s::text[]) WITH ORDINALITY AS u(k, i)""",
        (keys,),
    )
    conn.execute(
        """INSERT INTO spark.memories (tenant, key, kind, text, metadata, actionability)
           VALUES ('links', 'trace:lag', 'trace', 'Intent: kafka consumer lag | Outcome: failure',
                   jsonb_build_object('outcome', 'failure', 'learning_keys', %s::text[]), 0)""",
        (keys,),
    )
    rows = reflect(conn, "kafka consumer lag", None, k=2, tenant="links", params={"min_score": 0})
    matched = [r["key"] for r in rows if r["why"]["match"] != "linked"]
    linked = [r["key"] for r in rows if r["why"]["match"] == "linked"]
    assert sorted(matched) == ["learning:lag4", "trace:lag"]
    assert linked == ["learning:lag3", "learning:lag2", "learning:lag1"]  # three, newest first


def test_similar_learnings_come_back_on_their_own(conn: Conn, embedder: Embedder) -> None:
    rows = reflect(conn, "add a cobra subcommand", embedder.embed_query("add a cobra subcommand"))
    assert names(rows) == ["cobra"] and rows[0]["linked_to"] is None and rows[0]["kind"] == "learning"


def test_nonsense_finds_nothing(conn: Conn, embedder: Embedder) -> None:
    assert (
        reflect(conn, "purple giraffe orbit sandwich", embedder.embed_query("purple giraffe orbit sandwich"))
        == []
    )


def test_recency_half_life_and_as_of(conn: Conn, embedder: Embedder) -> None:
    query = "lock timeout while migrating a big users table"
    vec = embedder.embed_query(query)
    now = next(r for r in reflect(conn, query, vec, params={"min_score": 0}) if r["key"] == KEYS["old"])
    assert 399 < now["age_days"] < 401
    assert now["recency"] == pytest.approx(0.5 ** (now["age_days"] / 90), abs=1e-4)
    assert now["score"] == pytest.approx(now["similarity"] * (0.5 + 0.5 * now["recency"]), abs=1e-4)
    then = (OLD + timedelta(days=1)).isoformat()
    back = next(
        r
        for r in reflect(conn, query, vec, params={"min_score": 0, "as_of": then})
        if r["key"] == KEYS["old"]
    )
    assert back["score"] > now["score"] and back["age_days"] == pytest.approx(1, abs=0.01)
    # a shorter half-life weighs age more; before it happened, it is not there
    short = reflect(conn, query, vec, params={"min_score": 0, "half_life_days": 10})
    assert next(r for r in short if r["key"] == KEYS["old"])["score"] < now["score"]
    before = (OLD - timedelta(days=1)).isoformat()
    assert KEYS["old"] not in {
        r["key"] for r in reflect(conn, query, vec, params={"min_score": 0, "as_of": before})
    }


def test_outcome_filter(conn: Conn, embedder: Embedder) -> None:
    query = "fix a failing test"
    rows = reflect(
        conn, query, embedder.embed_query(query), k=20, params={"min_score": 0, "outcome": "success"}
    )
    assert {r["outcome"] for r in rows if r["kind"] == "trace"} == {"success"}
    assert any(r["kind"] == "learning" for r in rows)  # learnings have no outcome to filter on


def test_lexical_fallback_without_an_embedding(conn: Conn) -> None:
    rows = reflect(conn, "the refresh token broke again", None)
    assert names(rows)[0] in {"auth", "rotate"} and "auth" in names(rows)
    auth = rows[names(rows).index("auth")]
    assert auth["similarity"] is None and auth["why"]["match"] == "lexical"
    assert auth["why"]["query_embedding"] == "none: lexical fallback over the descriptors"
    assert auth["keyword_score"] == pytest.approx(2 / 3, abs=1e-4)  # refresh, token of refresh, token, broke
    # the descriptor's own labels and outcome words match nothing
    assert reflect(conn, "failure outcome intent files tags key issue", None) == []
    # docs/traces.md: the paraphrase needs a vector; by words alone it shares none with the trace
    assert reflect(conn, "Repair login session expiry", None) == []


def test_only_the_active_models_vectors_and_unembedded_rows_by_their_words(
    conn: Conn, embedder: Embedder
) -> None:
    conn.execute("SELECT spark.register_model('fake-3d', 3, 'mean', 16)")  # registered, not active
    conn.execute(
        """INSERT INTO spark.memories (tenant, key, kind, text, descriptor, content_hash, metadata,
                                       action_domain, actionability)
           VALUES (%(t)s, 'trace:pending', 'trace', %(d)s, %(d)s, sha256('x'), '{"outcome": "failure"}',
                   'general', 0)""",
        {"t": T, "d": "Intent: Deploy the payments service | Outcome: failure"},
    )
    conn.execute(
        """INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding)
           SELECT m.tenant, m.id, (SELECT id FROM spark.embedding_models WHERE name = 'fake-3d'),
                  m.created_at, '[1,0,0]'
           FROM spark.memories m WHERE m.tenant = %s AND m.key = 'trace:pending'""",
        (T,),
    )
    query = "deploy the payments service"
    rows = reflect(conn, query, embedder.embed_query(query))
    pending = next(r for r in rows if r["key"] == "trace:pending")
    assert (
        pending["similarity"] is None
        and pending["why"]["match"] == "lexical"
        and "not embedded" in (pending["why"]["note"])
    )


def test_the_hnsw_path_agrees_with_the_exact_scan(conn: Conn, embedder: Embedder) -> None:
    vec = embedder.embed_query("Repair login session expiry")
    exact = reflect(conn, "Repair login session expiry", vec)
    hnsw = reflect(conn, "Repair login session expiry", vec, params={"exact_scan_max": 0})
    assert hnsw and hnsw[0]["why"]["semantic_scan"] == "hnsw"
    assert [r["key"] for r in hnsw] == [r["key"] for r in exact]


# --- SQL edges ----------------------------------------------------------------------------------------------


def test_empty_tenant_k_zero_and_huge_k(conn: Conn, embedder: Embedder) -> None:
    vec = embedder.embed_query("deploy service")
    assert reflect(conn, "deploy service", vec, tenant="nobody") == []
    assert reflect(conn, "deploy service", None, tenant="nobody") == []
    assert reflect(conn, "Fix auth token refresh", vec, k=0) == []
    conn.execute(
        """INSERT INTO spark.memories (tenant, key, kind, text, descriptor, content_hash, metadata,
                                       action_domain, actionability)
           SELECT 'many', 'trace:' || g, 'trace', 'Intent: deploy service ' || g || ' | Outcome: failure',
                  'Intent: deploy service ' || g || ' | Outcome: failure', sha256(g::text::bytea),
                  '{"outcome": "failure"}', 'general', 0
           FROM generate_series(1, 105) g"""
    )
    rows = reflect(
        conn, "deploy service", None, k=100_000, tenant="many", params={"pool": 1000, "min_score": 0}
    )
    assert len(rows) == 100 and rows[-1]["rank"] == 100
    assert len(reflect(conn, "deploy service", None, k=7, tenant="many")) == 7
    # k past the default pool (50) still gets k matches: the pool grows to k
    assert len(reflect(conn, "deploy service", None, k=80, tenant="many", params={"min_score": 0})) == 80
    # with a query vector, rows the model has not embedded yet are still found by their words
    assert len(reflect(conn, "deploy service", vec, k=3, tenant="many")) == 3


@pytest.mark.parametrize(
    ("tenant", "query", "k", "params", "error", "message"),
    [
        (None, "q", 5, {}, errors.NullValueNotAllowed, "tenant must not be NULL"),
        ("", "q", 5, {}, errors.InvalidParameterValue, "tenant must be 1 to 128 characters"),
        (T, None, 5, {}, errors.NullValueNotAllowed, "query_text must not be NULL"),
        (T, "  ", 5, {}, errors.InvalidParameterValue, "query_text must not be empty"),
        (T, "q", None, {}, errors.NullValueNotAllowed, "k must not be NULL"),
        (T, "q", -1, {}, errors.InvalidParameterValue, "k must be 0 or more"),
        (T, "q", 0, {"bogus": 1}, errors.InvalidParameterValue, 'unknown params key "bogus"'),
        (T, "q", 5, {"min_score": "high"}, errors.InvalidParameterValue, "params.min_score must be a number"),
        (
            T,
            "q",
            5,
            {"min_score": 2},
            errors.InvalidParameterValue,
            "params.min_score must be a number from 0",
        ),
        (T, "q", 5, {"pool": 1.5}, errors.InvalidParameterValue, "params.pool must be an integer"),
        (
            T,
            "q",
            5,
            {"lexical_min_words": 0},
            errors.InvalidParameterValue,
            "params.lexical_min_words must be an integer from 1 to 100",
        ),
        (T, "q", 5, {"half_life_days": 0}, errors.InvalidParameterValue, "params.half_life_days"),
        (T, "q", 5, {"kinds": []}, errors.InvalidParameterValue, "params.kinds must be a non-empty array"),
        (T, "q", 5, {"kinds": ["insight"]}, errors.InvalidParameterValue, "params.kinds"),
        (T, "q", 5, {"kinds": ["trace", "trace"]}, errors.InvalidParameterValue, "params.kinds"),
        (T, "q", 5, {"outcome": "partial"}, errors.InvalidParameterValue, "params.outcome must be null"),
        (T, "q", 5, {"as_of": "soon-ish"}, errors.InvalidParameterValue, "params.as_of must be an ISO 8601"),
        (T, "q", 5, [1], errors.InvalidParameterValue, "params must be a JSON object"),
        (
            T,
            "q",
            5,
            {"query_model": 3},
            errors.InvalidParameterValue,
            "params.query_model must be a model name",
        ),
    ],
)
def test_bad_input_names_the_parameter(
    conn: Conn, tenant: str | None, query: str | None, k: int | None, params: Any, error: type, message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)), conn.transaction():
        conn.execute("SELECT * FROM spark.reflect(%s, %s, NULL, %s, %s)", (tenant, query, k, Jsonb(params)))


def test_vectors_must_fit_the_active_model(conn: Conn, embedder: Embedder) -> None:
    with pytest.raises(errors.DataException, match="3 dimensions"), conn.transaction():
        conn.execute("SELECT * FROM spark.reflect('dev', 'q', '[1,2,3]'::vector)")
    zero = "[" + ",".join(["0"] * 384) + "]"
    with pytest.raises(errors.InvalidParameterValue, match="zero vector"), conn.transaction():
        conn.execute("SELECT * FROM spark.reflect('dev', 'q', %s::vector)", (zero,))
    # an embedding makes an empty query text fine
    assert reflect(conn, "", embedder.embed_query("Fix auth token refresh"))[0]["key"] == KEYS["auth"]


def test_reflect_reads_only_and_follows_the_house_rules(conn: Conn, embedder: Embedder) -> None:
    def counts() -> tuple[int, ...]:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM spark.retrievals), (SELECT count(*) FROM spark.query_embeddings),"
            " (SELECT count(*) FROM spark.memories), (SELECT sum(xmin::text::bigint) FROM spark.memories)"
        ).fetchone()
        assert row is not None
        return tuple(int(v or 0) for v in row)

    before = counts()
    Advisor(conn, embedder, T).reflect("Repair login session expiry")
    assert counts() == before
    rows = conn.execute(
        """SELECT p.proname, p.provolatile, p.proconfig, obj_description(p.oid, 'pg_proc')
           FROM pg_proc p WHERE p.pronamespace = 'spark'::regnamespace
             AND p.proname IN ('reflect', 'reflect_defaults', '_reflect_params', '_reflect_stop_lexemes',
                               'advise_with_warnings')"""
    ).fetchall()
    assert len(rows) == 5
    for name, volatility, config, comment in rows:
        assert any(c.startswith("search_path=pg_catalog") for c in config), name
        assert comment and len(comment) > 40, name
        if name == "reflect":
            assert volatility == "s" and "Errors:" in comment


def test_the_defaults_agree_everywhere(conn: Conn) -> None:
    row = conn.execute("SELECT spark.reflect_defaults()").fetchone()
    assert row is not None
    for name, param in REFLECT_PARAM_KEYS.items():
        assert KEY_BY_NAME[name].default == row[0][param], name
    assert KEY_BY_NAME["reflection.top_k"].default == REFLECT_K == AdvisorOptions().reflect_k
    assert KEY_BY_NAME["reflection.warning_min_score"].default == WARNING_MIN_SCORE
    assert AdvisorOptions().warning_min_score == WARNING_MIN_SCORE


# --- Python: Advisor.reflect and the past-failure warning -------------------------------------------------


def test_advisor_reflect_takes_an_intent_or_a_string(conn: Conn, embedder: Embedder) -> None:
    advisor = Advisor(conn, embedder, T)
    intent = extract_intent("Edit", {"file_path": "src/auth/refresh.py"}, "repair the login session expiry")
    by_intent = advisor.reflect(intent)
    by_text = advisor.reflect("  Repair   login session expiry ")
    for found in (by_intent, by_text):
        auth = next(r for r in found if r.key == KEYS["auth"])
        assert auth.failure and auth.outcome == "failure" and auth.match == "semantic"
        assert "similarity" in auth.reason and auth.created_at.tzinfo is not None
    assert advisor.reflect("   ") == []
    assert Advisor(conn, None, T).reflect("refresh token")[0].match == "lexical"  # no model: lexical fallback


def advise_counted(
    advisor: Advisor, monkeypatch: pytest.MonkeyPatch, *call: Any
) -> tuple[list[Any], list[str]]:
    sent: list[str] = []
    original = psycopg.Cursor.execute

    def execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return original(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    try:
        return advisor.advise(*call), sent
    finally:
        monkeypatch.undo()


EDIT = ("Edit", {"file_path": "src/auth/refresh.py", "old_string": "a", "new_string": "b"})


def test_a_past_failure_comes_back_first_as_a_warning_in_one_round_trip(
    conn: Conn, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    advisor = Advisor(conn, embedder, T, session_id="s-warn")
    advice, sent = advise_counted(advisor, monkeypatch, *EDIT, "fix the auth token refresh")
    assert sent == [queries.ADVISE_WITH_WARNINGS]  # one statement: advise and reflect together
    warning = advice[0]
    assert (
        warning.warning
        and warning.key == KEYS["auth"]
        and warning.priority == "high"
        and not warning.blocking
    )
    assert warning.text.startswith("Past failure on a similar task: Intent: Fix auth token refresh")
    assert "Learned: Rotate refresh tokens atomically" in warning.text
    assert warning.score >= WARNING_MIN_SCORE and warning.why["warning"]["rule"].startswith("a past failure")
    assert sum(a.warning for a in advice) == 1 and all(a.key != KEYS["auth"] for a in advice[1:])
    logged = conn.execute(
        "SELECT id FROM spark.retrievals WHERE tenant = %s AND session_id = 's-warn'", (T,)
    ).fetchall()
    assert logged == [(warning.retrieval_id,)]
    assert all(a.retrieval_id == warning.retrieval_id for a in advice)
    items = conn.execute(
        "SELECT memory_id FROM spark.retrieval_items WHERE tenant = %s AND retrieval_id = %s",
        (T, warning.retrieval_id),
    ).fetchall()
    assert (warning.memory_id,) not in items  # warnings are not fusion signals
    assert advisor.record_outcome(warning.memory_id, "helpful", retrieval_id=warning.retrieval_id) > 0.5


def test_successes_and_weak_matches_never_warn(conn: Conn, embedder: Embedder) -> None:
    advisor = Advisor(conn, embedder, T)
    assert not any(
        a.warning for a in advisor.advise("Edit", {"file_path": "api/orders.py"}, "paginate orders")
    )
    strict = Advisor(conn, embedder, T, options=AdvisorOptions(warning_min_score=0.99))
    assert not any(a.warning for a in strict.advise(*EDIT, "fix the auth token refresh"))


def test_warnings_can_be_turned_off(conn: Conn, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    advisor = Advisor(conn, embedder, T, options=AdvisorOptions(warnings=False))
    advice, sent = advise_counted(advisor, monkeypatch, *EDIT, "fix the auth token refresh")
    assert sent == [queries.ADVISE] and not any(a.warning for a in advice)


def test_nothing_is_written_when_the_warning_part_fails(conn: Conn, embedder: Embedder) -> None:
    def calls() -> int:
        row = conn.execute("SELECT count(*) FROM spark.retrievals WHERE tenant = %s", (T,)).fetchone()
        assert row is not None
        return int(row[0])

    before = calls()
    advisor = Advisor(conn, embedder, T, options=AdvisorOptions(reflect_params={"bogus": 1}))
    with pytest.raises(ArgumentRefused, match='unknown reflect_params key "bogus"'):
        advisor.advise(*EDIT, "fix the auth token refresh")
    assert calls() == before
    for k in (50, -1):  # -1 used to turn the warnings off without a word
        with pytest.raises(InputError, match=f"AdvisorOptions.warning_k must be from 0 to 20, got {k}"):
            AdvisorOptions(warning_k=k)
    with (
        pytest.raises(errors.InvalidParameterValue, match="warning_k must be between 0 and 20"),
        conn.transaction(),
    ):
        conn.execute(  # the SQL function's own check, for callers that are not the Advisor
            "SELECT * FROM spark.advise_with_warnings(%s, 'fix the auth', warning_k => 50)", (T,)
        )
    assert calls() == before


# --- the outcome filter comes before the pool ---------------------------------------------------------


def add_outcome_trace(conn: Conn, tenant: str, key: str, descriptor: str, outcome: str, vector: Any) -> None:
    """A trace with its outcome, and (unless ``vector`` is None) its vector of the active model."""
    conn.execute(
        """WITH m AS (
               INSERT INTO spark.memories (tenant, key, kind, text, descriptor, content_hash, metadata,
                                           action_domain, actionability)
               VALUES (%(t)s, %(k)s, 'trace', %(d)s, %(d)s, sha256(convert_to(%(k)s, 'UTF8')), %(meta)s,
                       'general', 0)
               RETURNING tenant, id, created_at)
           INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding)
           SELECT m.tenant, m.id, (SELECT id FROM spark.active_model()), m.created_at, %(v)s::vector FROM m
           WHERE %(v)s::vector IS NOT NULL""",
        {"t": tenant, "k": key, "d": descriptor, "meta": Jsonb({"outcome": outcome}), "v": vector},
    )


def unit_mix(dim: int, second: float) -> str:
    """The first axis plus ``second`` of the second: further from the first axis as ``second`` grows."""
    return "[" + ",".join(["1", str(second)] + ["0"] * (dim - 2)) + "]"


@pytest.mark.parametrize("exact_scan_max", [7000, 0])  # the exact scan and the HNSW scan
def test_a_failure_behind_a_full_pool_of_nearer_successes_is_found_by_vector(
    conn: Conn, exact_scan_max: int
) -> None:
    row = conn.execute("SELECT dim FROM spark.active_model()").fetchone()
    assert row is not None
    dim = int(row[0])
    tenant = "outcome-pool-vec"
    for i in range(6):
        add_outcome_trace(
            conn, tenant, f"trace:ok{i}", f"Intent: task {i}", "success", unit_mix(dim, 0.01 * i)
        )
    add_outcome_trace(conn, tenant, "trace:bad", "Intent: task bad", "failure", unit_mix(dim, 1))
    params = {"pool": 5, "outcome": "failure", "min_score": 0, "exact_scan_max": exact_scan_max}
    # the 5 nearest are successes: filtered after the pool was cut, the outcome once left nothing
    rows = reflect(conn, "task", unit_mix(dim, 0), params=params, tenant=tenant)
    assert [(r["key"], r["outcome"], r["why"]["match"]) for r in rows] == [
        ("trace:bad", "failure", "semantic")
    ]
    assert rows[0]["why"]["semantic_scan"] == ("exact" if exact_scan_max else "hnsw")


def test_a_failure_behind_a_full_pool_of_better_lexical_successes_is_found(conn: Conn) -> None:
    tenant = "outcome-pool-lex"
    for i in range(6):
        add_outcome_trace(
            conn, tenant, f"trace:ok{i}", f"Intent: deploy the payments service {i}", "success", None
        )
    add_outcome_trace(conn, tenant, "trace:bad", "Intent: deploy the billing job", "failure", None)
    query = "deploy the payments service"
    every = reflect(conn, query, None, k=5, params={"pool": 5, "min_score": 0}, tenant=tenant)
    # the pool of 5: successes matching 3 words each, not the failure matching 1
    assert {r["outcome"] for r in every} == {"success"}
    rows = reflect(conn, query, None, params={"pool": 5, "outcome": "failure", "min_score": 0}, tenant=tenant)
    assert [(r["key"], r["outcome"], r["why"]["match"]) for r in rows] == [
        ("trace:bad", "failure", "lexical")
    ]
    assert rows[0]["keyword_score"] == pytest.approx(1 / 3, abs=1e-4)  # deploy, of deploy, payment, servic
    # filtered after the lexical pool was cut, the outcome once left nothing here too


# --- a query vector of another model than the active one (a client still on the old model) -----------------


def switch_model(conn: Conn) -> str:
    """Activate a model 'fake-b' of the active one's dimension, holding a copy of each of the tenant's
    vectors: an old model's query vector compared with them looks like a good semantic match. Its name."""
    row = conn.execute("SELECT dim FROM spark.active_model()").fetchone()
    assert row is not None
    conn.execute("SELECT spark.register_model('fake-b', %s, 'mean', 256)", (row[0],))
    conn.execute("SELECT * FROM spark.activate_model('fake-b')")
    conn.execute(
        """INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding)
           SELECT e.tenant, e.memory_id, (SELECT id FROM spark.active_model()), e.created_at, e.embedding
           FROM spark.embeddings e JOIN spark.embedding_models m ON m.id = e.model_id
           WHERE e.tenant = %s AND m.name <> 'fake-b'""",
        (T,),
    )
    return "fake-b"


def test_a_vector_of_another_model_than_the_active_one_is_ignored_not_compared(
    conn: Conn, embedder: Embedder
) -> None:
    """spark.reflect compared any vector of the right dimension: an old model's query vector against the
    new model's vectors gave "match": "semantic", "model": "fake-b" (spark.retrieve says "ignored")."""
    query, old = "Repair login session expiry", embedder.spec.name
    vec = embedder.embed_query(query)
    active = switch_model(conn)
    # without query_model the caller vouches for the vector, as spark.retrieve takes it: compared
    assert reflect(conn, query, vec)[0]["why"]["model"] == active
    assert reflect(conn, query, vec, params={"query_model": active})[0]["why"]["match"] == "semantic"
    # named as another model's: ignored, the lexical fallback (the paraphrase shares no word with the trace)
    assert reflect(conn, query, vec, params={"query_model": old}) == []
    words = "the refresh token broke again"
    rows = reflect(conn, words, embedder.embed_query(words), params={"query_model": old})
    assert "auth" in names(rows)
    ignored = f"ignored: the query was embedded by {old}, the active model is {active}"
    for r in rows:
        assert (
            r["why"]["match"] in ("lexical", "linked") and r["similarity"] is None and "model" not in r["why"]
        )
        assert r["why"]["query_embedding"] == f"{ignored} (lexical fallback over the descriptors)"
    # ignored whatever its dimension (as spark.retrieve), but never a zero vector; a blank text is nothing
    assert names(reflect(conn, words, "[1,0,0]", params={"query_model": old})) == names(rows)
    with pytest.raises(errors.InvalidParameterValue, match="zero vector"), conn.transaction():
        reflect(conn, words, "[0,0,0]", params={"query_model": old})
    with (
        pytest.raises(
            errors.InvalidParameterValue,
            match=re.escape(f"query_embedding is ignored, it was embedded by {old}"),
        ),
        conn.transaction(),
    ):
        reflect(conn, " ", vec, params={"query_model": old})


def test_python_reflection_during_a_model_switch_runs_lexically(conn: Conn, embedder: Embedder) -> None:
    """Advisor.reflect (SparkClient.reflect, `spark-pg reflect`) sent its vector without its model's name."""
    active = switch_model(conn)
    advisor = Advisor(conn, embedder, T)
    assert advisor.reflect("Repair login session expiry") == []  # was the auth failure, matched semantically
    found = advisor.reflect("the refresh token broke again")
    assert KEYS["auth"] in [r.key for r in found] and all(r.similarity is None for r in found)
    assert (
        found[0]
        .why["query_embedding"]
        .startswith(f"ignored: the query was embedded by {embedder.spec.name}, the active model is {active}")
    )
    vec = embedder.embed_query("Repair login session expiry")  # spark_pg.traces.reflect takes the model too
    assert reflect_py(conn, T, "Repair login session expiry", vec, query_model=embedder.spec.name) == []
    assert reflect_py(conn, T, "Repair login session expiry", vec, query_model=active)[0].match == "semantic"
    # the advisor's warnings: spark.advise_with_warnings passes params.query_model on and says so too
    warnings = [a for a in advisor.advise(*EDIT, "fix the auth token refresh") if a.warning]
    assert [w.key for w in warnings] == [KEYS["auth"]] and warnings[0].why["match"] == "lexical"
    assert (
        warnings[0]
        .why["query_embedding"]
        .startswith(f"ignored: the query was embedded by {embedder.spec.name}")
    )


def test_reflect_refuses_a_params_or_tenant_of_the_wrong_type_before_any_call(
    conn: Conn, embedder: Embedder
) -> None:
    """params=[1] was a builtins.TypeError (merged before it was checked); a tenant 5 selected no SQL
    function (psycopg's UndefinedFunction)."""
    five: Any = 5
    listed: Any = [1]
    raw: Any = b"auth"
    cases: list[tuple[Any, str]] = [
        (
            lambda: Advisor(conn, embedder, T).reflect("auth", params=listed),
            "params must be a mapping of str",
        ),
        (lambda: Advisor(conn, embedder, five).reflect("auth"), "tenant must be a string, got int"),
        (lambda: Advisor(conn, embedder, five).advise(*EDIT, "auth"), "tenant must be a string, got int"),
        (lambda: reflect_py(conn, five, "auth", None), "tenant must be a string, got int"),
        (lambda: reflect_py(conn, T, raw, None), "query text must be a string, got bytes"),
        (lambda: reflect_py(conn, T, "auth", None, params=listed), "params must be a mapping of str keys"),
        (lambda: reflect_py(conn, T, "auth", None, query_model=five), "query_model must be a model name"),
        # were UndefinedFunction (a list is sent as double precision[]) and a bare ValueError (2-D)
        (lambda: reflect_py(conn, T, "auth", "[0.1]"), "embedding must be a 1-D numpy array or a list"),
        (lambda: reflect_py(conn, T, "auth", np.ones((2, 384))), "embedding must be one vector"),
    ]
    for call, message in cases:
        with pytest.raises(InputError, match=re.escape(message)) as info:
            call()
        assert type(info.value) is InputError, message  # refused here, not by the server


# --- a match on words alone: on the cosine scale, and one word never warns ---------------------------------


def warned(
    conn: Conn, tenant: str, query: str, vec: Any, warning_min_score: float = WARNING_MIN_SCORE
) -> list[str]:
    """The keys spark.advise_with_warnings warns with."""
    rows = conn.execute(
        "SELECT key FROM spark.advise_with_warnings(%s, %s, %s, 5, warning_min_score => %s) WHERE warning",
        (tenant, query, vec, warning_min_score),
    ).fetchall()
    return [r[0] for r in rows]


def embed_now(conn: Conn, embedder: Embedder, tenant: str, key: str) -> None:
    """What the worker does for a deferred trace: its vector of the active model."""
    row = conn.execute(
        "SELECT text FROM spark.memories WHERE tenant = %s AND key = %s", (tenant, key)
    ).fetchone()
    assert row is not None
    conn.execute(
        """INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding)
           SELECT m.tenant, m.id, (SELECT id FROM spark.active_model()), m.created_at, %s
           FROM spark.memories m WHERE m.tenant = %s AND m.key = %s""",
        (embedder.embed_documents([row[0]])[0], tenant, key),
    )


def test_a_match_on_words_alone_is_scored_on_the_cosine_scale(conn: Conn, embedder: Embedder) -> None:
    """Relevance was coalesce(similarity, share of the query's words): a trace the worker had not embedded
    yet warned at 0.50 (2 of the query's 4 words), and no longer at 0.42 once embedded."""
    tenant, query = "words-scale", "add a cron job for the backup"
    trace = add_trace(
        conn, None, tenant, "Tune the nightly cron schedule", "failure", issue="jobs overlapped"
    )
    vec = embedder.embed_query(query)
    for embedding in (vec, None):  # not embedded yet, and the lexical fallback
        assert warned(conn, tenant, query, embedding) == []
        [row] = reflect(conn, query, embedding, tenant=tenant)
        assert row["keyword_score"] == pytest.approx(0.5) and row["score"] == pytest.approx(2 / 6, abs=1e-4)
        why = row["why"]
        assert (why["match"], why["keyword_hits"], why["query_words"]) == ("lexical", 2, 4)
        assert why["relevance_from"] == "matched words / (query words + 2): 2 / (4 + 2)"
        assert not from_row(row).warns(WARNING_MIN_SCORE)
    embed_now(conn, embedder, tenant, trace.key)
    [row] = reflect(conn, query, vec, tenant=tenant)
    assert row["why"]["match"] == "semantic" and 0.25 < row["similarity"] < WARNING_MIN_SCORE
    assert warned(conn, tenant, query, vec) == []  # the same answer before and after the worker


def test_a_one_word_query_never_warns_on_words_alone(conn: Conn, embedder: Embedder) -> None:
    """A one-word query scored 1.00 against any unembedded trace holding the word: it always warned."""
    tenant = "words-one"
    trace = add_trace(
        conn, None, tenant, "Upgrade the kafka client library", "failure", issue="rebalance loop"
    )
    for embedding in (embedder.embed_query("kafka"), None):
        assert warned(conn, tenant, "kafka", embedding) == []
        assert warned(conn, tenant, "kafka", embedding, warning_min_score=0) == []  # at any threshold
        # nor any other match on one of the query's words
        assert warned(conn, tenant, "kafka rollout", embedding, warning_min_score=0) == []
        [row] = reflect(conn, "kafka", embedding, tenant=tenant, params={"min_score": 0})
        assert row["key"] == trace.key and row["score"] == pytest.approx(1 / 3, abs=1e-4)
        assert row["why"]["keyword_hits"] == 1 and not from_row(row).warns(0)
        # two of them warn, as the rule says, and the CLI's rule (Reflection.warns) is the same
        query = "upgrade kafka"
        assert warned(conn, tenant, query, embedding) == [trace.key]
        [two] = reflect(conn, query, embedding, tenant=tenant)
        assert two["why"]["keyword_hits"] == LEXICAL_WARNING_MIN_WORDS
        assert from_row(two).warns(WARNING_MIN_SCORE)
    # spark.reflect shows the one-word match unless asked for more words
    assert reflect(conn, "kafka", None, tenant=tenant, params={"lexical_min_words": 2}) == []
    assert len(reflect(conn, "kafka client", None, tenant=tenant, params={"lexical_min_words": 2})) == 1
