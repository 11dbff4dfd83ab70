"""The memories the fault scenarios write (synthetic texts, or a JSONL file of them for a child process)
and the counts they read back from the tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg

from spark_pg import synthetic
from spark_pg.faults.harness import Lab
from spark_pg.records import MemoryIn

QUERY = "review the database migration before pushing to main"


def records(tenant: str, prefix: str, n: int, seed: int) -> list[MemoryIn]:
    return [
        MemoryIn(tenant=tenant, key=f"{prefix}{i:05d}", text=text)
        for i, text in enumerate(synthetic.texts(n, seed=seed))
    ]


def write_jsonl(path: Path, rows: list[MemoryIn]) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps({"tenant": r.tenant, "key": r.key, "text": r.text}) + "\n")
    return path


def tenant_counts(conn: psycopg.Connection[Any], tenant: str) -> dict[str, int]:
    """memories, distinct keys, vectors, memories with a vector, most vectors of one memory, queued."""
    row = conn.execute(
        """SELECT (SELECT count(*) FROM spark.memories WHERE tenant = %(t)s),
                  (SELECT count(DISTINCT key) FROM spark.memories WHERE tenant = %(t)s),
                  (SELECT count(*) FROM spark.embeddings WHERE tenant = %(t)s),
                  (SELECT count(DISTINCT memory_id) FROM spark.embeddings WHERE tenant = %(t)s),
                  (SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM spark.embeddings
                     WHERE tenant = %(t)s GROUP BY memory_id) x),
                  (SELECT count(*) FROM spark.embed_queue WHERE tenant = %(t)s)""",
        {"t": tenant},
    ).fetchone()
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
        conn.rollback()
    assert row is not None
    names = ("memories", "keys", "vectors", "with_vector", "most_per_memory", "queued")
    return dict(zip(names, (int(v) for v in row), strict=True))


def counts(lab: Lab, tenant: str) -> dict[str, int]:
    with lab.connect() as conn:
        return tenant_counts(conn, tenant)
