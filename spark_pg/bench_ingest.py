"""`spark-pg bench ingest`: ingest throughput for short memory texts, embedding included.

Generates N distinct short texts (8-18 words, the size of typical agent insights), ingests them through
the same path as `spark-pg ingest` into a scratch tenant, reports memories/s, and deletes the tenant.
:func:`timed_ingest` is that measurement; `spark-pg bench scale` runs it at each corpus size too.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg

from spark_pg import synthetic
from spark_pg.client import SparkClient
from spark_pg.embedding import Embedder
from spark_pg.ingest import ingest, refresh_after_write
from spark_pg.records import MemoryIn


@dataclass(frozen=True)
class IngestBench:
    rows: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def timed_ingest(
    conn: psycopg.Connection[Any],
    texts: list[str],
    embedder: Embedder | None,
    *,
    batch_size: int = 16,
    chunk_rows: int = 500,
    progress: bool = False,
    label: str = "bench ingest",
) -> IngestBench:
    """Ingest ``texts`` into a new scratch tenant through the product path (``embedder`` None: deferred
    embedding), timed, then delete the tenant (its memories, queue rows, statistics and vector index)."""
    tenant = f"bench-{uuid.uuid4().hex[:8]}"
    records = [MemoryIn(tenant=tenant, key=f"b{i}", text=t) for i, t in enumerate(texts)]
    try:
        started = time.perf_counter()
        result = ingest(
            conn,
            records,
            embedder,
            batch_size=batch_size,
            chunk_rows=chunk_rows,
            progress=progress,
            label=label,
        )
        elapsed = time.perf_counter() - started
    finally:
        with conn.transaction():
            conn.execute("DELETE FROM spark.memories WHERE tenant = %s", (tenant,))
        # an emptied tenant's statistics go, and the per-tenant HNSW index its vectors got past
        # index_min_vectors with them, dropped CONCURRENTLY (a plain delete of the statistics row left the
        # index behind)
        refresh_after_write(conn, [tenant])
    return IngestBench(result.total, elapsed)


def run(client: SparkClient, n: int, *, progress: bool = True) -> IngestBench:
    client.embedder.embed_query("warm up")  # model load is not ingest time
    return timed_ingest(
        client.conn,
        synthetic.texts(n),
        client.embedder,
        batch_size=client.settings.get_int("embedding.batch_size"),
        chunk_rows=client.settings.get_int("ingest.chunk_rows"),
        progress=progress,
    )
