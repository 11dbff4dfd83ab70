"""``spark-pg serve``: the embedding model and a connection pool kept warm behind a Unix socket.

One thread per connection (``socketserver.ThreadingMixIn``), one request per connection (:mod:`.wire`).
The socket is created with mode 0600 in a 0700 directory: whoever can connect can write outcomes. On
start the server takes an exclusive lock next to the socket, refuses to start when another server holds
it or answers on the socket, and removes a stale socket file (only a socket: anything else at the path is
left alone and the server refuses to start). While it loads the model the server holds the lock but has no
socket yet: a second server tells that ("still starting") from a server whose socket file was deleted by
whether the lock's holder has a socket bound to the path (:func:`binds`).

SIGTERM and SIGINT stop it cleanly: it stops accepting (the socket file is removed, connections not yet
accepted are refused), drops requests still being read, waits up to ``STOP_GRACE_S`` for the requests
being answered, then closes the pool and exits 0. Past that bound (a request stuck in the database or the
model) it says so in its log and leaves with ``os._exit(0)``: the interpreter's own exit would tear the
model's native threads down under a running request and abort the process.

Without the model files the server still starts and answers lexically (one warning in its log), and tries
to load the model again at most every ``query_model.RETRY_S`` seconds: once the files are back, advice is
hybrid again without a restart.

At start the database is checked on one plain connection before the model loads: an unreachable
database, a schema that needs ``spark-pg init`` or a ``--pool-size`` over max_connections (less the
reserved slots) end the start-up at once, in one line naming the cause.

Once it listens, when the database goes away (a crash, a restart) the server keeps running: requests
answer with an error at once or when their deadline passes, the pool replaces broken connections and,
after ``RECONNECT_TIMEOUT_S`` of failed attempts (1 s, then 2 s apart), stops trying until the next
request, which tries again at once. So the first request after the database is back is served after at
most about 2 s (the pool's own backoff would otherwise double without bound, to minutes after a long
outage).
"""

from __future__ import annotations

import fcntl
import logging
import os
import select
import signal
import socket
import socketserver
import stat
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import psutil
from psycopg_pool import ConnectionPool, PoolTimeout

from spark_pg import schema
from spark_pg.config import Settings
from spark_pg.db import database_url, open_plain, register_vector_if_present
from spark_pg.embedding import Embedder
from spark_pg.errors import DatabaseError, SparkPgError
from spark_pg.hooks import wire
from spark_pg.hooks.service import Conn, HookService, hook_conninfo, retrieve_params
from spark_pg.query_model import QueryModel

POOL_MAX = 4
HANDLER_TIMEOUT_S = 10.0  # a client that has not sent a whole request by then is dropped (one deadline)
STOP_GRACE_S = 5.0  # on SIGTERM/SIGINT, how long the requests being answered may still take
STOP_POLL_S = 0.1  # how often a handler reading a request looks whether the server is stopping
RECONNECT_TIMEOUT_S = 5.0  # the pool's reconnect attempts give up after this; the next request retries


class HookServerError(SparkPgError):
    """The server cannot start: its socket is taken or unusable."""


def client_closed(sock: socket.socket) -> bool:
    """Whether the client has closed its end: after sending it only shuts down writing (POLLRDHUP); gone
    (its budget ran out, or it was killed) the socket also hangs up (POLLHUP)."""
    poller = select.poll()
    poller.register(sock, select.POLLHUP)
    return any(events & select.POLLHUP for _, events in poller.poll(0))


class _Stopping(Exception):
    """The server is stopping: a request not read yet is dropped (the client sees the connection close)."""


def read_request(sock: socket.socket, deadline: float, stopping: threading.Event) -> bytes | None:
    """A request's bytes up to the first newline (or the end of the stream), at most about MAX_LINE; None
    when the client closed without sending a byte. The whole request by ``deadline`` (time.monotonic()),
    not each read: TimeoutError after it (a client sending a byte now and then cannot hold a thread),
    _Stopping once ``stopping`` is set."""
    chunks: list[bytes] = []
    while True:
        if stopping.is_set():
            raise _Stopping
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no whole request within {HANDLER_TIMEOUT_S:.0f} s")
        sock.settimeout(min(left, STOP_POLL_S))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        if not chunk and not chunks:
            return None
        if not chunk or wire.add_chunk(chunks, chunk):
            return b"".join(chunks)


