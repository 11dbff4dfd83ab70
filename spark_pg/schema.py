"""Install and upgrade the database: Alembic migrations (run once) and sql/ files (re-applied every time).

``install(url)`` upgrades to the head revision; the Alembic environment then applies every
``sql/NNN-name.sql`` file in name order inside the same transaction, so a fresh install and an
upgraded database end identical and nothing is half-applied.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from spark_pg.config import KEY_BY_NAME
from spark_pg.errors import DatabaseError, SchemaError

SQL_FILE = re.compile(r"^\d{3}-[a-z0-9][a-z0-9-]*\.sql$")
VERSION_TABLE = "spark_alembic_version"  # in public: it must outlive `DROP SCHEMA spark` on downgrade


class MigrationWarning(UserWarning):
    """A migration's RAISE WARNING (e.g. a CHECK left NOT VALID because old rows break it): raised as a Python
    warning while the upgrade runs, so that callers see it (it went only to the server's log before);
    ``spark-pg init`` prints it as ``spark-pg: warning: ...``."""


def _warn_on_server_warnings(notice: psycopg.errors.Diagnostic) -> None:
    if notice.severity_nonlocalized == "WARNING":
        warnings.warn(notice.message_primary or "", MigrationWarning, stacklevel=2)


def resource_dir(name: str) -> Path:
    """``sql`` or ``alembic``: the repo folder in a source checkout, else the copy bundled in the wheel."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / name, here / "_bundled" / name):
        if candidate.is_dir():
            return candidate
    raise SchemaError(f"cannot find the {name!r} folder next to the spark_pg package; reinstall spark_pg")


def sql_files() -> list[Path]:
    """The sql/ files in apply order; any .sql file not named NNN-name.sql is an error."""
    folder = resource_dir("sql")
    files = sorted(folder.glob("*.sql"))
    bad = [f.name for f in files if not SQL_FILE.match(f.name)]
    if bad:
        raise SchemaError(f"sql/ files must be named NNN-name.sql (lowercase): {', '.join(bad)}")
    return files


def apply_sql(conn: psycopg.Connection[Any]) -> list[str]:
    """Run every sql/ file on ``conn`` (inside the caller's transaction); returns the names applied.

    ``@vector_schema@`` in a file stands for the schema holding the pgvector extension (public unless
    installed elsewhere), so functions can pin ``search_path`` to it and pg_catalog only.
    """
    row = conn.execute(
        "SELECT quote_ident(extnamespace::regnamespace::text) FROM pg_extension WHERE extname = 'vector'"
    ).fetchone()
    if row is None:
        raise SchemaError("the vector extension is not installed in this database")
    vector_schema = str(row[0])
    conn.execute("SELECT set_config('search_path', %s, true)", (f"pg_catalog, {vector_schema}",))
    # Load pgvector's library: until it is loaded in this session, hnsw.* settings are unknown placeholders,
    # and only a superuser may name one in a function's SET clause (42501 for a database owner otherwise).
    conn.execute("SELECT '[1]'::vector")
    names = []
    for path in sql_files():
        conn.execute(path.read_text(encoding="utf-8").replace("@vector_schema@", vector_schema).encode())
        names.append(path.name)
    return names


LOCK_TIMEOUT_MS: int = KEY_BY_NAME["database.migration_lock_timeout_ms"].default


@contextmanager
def _alembic(url: str, lock_timeout_ms: int = LOCK_TIMEOUT_MS) -> Iterator[tuple[Any, Any]]:
    from alembic.config import Config
    from alembic.util import CommandError
    from sqlalchemy import create_engine
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.pool import NullPool

    from spark_pg.db import open_plain

    engine = create_engine("postgresql+psycopg://", creator=lambda: open_plain(url), poolclass=NullPool)
    cfg = Config()
    cfg.set_main_option("script_location", str(resource_dir("alembic")))
    waited = SchemaError(
        f"the upgrade waited {lock_timeout_ms} ms for a lock another transaction holds and changed nothing: "
        "run it again when long transactions have ended, or raise database.migration_lock_timeout_ms"
    )
    try:
        with engine.connect() as connection:
            driver = connection.connection.driver_connection
            assert driver is not None  # a live connection (the engine's creator made it)
            driver.add_notice_handler(_warn_on_server_warnings)
            cfg.attributes["connection"] = connection
            cfg.attributes["lock_timeout_ms"] = lock_timeout_ms
            yield cfg, connection
    except CommandError as exc:  # a revision this spark_pg does not have (a newer one migrated the database)
        raise SchemaError(f"{exc}: {_unknown_revision_hint()}") from None
    except psycopg.errors.LockNotAvailable as exc:  # in the sql/ step, which runs on the driver's connection
        raise waited from exc
    except DBAPIError as exc:
        if isinstance(exc.orig, psycopg.errors.LockNotAvailable):
            raise waited from exc.orig
        # SQLAlchemy wraps the driver's error; callers (and the CLI) handle psycopg's own, with its SQLSTATE
        if isinstance(exc.orig, psycopg.Error):
            raise exc.orig from None
        raise DatabaseError(f"migration failed: {exc}") from exc
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head", *, lock_timeout_ms: int = LOCK_TIMEOUT_MS) -> None:
    """Migrate to ``revision`` in one transaction; each lock is waited for at most ``lock_timeout_ms``
    (0: no limit), after which nothing is changed and SchemaError says so."""
    from alembic import command

    with _alembic(url, lock_timeout_ms) as (cfg, connection):
        command.upgrade(cfg, revision)
        connection.commit()


def downgrade(url: str, revision: str = "base") -> None:
    from alembic import command

    with _alembic(url) as (cfg, connection):
        command.downgrade(cfg, revision)
        connection.commit()


def _installed_revision(conn: psycopg.Connection[Any]) -> str | None:
    """The revision recorded in the version table, or None when spark_pg is not installed."""
    exists = conn.execute("SELECT to_regclass(%s)", (f"public.{VERSION_TABLE}",)).fetchone()
    if not exists or exists[0] is None:
        return None
    try:
        row = conn.execute(f"SELECT version_num FROM public.{VERSION_TABLE}").fetchone()
    except psycopg.errors.InsufficientPrivilege as exc:
        # a tenant role under row-level security without the documented grants (docs/security.md)
        raise DatabaseError(
            f"role {conn.info.user} cannot read public.{VERSION_TABLE}, which every client checks: "
            f"GRANT SELECT ON public.{VERSION_TABLE} TO it (docs/security.md, rls-grants)"
        ) from exc
    return None if row is None else str(row[0])


def current_revision(url: str) -> str | None:
    from spark_pg.db import open_plain

    with open_plain(url) as conn:
        return _installed_revision(conn)


def _scripts() -> Any:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(resource_dir("alembic")))
    return ScriptDirectory.from_config(cfg)


