"""The query cache the Python wrapper fills (spark.query_embeddings), and the arguments retrieve and explain
take: only the active model's vectors are cached, a cache write never waits for another transaction, a call
that writes nothing runs on a read-only connection, and a vector argument that is not one is an InputError."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from pgvector import Vector as PgVector
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from spark_pg import queries
from spark_pg.client import SparkClient
from spark_pg.config import Settings
from spark_pg.db import connect
from spark_pg.errors import InputError
from spark_pg.retrieve import explain, retrieve

NO_PACK = {"include_system": False}
QUERY = "fixing game physics that stutters"


@pytest.fixture
def client(db_url: str, model_settings: Settings, tenant: str) -> Iterator[SparkClient]:
    with SparkClient(model_settings, url=db_url) as c:
        c.add(
            tenant,
            "Game physics jitter came from a variable timestep; use a fixed 1/60 s step",
            key="physics",
        )
        c.add(tenant, "The user prefers dark mode in every editor", key="dark")
        yield c


def _foreign(dim: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    """A vector of the active model's dimension that stands for another model's (a unit vector)."""
    vec = np.zeros(dim, dtype=np.float32)
    vec[1] = 1.0
    return vec


def _cached(url: str, tenant: str, query: str) -> list[tuple[Any, ...]]:
    """The committed cache rows of a query text: (uses, embedding as a numpy array)."""
    with connect(url, autocommit=True) as c:
        rows = c.execute(
            "SELECT uses, embedding FROM spark.query_embeddings WHERE tenant = %s AND query_text = %s",
            (tenant, query),
        ).fetchall()
    return [(uses, np.asarray(vec.to_numpy() if isinstance(vec, PgVector) else vec)) for uses, vec in rows]


def test_a_vector_of_another_model_is_not_cached_under_the_active_one(
    client: SparkClient, db_url: str, tenant: str
) -> None:
    """A client still on the old model during a switch (params.query_model names it): spark.retrieve ignores
    its vector, and so does the cache; a later call without a vector runs lexically, comparing nothing."""
    foreign = _foreign(client.embedder.spec.dim)
    rows = retrieve(client.conn, tenant, QUERY, embedding=foreign, params={**NO_PACK, "query_model": "old"})
    assert rows and rows[0].why["query_embedding"].startswith("ignored: the query was embedded by old")
    assert _cached(db_url, tenant, QUERY) == []
    replay = retrieve(client.conn, tenant, QUERY, params=NO_PACK)
    assert replay and all(r.why["mode"] == "lexical" for r in replay)
    assert replay[0].why["query_embedding"] == "none (not in the query cache): lexical mode"
    # the advisor's statements share the cache write
    args = {
        "tenant": tenant,
        "query": QUERY,
        "embedding": foreign,
        "k": 3,
        "params": Jsonb({"query_model": "old"}),
        "cache": True,
        "session": None,
        "tool": "Bash",
        "family": None,
    }
    with client.conn.transaction():
        client.conn.execute(queries.ADVISE, args).fetchall()
    assert _cached(db_url, tenant, QUERY) == []
    # the active model's name, or none: cached
    right = client.embedder.embed_query(QUERY)
    name = client.embedder.spec.name
    retrieve(client.conn, tenant, QUERY, embedding=right, params={**NO_PACK, "query_model": name})
    [(uses, vec)] = _cached(db_url, tenant, QUERY)
    assert uses == 1 and np.allclose(vec, right)


def test_a_correct_call_repairs_a_cached_row(client: SparkClient, db_url: str, tenant: str) -> None:
    """A row holding another vector (another model's, cached before the check) is written over by the next
    call with the active model's vector, so a replay searches with what that call searched with."""
    foreign = _foreign(client.embedder.spec.dim)
    with connect(db_url, autocommit=True) as c:
        c.execute(
            """INSERT INTO spark.query_embeddings (tenant, model_id, query_hash, query_text, embedding)
               SELECT %(t)s, m.id, sha256(convert_to(%(q)s, 'UTF8')), %(q)s, %(v)s
               FROM spark.active_model() m""",
            {"t": tenant, "q": QUERY, "v": foreign},
        )
    right = client.embedder.embed_query(QUERY)
    retrieve(client.conn, tenant, QUERY, embedding=right, params=NO_PACK)
    [(uses, vec)] = _cached(db_url, tenant, QUERY)
    assert uses == 2 and np.allclose(vec, right)
    replay = retrieve(client.conn, tenant, QUERY, params=NO_PACK)
    assert replay[0].key == "physics" and replay[0].why["query_embedding"] == "cache"


def _waiting_refused(url: str) -> psycopg.Connection[Any]:
    """A connection on which a statement that waits for a lock fails after 2 s (55P03) instead of hanging."""
    conn = connect(url)
    conn.execute("SET lock_timeout = '2s'")
    conn.commit()
    return conn


def test_a_retrieval_never_waits_for_another_transactions_cache_write(
    client: SparkClient, db_url: str, tenant: str
) -> None:
    """Inside a caller's open transaction the cache row of a question is written and not committed: another
    session retrieving the same question does not wait for that commit (its own cache write is skipped, and
    with it the bump of uses)."""
    vec = client.embedder.embed_query(QUERY)
    with _waiting_refused(db_url) as first, _waiting_refused(db_url) as second:
        with first.transaction():
            retrieve(first, tenant, QUERY, embedding=vec, params=NO_PACK)
            rows = retrieve(second, tenant, QUERY, embedding=vec, params=NO_PACK)  # 55P03 if it waited
            assert rows[0].key == "physics"
            with second.transaction():  # and inside a transaction of its own
                assert retrieve(second, tenant, QUERY, embedding=vec, params=NO_PACK)[0].key == "physics"
        [(uses, _vec)] = _cached(db_url, tenant, QUERY)
        assert uses == 1


def test_two_transactions_retrieving_two_questions_in_opposite_orders_do_not_deadlock(
    client: SparkClient, db_url: str, tenant: str
) -> None:
    """A: q1 then q2, B: q2 then q1, both inside open transactions: each second call used to wait for the
    other transaction's cache row (a deadlock, 40P01, when both wait)."""
    q1, q2 = QUERY, "which editor theme does the user like"
    v1, v2 = client.embedder.embed_query(q1), client.embedder.embed_query(q2)
    with _waiting_refused(db_url) as a, _waiting_refused(db_url) as b, a.transaction(), b.transaction():
        retrieve(a, tenant, q1, embedding=v1, params=NO_PACK)
        retrieve(b, tenant, q2, embedding=v2, params=NO_PACK)
        retrieve(a, tenant, q2, embedding=v2, params=NO_PACK)  # 55P03 if it waited for b
        retrieve(b, tenant, q1, embedding=v1, params=NO_PACK)
    for query in (q1, q2):
        assert [uses for uses, _vec in _cached(db_url, tenant, query)] == [1]


def test_a_repeatable_read_retrieval_is_not_failed_by_a_cache_row_committed_since_its_snapshot(
    client: SparkClient, db_url: str, tenant: str
) -> None:
    """Under REPEATABLE READ the cache insert met the row another session committed after the snapshot: a
    serialization failure (40001) from a read. Such a transaction writes no cache row."""
    vec = client.embedder.embed_query(QUERY)
    with connect(db_url) as reader, connect(db_url) as other:
        reader.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with reader.transaction():
            reader.execute("SELECT 1").fetchall()  # the snapshot
            retrieve(other, tenant, QUERY, embedding=vec, params=NO_PACK)  # commits the cache row
            assert retrieve(reader, tenant, QUERY, embedding=vec, params=NO_PACK)[0].key == "physics"
            retrieve(reader, tenant, "a question of its own", embedding=vec, params=NO_PACK)
    assert [u for u, _ in _cached(db_url, tenant, QUERY)] == [1]
    assert _cached(db_url, tenant, "a question of its own") == []


def test_a_call_that_caches_nothing_runs_on_a_read_only_connection(
    client: SparkClient, db_url: str, tenant: str
) -> None:
    """cache=False, or no vector: the statement holds no INSERT, so a read-only transaction or a server that
    starts every transaction read-only (a standby) answers it; the cache write itself is still refused there
    (tests/test_retrieve_py.py)."""
    vec = client.embedder.embed_query(QUERY)
    with connect(db_url) as conn:
        conn.read_only = True
        assert retrieve(conn, tenant, QUERY, embedding=vec, params=NO_PACK, cache=False)[0].key == "physics"
        assert retrieve(conn, tenant, QUERY, params=NO_PACK)[0].why["mode"] == "lexical"
        assert explain(conn, tenant, QUERY, embedding=vec, params=NO_PACK)[0].key == "physics"
        # with the cache on (the default) too: nothing is cached on a connection set read_only
        assert retrieve(conn, tenant, QUERY, embedding=vec, params=NO_PACK)[0].key == "physics"
        conn.rollback()
    standby_like = make_conninfo(db_url, options="-c default_transaction_read_only=on")
    with connect(standby_like) as conn:
        assert retrieve(conn, tenant, QUERY, embedding=vec, params=NO_PACK, cache=False)[0].key == "physics"
        assert retrieve(conn, tenant, QUERY, params=NO_PACK)[0].key in ("physics", "dark")
        # the default call on a standby: refused with the write, answered without it
        assert retrieve(conn, tenant, QUERY, embedding=vec, params=NO_PACK)[0].key == "physics"
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert _cached(db_url, tenant, QUERY) == []


def test_an_embedding_is_a_vector_of_numbers_or_an_input_error_naming_it(
    client: SparkClient, tenant: str
) -> None:
    """A list or tuple of numbers, or a pgvector Vector, is sent as the numpy array would be (a list was sent
    as double precision[]: 42883, no such spark.retrieve); what is not one vector of finite numbers is an
    InputError naming the argument (a 2-D array was pgvector's bare ValueError)."""
    vec = client.embedder.embed_query(QUERY)
    expected = [
        (r.key, round(r.score, 5))
        for r in retrieve(client.conn, tenant, QUERY, embedding=vec, params=NO_PACK)
    ]
    assert expected[0][0] == "physics"
    for same in (vec.tolist(), tuple(vec.tolist()), PgVector(vec.tolist()), vec.astype(np.float64)):
        got = retrieve(client.conn, tenant, QUERY, embedding=same, params=NO_PACK)
        assert [(r.key, round(r.score, 5)) for r in got] == expected
        assert explain(client.conn, tenant, QUERY, embedding=same, params=NO_PACK)[0].key == "physics"
    dim = client.embedder.spec.dim
    nan = [0.1] * dim
    nan[3] = float("nan")
    bad: list[tuple[Any, str]] = [
        (
            np.ones((2, dim), dtype=np.float32),
            r"embedding must be one vector \(a 1-D array\), got an array of shape \(2, 384\)",
        ),
        (np.array(["a"] * dim), "embedding must hold numbers, got an array of <U1"),
        ("0.1, 0.2", "embedding must be a 1-D numpy array or a list or tuple of numbers, got str"),
        ({"a": 1.0}, "got dict"),
        ([0.1, "0.2"], "embedding must hold numbers, got str at index 1"),
        ([[0.1] * dim], "embedding must hold numbers, got list at index 0"),
        ([True] * dim, "embedding must hold numbers, got bool at index 0"),
        ([], "embedding must have 1 to 16000 dimensions, got 0"),
        (np.zeros(16_001, dtype=np.float32), "embedding must have 1 to 16000 dimensions, got 16001"),
        (nan, "embedding must hold finite float32 numbers, got nan at index 3"),
        ([1e39] * dim, "embedding must hold finite float32 numbers, got 1e[+]?39 at index 0"),
        ([10**400] * dim, "embedding must hold finite float32 numbers, got a huge integer"),
    ]
    for value, message in bad:
        for call in (retrieve, explain):
            with pytest.raises(InputError, match=message):
                call(client.conn, tenant, QUERY, embedding=value, params=NO_PACK)
    assert client.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_a_transaction_caching_many_questions_holds_at_most_1024_cache_locks(
    client: SparkClient, tenant: str
) -> None:
    """The cache write's advisory locks are per bucket of texts, held to the commit: a transaction caching
    thousands of questions cannot run the server's lock table out of memory (53200), and its own texts
    sharing a bucket are all cached."""
    vec = client.embedder.embed_query(QUERY)
    cache_only = queries._CACHE_QUERY_VECTOR.format(async_commit="") + "SELECT 1"  # the write alone: fast
    conn = client.conn
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany(
            cache_only,
            [
                {
                    "tenant": tenant,
                    "query": f"question {i}",
                    "embedding": vec,
                    "params": Jsonb({}),
                    "cache": True,
                }
                for i in range(1100)
            ],
        )
        held = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'"
        ).fetchone()
        assert held is not None and 0 < held[0] <= 1024  # a lock a text: 1100
        cached = conn.execute("SELECT count(*) FROM spark.query_embeddings WHERE tenant = %s", (tenant,))
        assert cached.fetchone() == (1100,)
