"""The Python API: one object that knows the settings, the database and the model.

>>> from spark_pg.client import SparkClient
>>> client = SparkClient()            # settings from the config file and SPARK_PG_* variables
>>> client.init()                     # migrate + apply sql/ (idempotent)
>>> client.add("alice", "Prefer pytest fixtures over setUp methods", kind="preference")
>>> client.search("alice", "writing tests")
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg

from spark_pg import queries, schema
from spark_pg.config import Settings, load_settings
from spark_pg.db import connect, database_url
from spark_pg.embedding import Embedder, load_embedder
from spark_pg.errors import InputError
from spark_pg.ingest import IngestResult, ingest
from spark_pg.records import MemoryIn, read_file, validate_row

SYSTEM_TENANT = "_system"


@dataclass(frozen=True)
class SearchHit:
    memory_id: int
    system_default: bool
    key: str
    text: str
    kind: str
    category: str
    source: str
    similarity: float

    @property
    def reason(self) -> str:
        origin = "cold-start pack (system default)" if self.system_default else f"own {self.kind}"
        return f"semantic similarity {self.similarity:.2f}; {origin}, category {self.category}"


class SparkClient:
    def __init__(self, settings: Settings | None = None, url: str | None = None) -> None:
        self.settings = settings or load_settings()
        self._url = url
        self._conn: psycopg.Connection[Any] | None = None

    @property
    def url(self) -> str:
        if self._url is None:
            self._url = database_url(self.settings)
        return self._url

    @property
    def conn(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = connect(
                self.url, statement_timeout_ms=self.settings.get_int("database.statement_timeout_ms")
            )
            schema.require_current(self._conn)
            self._conn.rollback()
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> SparkClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def init(self) -> str:
        """Upgrade the schema to head and re-apply sql/. Safe to run any number of times."""
        self.close()
        return schema.install(self.url)

    @property
    def embedder(self) -> Embedder:
        return load_embedder(self.settings)

    def ingest_records(
        self, records: list[MemoryIn], *, progress: bool = False, label: str = "ingest"
    ) -> IngestResult:
        return ingest(
            self.conn,
            records,
            self.embedder,
            batch_size=self.settings.get_int("embedding.batch_size"),
            chunk_rows=self.settings.get_int("ingest.chunk_rows"),
            progress=progress,
            label=label,
        )

    def add(self, tenant: str, text: str, **fields: Any) -> IngestResult:
        """Store one memory (fields as in an ingest file: key, kind, category, source, importance, ...)."""
        record = validate_row({"tenant": tenant, "text": text, **fields}, "arguments", 1)
        return self.ingest_records([record])

    def ingest_file(self, path: Path, tenant: str | None = None, *, progress: bool = False) -> IngestResult:
        records = read_file(path, tenant)
        return self.ingest_records(records, progress=progress, label=path.name)

    def load_seed_pack(self, *, progress: bool = False) -> IngestResult:
        """Load (or refresh) the cold-start pack into the shared system tenant."""
        pack = resources.files("spark_pg") / "data" / "seed_pack.yaml"
        with resources.as_file(pack) as path:
            records = read_file(path, SYSTEM_TENANT)
        seeded = [replace(r, kind="seed", source="system_default") for r in records]
        return self.ingest_records(seeded, progress=progress, label="cold-start pack")

    def search(
        self, tenant: str, query: str, k: int | None = None, min_similarity: float | None = None
    ) -> list[SearchHit]:
        """Plain semantic search over the tenant's memories and the cold-start pack."""
        if not query or not query.strip():
            raise InputError("query must not be empty")
        vector = self.embedder.embed_query(query)
        params = {
            "tenant": tenant,
            "embedding": vector,
            "k": self.settings.get_int("retrieval.k") if k is None else k,
            "min_similarity": self.settings.get_float("retrieval.min_similarity")
            if min_similarity is None
            else min_similarity,
        }
        with self.conn.transaction():
            rows = self.conn.execute(queries.SEARCH_SEMANTIC, params).fetchall()
        return [SearchHit(*row) for row in rows]

    def counts(self) -> list[tuple[str, int, int]]:
        with self.conn.transaction():
            return [(str(t), int(n), int(e)) for t, n, e in self.conn.execute(queries.COUNT_BY_TENANT)]
