"""Writing traces and learnings: scrubbed, keyed by the hash of their descriptor, embedded once.

A trace or learning is an ordinary memory (kind ``trace`` / ``learning``) written through
:func:`spark_pg.ingest.ingest`. Adding the same one again (the same descriptor after scrubbing and
normalising, so the same key and content hash) embeds nothing and rewrites nothing but two metadata fields:
``occurrences`` goes up by one and ``last_seen`` moves to now. A learning linked to a trace
(``from_trace``) records the link on both rows: ``trace_keys`` on the learning, ``learning_keys`` on the
trace (which is how spark.reflect finds a trace's learnings with one index probe per key).

Traces are stored with category and action domain ``general``, so what is embedded is exactly the
descriptor (no tags in front), and with **actionability 0**: a trace is a record of an attempt, not advice,
so the advisor's actionability gate keeps it out of ordinary advice; it comes back through reflection
(spark.reflect) and, when it was a failure, as the advisor's past-failure warning. Learnings are advice and
are scored and tagged at ingestion like any memory (a directive learning passes the gate).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb

from spark_pg import queries
from spark_pg.embedding import Embedder
from spark_pg.errors import InputError
from spark_pg.ingest import ingest, refresh_after_write
from spark_pg.records import MemoryIn, validate_row
from spark_pg.traces.descriptor import HANDLE_VERSION, clean, make_learning, make_trace
from spark_pg.traces.reflect import ensure_vector_adapters

MAX_LINKS = 50  # learning_keys per trace and trace_keys per learning (the oldest links go first)
LINK_FIELDS = ("learning_keys", "trace_keys")


@dataclass(frozen=True)
class Stored:
    """What an add did: ``added`` (a new memory, embedded now or queued), ``seen_again`` (the same one
    existed: occurrences + 1, nothing embedded) or ``updated`` (same key, new content: embedded again)."""

    key: str
    kind: str
    text: str
    status: str
    occurrences: int
    metadata: dict[str, Any]

    @property
    def embedded_again(self) -> bool:
        return self.status != "seen_again"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _record(
    tenant: str,
    key: str,
    text: str,
    kind: str,
    category: str,
    source: str,
    importance: float,
    created_at: datetime | str | None,
    metadata: Mapping[str, Any],
) -> MemoryIn:
    row = {
        "tenant": tenant,
        "key": key,
        "text": text,
        "kind": kind,
        "category": category,
        "source": clean(source, "source", 128, required=True),  # scrubbed like every other field
        "importance": importance,
        "created_at": created_at,
        "metadata": dict(metadata),
    }
    return validate_row(row, "arguments", 0)


def _links(old: Any, new: Any) -> list[str]:
    """Union of two link lists, old order first, at most MAX_LINKS (the oldest dropped)."""
    merged: list[str] = []
    for seq in (old, new):
        if isinstance(seq, list):
            merged.extend(k for k in seq if isinstance(k, str) and k not in merged)
    return merged[-MAX_LINKS:]


def _merge(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The new metadata over the stored one: occurrences + 1, links united, last_seen now."""
    seen = old.get("occurrences")
    merged = {**old, **new}
    merged["occurrences"] = (seen if isinstance(seen, int) and seen > 0 else 1) + 1
    merged["last_seen"] = _now()
    for name in LINK_FIELDS:
        if name in old or name in new:
            merged[name] = _links(old.get(name), new.get(name))
    return merged


def _lock_key(conn: psycopg.Connection[Any], tenant: str, key: str) -> None:
    """Hold the tenant's key until the transaction ends: a concurrent add of the same trace or learning
    waits, then finds this one (the row may not exist yet, so FOR UPDATE alone would lock nothing)."""
    conn.execute(queries.ADVISORY_XACT_LOCK, (f"spark.memory\x1f{tenant}\x1f{key}",))


def _store(
    conn: psycopg.Connection[Any], embedder: Embedder | None, record: MemoryIn, batch_size: int
) -> Stored:
    """Insert, bump or re-embed one record; the caller holds the transaction and the key's lock
    (:func:`_lock_key`)."""
    row = conn.execute(queries.MEMORY_FOR_UPDATE, {"tenant": record.tenant, "key": record.key}).fetchone()
    status = "added"
    meta = record.metadata or {}  # a trace's or learning's: always given (occurrences, last_seen)
    if row is not None:
        kind, content_hash, old_meta = row
        if kind != record.kind:
            raise InputError(
                f"key {record.key!r} of tenant {record.tenant!r} is a {kind}, not a {record.kind}"
            )
        meta = _merge(old_meta if isinstance(old_meta, dict) else {}, meta)
        if bytes(content_hash) == record.content_hash:
            conn.execute(
                queries.SET_MEMORY_METADATA,
                {"tenant": record.tenant, "key": record.key, "metadata": Jsonb(meta)},
            )
            return Stored(record.key, record.kind, record.text, "seen_again", meta["occurrences"], meta)
        record = replace(record, metadata=meta)
        status = "updated"
    ingest(conn, [record], embedder, batch_size=batch_size, label=record.kind)
    return Stored(record.key, record.kind, record.text, status, int(meta["occurrences"]), meta)


