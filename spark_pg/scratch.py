"""Scratch databases on the configured server, for evaluation and benchmarks (and the test suite)."""

from __future__ import annotations

import re

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from spark_pg.errors import InputError

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def with_dbname(url: str, dbname: str) -> str:
    """The same server URL, pointing at another database."""
    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo("", **params)


def _checked(name: str) -> str:
    if not _NAME.match(name):
        raise InputError(f"database name {name!r} must match {_NAME.pattern}")
    return name


def exists(server_url: str, name: str) -> bool:
    with psycopg.connect(server_url, autocommit=True) as admin:
        return admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def create(server_url: str, name: str) -> str:
    """Create database ``name`` (which must not exist) and return its URL."""
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{_checked(name)}"')
    return with_dbname(server_url, name)


def drop(server_url: str, name: str) -> None:
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{_checked(name)}" WITH (FORCE)')
