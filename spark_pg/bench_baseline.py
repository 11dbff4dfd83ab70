"""The common Python-side hybrid search, as a baseline for `spark-pg bench` (never used by the product).

What most agent-memory libraries do over PostgreSQL + pgvector, written plainly and run on spark_pg's own
tables, model and indexes so the comparison with ``spark.retrieve`` is about the approach, not the data:

1. **Vector query** (round trip 1): the ``fetch_k`` nearest vectors of the active model among the tenant's
   rows of ``spark.embeddings`` (``ORDER BY embedding <=> q LIMIT fetch_k``), joined to ``spark.memories``
   for key and text, the vectors returned with them. The cast ``embedding::vector(dim)`` and the model id
   are written as literals, exactly as the product's partial HNSW indexes are defined, and each statement
   is sent unprepared (planned with its values), so the planner can pick the tenant's own HNSW index, the
   model's shared one or an exact scan, the same paths the product takes. The session uses the product's
   default ``hnsw.ef_search`` (100) and ``hnsw.iterative_scan = relaxed_order``, without which a
   tenant-filtered walk of the shared graph returns too few rows.
2. **Keyword query** (round trip 2): ``ts_rank_cd`` of the memories' ``tsv`` against an OR ``tsquery`` of
   the query's English lexemes (the lexemes ``spark._or_tsquery`` uses, built inline), ``WHERE tenant = $1
   AND tsv @@ q ORDER BY rank DESC LIMIT fetch_k``. It uses whatever the planner picks among the ordinary
   indexes (the GIN index on ``tsv``, the tenant B-trees), not the product's tenant-aware lexeme index,
   which is part of what spark_pg adds.
3. **Vector fetch** (round trip 3, only when needed): the vectors of keyword-only candidates.
4. **In Python with numpy**: Reciprocal Rank Fusion of the two ranked lists (score = sum over the lists
   that found a memory of 1 / (rrf_k + rank), ranks from 1, rrf_k = 60), then MMR over the fused candidates
   (relevance = RRF score divided by the best one; lambda 0.8; similarity = cosine of the vectors; a
   candidate without a vector counts as similar to nothing), keeping the top k.

No gates, recency, outcomes, triggers, pinned items or cold-start pack: only the tenant's own rows. Every
statement runs on the caller's connection (the bench opens it in autocommit, one round trip per statement).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg

from spark_pg.embedding import Vector
from spark_pg.errors import InputError

FETCH_K = 40  # the product's default pool_semantic
RRF_K = 60
MMR_LAMBDA = 0.8
EF_SEARCH = 100  # the product's default ef_search

ACTIVE_MODEL = "SELECT id, dim FROM spark.embedding_models WHERE active"
SESSION = """SELECT set_config('hnsw.ef_search', %(ef)s, false),
                 set_config('hnsw.iterative_scan', 'relaxed_order', false)"""
VECTOR_QUERY = """
SELECT s.memory_id, m.key, m.text, s.dist, s.embedding
FROM (SELECT e.memory_id, e.embedding, e.embedding::vector({dim}) <=> %(q)s::vector({dim}) AS dist
      FROM spark.embeddings e
      WHERE e.tenant = %(tenant)s AND e.model_id = {model_id}
      ORDER BY e.embedding::vector({dim}) <=> %(q)s::vector({dim})
      LIMIT %(n)s) s
