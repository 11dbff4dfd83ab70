"""The Python API: one object that knows the settings, the database and the model.

>>> from spark_pg.client import SparkClient
>>> client = SparkClient()            # settings from the config file and SPARK_PG_* variables
>>> client.init()                     # migrate + apply sql/ (idempotent)
>>> client.add("alice", "Prefer pytest fixtures over setUp methods", kind="preference")
>>> client.search("alice", "writing tests")   # spark.retrieve, one round trip
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg

from spark_pg import schema
from spark_pg.config import RETRIEVE_PARAM_KEYS, Settings, load_settings
from spark_pg.db import connect, database_url
from spark_pg.embedding import Embedder, Vector, load_embedder
from spark_pg.errors import InputError
from spark_pg.ingest import IngestResult, ingest
from spark_pg.records import MemoryIn, read_file, validate_row
from spark_pg.retrieve import Candidate, Retrieved, explain, retrieve
from spark_pg.triggers import load_rules, sync_rules

SYSTEM_TENANT = "_system"


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
        self, records: list[MemoryIn], *, progress: bool = False, label: str = "ingest", defer: bool = False
    ) -> IngestResult:
        """Store ``records``; ``defer``: without embedding them (write-behind: `spark-pg worker` does)."""
        return ingest(
            self.conn,
            records,
            None if defer else self.embedder,
            batch_size=self.settings.get_int("embedding.batch_size"),
            chunk_rows=self.settings.get_int("ingest.chunk_rows"),
            progress=progress,
            label=label,
        )

    def add(self, tenant: str, text: str, *, defer: bool = False, **fields: Any) -> IngestResult:
        """Store one memory (fields as in an ingest file: key, kind, category, source, importance, ...)."""
        record = validate_row({"tenant": tenant, "text": text, **fields}, "arguments", 1)
        return self.ingest_records([record], defer=defer)

    def ingest_file(
        self, path: Path, tenant: str | None = None, *, progress: bool = False, defer: bool = False
    ) -> IngestResult:
        records = read_file(path, tenant)
        return self.ingest_records(records, progress=progress, label=path.name, defer=defer)

    def load_seed_pack(self, *, progress: bool = False) -> IngestResult:
        """Load (or refresh) the cold-start pack and its trigger rules into the shared system tenant."""
        pack = resources.files("spark_pg") / "data" / "seed_pack.yaml"
        with resources.as_file(pack) as path:
            records = read_file(path, SYSTEM_TENANT)
        seeded = [replace(r, kind="seed", source="system_default") for r in records]
        result = self.ingest_records(seeded, progress=progress, label="cold-start pack")
        rules = resources.files("spark_pg") / "data" / "trigger_rules.yaml"
        with resources.as_file(rules) as path:
            sync_rules(self.conn, SYSTEM_TENANT, load_rules(path))
        return result

    def retrieve_params(self, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """spark.retrieve params: the configured retrieval.* keys, then ``params``."""
        merged: dict[str, Any] = {
            name: self.settings.raw(f"retrieval.{name}") for name in RETRIEVE_PARAM_KEYS
        }
        merged.update(params or {})
        return merged

    def _embed_query(self, query: str) -> Vector:
        if not query or not query.strip():
            raise InputError("query must not be empty")
        return self.embedder.embed_query(query)

    def _call(self, query: str, k: int | None, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """The arguments search and explain share: query vector, k and params from the settings."""
        merged = self.retrieve_params(params)
        # the model that embedded the query: spark.retrieve ignores the vector if another model is active
        merged.setdefault("query_model", self.embedder.spec.name)
        return {
            "embedding": self._embed_query(query),
            "k": self.settings.get_int("retrieval.k") if k is None else k,
            "params": merged,
        }

    def search(
        self, tenant: str, query: str, k: int | None = None, params: Mapping[str, Any] | None = None
    ) -> list[Retrieved]:
        """Hybrid retrieval (spark.retrieve) over the tenant's memories and the cold-start pack."""
        return retrieve(
            self.conn,
            tenant,
            query,
            cache=self.settings.get_bool("retrieval.cache_queries"),
            **self._call(query, k, params),
        )

    def explain(
        self, tenant: str, query: str, k: int | None = None, params: Mapping[str, Any] | None = None
    ) -> list[Candidate]:
        """Every candidate of the same call, with why each was surfaced or dropped."""
        return explain(self.conn, tenant, query, **self._call(query, k, params))
