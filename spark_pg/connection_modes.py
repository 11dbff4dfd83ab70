"""Blocks that run a connection in another mode, then put the mode back: autocommit, no statement timeout;
and the checks a caller's connection passes before a call uses it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from spark_pg import queries
from spark_pg.errors import InputError


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
def _setting(conn: psycopg.Connection[Any], name: str, value: str, *, local: bool) -> Iterator[None]:
    """The server setting ``name`` at ``value`` for the block, then the value in force before. ``local``:
    for the caller's transaction (SET LOCAL: a block that fails is rolled back with its setting; one set
    inside a savepoint would last to the end of the caller's transaction, so it is put back too); else for
    the session (an autocommit connection, where a SET LOCAL would end with its own statement)."""
    row = conn.execute(queries.SET_SETTING_RETURNING_OLD, {"name": name, "value": value, "local": local})
    old = row.fetchone()
    assert old is not None
    try:
        yield
    finally:
        # not on a failed transaction (its rollback restores a local setting) nor a lost connection
        if not conn.closed and conn.info.transaction_status in (
            TransactionStatus.IDLE,
            TransactionStatus.INTRANS,
        ):
            conn.execute(queries.SET_SETTING, {"name": name, "value": old[0], "local": local})


def statement_timeout_lifted(conn: psycopg.Connection[Any], *, local: bool) -> AbstractContextManager[None]:
    """No statement timeout for the block, then the one in force before (``local``: see :func:`_setting`)."""
    return _setting(conn, "statement_timeout", "0", local=local)


def lock_timeout(conn: psycopg.Connection[Any], ms: int, *, local: bool) -> AbstractContextManager[None]:
    """lock_timeout ``ms`` for the block, then the one in force before (``local``: see :func:`_setting`)."""
    return _setting(conn, "lock_timeout", f"{ms}ms", local=local)


def usable(conn: Any) -> psycopg.Connection[Any]:
    """``conn`` if it is a psycopg connection whose transaction has not failed, else InputError saying so:
    on a failed one every statement raised InFailedSqlTransaction, and psycopg logged a second error
    rolling back the savepoint it could not make."""
    if not isinstance(conn, psycopg.Connection):
        raise InputError(f"conn must be a psycopg connection, got {type(conn).__name__}")
    if conn.info.transaction_status == TransactionStatus.INERROR:
        raise InputError(
            "conn is in a failed transaction (an earlier statement raised an error): roll it back "
            "(conn.rollback()) before this call"
        )
    return conn


def vectors_adaptable(conn: psycopg.Connection[Any]) -> None:
    """pgvector's adapters on ``conn`` before a vector is sent (a plain ``psycopg.connect`` has none): see
    :func:`spark_pg.traces.reflect.ensure_vector_adapters`; a dictionary look-up once registered."""
    if conn.adapters.types.get("vector") is None:
        from spark_pg.traces.reflect import ensure_vector_adapters  # it imports spark_pg.retrieve

        ensure_vector_adapters(conn)