JOIN spark.memories m ON m.tenant = %(tenant)s AND m.id = s.memory_id
ORDER BY s.dist, s.memory_id
"""
KEYWORD_QUERY = r"""
WITH q AS (  -- an OR of the lexemes, each a tsquery literal taken as it is (as spark._or_tsquery)
    SELECT string_agg('''' || replace(replace(lexeme, E'\\', E'\\\\'), '''', '''''') || '''', ' | ')::tsquery
               AS tsq
    FROM unnest(to_tsvector('english', %(text)s)))
SELECT m.id, m.key, m.text, ts_rank_cd(m.tsv, q.tsq) AS rank
FROM spark.memories m, q
WHERE m.tenant = %(tenant)s AND m.tsv @@ q.tsq
ORDER BY rank DESC, m.id
LIMIT %(n)s
"""
FETCH_VECTORS = """
SELECT e.memory_id, e.embedding FROM spark.embeddings e
WHERE e.tenant = %(tenant)s AND e.model_id = {model_id} AND e.memory_id = ANY(%(ids)s)
"""


@dataclass(frozen=True)
class Hit:
    """One result of the baseline: the memory, its RRF score and its rank in each list (1-based)."""

    memory_id: int
    key: str
    text: str
    score: float
    semantic_rank: int | None
    keyword_rank: int | None


@dataclass
class Phases:
    """Wall time of the last search's parts, in milliseconds, and its round trips."""

    vector_ms: float = 0.0
    keyword_ms: float = 0.0
    fetch_ms: float = 0.0
    python_ms: float = 0.0
    round_trips: int = 0


def _array(value: Any) -> Vector:
    """A stored vector as float32 numpy (pgvector's loaders return its ``Vector`` class)."""
    if isinstance(value, np.ndarray):
        return value.astype(np.float32, copy=False)
    array: Vector = value.to_numpy()
    return array


def rrf(ranked: list[list[int]], k: int = RRF_K) -> dict[int, float]:
    """Reciprocal Rank Fusion: per id, the sum over the lists holding it of 1 / (k + rank), rank from 1."""
    scores: dict[int, float] = {}
    for ids in ranked:
        for rank, memory_id in enumerate(ids, 1):
            scores[memory_id] = scores.get(memory_id, 0.0) + 1.0 / (k + rank)
    return scores


def mmr(
    relevance: npt.NDArray[np.float64], vectors: npt.NDArray[np.float32], k: int, lam: float
) -> list[int]:
    """Indices of the k rows picked greedily by lam * relevance - (1 - lam) * max cosine to those picked.

    ``relevance`` is scaled by its maximum first; rows of ``vectors`` that are all zero (no vector) have
    similarity 0 with everything. Ties go to the lower index, so callers pass rows in relevance order.
    """
    n = len(relevance)
    if n == 0 or k <= 0:
        return []
    top = float(relevance.max())
    rel = relevance / top if top > 0 else relevance
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    max_sim = np.zeros(n)
    picked: list[int] = []
    free = np.ones(n, dtype=bool)
    for _ in range(min(k, n)):
        value = np.where(free, lam * rel - (1 - lam) * max_sim, -np.inf)
        i = int(np.argmax(value))
        picked.append(i)
        free[i] = False
        max_sim = np.maximum(max_sim, unit @ unit[i])
    return picked


@dataclass
class PythonHybrid:
    """The baseline bound to one connection: the active model is looked up and the session set up once."""

    conn: psycopg.Connection[Any]
    fetch_k: int = FETCH_K
    rrf_k: int = RRF_K
    mmr_lambda: float = MMR_LAMBDA
    ef_search: int = EF_SEARCH
    last: Phases = field(default_factory=Phases)

    def __post_init__(self) -> None:
        row = self.conn.execute(ACTIVE_MODEL).fetchone()
        if row is None:
            raise InputError("no active embedding model: the baseline needs stored vectors")
        self.model_id, self.dim = int(row[0]), int(row[1])
        self.conn.execute(SESSION, {"ef": str(self.ef_search)})
        self._vector_sql = VECTOR_QUERY.format(dim=self.dim, model_id=self.model_id)
        self._fetch_sql = FETCH_VECTORS.format(model_id=self.model_id)

    def search(self, tenant: str, query_text: str, query_vector: Vector, k: int = 8) -> list[Hit]:
        """The top k memories of ``tenant`` for the query: two or three statements, then fusion in Python."""
        phases = Phases()
        t0 = time.perf_counter()
        # binary results: vectors arrive as float32 arrays without parsing text
        with self.conn.cursor(binary=True) as cur:
            cur.execute(
                self._vector_sql, {"q": query_vector, "tenant": tenant, "n": self.fetch_k}, prepare=False
            )
            semantic = cur.fetchall()
            t1 = time.perf_counter()
            cur.execute(
                KEYWORD_QUERY, {"text": query_text, "tenant": tenant, "n": self.fetch_k}, prepare=False
            )
            keyword = cur.fetchall()
            t2 = time.perf_counter()
            phases.round_trips = 2
            vectors = {int(r[0]): _array(r[4]) for r in semantic}
            missing = [int(r[0]) for r in keyword if int(r[0]) not in vectors]
            if missing:
                cur.execute(self._fetch_sql, {"tenant": tenant, "ids": missing}, prepare=False)
                vectors.update((int(r[0]), _array(r[1])) for r in cur.fetchall())
                phases.round_trips = 3
            t3 = time.perf_counter()
        sem_ids = [int(r[0]) for r in semantic]
        kw_ids = [int(r[0]) for r in keyword]
        fused = rrf([sem_ids, kw_ids], self.rrf_k)
        order = sorted(fused, key=lambda i: (-fused[i], i))
        relevance = np.array([fused[i] for i in order], dtype=np.float64)
        matrix = np.zeros((len(order), self.dim), dtype=np.float32)
        for row, memory_id in enumerate(order):
            vector = vectors.get(memory_id)
            if vector is not None:
                matrix[row] = vector
        picked = mmr(relevance, matrix, k, self.mmr_lambda)
        info = {int(r[0]): (r[1], r[2]) for r in keyword} | {int(r[0]): (r[1], r[2]) for r in semantic}
        sem_rank = {m: n for n, m in enumerate(sem_ids, 1)}
        kw_rank = {m: n for n, m in enumerate(kw_ids, 1)}
        hits = [
            Hit(
                memory_id=order[i],
                key=info[order[i]][0],
                text=info[order[i]][1],
                score=fused[order[i]],
                semantic_rank=sem_rank.get(order[i]),
                keyword_rank=kw_rank.get(order[i]),
            )
            for i in picked
        ]
        t4 = time.perf_counter()
        phases.vector_ms = (t1 - t0) * 1000
        phases.keyword_ms = (t2 - t1) * 1000
        phases.fetch_ms = (t3 - t2) * 1000
        phases.python_ms = (t4 - t3) * 1000
        self.last = phases
        return hits
