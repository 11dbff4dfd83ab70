"""The database side: ``spark.revalue_sample`` and ``spark.revalue_apply``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import psycopg

from spark_pg import queries
from spark_pg.errors import InputError
from spark_pg.refusals import refusals
from spark_pg.retrieve import one_statement
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
    """spark.revalue_sample: up to ``n`` random memories of ``tenant`` at or below ``max_importance``,
    created at least ``min_age_days`` ago and not revalued within ``cooldown_days`` (0 to 36,500 days each;
    InputError otherwise, as for an ``n`` that is not an integer)."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise InputError(f"n must be an integer, got {n!r}")
    for name, days in (("min_age_days", min_age_days), ("cooldown_days", cooldown_days)):
        if isinstance(days, bool) or not isinstance(days, int | float) or not 0 <= days <= MAX_DAYS:
            raise InputError(f"{name} must be a number of days from 0 to {MAX_DAYS}, got {days!r}")
    with one_statement(conn):  # the caller's connection as it was, also on error
        rows = conn.execute(
            queries.REVALUE_SAMPLE,
            {
                "tenant": tenant,
                "n": n,
                "max_importance": max_importance,
                "min_age": timedelta(days=min_age_days),
                "cooldown": timedelta(days=cooldown_days),
                "seed": seed,
            },
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
    """spark.revalue_apply in one round trip. Committed when ``conn`` has no transaction open (else part of
    the caller's); ``dry_run`` checks and reports everything, then rolls back. A decision the database
    refuses (an id that is not the tenant's, ...) raises InputError and nothing is applied; a decision whose
    ``expected`` importance is no longer the memory's comes back with status "skipped: changed since
    sampled", the others applied."""
    payload = json.dumps([d.as_json() for d in decisions])
    with refusals(), conn.transaction(force_rollback=dry_run):
        rows = conn.execute(
            queries.REVALUE_APPLY, {"tenant": tenant, "decisions": payload, "decided_by": decided_by}
        ).fetchall()
    return [Applied(*row) for row in rows]
