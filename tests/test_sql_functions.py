"""spark.* functions called as any SQL client would: edges and errors, table-driven."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors

from tests.conftest import rolled_back, temp_database

Conn = psycopg.Connection[Any]
DIM = 384


@pytest.fixture(scope="module")
def sql_db(server_url: str) -> Iterator[str]:
    """This module's own fresh install: no model registered, no seed pack, unless a test adds them."""
    with temp_database(server_url, install=True) as url:
        yield url


@pytest.fixture
def conn(sql_db: str) -> Iterator[Conn]:
    """Work rolled back at the end of each test."""
    with rolled_back(sql_db) as connection:
        yield connection


def vec(*head: float) -> str:
    values = list(head) + [0.0] * (DIM - len(head))
    return "[" + ",".join(str(v) for v in values) + "]"


@pytest.fixture
def model_id(conn: Conn) -> int:
    row = conn.execute("SELECT spark.register_model('test-model', %s, 'mean', 256)", (DIM,)).fetchone()
    assert row is not None
    return int(row[0])


def insert(conn: Conn, tenant: str, key: str, embedding: str | None, model_id: int | None) -> None:
    conn.execute(
        """WITH m AS (INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash)
                      VALUES (%(tenant)s, %(key)s, %(text)s, %(text)s, '\\x00')
                      RETURNING tenant, id, created_at)
           INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding)
           SELECT m.tenant, m.id, %(model_id)s, m.created_at, %(embedding)s::vector FROM m
           WHERE %(embedding)s::vector IS NOT NULL""",
        {"tenant": tenant, "key": key, "text": f"text {key}", "embedding": embedding, "model_id": model_id},
    )


@pytest.fixture
def corpus(conn: Conn, model_id: int, tenant: str) -> str:
    insert(conn, tenant, "near", vec(1, 0.1), model_id)
    insert(conn, tenant, "far", vec(0, 1), model_id)
    insert(conn, tenant, "pending", None, None)  # awaiting its embedding
    insert(conn, "other-tenant", "secret", vec(1, 0.1), model_id)
    insert(conn, "_system", "seed", vec(1, 0.3), model_id)
    return tenant


def search(
    conn: Conn, tenant: str | None, embedding: str | None, k: Any = 8, min_similarity: Any = -1
) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT key, system_default, similarity FROM spark.search_semantic("
        "tenant => %s, query_embedding => %s::vector, k => %s, min_similarity => %s)",
        (tenant, embedding, k, min_similarity),
    ).fetchall()


def test_search_orders_by_similarity_and_includes_the_cold_start_pack(conn: Conn, corpus: str) -> None:
    rows = search(conn, corpus, vec(1, 0.1))
    assert [r[0] for r in rows] == ["near", "seed", "far"]
    assert rows[0][2] == pytest.approx(1.0, abs=1e-5)
    assert [r[1] for r in rows] == [False, True, False]


def test_search_never_returns_another_tenants_memories(conn: Conn, corpus: str) -> None:
    assert "secret" not in {r[0] for r in search(conn, corpus, vec(1, 0.1), k=1000)}


def test_empty_tenant_gets_only_the_cold_start_pack(conn: Conn, corpus: str) -> None:
    assert search(conn, "nobody-here", vec(1, 0.1)) == [("seed", True, pytest.approx(0.9817, abs=1e-3))]


def test_k_limits_and_min_similarity_gates(conn: Conn, corpus: str) -> None:
    assert [r[0] for r in search(conn, corpus, vec(1, 0.1), k=1)] == ["near"]
    assert [r[0] for r in search(conn, corpus, vec(1, 0.1), min_similarity=0.95)] == ["near", "seed"]
    assert len(search(conn, corpus, vec(1, 0.1), k=1000)) == 3  # huge k: everything embedded, no error


def test_no_model_registered_returns_nothing(conn: Conn) -> None:
    assert search(conn, "anyone", vec(1)) == []
    with pytest.raises(errors.InvalidParameterValue, match="zero vector"), conn.transaction():
        search(conn, "anyone", vec())  # wrong whether or not a model is registered


@pytest.mark.parametrize(
    ("tenant", "embedding", "k", "min_sim", "error", "names"),
    [
        (None, vec(1), 8, -1, errors.NullValueNotAllowed, "tenant"),
        ("", vec(1), 8, -1, errors.InvalidParameterValue, "tenant"),
        ("x" * 129, vec(1), 8, -1, errors.InvalidParameterValue, "tenant"),
        ("t", None, 8, -1, errors.NullValueNotAllowed, "query_embedding"),
        ("t", vec(1), 0, -1, errors.InvalidParameterValue, "k"),
        ("t", vec(1), -5, -1, errors.InvalidParameterValue, "k"),
        ("t", vec(1), 1001, -1, errors.InvalidParameterValue, "k"),
        ("t", vec(1), None, -1, errors.NullValueNotAllowed, "k"),
        ("t", vec(1), 8, 1.5, errors.InvalidParameterValue, "min_similarity"),
        ("t", vec(1), 8, None, errors.NullValueNotAllowed, "min_similarity"),
        ("t", "[1,2,3]", 8, -1, errors.DataException, "query_embedding has 3 dimensions"),
        ("t", vec(), 8, -1, errors.InvalidParameterValue, "zero vector"),
    ],
)
def test_search_rejects_bad_input(
    conn: Conn,
    model_id: int,
    tenant: str | None,
    embedding: str | None,
    k: Any,
    min_sim: Any,
    error: type[Exception],
    names: str,
) -> None:
    with pytest.raises(error, match=names), conn.transaction():
        search(conn, tenant, embedding, k, min_sim)


