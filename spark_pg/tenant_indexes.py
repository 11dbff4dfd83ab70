"""Per-tenant HNSW indexes built and dropped CONCURRENTLY, before spark.refresh_tenant_stats records them.

spark.refresh_tenant_stats can build a tenant's index itself, but a plain CREATE INDEX holds a lock that stops
every tenant's vector writes (ingest, the worker, edits) until the refresh commits: about 40 s for a tenant
the worker filled to 20,000 vectors before its next write. Run from here, the statements of
spark.tenant_index_plan use CONCURRENTLY: writers go on, and retrieval uses the shared index until the
tenant's is valid. The builder holds the tenant's advisory lock (the refresh leaves a tenant so held to it);
a tenant another builder holds is skipped. A build that is interrupted leaves an invalid index, which the
next plan drops and builds again.

A CONCURRENTLY build waits for every transaction older than it to end, a `pg_dump` or an idle REPEATABLE READ
session included. The write that set it off already committed its rows, so it does not wait past
BUILD_LOCK_TIMEOUT_MS: the build gives up (leaving the invalid index to the next plan) and the write returns.
A role that does not own spark.embeddings (a tenant role under row-level security) cannot build an index at
all: its writes leave the build to the owner's worker or refresh.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from spark_pg import queries
from spark_pg.connection_modes import autocommit, lock_timeout, statement_timeout_lifted
from spark_pg.refusals import one_line

log = logging.getLogger(__name__)

BUILD_LOCK_TIMEOUT_MS = 5000  # the longest a build waits for older transactions (and locks) before giving up
DDL_POLL_S = 0.2  # how often a builder looks whether another one's build of spark.embeddings is over


@dataclass
class IndexWork:
    """What :func:`build_tenant_indexes` did: the indexes built and dropped (names), and the tenants it left:
    ``busy`` (another builder held the tenant), ``queued`` (another builder's build of spark.embeddings
    went on past the lock timeout: nothing of the tenant's plan ran), ``left_to_owner`` (this role may not
    build or drop indexes of spark.embeddings) and ``failed`` (a lock timeout, a deadlock or a cancel: the
    next plan drops what it left invalid and builds again)."""

    built: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    queued: list[str] = field(default_factory=list)
    left_to_owner: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    @property
    def ran(self) -> int:
        """How many of the plans' statements ran."""
        return len(self.built) + len(self.dropped)


def build_tenant_indexes(
    conn: psycopg.Connection[Any], tenants: Sequence[str], *, patient: bool = False
) -> IndexWork:
    """Run spark.tenant_index_plan's CONCURRENTLY statements for ``tenants``; returns what was done.

    Only on a connection outside a transaction (CONCURRENTLY cannot run inside one): inside a caller's
    transaction nothing runs here, and the write's refresh leaves the indexes alone too (build_indexes
    false: spark_pg.ingest.refresh_after_write) for the next write outside one, the worker or maintain. A
    lock or statement timeout, or a cancel, is logged and leaves the tenant to the next refresh. One builder
    at a time runs statements on spark.embeddings (:func:`_ddl_lock`): a tenant whose plan has steps waits
    for another builder's to end, up to BUILD_LOCK_TIMEOUT_MS (then it is ``queued``), or as long as it
    takes when ``patient``."""
    work = IndexWork()
    if conn.info.transaction_status != TransactionStatus.IDLE:
        return work
    with (
        autocommit(conn),
        statement_timeout_lifted(conn, local=False),  # a build at 100,000 takes minutes
        lock_timeout(conn, BUILD_LOCK_TIMEOUT_MS, local=False),
    ):
        row = conn.execute(queries.MAY_BUILD_TENANT_INDEXES).fetchone()
        if not (row and row[0]):  # a tenant role under row-level security: asked first, nothing waited for
            work.left_to_owner = list(tenants)
            return work
        for tenant in tenants:
            held = conn.execute(queries.TRY_TENANT_INDEX_LOCK, {"tenant": tenant}).fetchone()
            if held is None or not held[0]:
                work.busy.append(tenant)  # another builder is at work on this tenant
                continue
            try:
                steps = conn.execute(queries.TENANT_INDEX_PLAN, {"tenant": tenant}).fetchall()
                if not steps:
                    continue
                with ddl_turn(conn, patient=patient) as turn:
                    if not turn:
                        work.queued.append(tenant)
                        log.info("the HNSW index of tenant %s waits for another build on its table", tenant)
                        continue
                    for _, name, action, statement in steps:
                        log.info("%s the HNSW index %s of tenant %s (concurrently)", action, name, tenant)
                        conn.execute(statement)
                        (work.dropped if action == "drop" else work.built).append(name)
            except psycopg.errors.OperationalError as exc:  # a lock timeout, a deadlock, a cancel
                work.failed.append(tenant)
                log.warning("the HNSW index of tenant %s was not built (%s); the next write tries again",
                            tenant, one_line(exc))  # fmt: skip
            except psycopg.errors.InsufficientPrivilege as exc:  # only the table's owner builds its indexes
                work.left_to_owner.append(tenant)
                log.info("the HNSW index of tenant %s is left to the owner of spark.embeddings (%s)",
                         tenant, one_line(exc))  # fmt: skip
            finally:
                if not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE:
                    conn.execute(queries.TENANT_INDEX_UNLOCK, {"tenant": tenant})
    return work


@contextmanager
def ddl_turn(conn: psycopg.Connection[Any], *, patient: bool) -> Iterator[bool]:
    """This session's turn to run CONCURRENTLY statements on spark.embeddings (:func:`_ddl_lock`): yields
    whether it got it, and gives it back at the end. Every builder takes it: the per-tenant plans here,
    spark-pg maintain, and reembed's shared index and drops."""
    got = _ddl_lock(conn, patient=patient)
    try:
        yield got
    finally:
        if got and not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE:
            conn.execute(queries.TENANT_INDEX_DDL_UNLOCK)


def _ddl_lock(conn: psycopg.Connection[Any], *, patient: bool) -> bool:
    """Whether this session got the lock builders hold while they run statements on spark.embeddings
    (polled for up to BUILD_LOCK_TIMEOUT_MS, or until it is free when ``patient``). Two CONCURRENTLY builds
    of partial indexes on one table do not run side by side: the second waits for the first's lock while
    the first waits for the second's transaction to end, a deadlock the server breaks by cancelling one.
    Polled, never waited for in a statement: a statement that waits holds a snapshot, which the build under
    way waits for in turn."""
    deadline = time.monotonic() + BUILD_LOCK_TIMEOUT_MS / 1000
    while True:
        row = conn.execute(queries.TRY_TENANT_INDEX_DDL_LOCK).fetchone()
        if row is not None and row[0]:
            return True
        if not patient and time.monotonic() >= deadline:
            return False
        time.sleep(DDL_POLL_S)


@contextmanager
def refresh_transaction(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """A transaction of its own for spark.refresh_tenant_stats: without a statement timeout (a lexeme count
    of a large tenant can take seconds) and with lock_timeout BUILD_LOCK_TIMEOUT_MS (a refresh that would
    wait behind another transaction's lock, e.g. a plain DROP INDEX of an invalid index behind a pg_dump,
    gives up with OperationalError rather than hold up its caller)."""
    with (
        conn.transaction(),
        statement_timeout_lifted(conn, local=True),
        lock_timeout(conn, BUILD_LOCK_TIMEOUT_MS, local=True),
    ):
        yield
