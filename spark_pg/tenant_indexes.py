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
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from spark_pg import queries
from spark_pg.connection_modes import autocommit, lock_timeout, statement_timeout_lifted
from spark_pg.refusals import one_line

log = logging.getLogger(__name__)

BUILD_LOCK_TIMEOUT_MS = 5000  # the longest a build waits for older transactions (and locks) before giving up


def build_concurrently(conn: psycopg.Connection[Any], tenants: Sequence[str]) -> int:
    """Run spark.tenant_index_plan's CONCURRENTLY statements for ``tenants``; returns how many ran.

    Only on a connection outside a transaction (CONCURRENTLY cannot run inside one): inside a caller's
    transaction nothing runs here and the refresh builds the indexes itself. A lock or statement timeout, or
    a cancel, is logged and leaves the tenant to the next refresh."""
    if conn.info.transaction_status != TransactionStatus.IDLE:
        return 0
    ran = 0
    with (
        autocommit(conn),
        statement_timeout_lifted(conn, local=False),  # a build at 100,000 takes minutes
        lock_timeout(conn, BUILD_LOCK_TIMEOUT_MS, local=False),
    ):
        for tenant in tenants:
            held = conn.execute(queries.TRY_TENANT_INDEX_LOCK, {"tenant": tenant}).fetchone()
            if held is None or not held[0]:
                continue  # another builder is at work on this tenant
            try:
                steps = conn.execute(queries.TENANT_INDEX_PLAN, {"tenant": tenant}).fetchall()
                for _, name, action, statement in steps:
                    log.info("%s the HNSW index %s of tenant %s (concurrently)", action, name, tenant)
                    conn.execute(statement)
                    ran += 1
            except psycopg.errors.OperationalError as exc:  # a lock timeout, a cancel
                log.warning("the HNSW index of tenant %s was not built (%s); the next write tries again",
                            tenant, one_line(exc))  # fmt: skip
            except psycopg.errors.InsufficientPrivilege as exc:  # only the table's owner builds its indexes
                log.info("the HNSW index of tenant %s is left to the owner of spark.embeddings (%s)",
                         tenant, one_line(exc))  # fmt: skip
            finally:
                if not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE:
                    conn.execute(queries.TENANT_INDEX_UNLOCK, {"tenant": tenant})
    return ran