class _Handler(socketserver.StreamRequestHandler):
    timeout = HANDLER_TIMEOUT_S  # for writing the answer
    server: HookServer

    def handle(self) -> None:
        started = time.perf_counter()
        received = time.monotonic()  # the request's deadline_ms counts from here
        response: dict[str, Any] | None = None
        try:
            line = read_request(self.connection, received + self.server.read_timeout, self.server.stopping)
        except _Stopping:
            self.server.log("request not read: the server is stopping (the connection is closed)")
            return
        except wire.WireError as exc:  # too long
            line, response = b"", {"ok": False, "error": str(exc)}
        except OSError as exc:  # silent past the read timeout, or gone before it sent a whole request
            self.server.log(f"request not read: {type(exc).__name__}: {exc}")
            return
        if line is None:
            self.server.log("request not read (the client closed without sending)")
            return
        if response is None:
            try:
                response = self.server.service.respond(
                    wire.decode(line), received, lambda: client_closed(self.connection)
                )
            except wire.WireError as exc:
                response = {"ok": False, "error": str(exc)}
        self.server.count()
        try:
            self.connection.settimeout(self.timeout)
            self.wfile.write(wire.encode(response))
        except OSError as exc:  # the client left first (its budget ran out, or it was killed)
            spent = (time.perf_counter() - started) * 1000
            self.server.log(
                f"answer not delivered after {spent:.0f} ms: the client left ({type(exc).__name__})"
            )
            return
        spent = (time.perf_counter() - started) * 1000
        if not response.get("ok"):
            self.server.log(f"request failed after {spent:.0f} ms: {response.get('error')}")
        elif response.get("expired"):
            self.server.log(
                f"no advice after {spent:.0f} ms: the client's deadline passed or it left (rolled back)"
            )


class HookServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """One thread per connection; the running ones are counted, so that stopping can wait for them
    (:meth:`wait_idle`) instead of tearing the pool and the model down under them."""

    daemon_threads = True  # never joined by the interpreter: stopping waits a bounded time (wait_idle)
    block_on_close = False
    request_queue_size = 128  # listen backlog: a burst of parallel tool calls waits instead of being refused
    read_timeout = HANDLER_TIMEOUT_S  # the whole request must arrive within this (tests shorten it)

    def __init__(self, path: Path, service: HookService, log: Callable[[str], None]) -> None:
        self.path = path
        self.service = service
        self.log = log
        self.served = 0
        self.stopping = threading.Event()  # set: handlers still reading a request drop it
        self._served_lock = threading.Lock()
        self._running = 0
        self._idle = threading.Condition()
        old = os.umask(0o177)
        try:
            super().__init__(str(path), _Handler)
        finally:
            os.umask(old)

    def count(self) -> None:
        with self._served_lock:
            self.served += 1

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._idle:  # counted before its thread starts: wait_idle cannot miss it
            self._running += 1
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread to count it down
            self._done()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done()

    def _done(self) -> None:
        with self._idle:
            self._running -= 1
            self._idle.notify_all()

    def wait_idle(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for the running handlers to end; how many are still running."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._running > 0 and (left := deadline - time.monotonic()) > 0:
                self._idle.wait(left)
            return self._running


def is_socket(path: Path) -> bool:
    """Whether ``path`` itself (not what a symlink points to) is a Unix socket."""
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _same_file(path: Path, known: os.stat_result) -> bool:
    """Whether ``path`` is still the socket ``known`` describes: a socket with the same device, inode and
    change time (an inode number can be reused by the next file created)."""
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        return False
    same = (now.st_dev, now.st_ino, now.st_ctime_ns) == (known.st_dev, known.st_ino, known.st_ctime_ns)
    return stat.S_ISSOCK(now.st_mode) and same


def _not_a_socket(path: Path) -> HookServerError:
    return HookServerError(f"{path} exists and is not a socket: pass another --socket (it is left alone)")


def lock_holder(fd: int) -> int | None:
    """The pid of the process holding a flock on the file open as ``fd``, from /proc/locks (Linux), or
    None: the server that holds a socket is named even when its socket no longer answers."""
    st = os.fstat(fd)
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            for line in locks:
                fields = line.split()
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == where and fields[4].isdigit():
                    return int(fields[4])
    except OSError:
        pass
    return None


def binds(pid: int, path: Path) -> bool | None:
    """Whether process ``pid`` has a Unix socket bound to ``path`` (its name stays in the kernel's table
    after the file was deleted), None when that cannot be told (another user's process, no /proc). A server
    that holds the lock but binds nothing yet is still starting: it binds once its model and pool are up."""
    names = {str(path), os.path.abspath(path)}
    try:
        sockets = psutil.Process(pid).net_connections(kind="unix")
    except (psutil.Error, OSError):
        return None
    return any(isinstance(s.laddr, str) and s.laddr in names for s in sockets)


class SocketClaim:
    """The right to serve on a socket path: an exclusive lock, held until :meth:`release`."""

    def __init__(self, where: str | os.PathLike[str]) -> None:
        path = Path(where)
        if len(os.fsencode(path)) > wire.MAX_SOCKET_PATH:
            limit = wire.MAX_SOCKET_PATH
            raise HookServerError(f"socket path {path} is longer than {limit} bytes: pass a shorter --socket")
        if os.path.lexists(path) and not is_socket(path):  # before creating the lock file beside it
            raise _not_a_socket(path)
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:  # a file on the way, no permission, a read-only or virtual file system
            raise HookServerError(
                f"cannot create the socket's folder {path.parent}: {exc.strerror}: pass another --socket"
            ) from None
        self.path = path
        lock = path.parent / f".{path.name}.lock"
        try:  # neither truncates nor follows a symlink: the lock file may be someone else's file
            self._lock = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise HookServerError(f"cannot open the lock file {lock}: {exc.strerror}") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = lock_holder(self._lock)
            self._close()
            answer = wire.ping(path)
            pid = answer.get("pid") if answer else holder
            who = f" (pid {pid})" if pid else ""
            if answer is None and not is_socket(path):
                bound = None if holder is None else binds(holder, path)
                if bound is False:  # it holds the lock while it loads the model, before it binds
                    raise HookServerError(
                        f"another spark-pg serve{who} holds {path} and is still starting (loading the model, "
                        "opening the pool): it answers there once it has started"
                    ) from None
                kill = f"stop it{f' (kill {pid})' if pid else ''} and start this one again"
                if bound is None:
                    raise HookServerError(
                        f"another spark-pg serve{who} holds {path} but has no socket there: it may still be "
                        f"starting (then wait for it); if its socket was deleted, no hook reaches it: {kill}"
                    ) from None
                raise HookServerError(  # it listened, then its socket was removed: no hook can reach it
                    f"another spark-pg serve{who} holds {path} but its socket is gone, so no hook reaches "
                    f"it: {kill}"
                ) from None
            raise HookServerError(f"another spark-pg serve{who} holds {path}") from None
        answer = wire.ping(path)
        if answer is not None:  # a server that does not lock (another version) still owns it
            self.release()
            raise HookServerError(f"a server (pid {answer.get('pid')}) already answers on {path}")
        if is_socket(path):
            path.unlink()  # stale: nothing answers on it
        elif os.path.lexists(path):
            self.release()
            raise _not_a_socket(path)

    def _close(self) -> None:
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1

    def release(self) -> None:
        if self._lock >= 0:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._close()


# the connections a role without superuser rights may ever hold at once, and the reserved ones
_CONNECTION_SLOTS = """
SELECT current_setting('max_connections')::int,
       current_setting('superuser_reserved_connections')::int
       + coalesce(current_setting('reserved_connections', true)::int, 0)
"""


def check_database(conn: Conn, size: int) -> None:
    """DatabaseError (SchemaError: run ``spark-pg init``) unless the schema is current and a pool of
    ``size`` fits in the database's max_connections less its reserved slots (a larger pool would meet
    "too many clients" only under load)."""
    schema.require_current(conn)
    row = conn.execute(_CONNECTION_SLOTS).fetchone()
    conn.rollback()
    if row is None:
        return
    most, reserved = int(row[0]), int(row[1])
    if size > most - reserved:
        raise DatabaseError(
            f"--pool-size {size} is more connections than the database allows: max_connections is {most}, "
            f"{reserved} of them reserved; pass --pool-size {max(1, most - reserved)} or less (other "
            "clients need connections too)"
        )


def open_pool(url: str, size: int, log: Callable[[str], None] | None = None) -> ConnectionPool[Conn]:
    """A pool of connections with pgvector registered and the hooks' timeouts. The database is checked
    first on one plain connection (:func:`check_database`): an unreachable database, a schema that needs
    ``spark-pg init`` or a pool over max_connections fail at once, one DatabaseError naming the cause, not
    after the pool's own retries. Once the pool is open, a reconnect that fails for RECONNECT_TIMEOUT_S is
    given up (``log`` says so); the next request starts another."""
    conninfo = hook_conninfo(url)
    with open_plain(conninfo) as conn:
        check_database(conn, size)
    opened = threading.Event()  # no "next request" before the server listens: start-up fails instead

    def configure(conn: Conn) -> None:
        register_vector_if_present(conn)

    def given_up(pool: ConnectionPool[Conn]) -> None:
        if log is not None and opened.is_set():
            log(
                f"the database has not answered for {RECONNECT_TIMEOUT_S:.0f} s; "
                "the next request tries to connect again"
            )

    pool: ConnectionPool[Conn] = ConnectionPool(
        conninfo,
        min_size=1,
        max_size=max(1, size),
        configure=configure,
        check=ConnectionPool.check_connection,
        reconnect_timeout=RECONNECT_TIMEOUT_S,
        reconnect_failed=given_up,
        open=False,
        name="spark-pg-hooks",
    )
    try:  # the database answered a moment ago: only one that went away since then waits this long
        pool.open(wait=True, timeout=RECONNECT_TIMEOUT_S)
    except PoolTimeout:
        pool.close()
        raise DatabaseError(
            f"cannot connect to the database: it stopped answering while the pool opened "
            f"(no connection within {RECONNECT_TIMEOUT_S:.0f} s)"
        ) from None
    opened.set()
    return pool


Warm = tuple[HookService, ConnectionPool[Conn], Embedder | None]


def build(settings: Settings, pool_size: int = POOL_MAX, log: Callable[[str], None] | None = None) -> Warm:
    """The warm service: the model loaded and used once (or None while it cannot load: lexical advice,
    see QueryModel; ``log`` is told), the pool open (first: a database that cannot serve fails before the
    model loads, :func:`open_pool`). Unless embedding.threads is set,
    the model runs on one thread: the server embeds one short query at a time, which one thread does
    faster than one per core (12.9 against 19.7 ms median on 2 cores, docs/performance.md), and the other
    cores stay free for PostgreSQL and the hook processes."""
    if settings.opt_int("embedding.threads") is None:
        settings = Settings({**settings.as_dict(), "embedding.threads": 1}, settings.config_file)
    pool = open_pool(database_url(settings), pool_size, log)
    try:
        model = QueryModel(settings, warn=log or _log)
        embedder = model()
        if embedder is not None:
            embedder.embed_query("warm up")
    except BaseException:
        pool.close()
        raise
    process = psutil.Process()

    def info() -> dict[str, Any]:
        loaded = model()
        return {
            "rss": process.memory_info().rss,
            "model": None if loaded is None else loaded.spec.name,
            "lexical": model.reason,
        }

    service = HookService(pool.connection, model, params=retrieve_params(settings), info=info)
    return service, pool, embedder


_log_lock = threading.Lock()


def _log(message: str) -> None:
    """One line on stderr in one write, under a lock: lines of several handler threads never mix (print
    wrote the message and its newline apart, so lines of parallel requests ran into each other)."""
    line = f"spark-pg serve: {message}\n"
    with _log_lock:
        try:
            sys.stderr.write(line)
            sys.stderr.flush()
        except (OSError, ValueError):  # stderr closed or gone: the server keeps serving
            pass


def _flush_output() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            with _log_lock:
                stream.flush()
        except (OSError, ValueError):
            pass


class _OneLine(logging.Handler):
    """A log record as one line through the server's ``log``: the pool's messages (``error connecting in
    'spark-pg-hooks': ...``) went to stderr through logging's last-resort handler, two lines each, the
    second indented, between the server's own one-line messages."""

    def __init__(self, log: Callable[[str], None]) -> None:
        super().__init__(logging.WARNING)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.log(" ".join(record.getMessage().split()))
        except Exception:  # a message that cannot be formatted never stops the server
            self.handleError(record)


# the pool logs as "psycopg.pool", its scheduler (the thread that reconnects) as "psycopg_pool.sched"
POOL_LOGGERS = ("psycopg.pool", "psycopg_pool")


def _pool_log_lines(log: Callable[[str], None]) -> None:
    """Route psycopg's pool loggers through ``log``, one line a record (once per logger: a server started
    again in one process replaces its handler)."""
    for name in POOL_LOGGERS:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if isinstance(h, _OneLine)]:
            logger.removeHandler(old)
        logger.addHandler(_OneLine(log))
        logger.propagate = False


