"""`spark-pg maintain`: every tenant's HNSW indexes and statistics up to date, whatever changed its rows.

Ingest, `spark-pg add` and the worker bring a tenant's own HNSW index (spark.tenant_index_plan) and its
statistics (spark.refresh_tenant_stats: lexeme counts, spark.tenant_vector_indexes) up to date after their
own writes (spark_pg.ingest.refresh_after_write). A tenant emptied or shrunk by a SQL DELETE, or filled by
SQL or a restored dump, keeps what it had until a write through spark-pg comes for it, which may be never.
:func:`maintain` visits every tenant spark.refresh_tenant_stats(NULL) visits (queries.TENANTS), or one, and
for each, in turn:

1. runs its index plan CONCURRENTLY (spark_pg.tenant_indexes.build_tenant_indexes): drops the index of a
   tenant that fell under half the threshold (emptied included) and one an interrupted build left invalid,
   builds the ones that are due. Readers and writers go on; a statement that waits for a lock (an older
   transaction) gives up after BUILD_LOCK_TIMEOUT_MS, and the tenant is then left whole to the next run:
   its refresh would build or drop the index itself, with a plain CREATE / DROP INDEX that holds every
   tenant's writers (or readers) for the build;
2. refreshes its statistics and index registry in a transaction of its own (statement timeout lifted, lock
   timeout BUILD_LOCK_TIMEOUT_MS), ``force`` rebuilding the lexeme counts even when the tenant's size moved
   by less than a quarter.

A role that does not own spark.embeddings (a tenant role under row-level security) may build no index:
step 1 is left to the owner (``MaintainReport.index_work``) and the statistics it may write are refreshed;
a tenant whose statistics it may not write (the pack, seen under ``pack_read``) is ``refused``. A tenant
another builder or refresher holds (a second `maintain`, an ingest) is skipped rather than waited for past
the lock timeout (``busy``): the other one does that work. Only a tenant left undone by a lock timeout or a
cancel (``failed``) makes the run incomplete.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from tqdm import tqdm

from spark_pg import queries
from spark_pg.connection_modes import autocommit, usable
from spark_pg.errors import InputError
from spark_pg.records import MAX_TENANT
from spark_pg.refusals import one_line
from spark_pg.rowfiles import text_problem
from spark_pg.sql_args import flag_arg
from spark_pg.tenant_indexes import build_tenant_indexes, refresh_transaction

log = logging.getLogger(__name__)

LEFT_TO_OWNER = "left to the owner of spark.embeddings"


@dataclass
class MaintainReport:
    """What :func:`maintain` did. ``built`` / ``dropped``: names of the HNSW indexes built and dropped;
    ``touched``: tenants whose statistics or index registry changed; ``index_work``: ``done``, or
    :data:`LEFT_TO_OWNER` for a role that may not build indexes; ``busy``: tenants another builder or
    refresher held; ``refused``: tenants whose statistics this role may not write; ``failed``: tenants
    left undone by a lock timeout or a cancel (run again)."""

    tenants: int = 0
    built: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    touched: int = 0
    index_work: str = "done"
    busy: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Every tenant was brought up to date, or left to whoever may or already does."""
        return not self.failed

    def as_json(self) -> dict[str, Any]:
        return {
            "tenants": self.tenants,
            "built": len(self.built),
            "dropped": len(self.dropped),
            "touched": self.touched,
            "index_work": self.index_work,
            "built_indexes": self.built,
            "dropped_indexes": self.dropped,
            "busy": self.busy,
            "refused": self.refused,
            "failed": self.failed,
            "seconds": round(self.seconds, 3),
            "ok": self.ok,
        }


def check_tenant(name: str, tenant: object) -> str:
    """``tenant`` if it is one (1 to MAX_TENANT characters, not blank, storable), else InputError naming it
    ``name``: spark.refresh_tenant_stats's own check (22023), made before anything starts."""
    problem = text_problem(tenant, MAX_TENANT)
    if problem:
        raise InputError(f"{name} {problem}")
    assert isinstance(tenant, str)
    return tenant


