"""Blocks that run a connection in another mode, then put the mode back: autocommit, no statement timeout."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from spark_pg import queries


@contextmanager
def autocommit(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """The block in autocommit mode (a statement is a transaction of its own; CONCURRENTLY can run), then
    the mode before. For an idle connection: psycopg refuses the switch inside a transaction."""
    if conn.autocommit:
        yield
        return
    conn.autocommit = True
    try:
        yield
    finally:
        # a lost connection cannot take the setting back; its own error is the one to see
        if not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE:
            conn.autocommit = False


@contextmanager
def statement_timeout_lifted(conn: psycopg.Connection[Any], *, local: bool) -> Iterator[None]:
    """No statement timeout for the block, then the one in force before. ``local``: for the caller's
    transaction (SET LOCAL: a block that fails is rolled back with its setting); else for the session (an
    autocommit connection, where a SET LOCAL would end with its own statement)."""
    row = conn.execute(queries.LIFT_STATEMENT_TIMEOUT, {"local": local}).fetchone()
    assert row is not None
    try:
        yield
    finally:
        # not on a failed transaction (its rollback restores a local setting) nor a lost connection
        if not conn.closed and conn.info.transaction_status in (
            TransactionStatus.IDLE,
            TransactionStatus.INTRANS,
        ):
            conn.execute(queries.SET_STATEMENT_TIMEOUT, {"value": row[0], "local": local})