def test_nan_vectors_are_refused_by_pgvector(conn: Conn, model_id: int) -> None:
    with pytest.raises(errors.DataException, match="NaN"), conn.transaction():
        search(conn, "t", "[NaN" + ",0" * (DIM - 1) + "]")


@pytest.mark.parametrize(
    ("args", "error", "names"),
    [
        (("", 384, "mean", 256), errors.InvalidParameterValue, "name"),
        (("m", 0, "mean", 256), errors.InvalidParameterValue, "dim"),
        (("m", 2001, "mean", 256), errors.InvalidParameterValue, "dim"),
        (("m", 384, "max", 256), errors.InvalidParameterValue, "pooling"),
        (("m", 384, "mean", 0), errors.InvalidParameterValue, "max_tokens"),
        ((None, 384, "mean", 256), errors.NullValueNotAllowed, "name must not be NULL"),
        (("m", None, "mean", 256), errors.NullValueNotAllowed, "dim must not be NULL"),
        (("m", 384, None, 256), errors.NullValueNotAllowed, "pooling must not be NULL"),
        (("m", 384, "mean", None), errors.NullValueNotAllowed, "max_tokens must not be NULL"),
    ],
)
def test_register_model_rejects_bad_input(
    conn: Conn, args: tuple[Any, ...], error: type[Exception], names: str
) -> None:
    with pytest.raises(error, match=names), conn.transaction():
        conn.execute("SELECT spark.register_model(%s, %s, %s, %s)", args)


def test_register_model_is_idempotent_and_guards_dimension(conn: Conn, model_id: int) -> None:
    again = conn.execute("SELECT spark.register_model('test-model', %s, 'mean', 256)", (DIM,)).fetchone()
    assert again == (model_id,)
    with pytest.raises(errors.DataException, match="registered with dim 384"), conn.transaction():
        conn.execute("SELECT spark.register_model('test-model', 768, 'mean', 256)")
    # the same name with other truncation or prefixes would embed unlike its stored vectors
    for other in ("512, '', ''", "256, 'query: ', ''", "256, '', 'passage: '"):
        with pytest.raises(errors.DataException, match="registered with max_tokens 256"), conn.transaction():
            conn.execute(f"SELECT spark.register_model('test-model', {DIM}, 'mean', {other})")
    assert conn.execute(
        f"SELECT spark.register_model('test-model', {DIM}, 'mean', 256, NULL, '')"
    ).fetchone() == (model_id,)  # a NULL prefix is the empty one
    index = conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE indexname = %s", (f"embeddings_hnsw_m{model_id}",)
    ).fetchone()
    assert index is not None and "hnsw" in index[0] and f"model_id = {model_id}" in index[0]
    active = conn.execute("SELECT name, dim FROM spark.active_model()").fetchone()
    assert active == ("test-model", DIM)


def test_ensure_model_index_rejects_unknown_model(conn: Conn) -> None:
    with pytest.raises(errors.InvalidParameterValue, match="model_id 32000"), conn.transaction():
        conn.execute("SELECT spark.ensure_model_index(32000::smallint)")
    # a plain integer literal, as psql users write it, and one past a smallint: the same refusal, no
    # 42883 or 22003
    for model_id in ("40000", "-1", "2147483647"):
        unknown = pytest.raises(errors.InvalidParameterValue, match=f"model_id {model_id} is not")
        with unknown, conn.transaction():
            conn.execute(f"SELECT spark.ensure_model_index({model_id})")
    with pytest.raises(errors.NullValueNotAllowed, match="model_id"), conn.transaction():
        conn.execute("SELECT spark.ensure_model_index(NULL)")


def test_ensure_model_index_takes_a_plain_integer(conn: Conn, model_id: int) -> None:
    row = conn.execute("SELECT spark.ensure_model_index(model_id => %s::integer)", (model_id,)).fetchone()
    assert row == (f"embeddings_hnsw_m{model_id}",)


def test_filtered_vector_search_uses_the_hnsw_index_on_a_large_table(conn: Conn, model_id: int) -> None:
    # (a small tenant may get an exact scan instead, which is cheaper and exact)
    conn.execute(
        """
        WITH m AS (
            INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash)
            SELECT CASE WHEN g %% 10 = 0 THEN 'small' ELSE 'big' END, 'k' || g, 'x', 'x', '\\x00'
            FROM generate_series(1, 2000) g
            RETURNING tenant, id, created_at)
        INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding)
        SELECT m.tenant, m.id, %s, m.created_at,
               (SELECT array_agg(random())::vector FROM generate_series(1, %s) WHERE m.id > 0)
        FROM m""",
        (model_id, DIM),
    )
    conn.execute("ANALYZE spark.embeddings")
    plan = "\n".join(
        r[0]
        for r in conn.execute(
            f"""
        EXPLAIN SELECT memory_id FROM spark.embeddings
        WHERE model_id = {model_id} AND tenant IN ('big', '_system')
        ORDER BY embedding::vector({DIM}) <=> %s::vector({DIM}) LIMIT 10""",
            (vec(1),),
        ).fetchall()
    )
    assert f"embeddings_hnsw_m{model_id}" in plan, plan
