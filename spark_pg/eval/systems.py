"""The four systems under evaluation: spark.retrieve and three baselines, each one SQL statement.

Every system answers one question for one tenant, as of the question's time, with the ranked keys of
at most k memories. The baselines are deliberately plain so their numbers are easy to reproduce in psql:

- vector:  exact cosine kNN over the tenant's rows embedded by the active model (no index: the partial
           HNSW index is on ``embedding::vector(dim)``, which this ORDER BY does not use);
- keyword: an OR over the question's words, ``websearch_to_tsquery('english', 'w1 or w2 or ...')``,
           ranked by ``ts_rank_cd``;
- rrf:     Reciprocal Rank Fusion of the top 50 of each, score = sum of 1 / (60 + rank).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from spark_pg.embedding import Vector

SPARK_SQL = """
SELECT memory_id, key
FROM spark.retrieve(tenant => %(tenant)s, query_text => %(query)s, query_embedding => %(embedding)s,
                    k => %(k)s, params => %(params)s)
"""

# ties (many short turns share a ts_rank_cd) break on the key, which belongs to the data: by id they broke on
# the order the loader happened to insert in, so the same data loaded twice could score differently
VECTOR_SQL = """
SELECT m.id, m.key
FROM spark.embeddings e JOIN spark.memories m ON m.tenant = e.tenant AND m.id = e.memory_id
WHERE e.tenant = %(tenant)s AND e.model_id = %(model_id)s AND e.created_at <= %(as_of)s
ORDER BY e.embedding <=> %(embedding)s, m.key
LIMIT %(k)s
"""

KEYWORD_SQL = """
SELECT m.id, m.key
FROM spark.memories m, websearch_to_tsquery('english', %(words)s) AS q
WHERE m.tenant = %(tenant)s AND m.created_at <= %(as_of)s AND m.tsv @@ q
ORDER BY ts_rank_cd(m.tsv, q) DESC, m.key
LIMIT %(k)s
"""

RRF_SQL = """
WITH vector_pool AS (
    SELECT m.id, m.key, row_number() OVER (ORDER BY e.embedding <=> %(embedding)s, m.key) AS rank
    FROM spark.embeddings e JOIN spark.memories m ON m.tenant = e.tenant AND m.id = e.memory_id
    WHERE e.tenant = %(tenant)s AND e.model_id = %(model_id)s AND e.created_at <= %(as_of)s
    ORDER BY e.embedding <=> %(embedding)s, m.key
    LIMIT 50
), keyword_pool AS (
    SELECT m.id, m.key, row_number() OVER (ORDER BY ts_rank_cd(m.tsv, q) DESC, m.key) AS rank
    FROM spark.memories m, websearch_to_tsquery('english', %(words)s) AS q
    WHERE m.tenant = %(tenant)s AND m.created_at <= %(as_of)s AND m.tsv @@ q
    ORDER BY ts_rank_cd(m.tsv, q) DESC, m.key
    LIMIT 50
)
SELECT id, key
FROM (SELECT * FROM vector_pool UNION ALL SELECT * FROM keyword_pool) AS pools
GROUP BY id, key
ORDER BY sum(1.0 / (60 + rank)) DESC, key
LIMIT %(k)s
"""

FUNCTION_EXISTS = """
SELECT EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
               WHERE n.nspname = %s AND p.proname = %s)
"""

_WORD = re.compile(r"\w+")


def or_words(text: str) -> str:
    """The question's words joined by ' or ' (punctuation dropped), for websearch_to_tsquery."""
    return " or ".join(_WORD.findall(text))


@dataclass(frozen=True)
class System:
    name: str
    description: str
    sql: str
    requires: str | None = None  # a schema-qualified SQL function that must exist, e.g. spark.retrieve


SYSTEMS: tuple[System, ...] = (
    System("spark", "spark.retrieve (hybrid pools, fusion, gates, diversity)", SPARK_SQL, "spark.retrieve"),
    System("vector", "exact cosine kNN", VECTOR_SQL),
    System("keyword", "OR tsquery + ts_rank_cd", KEYWORD_SQL),
    System("rrf", "RRF of vector top 50 + keyword top 50 (k=60)", RRF_SQL),
)


@dataclass(frozen=True)
class Ask:
    """One question as every system receives it."""

    tenant: str
    text: str
    embedding: Vector
    k: int
    as_of: datetime
    model_id: int
    retrieve_params: Mapping[str, Any] = field(default_factory=dict)  # spark.retrieve's, besides as_of

    def params(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "query": self.text,
            "words": or_words(self.text),
            "embedding": self.embedding,
            "k": self.k,
            "as_of": self.as_of,
            "model_id": self.model_id,
            "params": Jsonb({**self.retrieve_params, "as_of": self.as_of.isoformat()}),
        }


def missing_function(conn: psycopg.Connection[Any], system: System) -> str | None:
    """The SQL function ``system`` needs if it is not in the database, else None."""
    if system.requires is None:
        return None
    schema, _, name = system.requires.rpartition(".")
    row = conn.execute(FUNCTION_EXISTS, (schema or "public", name)).fetchone()
    return None if row is not None and row[0] else system.requires


def run(cur: psycopg.Cursor[Any], system: System, params: Mapping[str, Any]) -> list[str]:
    """The keys of the memories ``system`` retrieves (params: ``Ask.params()``), best first."""
    cur.execute(system.sql, params)
    return [str(key) for _, key in cur.fetchall()]