@functools.cache
def head_revision() -> str:
    head = _scripts().get_current_head()
    assert head is not None
    return str(head)


@functools.cache
def known_revisions() -> frozenset[str]:
    """Every revision this spark_pg's migrations define."""
    return frozenset(str(rev.revision) for rev in _scripts().walk_revisions())


def _unknown_revision_hint() -> str:
    return (
        f"this spark_pg's migrations end at {head_revision()}, so a newer spark_pg migrated this database: "
        "upgrade spark_pg (pip install -U spark_pg, or pull and `make`) rather than run init"
    )


def install(url: str, *, lock_timeout_ms: int = LOCK_TIMEOUT_MS) -> str:
    """Upgrade to head and (re-)apply sql/; safe to run any number of times. Returns the revision."""
    upgrade(url, "head", lock_timeout_ms=lock_timeout_ms)
    return head_revision()


def require_current(conn: psycopg.Connection[Any]) -> None:
    """Raise SchemaError unless the schema is installed at the head revision."""
    version = _installed_revision(conn)
    if version is not None and version not in known_revisions():
        raise SchemaError(f"the database schema is at {version}, unknown here: {_unknown_revision_hint()}")
    if version is None:
        raise SchemaError("the database has no spark_pg schema yet: run `spark-pg init`")
    if version != head_revision():
        raise SchemaError(f"the database schema is at {version}, not {head_revision()}: run `spark-pg init`")
