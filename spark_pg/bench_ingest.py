"""`spark-pg bench ingest`: ingest throughput for short memory texts, embedding included.

Generates N distinct short texts (8-16 words, the size of typical agent insights), ingests them through
the same path as `spark-pg ingest` into a scratch tenant, reports memories/s, and deletes the tenant.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass

from spark_pg.client import SparkClient
from spark_pg.records import MemoryIn

_ACTIONS = (
    "Run",
    "Check",
    "Avoid",
    "Prefer",
    "Always use",
    "Never skip",
    "Document",
    "Cache",
    "Validate",
    "Log",
)
_OBJECTS = (
    "the database migration",
    "unit tests",
    "the deploy script",
    "API tokens",
    "the retry loop",
    "config files",
    "the CI cache",
    "error messages",
    "the auth middleware",
    "feature flags",
    "the physics timestep",
    "SQL queries",
    "the docker image",
    "rate limits",
    "the search index",
)
_CONTEXTS = (
    "before pushing to main",
    "when the build is red",
    "in staging first",
    "for every release",
    "after editing models.py",
    "when latency spikes",
    "on the payments service",
    "during code review",
    "before a long refactor",
    "when the user asks for speed",
    "in the nightly job",
    "on large inputs",
)
_REASONS = (
    "because it failed last week",
    "since it saves an hour",
    "to keep the history clean",
    "as the user prefers",
    "to avoid silent data loss",
    "so rollbacks stay cheap",
    "",
)


@dataclass(frozen=True)
class IngestBench:
    rows: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def short_texts(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for i in range(n):
        parts = [rng.choice(_ACTIONS), rng.choice(_OBJECTS), rng.choice(_CONTEXTS), rng.choice(_REASONS)]
        texts.append(" ".join(p for p in parts if p) + f" (note {i})")
    return texts


def run(client: SparkClient, n: int, *, progress: bool = True) -> IngestBench:
    tenant = f"bench-{uuid.uuid4().hex[:8]}"
    records = [MemoryIn(tenant=tenant, key=f"b{i}", text=t) for i, t in enumerate(short_texts(n))]
    client.embedder.embed_query("warm up")  # model load is not ingest time
    try:
        started = time.perf_counter()
        result = client.ingest_records(records, progress=progress, label="bench ingest")
        elapsed = time.perf_counter() - started
    finally:
        with client.conn.transaction():
            client.conn.execute("DELETE FROM spark.memories WHERE tenant = %s", (tenant,))
    return IngestBench(result.total, elapsed)