def serve(
    settings: Settings,
    where: str | os.PathLike[str],
    *,
    pool_size: int = POOL_MAX,
    log: Callable[[str], None] = _log,
) -> None:
    """Serve until SIGTERM or SIGINT (main thread only). Refuses fast, before loading anything, when the
    socket is taken."""
    claim = SocketClaim(where)
    path = claim.path
    _pool_log_lines(log)
    pool: ConnectionPool[Conn] | None = None
    bound: os.stat_result | None = None
    try:
        started = time.monotonic()
        service, pool, embedder = build(settings, pool_size, log)
        server = HookServer(path, service, log)
        bound = os.lstat(path)  # which socket is ours: only that one is removed at the end
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if not stop.is_set():  # a second signal while stopping changes nothing: stopping is bounded
                stop.set()
                threading.Thread(target=server.shutdown, daemon=True).start()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        log(
            f"listening on {path} (pid {os.getpid()}, "
            f"model {embedder.spec.name if embedder else 'none yet: lexical advice'}, "
            f"pool {pool_size}, ready in {time.monotonic() - started:.1f} s)"
        )
        try:
            server.serve_forever(poll_interval=0.2)
        finally:
            server.stopping.set()  # handlers still reading a request drop it
            server.server_close()  # no new connection; those not accepted yet are refused
            if _same_file(path, bound):  # ours; never another server's or anything else
                path.unlink()
            bound = None
            still = server.wait_idle(STOP_GRACE_S)  # the requests being answered, with the pool still open
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if still:
                log(
                    f"stopped after {server.served} requests; {still} still running after "
                    f"{STOP_GRACE_S:.0f} s are abandoned (their connections close, the database rolls "
                    "their transactions back): exiting without waiting for them"
                )
                _flush_output()
                # not the interpreter's exit: the model's native threads torn down under a running
                # request abort the process ("terminate called without an active exception")
                os._exit(0 if stop.is_set() else 1)
            log(f"stopped after {server.served} requests")
    finally:
        if bound is not None and _same_file(path, bound):  # ours; never another server's or anything else
            path.unlink()
        if pool is not None:
            pool.close()
        claim.release()
