"""The database side: ``spark.revalue_sample`` and ``spark.revalue_apply``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from spark_pg import queries
from spark_pg.errors import InputError
from spark_pg.refusals import refusals
from spark_pg.retrieve import one_statement
from spark_pg.revalue.checks import decisions_arg, fraction_arg
from spark_pg.revalue.records import (
    DEFAULT_COOLDOWN_DAYS,
    DEFAULT_MAX_IMPORTANCE,
    DEFAULT_MIN_AGE_DAYS,
    DEFAULT_SAMPLE,
    MAX_DAYS,
    Applied,
    Decision,
    Sampled,
)
from spark_pg.sql_args import INT8, flag_arg, int_arg, nullable_text_arg


def sample(
    conn: psycopg.Connection[Any],
    tenant: str,
    n: int = DEFAULT_SAMPLE,
    *,
    max_importance: float = DEFAULT_MAX_IMPORTANCE,
    min_age_days: float = DEFAULT_MIN_AGE_DAYS,
    cooldown_days: float = DEFAULT_COOLDOWN_DAYS,
    seed: int | None = None,
) -> list[Sampled]:
    """spark.revalue_sample: up to ``n`` random memories of ``tenant`` at or below ``max_importance`` (0 to
    1), created at least ``min_age_days`` ago and not revalued within ``cooldown_days`` (0 to 36,500 days
    each); ``seed`` an integer or None. An argument of the wrong type or out of range raises InputError
    naming it (a tenant that is not a str, an ``n`` or ``seed`` that is not an integer, ...)."""
    checked = {
        "tenant": nullable_text_arg("tenant", tenant),
        "n": int_arg("n", n),
        "max_importance": fraction_arg("max_importance", max_importance),
        "seed": None if seed is None else int_arg("seed", seed, INT8),
    }
    for name, days in (("min_age_days", min_age_days), ("cooldown_days", cooldown_days)):
        if isinstance(days, bool) or not isinstance(days, int | float) or not 0 <= days <= MAX_DAYS:
            raise InputError(f"{name} must be a number of days from 0 to {MAX_DAYS}, got {days!r}")
    with one_statement(conn):  # the caller's connection as it was, also on error
        rows = conn.execute(
            queries.REVALUE_SAMPLE,
            checked | {"min_age": timedelta(days=min_age_days), "cooldown": timedelta(days=cooldown_days)},
        ).fetchall()
    return [Sampled(*row) for row in rows]


def apply(
    conn: psycopg.Connection[Any],
    tenant: str,
    decisions: Sequence[Decision],
    *,
    decided_by: str = "api",
    dry_run: bool = False,
) -> list[Applied]:
    """spark.revalue_apply, in one transaction: committed when ``conn`` has no transaction open (else part of
    the caller's); ``dry_run`` checks and reports everything, then rolls back. A decision the database
    refuses (an id that is not the tenant's, ...) raises InputError and nothing is applied; a decision whose
    ``expected`` importance is no longer the memory's comes back with status "skipped: changed since
    sampled", the others applied. An argument of the wrong type raises InputError naming it before anything
    is sent (a tenant or ``decided_by`` that is not a str, an item that is not a :class:`Decision`, a NaN
    importance, ...).

    The function must read each memory and its last revaluation as last committed, after the concurrent
    batches it waited for: its own transaction runs at READ COMMITTED whatever the server's default, and a
    caller's transaction at another isolation level raises InputError (under REPEATABLE READ two concurrent
    batches that keep one memory both logged it)."""
    args = {
        "tenant": nullable_text_arg("tenant", tenant),
        "decided_by": nullable_text_arg("decided_by", decided_by),
    }
    payload = json.dumps([d.as_json() for d in decisions_arg(decisions)])
    rollback = flag_arg("dry_run", dry_run)
    own = conn.info.transaction_status == TransactionStatus.IDLE
    if not own:
        _require_read_committed(conn)
    with refusals(), conn.transaction(force_rollback=rollback):
        if own:  # before any query of the transaction, as PostgreSQL requires
            conn.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        rows = conn.execute(queries.REVALUE_APPLY, args | {"decisions": payload}).fetchall()
    return [Applied(*row) for row in rows]


def _require_read_committed(conn: psycopg.Connection[Any]) -> None:
    """InputError when the caller's open transaction is not at READ COMMITTED."""
    row = conn.execute("SELECT current_setting('transaction_isolation')").fetchone()
    level = row[0] if row else None
    if level != "read committed":
        raise InputError(
            f"apply must run at READ COMMITTED (it reads each memory's last revaluation as last committed), "
            f"and the open transaction is {str(level).upper()}: commit it first, or open it at READ COMMITTED"
        )
