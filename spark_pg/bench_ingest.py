"""`spark-pg bench ingest`: ingest throughput for short memory texts, embedding included.

Generates N distinct short texts (8-16 words, the size of typical agent insights), ingests them through
the same path as `spark-pg ingest` into a scratch tenant, reports memories/s, and deletes the tenant.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from spark_pg import synthetic
from spark_pg.client import SparkClient
from spark_pg.records import MemoryIn


@dataclass(frozen=True)
class IngestBench:
    rows: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def run(client: SparkClient, n: int, *, progress: bool = True) -> IngestBench:
    tenant = f"bench-{uuid.uuid4().hex[:8]}"
    records = [MemoryIn(tenant=tenant, key=f"b{i}", text=t) for i, t in enumerate(synthetic.texts(n))]
    client.embedder.embed_query("warm up")  # model load is not ingest time
    try:
        started = time.perf_counter()
        result = client.ingest_records(records, progress=progress, label="bench ingest")
        elapsed = time.perf_counter() - started
    finally:
        with client.conn.transaction():
            client.conn.execute("DELETE FROM spark.memories WHERE tenant = %s", (tenant,))
    return IngestBench(result.total, elapsed)