def maintain(
    conn: psycopg.Connection[Any], tenant: str | None = None, *, force: bool = False, progress: bool = False
) -> MaintainReport:
    """Bring the per-tenant HNSW indexes and statistics of every tenant (or ``tenant``) up to date (see the
    module). ``conn`` must be outside a transaction (CONCURRENTLY cannot run inside one); it is used in
    autocommit mode and left in the mode it had. ``progress``: a bar over the tenants."""
    usable(conn)
    force = flag_arg("force", force)
    if tenant is not None:
        tenant = check_tenant("tenant", tenant)
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise InputError(
            "maintain needs a connection outside a transaction (CREATE INDEX CONCURRENTLY cannot run in "
            "one): commit or roll back first"
        )
    report = MaintainReport()
    started = time.monotonic()
    with autocommit(conn):
        row = conn.execute(queries.MAY_BUILD_TENANT_INDEXES).fetchone()
        may_build = bool(row and row[0])
        if not may_build:
            report.index_work = LEFT_TO_OWNER
        if tenant is None:
            tenants = [str(r[0]) for r in conn.execute(queries.TENANTS).fetchall()]
        else:
            tenants = [tenant]
        report.tenants = len(tenants)
        for t in tqdm(tenants, desc="maintain", unit="tenant", disable=not progress):
            if may_build and not _indexes(conn, t, report):
                continue
            _refresh(conn, t, force, report)
    report.seconds = time.monotonic() - started
    return report


def _indexes(conn: psycopg.Connection[Any], tenant: str, report: MaintainReport) -> bool:
    """Step 1 for ``tenant``; False when its statistics must wait too (its index step did not run or gave
    up: the refresh would build or drop the index itself, inline). Another builder's build of spark.embeddings
    is waited for (two do not run side by side), however long it takes: a scheduled run may."""
    work = build_tenant_indexes(conn, [tenant], patient=True)
    report.built += work.built
    report.dropped += work.dropped
    if work.left_to_owner and report.index_work == "done":  # an owner denied an index: say so all the same
        report.index_work = LEFT_TO_OWNER
    if work.busy or work.queued:  # another builder holds the tenant (its refresh skips the index then)
        report.busy.append(tenant)
    if work.failed:  # build_tenant_indexes said why
        report.failed.append(tenant)
    return not (work.failed or work.queued)


def _refresh(conn: psycopg.Connection[Any], tenant: str, force: bool, report: MaintainReport) -> None:
    """Step 2 for ``tenant``, in a transaction of its own."""
    waiting = True
    try:
        with refresh_transaction(conn):
            conn.execute(queries.TENANT_REFRESH_LOCK, {"tenant": tenant})
            waiting = False
            args = {"tenant": tenant, "force": force}
            row = conn.execute(queries.REFRESH_ONE_TENANT_STATS, args).fetchone()
        report.touched += int(row[0]) if row and row[0] else 0
    except psycopg.errors.InsufficientPrivilege as exc:  # row-level security: not this role's rows to write
        log.info("the statistics of tenant %s are left to the owner (%s)", tenant, one_line(exc))
        report.refused.append(tenant)
    except psycopg.errors.OperationalError as exc:  # a lock or statement timeout, a cancel
        if conn.closed or conn.broken:  # the connection is lost: every tenant after would fail too
            raise
        if waiting and isinstance(exc, psycopg.errors.LockNotAvailable):
            if tenant not in report.busy:  # another refresher held the tenant: it does the same work
                report.busy.append(tenant)
        else:
            log.warning("the statistics of tenant %s were not refreshed (%s); run spark-pg maintain again",
                        tenant, one_line(exc))  # fmt: skip
            report.failed.append(tenant)
