"""The hook server's socket: where it is and what goes over it.

One request per connection: the client connects to the Unix socket, sends one JSON object and a newline,
and reads one JSON object and a newline back. Requests are ``{"v": 1, "op": "hook", "tenant": ...,
"interrupts": bool, "event": {...}}`` (the event as :meth:`HookEvent.to_wire` gives it) or ``{"v": 1,
"op": "ping"}``; answers are ``{"ok": true, "output": {...} | null}`` (``output`` is what the hook prints)
or ``{"ok": false, "error": "..."}``. Standard library only: the hook client imports this module.
"""

from __future__ import annotations

import json
import os
import socket
import time
import warnings

from spark_pg.errors import SparkPgError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing, which costs a hook's start-up
if TYPE_CHECKING:
    from typing import Any

# Paths are plain strings here: pathlib alone would add a tenth to a hook's start-up.

VERSION = 1
SOCKET_ENV = "SPARK_PG_HOOK_SOCKET"
SOCKET_NAME = "hooks.sock"
MAX_MESSAGE = 16 * 1024 * 1024  # an event carries the tool input, which can be a whole file
MAX_LINE = MAX_MESSAGE + 64 * 1024  # an event of MAX_MESSAGE bytes in its request (tenant, options)
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes on Linux, terminator included
MAX_POOL_SIZE = 64  # `spark-pg serve --pool-size`: a few agents need a handful; PostgreSQL's default is 100


class ServerUnavailable(SparkPgError):
    """No hook server listens on the socket (absent, or a stale file): the caller may work in-process."""


class WireError(SparkPgError):
    """The server answered something that is not one JSON object, or too much."""


class SocketPathError(SparkPgError):
    """No default socket path: platformdirs refuses the runtime folder (a symlink, another user's)."""


def default_socket_path() -> str:
    """``$SPARK_PG_HOOK_SOCKET``; else ``$XDG_RUNTIME_DIR/spark_pg/hooks.sock``; else ``hooks.sock`` in
    platformdirs' user runtime directory for spark_pg (``/tmp/runtime-<uid>/spark_pg`` on Linux, checked
    to be the user's own). platformdirs is imported only in the last case: it costs a hook ~15 ms.
    SocketPathError (one line) when platformdirs refuses that folder."""
    explicit = os.environ.get(SOCKET_ENV)
    if explicit:
        return os.path.expanduser(explicit)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        return os.path.join(runtime, "spark_pg", SOCKET_NAME)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        import platformdirs

        try:
            runtime = platformdirs.user_runtime_dir("spark_pg")
        except OSError as exc:  # "runtime directory /tmp/runtime-0 is a symlink; set XDG_RUNTIME_DIR ..."
            where = f"{exc.filename}: " if exc.filename and str(exc.filename) not in str(exc) else ""
            raise SocketPathError(
                f"no folder for the hook socket: {where}{exc}: set XDG_RUNTIME_DIR to a folder of your own "
                f"(mode 0700), or pass --socket (or set {SOCKET_ENV})"
            ) from None
        return os.path.join(runtime, SOCKET_NAME)


def pool_size_arg(text: str) -> int:
    """``spark-pg serve --pool-size``: 1 to MAX_POOL_SIZE (an argparse type, here so that the CLI's parser
    does not import the server, which imports psycopg)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    if value > MAX_POOL_SIZE:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_POOL_SIZE}, got {value}")
    return value


def encode(message: dict[str, Any]) -> bytes:
    """One line of JSON in UTF-8: ASCII escapes made a non-Latin event 2-3 times its size (an emoji, 4
    bytes, became 12), and a 6 MB one over the limit. A lone surrogate (not UTF-8) is escaped."""
    try:
        text = json.dumps(message, separators=(",", ":"), default=str, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        text = json.dumps(message, separators=(",", ":"), default=str).encode()
    return text + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    if len(line) > MAX_LINE:
        raise WireError(f"message over {MAX_LINE} bytes")
    try:
        value = json.loads(line)
    except ValueError as exc:
        raise WireError(f"not JSON: {exc}") from None
    except RecursionError:
        raise WireError("not JSON this server reads: nested too deeply") from None
    if not isinstance(value, dict):
        raise WireError(f"expected a JSON object, got {type(value).__name__}")
    return value


def _left(deadline: float | None) -> float | None:
    """Seconds until ``deadline`` (time.monotonic()), for socket.settimeout; TimeoutError once it passed."""
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the hook server did not answer in time")
    return left


def read_line(sock: socket.socket, deadline: float | None = None) -> bytes:
    """Bytes up to the first newline (or the end of the stream), at most MAX_LINE; by ``deadline``
    (time.monotonic()) if given."""
    chunks: list[bytes] = []
    while True:
        if deadline is not None:
            sock.settimeout(_left(deadline))
        chunk = sock.recv(65536)
        if not chunk or add_chunk(chunks, chunk):
            return b"".join(chunks)


def add_chunk(chunks: list[bytes], chunk: bytes) -> bool:
    """Add ``chunk`` to the line read so far: True once the line is whole (its newline came; what follows
    it is dropped). WireError when the line runs past MAX_LINE."""
    end = chunk.find(b"\n")
    if end >= 0:
        chunks.append(chunk[:end])
        return True
    chunks.append(chunk)
    if sum(len(c) for c in chunks) > MAX_LINE:
        raise WireError(f"message over {MAX_LINE} bytes")
    return False


BUSY_RETRY_S = 0.005  # a server whose listen backlog is full is asked again after this


def ask(path: str | os.PathLike[str], message: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Send one request and return the answer, all within ``timeout`` seconds (connect, send and answer
    together). ServerUnavailable when no server can be reached on ``path`` (nothing there, a stale file, a
    path the socket API refuses, no permission); TimeoutError when the server does not answer in time,
    including one too busy to accept the connection until then."""
    deadline = time.monotonic() + max(timeout, 0.001)
    data = encode(message)
    if len(data) > MAX_LINE:  # the server would cut it off: say so rather than meet a broken pipe
        raise WireError(f"the request is {len(data)} bytes; the hook server reads at most {MAX_LINE}")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        while True:
            sock.settimeout(_left(deadline))
            try:
                sock.connect(os.fspath(path))
                break
            except BlockingIOError:  # the backlog is full: a live server, busy; ask again shortly
                time.sleep(min(BUSY_RETRY_S, max(deadline - time.monotonic(), 0)))
            except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError, PermissionError) as exc:
                raise ServerUnavailable(f"no hook server on {path}: {exc.strerror}") from None
            except OSError as exc:
                if isinstance(exc, TimeoutError) or exc.errno is not None:
                    raise
                # no errno: the socket API refused the address itself ("AF_UNIX path too long")
                raise ServerUnavailable(f"no hook server on {path}: {exc}") from None
        sock.settimeout(_left(deadline))
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        line = read_line(sock, deadline)
        if not line:  # not "not JSON": a stopping server closes the connections it will not answer
            raise WireError("the hook server closed the connection without answering (stopping?)")
        return decode(line)


def ping(path: str | os.PathLike[str], timeout: float = 1.0) -> dict[str, Any] | None:
    """The server's ping answer (pid, rss, ...), or None when no server answers on ``path``."""
    try:
        answer = ask(path, {"v": VERSION, "op": "ping"}, timeout)
    except (OSError, SparkPgError):
        return None
    return answer if answer.get("ok") else None
