"""The bench's Python-side hybrid baseline (spark_pg/bench_baseline.py) on a tiny hand-made corpus.

Four-dimensional vectors of a test model, so every rank is known: the baseline must stay inside the tenant
and the active model, return k results, put the memory both lists rank first on top, reach memories
without a vector through the keyword list, and fetch missing vectors in a third round trip only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import numpy as np
import pytest

from spark_pg.bench_baseline import RRF_K, PythonHybrid, mmr, rrf
from spark_pg.db import connect
from tests.conftest import temp_database

A, B, EMPTY = "acme", "other", "nobody"
QUERY = "payment webhook"
QVEC = np.array([1, 0, 0, 0], dtype=np.float32)

# tenant, key, text, vector of the active model (None: not embedded yet)
ROWS: list[tuple[str, str, str, list[float] | None]] = [
    (A, "both", "Retry the payment webhook when it times out", [1, 0, 0, 0]),
    (A, "sem", "Rotate TLS certificates every month", [0.95, 0.31, 0, 0]),
    (A, "kw", "The webhook handler must verify each payment signature", None),
    *[(A, f"filler{i}", f"Lint the frontend before review number {i}", [0, 1, 0.1 * i, 0]) for i in range(9)],
    (B, "foreign", "payment webhook payment webhook", [1, 0, 0, 0]),
]
STORE = """INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding)
           VALUES (%s, %s, %s, %s, %s)"""


@pytest.fixture(scope="module")
def url(server_url: str) -> Iterator[str]:
    with temp_database(server_url, install=True) as db:
        with connect(db) as conn:
            active = conn.execute("SELECT spark.register_model('test-4d', 4, 'mean', 128)").fetchone()
            other = conn.execute("SELECT spark.register_model('other-4d', 4, 'mean', 128)").fetchone()
            assert active is not None and other is not None
            for tenant, key, text, vector in ROWS:
                row = conn.execute(
                    """INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash)
                       VALUES (%s, %s, %s, %s, %s) RETURNING id, created_at""",
                    (tenant, key, text, text, hashlib.sha256(text.encode()).digest()),
                ).fetchone()
                assert row is not None
                if vector is not None:
                    conn.execute(
                        STORE, (tenant, row[0], active[0], row[1], np.array(vector, dtype=np.float32))
                    )
                # the inactive model's vectors put filler0 on the query: it must not count
                other_vector = [1, 0, 0, 0] if key == "filler0" else [0, 0, 0, 1]
                conn.execute(
                    STORE, (tenant, row[0], other[0], row[1], np.array(other_vector, dtype=np.float32))
                )
            conn.commit()
        yield db


@pytest.fixture
def hybrid(url: str) -> Iterator[PythonHybrid]:
    with connect(url, autocommit=True) as conn:
        yield PythonHybrid(conn)


def test_rrf_sums_reciprocal_ranks() -> None:
    scores = rrf([[1, 2, 3], [3, 4]], k=60)
    assert scores[1] == pytest.approx(1 / 61)
    assert scores[3] == pytest.approx(1 / 63 + 1 / 61)
    assert scores[4] == pytest.approx(1 / 62)
    assert max(scores, key=lambda i: scores[i]) == 3  # found by both lists


def test_mmr_trades_relevance_for_novelty() -> None:
    relevance = np.array([1.0, 0.99, 0.5])
    vectors = np.array([[1, 0], [1, 0], [0, 1]], dtype=np.float32)  # rows 0 and 1 are duplicates
    assert mmr(relevance, vectors, 2, 1.0) == [0, 1]
    assert mmr(relevance, vectors, 2, 0.5) == [0, 2]
    assert mmr(relevance, vectors, 5, 0.8) == [0, 1, 2]  # never more than there are
    assert mmr(relevance, np.zeros((3, 2), dtype=np.float32), 3, 0.5) == [0, 1, 2]  # no vectors: by relevance
    assert mmr(np.array([]), np.zeros((0, 2), dtype=np.float32), 3, 0.8) == []


def test_tenant_k_and_order(hybrid: PythonHybrid) -> None:
    hits = hybrid.search(A, QUERY, QVEC, k=8)
    keys = [h.key for h in hits]
    assert len(hits) == 8 and len(set(keys)) == 8
    assert "foreign" not in keys  # another tenant's exact match
    assert keys[0] == "both"
    top = hits[0]
    assert top.semantic_rank == 1 and top.keyword_rank is not None
    assert top.score == pytest.approx(1 / (RRF_K + 1) + 1 / (RRF_K + top.keyword_rank))
    assert top.score == max(h.score for h in hits)
    # only the active model's vectors: filler0 is the nearest of the other model, far in the active one
    by_key = {h.key: h for h in hybrid.search(A, "", QVEC, k=12)}
    assert by_key["sem"].semantic_rank == 2
    assert by_key["filler0"].semantic_rank is not None and by_key["filler0"].semantic_rank > 2


def test_keyword_only_memory_and_round_trips(hybrid: PythonHybrid) -> None:
    hits = hybrid.search(A, QUERY, QVEC, k=8)
    kw = next(h for h in hits if h.key == "kw")  # no vector: found by keyword alone
    assert kw.semantic_rank is None and kw.keyword_rank is not None
    assert hybrid.last.round_trips == 3  # its vector was looked for
    hybrid.search(A, "TLS certificates", QVEC, k=8)  # the keyword hit is in the vector list too
    assert hybrid.last.round_trips == 2
    assert hybrid.last.vector_ms > 0 and hybrid.last.keyword_ms > 0


def test_small_k_empty_tenant_and_no_lexemes(hybrid: PythonHybrid) -> None:
    assert len(hybrid.search(A, QUERY, QVEC, k=3)) == 3
    assert hybrid.search(EMPTY, QUERY, QVEC, k=8) == []
    only_vectors = hybrid.search(A, "the and of", QVEC, k=4)  # stop words only: the vector list alone
    # MMR at lambda 0.8: "sem" (cosine 0.95 to "both") yields to filler0, ranked third but novel
    assert [h.key for h in only_vectors][:2] == ["both", "filler0"]
    assert [h.semantic_rank for h in only_vectors][:2] == [1, 3]
    assert all(h.keyword_rank is None for h in only_vectors)
    assert len(hybrid.search(B, QUERY, QVEC, k=8)) == 1