def add_trace(
    conn: psycopg.Connection[Any],
    embedder: Embedder | None,
    tenant: str,
    intent: str,
    outcome: str,
    *,
    files: str | Sequence[str] | None = None,
    issue: str | None = None,
    tags: str | Sequence[str] | None = None,
    source: str = "agent",
    importance: float = 0.5,
    created_at: datetime | str | None = None,
    batch_size: int = 16,
) -> Stored:
    """Record a task attempt as a memory of kind ``trace`` (its text: the scrubbed, normalised descriptor).

    ``embedder`` None stores it at once and leaves the vector to the write-behind worker. Adding the same
    attempt again embeds nothing (see the module docstring)."""
    trace = make_trace(intent, outcome, files=files, issue=issue, tags=tags)
    meta = trace.metadata() | {"occurrences": 1, "last_seen": _now()}
    record = _record(
        tenant, trace.key, trace.descriptor, "trace", "general", source, importance, created_at, meta
    )
    # exactly the descriptor is embedded (no tags), and never ordinary advice (reflection finds it)
    record = replace(record, action_domain="general", actionability=0.0)
    if embedder is not None:
        ensure_vector_adapters(conn)  # a plain psycopg connection: its vector is sent
    with conn.transaction():
        _lock_key(conn, tenant, record.key)
        stored = _store(conn, embedder, record, batch_size)
    _index_work(conn, tenant)
    return stored


def _index_work(conn: psycopg.Connection[Any], tenant: str) -> None:
    """The tenant's HNSW index work, which the write inside this module's transaction left undone
    (:func:`spark_pg.ingest.refresh_after_write`: built there, the index held every tenant's vector writes,
    and a plain drop of an invalid one every tenant's reads, until the commit), once the write committed. A
    transaction of the caller's still open leaves it to the next write or `spark-pg maintain`."""
    if conn.info.transaction_status == TransactionStatus.IDLE:
        refresh_after_write(conn, [tenant])


def add_learning(
    conn: psycopg.Connection[Any],
    embedder: Embedder | None,
    tenant: str,
    handle: str,
    *,
    from_trace: str | None = None,
    category: str | None = None,
    source: str = "agent",
    importance: float = 0.5,
    created_at: datetime | str | None = None,
    batch_size: int = 16,
) -> Stored:
    """Record a learning (kind ``learning``) whose text is its semantic handle, optionally linked to the
    trace it came from (``from_trace``: a trace key of the same tenant, else InputError)."""
    learning = make_learning(handle, category)
    if from_trace is not None and (not isinstance(from_trace, str) or not 0 < len(from_trace) <= 512):
        raise InputError(f"from_trace must be a trace key (1 to 512 characters), got {from_trace!r}")
    meta: dict[str, Any] = {
        "handle_version": HANDLE_VERSION,
        "handle_hash": learning.handle_hash,
        "trace_keys": [from_trace] if from_trace else [],
        "occurrences": 1,
        "last_seen": _now(),
    }
    if embedder is not None:
        ensure_vector_adapters(conn)
    with conn.transaction():
        # before anything is read: a concurrent add of the same learning waits, then sees this one
        _lock_key(conn, tenant, learning.key)
        if category is None:  # linking a learning later must not reset the category it was given
            row = conn.execute(queries.MEMORY_CATEGORY, {"tenant": tenant, "key": learning.key}).fetchone()
            if row is not None:
                learning = replace(learning, category=row[0])
        record = _record(
            tenant,
            learning.key,
            learning.handle,
            "learning",
            learning.category,
            source,
            importance,
            created_at,
            meta,
        )
        trace_meta: dict[str, Any] = {}
        if from_trace:
            row = conn.execute(queries.MEMORY_FOR_UPDATE, {"tenant": tenant, "key": from_trace}).fetchone()
            if row is None or row[0] != "trace":
                raise InputError(f"from_trace: {from_trace!r} is not a trace of tenant {tenant!r}")
            trace_meta = row[2] if isinstance(row[2], dict) else {}
        stored = _store(conn, embedder, record, batch_size)
        if from_trace:
            links = _links(trace_meta.get("learning_keys"), [learning.key])
            if links != trace_meta.get("learning_keys"):
                conn.execute(
                    queries.SET_MEMORY_METADATA,
                    {
                        "tenant": tenant,
                        "key": from_trace,
                        "metadata": Jsonb(trace_meta | {"learning_keys": links}),
                    },
                )
    _index_work(conn, tenant)
    return stored
