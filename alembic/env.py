"""Alembic environment for spark_pg.

Runs migrations in one transaction. After an upgrade that ends at the head revision it applies every
sql/ file (functions and views, CREATE OR REPLACE) in the same transaction. After a downgrade to base it
drops its own version table, so nothing of spark_pg is left behind.

Used programmatically by ``spark_pg.schema`` (which passes a connection) or from the command line with
``alembic -x url=postgresql://...`` (or SPARK_PG_DATABASE_URL) from the repository root.
"""

from __future__ import annotations

import os

import psycopg
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from alembic import context
from spark_pg.schema import LOCK_TIMEOUT_MS, VERSION_TABLE, apply_sql


def _find_vector(connection) -> None:  # type: ignore[no-untyped-def]
    """Put the schema holding pgvector last on this transaction's search_path when it is not on it.

    The migrations name pgvector's type as plain ``vector``; a database may hold the extension in a schema
    of its own (the sql/ files allow it). Last, so that what the migrations create unqualified still goes
    where it did; for this transaction only (a column keeps its type by oid). Nothing to do before the
    extension exists: the first migration creates it on the search_path.
    """
    connection.exec_driver_sql("""
        SELECT set_config('search_path', concat_ws(', ', nullif(current_setting('search_path'), ''),
                                                   quote_ident(n.nspname)), true)
        FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
        WHERE e.extname = 'vector' AND NOT n.nspname = ANY (current_schemas(false))""")


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(
        connection=connection,
        version_table=VERSION_TABLE,
        version_table_schema="public",
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        # waiting for a lock behind a long transaction would queue every later query of the tables behind
        # the upgrade: give up after the timeout instead (the transaction rolls back, nothing is changed)
        timeout = int(context.config.attributes.get("lock_timeout_ms", LOCK_TIMEOUT_MS))
        connection.exec_driver_sql("SELECT set_config('lock_timeout', %s, true)", (f"{timeout}ms",))
        # one init at a time: two at once raced to create the version table (23505) or to replace the same
        # function (XX000 tuple concurrently updated); the second now waits, then finds nothing to do
        connection.exec_driver_sql("SELECT pg_advisory_xact_lock(hashtext('spark_pg.schema'))")
        _find_vector(connection)
        context.run_migrations()
        heads = set(context.get_context().get_current_heads())
        if heads and heads == set(context.script.get_heads()):
            # the raw psycopg connection runs multi-statement files and leaves '%' alone
            apply_sql(connection.connection.driver_connection)
        elif not heads:
            connection.exec_driver_sql(f"DROP TABLE IF EXISTS public.{VERSION_TABLE}")


def main() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or os.environ.get("SPARK_PG_DATABASE_URL")
    if not url:
        raise SystemExit("pass -x url=postgresql://... or set SPARK_PG_DATABASE_URL")
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(url), poolclass=NullPool)
    with engine.connect() as conn:
        _run(conn)
        conn.commit()


if context.is_offline_mode():
    raise SystemExit("spark_pg migrations run online only (sql/ files are applied against a live database)")
main()
