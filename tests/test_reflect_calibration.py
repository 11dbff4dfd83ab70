"""The scale of a match on words alone in spark.reflect (sql/070-reflect.sql, docs/traces.md): measured
against the cosine similarity of the real model on 30 trace descriptors and 64 task queries.

A trace the worker has not embedded yet (or any trace, without a query vector) is matched on its words, and
its relevance is compared with the same min_score and warning_min_score as a cosine similarity. This module
checks that the relevance spark.reflect gives it, matched words / (query words + 2), is on the cosine
scale: nearer the cosine of the same pair than the plain share of the query's words, the best of its family,
and never a warning for one matched word. ``pytest -s`` prints the figures docs/traces.md quotes."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from spark_pg.embedding import Embedder
from spark_pg.traces import add_trace

Conn = psycopg.Connection[Any]
WARN = 0.45  # spark.advise_with_warnings' default warning_min_score
PAD = 2  # spark.reflect's word_pad

TRACES = [
    ("Tune the nightly cron schedule", "failure", "jobs overlapped", "infra/cron.yaml"),
    ("Fix auth token refresh", "failure", "refresh token reused after rotation", "src/auth/refresh.py"),
    ("Add pagination to the orders API", "success", "", "api/orders.py"),
    ("Speed up the CI pipeline cache", "success", "", ".github/workflows/ci.yml"),
    ("Fix flaky websocket reconnect test", "failure", "race on server shutdown", "tests/test_ws.py"),
    (
        "Migrate the users table to add an email index",
        "failure",
        "lock timeout on a big table",
        "alembic/0042.py",
    ),
    ("Upgrade the kafka client library", "failure", "consumer group rebalanced in a loop", "pom.xml"),
    (
        "Deploy the payments service to staging",
        "failure",
        "missing secret in the helm chart",
        "deploy/pay.yaml",
    ),
    ("Add a retry policy to the HTTP client", "success", "", "src/http/client.py"),
    ("Rename the billing module", "success", "", "src/billing/__init__.py"),
    (
        "Speed up the search query on products",
        "failure",
        "the planner ignored the trigram index",
        "sql/search.sql",
    ),
    ("Set up log rotation for the api server", "success", "", "ops/logrotate.conf"),
    ("Write unit tests for the date parser", "success", "", "tests/test_dates.py"),
    ("Fix memory leak in the image resizer", "failure", "buffers kept by the cache", "src/img/resize.py"),
    ("Add dark mode to the settings page", "success", "", "web/settings.tsx"),
    ("Back up the postgres database to s3", "failure", "the dump ran out of disk", "ops/backup.sh"),
    ("Bump the node version in docker", "failure", "native module failed to build", "Dockerfile"),
    ("Refactor the email sender into a queue worker", "success", "", "src/mail/worker.py"),
    (
        "Add rate limiting to the login endpoint",
        "failure",
        "limits shared across tenants",
        "src/auth/login.py",
    ),
    (
        "Fix timezone bug in the report export",
        "failure",
        "naive datetimes compared to aware ones",
        "src/export.py",
    ),
    ("Cache user profiles in redis", "success", "", "src/users/cache.py"),
    (
        "Configure TLS certificates for the ingress",
        "failure",
        "cert-manager challenge failed",
        "k8s/ingress.yaml",
    ),
    ("Remove the deprecated v1 endpoints", "success", "", "api/v1.py"),
    ("Parallelise the test suite", "failure", "tests shared one database", "pytest.ini"),
    ("Add a health check to the worker", "success", "", "src/worker/health.py"),
    ("Schedule a weekly cleanup job for old sessions", "success", "", "src/jobs/cleanup.py"),
    ("Fix the broken build on the main branch", "failure", "a stale lock file", "package-lock.json"),
    ("Add an index to the orders table", "success", "", "alembic/0051.py"),
    ("Stream large file uploads to s3", "failure", "multipart upload left parts behind", "src/upload.py"),
    ("Translate the onboarding emails", "success", "", "locales/fr.json"),
]
QUERIES = [
    "add a cron job for the backup", "kafka", "cron", "token", "fix the auth token refresh again",
    "repair login session expiry", "paginate the orders endpoint", "add pagination to invoices",
    "cache the CI dependencies", "the websocket test is flaky", "add an index to the users table",
    "migrate the email column", "upgrade kafka", "kafka consumer lag", "deploy payments",
    "deploy the search service", "retry failed http requests", "rename the invoices module",
    "speed up product search", "rotate the nginx logs", "test the date parser", "memory leak",
    "fix a memory leak in the worker", "dark mode", "back up the database", "postgres backup to s3",
    "upgrade node in the dockerfile", "send emails from a queue", "rate limit the api",
    "timezone bug", "export reports as csv", "cache sessions in redis", "renew TLS certificates",
    "remove old endpoints", "run tests in parallel", "health check endpoint", "clean up old sessions",
    "the build is broken", "add an index", "upload files to s3", "translate the app to german",
    "fix the test", "add a feature flag to the settings page", "schedule a job", "orders api",
    "database", "fix login", "speed up the build", "add tests for the parser", "refactor the worker",
    "configure the ingress", "the api server is slow", "users table",
    "write a migration for the orders table", "s3", "docker", "redis", "email", "nightly job failed",
    "reports", "add retries to the kafka consumer",
    "debug a flaky test on ci", "move billing code into its own package", "lock timeout on migration",
]  # fmt: skip


def pairs(conn: Conn, embedder: Embedder, tenant: str) -> list[dict[str, Any]]:
    """Every (query, trace) pair sharing a word: matched words, query words, the relevance spark.reflect
    gives the match on words alone, and the cosine similarity of the two vectors."""
    for intent, outcome, issue, files in TRACES:
        add_trace(conn, embedder, tenant, intent, outcome, issue=issue or None, files=files)
    out = []
    with conn.cursor(row_factory=dict_row) as cur:
        for query in QUERIES:
            vec = embedder.embed_query(query)
            cosine = {
                r["key"]: r["cos"]
                for r in cur.execute(
                    """SELECT m.key, 1 - (e.embedding <=> %s) AS cos FROM spark.memories m
                       JOIN spark.embeddings e ON e.tenant = m.tenant AND e.memory_id = m.id
                       WHERE m.tenant = %s""",
                    (vec, tenant),
                ).fetchall()
            }
            words = cur.execute(  # no query vector: every trace sharing a word, matched on its words
                "SELECT key, score, why FROM spark.reflect(%s, %s, NULL, 100, %s)",
                (tenant, query, Jsonb({"min_score": 0, "pool": 100, "recency_floor": 1})),
            ).fetchall()
            for r in words:
                hits, n = r["why"]["keyword_hits"], r["why"]["query_words"]
                out.append({"hits": hits, "n": n, "relevance": r["score"], "cos": cosine[r["key"]]})
    return out


def rmse(values: list[tuple[float, float]]) -> float:
    return float((sum((a - b) ** 2 for a, b in values) / len(values)) ** 0.5)


def disagreements(values: list[tuple[float, float]]) -> tuple[int, int]:
    """(warns on words but not by cosine, warns by cosine but not on words) at WARN."""
    return (
        sum(1 for a, c in values if a >= WARN > c),
        sum(1 for a, c in values if c >= WARN > a),
    )


def test_a_match_on_words_alone_is_scored_on_the_cosine_scale(
    conn: Conn, embedder: Embedder, tenant: str
) -> None:
    found = pairs(conn, embedder, tenant)
    assert all(p["relevance"] == pytest.approx(p["hits"] / (p["n"] + PAD), abs=1e-6) for p in found)
    share = [(p["hits"] / p["n"], p["cos"]) for p in found]
    word = [(p["relevance"], p["cos"]) for p in found]
    family = {pad: rmse([(p["hits"] / (p["n"] + pad), p["cos"]) for p in found]) for pad in (1, 1.5, 2, 3, 4)}
    print(f"\n{len(found)} pairs sharing a word, of {len(TRACES) * len(QUERIES)}")
    for name, values in (("share", share), (f"matched / (words + {PAD})", word)):
        false, missed = disagreements(values)
        print(f"{name}: rmse {rmse(values):.3f}, warns without the cosine {false}, not with it {missed}")
    print("rmse by pad: " + ", ".join(f"{pad}: {e:.3f}" for pad, e in family.items()))
    one = [p for p in found if p["hits"] == 1]
    print(f"one matched word: {len(one)} pairs, cosine >= {WARN} in {sum(p['cos'] >= WARN for p in one)}")
    # nearer the cosine than the share, the best pad of its family, fewer warnings the cosine would not give
    assert rmse(word) < rmse(share) and min(family, key=family.__getitem__) == PAD
    assert disagreements(word)[0] < disagreements(share)[0]
    # one matched word is at most 1/3: never a warning at the default threshold (and the rule refuses it
    # at any threshold: tests/test_reflect.py)
    assert one and max(p["relevance"] for p in one) <= 1 / 3 + 1e-6
