"""The Python API: one object that knows the settings, the database and the model.

>>> from spark_pg.client import SparkClient
>>> client = SparkClient()            # settings from the config file and SPARK_PG_* variables
>>> client.init()                     # migrate + apply sql/ (idempotent)
>>> client.add("alice", "Prefer pytest fixtures over setUp methods", kind="preference")
>>> client.search("alice", "writing tests")   # spark.retrieve, one round trip
>>> client.add_trace("alice", "Fix auth token refresh", "failure", issue="refresh token reused")
>>> client.reflect("alice", "Repair login session expiry")   # spark.reflect: have I faced this before?
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus

from spark_pg import schema
from spark_pg.advisor import Advisor, AdvisorOptions
from spark_pg.config import REFLECT_PARAM_KEYS, RETRIEVE_PARAM_KEYS, Settings, load_settings
from spark_pg.db import connect, database_url
from spark_pg.embedding import Embedder, Vector, load_embedder
from spark_pg.errors import InputError
from spark_pg.ingest import IngestResult, ingest
from spark_pg.query_model import QueryModel
from spark_pg.records import SYSTEM_TENANT, MemoryIn, read_file, validate_row
from spark_pg.retrieve import Candidate, Retrieved, explain, retrieve, wrapper_params
from spark_pg.sql_args import flag_arg, params_arg
from spark_pg.traces.reflect import Reflection
from spark_pg.traces.store import Stored, add_learning, add_trace
from spark_pg.triggers import load_rules, sync_rules

log = logging.getLogger(__name__)
T = TypeVar("T")


class SparkClient:
    def __init__(self, settings: Settings | None = None, url: str | None = None) -> None:
        # checked here: a url of another type was an AttributeError at the first call
        if settings is not None and not isinstance(settings, Settings):
            raise InputError(
                f"settings must be a spark_pg.config.Settings (load_settings() makes one), "
                f"got {type(settings).__name__}"
            )
        if url is not None and not isinstance(url, str):
            raise InputError(f"url must be a database URL (a string), got {type(url).__name__}")
        self.settings = settings or load_settings()
        self._url = url
        self._conn: psycopg.Connection[Any] | None = None
        # reads run lexically while the model cannot load (a warning is logged); writes need the model
        self.query_model = QueryModel(self.settings, warn=log.warning)

    @property
    def url(self) -> str:
        if self._url is None:
            self._url = database_url(self.settings)
        return self._url

    @property
    def conn(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            timeout = self.settings.get_int("database.statement_timeout_ms")
            conn = connect(self.url, statement_timeout_ms=timeout)
            try:
                schema.require_current(conn)
                conn.rollback()
            except BaseException:  # kept, it would skip the check on the next call (and hold a transaction)
                conn.close()
                raise
            self._conn = conn
        if self._conn.info.transaction_status == TransactionStatus.INERROR:
            # its own connection, whose transaction an earlier call or statement failed (nothing in it can
            # commit now): rolled back, so that this call runs. Not inside a `with conn.transaction()`
            # block, where psycopg refuses it: the call then says to roll back first
            with contextlib.suppress(psycopg.ProgrammingError):
                self._conn.rollback()
        return self._conn

    def _read(self, call: Callable[[psycopg.Connection[Any]], T]) -> T:
        """``call`` (a read) on the connection; once more on a new one when the connection was found lost
        (a server restart: psycopg's OperationalError, the connection closed) where it held no transaction
        of the caller's. Never a write: it may have committed before the connection broke."""
        conn = self.conn
        idle = conn.info.transaction_status == TransactionStatus.IDLE
        try:
            return call(conn)
        except psycopg.OperationalError as exc:
            if not (idle and conn.closed):
                raise
            log.warning("the connection to the database was lost (%s): connecting again", exc)
        return call(self.conn)

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
        return schema.install(
            self.url, lock_timeout_ms=self.settings.get_int("database.migration_lock_timeout_ms")
        )

    @property
    def embedder(self) -> Embedder:
        return load_embedder(self.settings)

    def ingest_records(
        self,
        records: Iterable[MemoryIn],
        *,
        progress: bool = False,
        label: str = "ingest",
        defer: bool = False,
        pack: bool = False,
    ) -> IngestResult:
        """Store ``records`` (a list, or any iterable); ``defer``: without embedding them (write-behind:
        `spark-pg worker` does); ``pack``: records of the pack's tenant are allowed (the pack loader)."""
        flag_arg("defer", defer)
        return ingest(
            self.conn,
            records,
            None if defer else self.embedder,
            batch_size=self.settings.get_int("embedding.batch_size"),
            chunk_rows=self.settings.get_int("ingest.chunk_rows"),
            progress=progress,
            label=label,
            pack=pack,
        )

    def add(self, tenant: str, text: str, *, defer: bool = False, **fields: Any) -> IngestResult:
        """Store one memory (fields as in an ingest file: key, kind, category, source, importance, ...)."""
        flag_arg("defer", defer)
        record = validate_row({"tenant": tenant, "text": text, **fields}, "arguments", 0)
        return self.ingest_records([record], defer=defer)

    def ingest_file(
        self, path: Path | str, tenant: str | None = None, *, progress: bool = False, defer: bool = False
    ) -> IngestResult:
        if not isinstance(path, str | os.PathLike):
            raise InputError(f"path must be a file path (a str or a pathlib.Path), got {type(path).__name__}")
        flag_arg("progress", progress)  # before the file is read
        flag_arg("defer", defer)
        path = Path(path)
        records = read_file(path, tenant)
        return self.ingest_records(records, progress=progress, label=path.name, defer=defer)

    def load_seed_pack(self, *, progress: bool = False, extra: Path | str | None = None) -> IngestResult:
        """Load (or refresh) the cold-start pack and its trigger rules into the shared system tenant; with
        ``extra`` (an ingest file whose rows name no other tenant), those memories into the pack instead."""
        with resources.as_file(resources.files("spark_pg") / "data" / "seed_pack.yaml") as path:
            builtin = read_file(path, SYSTEM_TENANT, pack=True)
        records = builtin
        if extra is not None:
            extra = Path(extra)  # a str path too, as ingest_file takes
            records = read_file(extra, SYSTEM_TENANT, pack=True)
            other = next((r.tenant for r in records if r.tenant != SYSTEM_TENANT), None)
            if other is not None:
                raise InputError(f"{extra}: a pack file's rows belong to the pack, not to tenant {other!r}")
            # the next `spark-pg seed` would put a built-in memory back: a deployment adds, never replaces
            ours = {r.key for r in builtin}
            clash = next((r.key for r in records if r.key in ours), None)
            if clash is not None:
                raise InputError(
                    f"{extra}: key {clash!r} is a memory of the built-in pack (spark-pg seed restores it): "
                    "give the row a key of its own"
                )
        seeded = [replace(r, kind="seed", source="system_default") for r in records]
        if extra is not None:
            return self.ingest_records(seeded, progress=progress, label="cold-start pack", pack=True)
        with resources.as_file(resources.files("spark_pg") / "data" / "trigger_rules.yaml") as path:
            rules = load_rules(path)  # read before anything is written
        self.embedder  # noqa: B018 - the model loads before the transaction opens, not inside it
        # the memories and the rules that surface them in one transaction: a failure stores neither (the
        # memories were committed first, and a pack whose rules failed went on without its interrupts)
        with self.conn.transaction():
            result = self.ingest_records(seeded, progress=progress, label="cold-start pack", pack=True)
            # spark.put_trigger_rule writes the pack's tenant only with this setting, for this transaction
            # (or savepoint: switched off again so that a caller's open transaction does not keep it)
            self.conn.execute("SET LOCAL spark.pack_writes = on")
            try:
                sync_rules(self.conn, SYSTEM_TENANT, rules)
            finally:
                if not self.conn.closed and self.conn.info.transaction_status != TransactionStatus.INERROR:
                    self.conn.execute("SET LOCAL spark.pack_writes = off")
        return result

    def retrieve_params(self, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """spark.retrieve params: the configured retrieval.* keys, then ``params``."""
        merged: dict[str, Any] = {
            name: self.settings.raw(f"retrieval.{name}") for name in RETRIEVE_PARAM_KEYS
        }
        params = wrapper_params(params)  # numpy's numbers as Python's, a naive as_of as UTC
        params_arg("params", params)  # named before anything is merged into it
        merged.update(params or {})
        return merged

    def _embed_query(self, query: str) -> Vector | None:
        """The query's vector; None when no embedding model can be loaded: retrieval then runs lexically,
        says so in ``why.mode`` and a warning is logged (never a made-up vector)."""
        if not isinstance(query, str):  # before .strip(); its content is checked as "query text" (retrieve)
            raise InputError(f"query must be a string, got {type(query).__name__}")
        if not query or not query.strip():
            raise InputError("query must not be empty")
        embedder = self.query_model()
        return None if embedder is None else embedder.embed_query(query)

    def _call(self, query: str, k: int | None, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """The arguments search and explain share: query vector, k and params from the settings."""
        merged = self.retrieve_params(params)
        embedding = self._embed_query(query)
        if embedding is not None:  # spark.retrieve ignores a vector of another model than the active one
            merged.setdefault("query_model", self.settings.get_str("embedding.model"))
        return {
            "embedding": embedding,
            "k": self.settings.get_int("retrieval.k") if k is None else k,
            "params": merged,
        }

    def search(
        self, tenant: str, query: str, k: int | None = None, params: Mapping[str, Any] | None = None
    ) -> list[Retrieved]:
        """Hybrid retrieval (spark.retrieve) over the tenant's memories and the cold-start pack."""
        args = self._call(query, k, params)
        cache = self.settings.get_bool("retrieval.cache_queries")
        return self._read(lambda conn: retrieve(conn, tenant, query, cache=cache, **args))

    def explain(
        self, tenant: str, query: str, k: int | None = None, params: Mapping[str, Any] | None = None
    ) -> list[Candidate]:
        """Every candidate of the same call, with why each was surfaced or dropped."""
        args = self._call(query, k, params)
        return self._read(lambda conn: explain(conn, tenant, query, **args))

    # traces, learnings and reflection (spark_pg/traces, docs/traces.md)
    def add_trace(
        self, tenant: str, intent: str, outcome: str, *, defer: bool = False, **fields: Any
    ) -> Stored:
        """Record a task attempt (fields: files, issue, tags, source, importance, created_at); scrubbed,
        keyed by its descriptor's hash, embedded once (``defer``: by `spark-pg worker`)."""
        _known_fields(add_trace, fields)
        flag_arg("defer", defer)
        batch = self.settings.get_int("embedding.batch_size")
        embedder = None if defer else self.embedder
        return add_trace(self.conn, embedder, tenant, intent, outcome, batch_size=batch, **fields)

    def add_learning(self, tenant: str, handle: str, *, defer: bool = False, **fields: Any) -> Stored:
        """Record a learning's semantic handle (fields: from_trace, category, source, importance,
        created_at); ``defer``: embedded by `spark-pg worker`."""
        _known_fields(add_learning, fields)
        flag_arg("defer", defer)
        batch = self.settings.get_int("embedding.batch_size")
        embedder = None if defer else self.embedder
        return add_learning(self.conn, embedder, tenant, handle, batch_size=batch, **fields)

    def reflection_options(self, **overrides: Any) -> AdvisorOptions:
        """AdvisorOptions with the configured reflection.* keys (and ``overrides``)."""
        names = [f.name for f in dataclasses.fields(AdvisorOptions)]
        unknown = sorted(set(overrides) - set(names))
        if unknown:  # was AdvisorOptions' TypeError
            raise InputError(f"the advisor has no option {unknown[0]!r}; its options: {', '.join(names)}")
        fields: dict[str, Any] = {
            "warning_min_score": self.settings.get_float("reflection.warning_min_score"),
            "reflect_k": self.settings.get_int("reflection.top_k"),
            "reflect_params": {p: self.settings.raw(name) for name, p in REFLECT_PARAM_KEYS.items()},
        }
        return AdvisorOptions(**(fields | overrides))

    def advisor(self, tenant: str, *, session_id: str | None = None, **options: Any) -> Advisor:
        """An Advisor on this client's connection and model, with the configured reflection settings and
        the configured retrieval.* keys spark.retrieve takes (as :meth:`search` passes them; a ``params``
        option is merged over them)."""
        params = self.retrieve_params(options.pop("params", None))
        opts = self.reflection_options(params=params, **options)
        self.conn  # noqa: B018 (connects and checks the schema now, not at the first advice)
        return Advisor(lambda: self.conn, self.query_model(), tenant, session_id=session_id, options=opts)

    def reflect(
        self, tenant: str, text: str, k: int | None = None, params: Mapping[str, Any] | None = None
    ) -> list[Reflection]:
        """Have I faced this before? Similar past traces and learnings (spark.reflect, one round trip)."""
        return self.advisor(tenant).reflect(text, k=k, params=params)


def _known_fields(function: Any, fields: Mapping[str, Any]) -> None:
    """InputError naming a field ``function`` has no keyword for, and listing the ones it has."""
    import inspect

    allowed = [
        name
        for name, p in inspect.signature(function).parameters.items()
        if p.kind is p.KEYWORD_ONLY and name != "batch_size"
    ]
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise InputError(f"{function.__name__} has no field {unknown[0]!r}; its fields: {', '.join(allowed)}")
