"""Scratch databases on the configured server, for evaluation and benchmarks (and the test suite)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from spark_pg.db import open_plain
from spark_pg.errors import DatabaseError, InputError

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# where claims are taken: advisory locks belong to one database, and every run must meet every other
# whatever database its URL names. Not template1: a session there makes CREATE DATABASE fail
LOCK_DATABASE = "postgres"


def with_dbname(url: str, dbname: str) -> str:
    """The same server URL, pointing at another database."""
    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo("", **params)


def _checked(name: str) -> str:
    if not _NAME.match(name):
        raise InputError(f"database name {name!r} must match {_NAME.pattern}")
    return name


def _admin(server_url: str) -> psycopg.Connection[Any]:
    return open_plain(server_url, autocommit=True)


def exists(server_url: str, name: str) -> bool:
    with _admin(server_url) as admin:
        return admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def create(server_url: str, name: str, *, exist_ok: bool = False) -> str:
    """Create database ``name`` and return its URL (``exist_ok``: an existing one, even one created
    concurrently, is fine)."""
    with _admin(server_url) as admin:
        try:
            admin.execute(f'CREATE DATABASE "{_checked(name)}"')
        except psycopg.errors.DuplicateDatabase:
            if not exist_ok:
                raise
    return with_dbname(server_url, name)


def _lock_session(server_url: str) -> psycopg.Connection[Any]:
    """A connection to the server's ``postgres`` database; to ``server_url``'s own database when that one
    cannot be connected to (it may have been dropped, or the role may lack CONNECT on it), unless that is
    template1."""
    try:
        return _admin(with_dbname(server_url, LOCK_DATABASE))
    except DatabaseError:
        if conninfo_to_dict(server_url).get("dbname") == "template1":
            raise
        return _admin(server_url)


@contextmanager
def claimed(server_url: str, name: str) -> Iterator[bool]:
    """Hold a session advisory lock on scratch database ``name`` for the block (on a connection of its own,
    so it holds across the block's connections and ends with the process); yields whether this process got
    it: False while another holds it. The lock is taken in the server's ``postgres`` database, whichever
    database ``server_url`` names (taken in that one, two runs whose URLs named two databases of one server
    both got it, and one's ``--fresh`` dropped the scratch database under the other)."""
    with _lock_session(server_url) as admin:
        row = admin.execute(
            "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (f"scratch:{name}",)
        ).fetchone()
        yield bool(row and row[0])


def drop(server_url: str, name: str) -> None:
    """Drop database ``name`` if it exists, disconnecting its sessions."""
    with _admin(server_url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{_checked(name)}" WITH (FORCE)')


def check_free_connections(server_url: str, needed: int, fix: str) -> None:
    """InputError, before any work, when the server has fewer free connection slots than ``needed``
    (max_connections less the reserved ones and those in use); ``fix`` says what to give fewer of."""
    from spark_pg import queries

    with _admin(server_url) as conn:
        row = conn.execute(queries.FREE_CONNECTIONS).fetchone()
    free = int(row[0]) if row is not None else needed
    if free < needed:
        raise InputError(
            f"the run needs {needed} connections and the server has {free} free (max_connections less the "
            f"reserved and those in use): {fix}"
        )
