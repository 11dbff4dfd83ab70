"""Write memories: batched embedding, COPY into a staging table, one upsert, all in one transaction.

Rows whose content is unchanged since the active model embedded them are not embedded again.

Re-ingesting a (tenant, key) updates the row instead of duplicating it. A failure anywhere (bad row,
model error, database error) rolls the whole call back: nothing is half-written.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb
from tqdm import tqdm

from spark_pg import queries
from spark_pg.connection_modes import statement_timeout_lifted, usable, vectors_adaptable
from spark_pg.embedding import Embedder, ModelSpec
from spark_pg.errors import DatabaseError, IngestError, InputError, ModelMismatch
from spark_pg.intent import ACTION_DOMAINS, actionability
from spark_pg.records import KEEPABLE, SCRUBBED_KINDS, SYSTEM_TENANT, MemoryIn, validate_row
from spark_pg.refusals import one_line
from spark_pg.sql_args import flag_arg
from spark_pg.tenant_indexes import build_tenant_indexes, refresh_transaction

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IngestResult:
    inserted: int
    updated: int
    unchanged: int = 0  # stored already exactly so: not written again
    # dated more than an hour ahead of this machine's clock: retrieval leaves a memory out until its
    # created_at (unless params.as_of is later), which is right for replayed data and a surprise otherwise
    future: int = 0
    latest: datetime | None = None  # the latest such created_at
    # vectors this call stored, the unchanged rows' included (one written with its embedding deferred gets
    # its vector from the next synchronous write of the same content); 0 when embedding is deferred, and
    # when another model became the active one while the call embedded (its rows wait in the queue)
    embedded: int = 0

    @property
    def total(self) -> int:
        return self.inserted + self.updated + self.unchanged


def dated_ahead(records: Sequence[MemoryIn]) -> tuple[int, datetime | None]:
    """How many ``records`` are dated more than an hour ahead of now, and the latest of those dates."""
    limit = datetime.now(UTC) + timedelta(hours=1)
    times = (r.created_at for r in records if r.created_at is not None)
    # a MemoryIn built by hand may hold a naive time: UTC, as validate_row and the database take it
    ahead = [t for t in (t if t.tzinfo else t.replace(tzinfo=UTC) for t in times) if t > limit]
    return len(ahead), max(ahead, default=None)


def register_model(conn: psycopg.Connection[Any], spec: ModelSpec) -> int:
    """spark.register_model for ``spec`` (idempotent; the first model registered becomes active): its id."""
    row = conn.execute(
        queries.REGISTER_MODEL,
        {
            "name": spec.name,
            "dim": spec.dim,
            "pooling": spec.pooling,
            "max_tokens": spec.max_tokens,
            "query_prefix": spec.query_prefix,
            "document_prefix": spec.document_prefix,
        },
    ).fetchone()
    assert row is not None
    return int(row[0])


def check_active_model(conn: psycopg.Connection[Any], name: str) -> None:
    """Raise ModelMismatch when another model than ``name`` made the stored vectors (is the active one)."""
    active = conn.execute(queries.ACTIVE_MODEL).fetchone()
    if active is not None and active[1] != name:
        raise ModelMismatch(
            f"the stored vectors were made by {active[1]}, but embedding.model is {name}; "
            f"set embedding.model to {active[1]}, or move every memory to {name} with "
            f"`spark-pg reembed --model {name}`"
        )


def hold_active_model(conn: psycopg.Connection[Any]) -> tuple[int, str] | None:
    """Hold off a model switch until the current transaction ends (queries.HOLD_MODEL_SWITCH), then return
    the active model as (id, name), or None when none is. Writers that store vectors call it in their write
    transaction before they write anything, and store vectors only of that model."""
    held = conn.execute(queries.HOLD_MODEL_SWITCH).fetchone()
    fresh = held is not None and bool(held[1])
    row = conn.execute(queries.ACTIVE_MODEL_SEEN if fresh else queries.ACTIVE_MODEL_HELD).fetchone()
    return None if row is None else (int(row[0]), str(row[1]))


def _model_kept(conn: psycopg.Connection[Any], model_id: int, name: str) -> int | None:
    """``model_id`` when it is still the active model, held so until the commit (:func:`hold_active_model`);
    else None, with a warning: a switch (`spark-pg reembed`) committed since :func:`ensure_model` checked,
    and the rows are written without vectors of the retired model, queued for a worker on the new one."""
    active = hold_active_model(conn)
    if active is not None and active[0] == model_id:
        return model_id
    now = f"{active[1]} is the active model now" if active is not None else "no model is active now"
    log.warning(
        "the model was switched while this ingest embedded: %s, not %s; the rows are stored without vectors "
        "and queued for `spark-pg worker`; set embedding.model to the active model",
        now,
        name,
    )
    return None


def ensure_model(conn: psycopg.Connection[Any], embedder: Embedder) -> int:
    """Register the embedder's model (committed) and return its id; refuse to mix models. A role that may
    not register it (a tenant role under row-level security, docs/security.md) gets a DatabaseError saying
    what to do instead."""
    try:
        with conn.transaction():
            check_active_model(conn, embedder.spec.name)
            return register_model(conn, embedder.spec)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise DatabaseError(
            f"this role may not register the embedding model {embedder.spec.name} ({one_line(exc)}): "
            "let the schema owner register it (its first ingest with embedding, or `spark-pg worker`), "
            "or ingest with --defer-embedding (defer=True) and let the owner's worker embed"
        ) from exc


def stored_row(record: MemoryIn) -> tuple[Any, ...]:
    """The row ingest writes for ``record`` (its values derived from the text included), without the vector
    and the model id: what `spark-pg eval` hashes to tell whether a scratch database is still current."""
    return _row(record, None, None)


def _row(record: MemoryIn, vector: Any, model_id: int | None) -> tuple[Any, ...]:
    return (
        record.tenant,
        record.key,
        record.kind,
        record.category,
        record.source,
        record.text,
        record.context,
        record.descriptor,
        record.content_hash,
        record.importance,
        record.tier,
        record.priority,
        record.created_at,
        Jsonb(record.metadata),
        record.domain,
        record.actionability if record.actionability is not None else actionability(record.text).score,
        vector,
        model_id,
        sorted(record.keep),
    )


def _already_embedded(cur: psycopg.Cursor[Any], chunk: Sequence[MemoryIn], model_id: int) -> set[int]:
    """Positions in ``chunk`` whose stored row has the same content, embedded by this model."""
    cur.execute(
        queries.EMBEDDED_HASHES,
        {"tenants": [r.tenant for r in chunk], "keys": [r.key for r in chunk], "model_id": model_id},
    )
    stored = {(t, k): bytes(h) for t, k, h in cur.fetchall()}
    return {i for i, r in enumerate(chunk) if stored.get((r.tenant, r.key)) == r.content_hash}


def _embed_stale_skips(cur: psycopg.Cursor[Any], embedder: Embedder, model_id: int, batch_size: int) -> None:
    """Embed the staged rows skipped as unchanged whose stored row another writer changed before this one
    locked it: the upsert puts their content back, its trigger drops the other writer's vector, and they
    were left with no vector at all, only queued (a synchronous ingest leaves nothing queued)."""
    stale = cur.execute(queries.STALE_SKIPS, {"model_id": model_id}).fetchall()
    if not stale:
        return
    vectors = embedder.embed_documents([str(r[2]) for r in stale], batch_size=batch_size)
    cur.execute(
        queries.STAGE_VECTORS,
        {
            "model_id": model_id,
            "tenants": [r[0] for r in stale],
            "keys": [r[1] for r in stale],
            "vectors": list(vectors),
        },
    )


def refresh_after_write(conn: psycopg.Connection[Any], tenants: list[str]) -> None:
    """spark.refresh_tenant_stats for the tenants just written, in its own transaction and without a
    statement timeout (a lexeme count of a large tenant can take seconds). Their HNSW indexes are built
    CONCURRENTLY first when the connection is outside a transaction (spark_pg.tenant_indexes): built by the
    refresh, an index locks every tenant's vector writes until it commits. The rows are committed either
    way: a refresh that fails (a lock timeout) is logged, not raised, and the next write tries again. A
    tenant whose build waited its turn out (another build on spark.embeddings went on) or gave up is left
    whole to the next write or `spark-pg maintain`: its refresh would build or drop the index itself.
    Inside a caller's transaction (``trace add``) only the statistics are refreshed: an index built or
    dropped there would hold its locks until that transaction ends; the caller runs this again once it has
    committed (spark_pg.traces.store), or the next write or `spark-pg maintain` does the index work."""
    idle = conn.info.transaction_status == TransactionStatus.IDLE
    work = build_tenant_indexes(conn, tenants)
    waiting = set(work.queued) | set(work.failed)
    tenants = [t for t in tenants if t not in waiting]
    if not tenants:
        return
    try:
        # the rows are stored: a refresh that would wait behind another transaction's lock (a plain DROP INDEX
        # of an invalid index behind a pg_dump) is left to the next write rather than holding this one
        with refresh_transaction(conn):
            conn.execute(queries.REFRESH_TENANT_STATS, {"tenants": tenants, "build_indexes": idle})
    except psycopg.errors.OperationalError as exc:  # lock or statement timeout, cancelled
        log.warning(
            "the rows are stored, but the statistics of %s were not refreshed (%s); the next write tries "
            "again",
            ", ".join(tenants[:5]) + (" ..." if len(tenants) > 5 else ""),
            one_line(exc),
        )


def _checked(record: MemoryIn, i: int) -> MemoryIn:
    """``record`` as it is stored, or InputError naming ``records[i]`` and its field (:func:`_field_problem`).
    A trace or learning is stored as a file's row of that kind is: scrubbed (spark_pg.records.validate_row),
    whoever built it."""
    problem, valid = _field_problem(record)
    if problem or valid is None:
        raise InputError(f"records[{i}].{problem}")
    # stored as validate_row read them (it was the record as given): a None in a KEEPABLE field as a file's
    # row that leaves it out (the default on insert, the stored value on update), a naive created_at as
    # UTC, numpy's numbers as Python's (psycopg cannot send them), the metadata as JSON reads it back
    validated = {name: getattr(valid, name) for name in (*KEEPABLE, "created_at")}
    score = None if record.actionability is None else float(record.actionability)
    record = replace(record, **validated, actionability=score, keep=record.keep | valid.keep)
    if record.kind not in SCRUBBED_KINDS:
        return record
    fields: tuple[str, ...] = ("text", "key", "category", "source", "context", "metadata")
    if record.kind == "trace":
        fields += ("action_domain", "actionability")
    return replace(record, **{name: getattr(valid, name) for name in fields})


def _field_problem(record: MemoryIn) -> tuple[str | None, MemoryIn | None]:
    """What is wrong with a field that only a MemoryIn made in code can set (validate_row checks the rest),
    as ``field ...``, or None; and the record validate_row makes of its fields."""
    if record.created_at is not None and not isinstance(record.created_at, datetime):
        # it was a TypeError after the commit (counting the dated-ahead)
        return f"created_at must be a datetime, got {type(record.created_at).__name__}", None
    # validate_row reads a None in them as the default: the database refused it (NOT NULL), in a message
    # holding the whole row
    none = next(
        (n for n in ("tenant", "key", "text", "kind", "category", "source") if getattr(record, n) is None),
        None,
    )
    if none is not None:
        return f"{none} must not be None", None
    if not isinstance(record.keep, set | frozenset) or not record.keep <= set(KEEPABLE):
        return f"keep must be a set of names from {', '.join(KEEPABLE)}, got {record.keep!r}", None
    if record.action_domain is not None and record.action_domain not in ACTION_DOMAINS:
        # any other name would hide the memory from every domain-filtered advice call
        return f"action_domain must be one of {', '.join(ACTION_DOMAINS)}, got {record.action_domain!r}", None
    score = record.actionability
    if score is not None and (
        isinstance(score, bool) or not isinstance(score, numbers.Real) or not 0 <= score <= 1
    ):
        return f"actionability must be a number from 0 to 1, got {score!r}", None
    # the fields a file's row has, through the file's checks: a MemoryIn made in code with importance 2.0,
    # a NUL in its text, inf in its metadata or a created_at in 1 BC reached the database, whose errors did
    # not name the record (or stored it, and no client could read it back)
    row = {
        name: getattr(record, name)
        for name in ("tenant", "key", "text", "kind", "category", "source", "context", "importance", "tier",
                     "priority", "metadata", "created_at")
    }  # fmt: skip
    try:
        return None, validate_row(row, "", 0, pack=record.tenant == SYSTEM_TENANT)
    except IngestError as exc:
        return (f"{exc.field} {str(exc).split(': ', 1)[1]}" if exc.field else str(exc)), None


def ingest(
    conn: psycopg.Connection[Any],
    records: Iterable[MemoryIn],
    embedder: Embedder | None,
    *,
    batch_size: int = 16,
    chunk_rows: int = 500,
    progress: bool = False,
    label: str = "ingest",
    pack: bool = False,
) -> IngestResult:
    """Embed and upsert ``records`` (a list, or any iterable: taken once) in one transaction. Returns how
    many rows were inserted, updated and left unchanged (stored already exactly so).
    Records of the pack's tenant are refused unless ``pack`` (the pack loader): they reach every tenant.
    ``conn`` must be writable, and not in a failed transaction (InputError); a plain ``psycopg.connect``
    one gets pgvector's adapters when vectors are sent.

    ``embedder`` None defers embedding (write-behind): the rows are stored at once, keyword-findable, and
    queued in spark.embed_queue for ``spark-pg worker``. So are they when a model switch (``spark-pg
    reembed``) commits while the call embeds: its vectors are of the retired model, and are not stored (a
    warning is logged). A switch that comes later waits for this call's commit."""
    for name, value in (("chunk_rows", chunk_rows), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise InputError(f"{name} must be a whole number from 1, got {value!r}")
    progress, pack = flag_arg("progress", progress), flag_arg("pack", pack)
    if isinstance(records, str | bytes | Mapping) or not isinstance(records, Iterable):
        raise InputError(f"records must be a list of MemoryIn, got {type(records).__name__}")
    records = list(records)  # once: a generator was used up by the checks, and nothing was written
    bad = next((i for i, r in enumerate(records) if not isinstance(r, MemoryIn)), None)
    if bad is not None:
        raise InputError(
            f"records[{bad}] must be a MemoryIn (spark_pg.records.validate_row makes one from a dict), "
            f"got {type(records[bad]).__name__}"
        )
    if not pack and any(r.tenant == SYSTEM_TENANT for r in records):
        raise InputError(f"tenant {SYSTEM_TENANT} holds the cold-start pack: only `spark-pg seed` writes it")
    conn = usable(conn)
    if not records:
        return IngestResult(0, 0)
    first: dict[tuple[str, str], int] = {}
    records = [
        _checked(r, i) for i, r in enumerate(records)
    ]  # before the write: nothing stored if one is bad
    for i, r in enumerate(records):
        if (j := first.setdefault((r.tenant, r.key), i)) != i:
            raise InputError(f"records[{i}] has the tenant and key of records[{j}] ({r.tenant!r}, {r.key!r})")
    if embedder is not None:
        vectors_adaptable(conn)
    try:
        return _write(conn, records, embedder, int(batch_size), int(chunk_rows), progress, label)
    except psycopg.errors.ReadOnlySqlTransaction as exc:
        # its first write (the model's or the staging table's) was refused, in words about that step
        raise InputError(
            "ingest needs a writable connection: conn's transactions are read-only (conn.read_only, "
            "default_transaction_read_only or a standby); nothing was written"
        ) from exc


def _write(
    conn: psycopg.Connection[Any],
    records: list[MemoryIn],
    embedder: Embedder | None,
    batch_size: int,
    chunk_rows: int,
    progress: bool,
    label: str,
) -> IngestResult:
    """:func:`ingest`'s write, of records checked."""
    model_id = ensure_model(conn, embedder) if embedder is not None else None
    inserted = updated = 0
    with (
        conn.transaction(),
        conn.cursor() as cur,
        # a load runs as long as it needs: under the session's statement timeout (30 s by default) the
        # upsert of ~200,000 rows was cancelled after all the embedding, and everything rolled back
        statement_timeout_lifted(conn, local=True),
        tqdm(total=len(records), desc=label, unit="mem", disable=not progress, leave=True) as bar,
    ):
        cur.execute(queries.DROP_INGEST_TABLE)  # a savepoint-nested earlier call may have left it
        cur.execute(queries.CREATE_INGEST_TABLE)
        for start in range(0, len(records), chunk_rows):
            chunk = records[start : start + chunk_rows]
            by_pos: dict[int, Any] = {}
            if embedder is not None and model_id is not None:
                unchanged = _already_embedded(cur, chunk, model_id)
                todo = [i for i in range(len(chunk)) if i not in unchanged]
                vectors = embedder.embed_documents([chunk[i].descriptor for i in todo], batch_size=batch_size)
                by_pos = dict(zip(todo, vectors, strict=True))
            with cur.copy(queries.COPY_INGEST) as copy:
                for i, record in enumerate(chunk):
                    vector = by_pos.get(i)
                    copy.write_row(_row(record, vector, model_id if vector is not None else None))
            bar.update(len(chunk))
        bar.set_postfix_str("writing")  # the bar is full once the rows are staged: the upsert is not done
        if embedder is not None and model_id is not None:
            # checked again, now held until the commit: a switch that committed since ensure_model rebuilt
            # the queue without these rows, and vectors of the old model would take them off it for good
            model_id = _model_kept(conn, model_id, embedder.spec.name)
        cur.execute(queries.INDEX_INGEST_TABLE)
        cur.execute(queries.LOCK_INGEST_ROWS)
        cur.execute(queries.DROP_ROW_TIER_MARKS)
        cur.execute(queries.KEEP_STORED_FIELDS)
        if embedder is not None and model_id is not None:
            _embed_stale_skips(cur, embedder, model_id, batch_size)
        cur.execute(queries.INGEST_WRITES, ("on",))
        cur.execute(queries.UPSERT)
        for (was_insert,) in cur.fetchall():
            if was_insert:
                inserted += 1
            else:
                updated += 1
        cur.execute(queries.INGEST_WRITES, ("off",))
        embedded = 0
        if model_id is not None:
            cur.execute(queries.LOCK_QUEUED_STAGED)  # a worker's batch holding some is waited for
            cur.execute(queries.STORE_VECTORS)
            embedded = max(cur.rowcount, 0)
        bar.set_postfix_str("")
    refresh_after_write(conn, sorted({r.tenant for r in records}))
    future, latest = dated_ahead(records)
    return IngestResult(inserted, updated, len(records) - inserted - updated, future, latest, embedded)
