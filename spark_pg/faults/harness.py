"""The scratch home `spark-pg faults` breaks things in: its own embedded server (which may be SIGKILLed),
the schema, a copy of the model files, a config file naming both, the child processes, the cleanup."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import psycopg
import yaml

from spark_pg import schema
from spark_pg.bench_hooks import hook_command as spark_pg_command
from spark_pg.config import Settings, load_settings
from spark_pg.db import EmbeddedServer, connect
from spark_pg.embedding import Embedder, load_embedder
from spark_pg.errors import ModelNotAvailable, SparkPgError
from spark_pg.faults.report import Say, quiet
from spark_pg.model_files import missing_files

SERVER_GONE_TIMEOUT_S = 30.0
Ran = tuple[subprocess.CompletedProcess[str], float]


class FaultError(SparkPgError):
    """A scenario could not be run to its end (a process did not start, a wait timed out)."""


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def tail(path: Path, chars: int = 800) -> str:
    try:
        return path.read_text(errors="replace")[-chars:].strip()
    except OSError:
        return "(no log)"


class Lab:
    """A scratch home: its own embedded server, the schema, a copy of the model files and a config file
    naming them. Processes started through :meth:`spawn` and :meth:`run` (each in a process group of its
    own, so that a signal reaches anything it started, and Ctrl-C in a terminal reaches only the drill,
    which stops them in order) are stopped, the server shut down and the home removed (unless ``keep``)
    by :meth:`close`, on failure too."""

    def __init__(self, model_source: Path, *, keep: bool = False, say: Say = quiet) -> None:
        if missing_files(model_source):
            raise ModelNotAvailable(
                f"spark-pg faults copies the offline model from {model_source}, which lacks "
                f"{', '.join(missing_files(model_source))}: run `spark-pg model setup` first"
            )
        self.model_source = model_source
        self.keep = keep
        self.say = say
        self.home = Path(tempfile.mkdtemp(prefix="spark-pg-faults-"))
        self.server = EmbeddedServer(self.home, shared_buffers_mb=128)
        self.model_dir = self.home / "model"
        self.logs = self.home / "logs"
        self.config = self.home / "config.yaml"
        self.url = ""
        self._settings: Settings | None = None
        self._procs: list[subprocess.Popen[bytes]] = []  # started by spawn
        self._running: set[subprocess.Popen[str]] = set()  # started by run, not yet ended
        self._stopping = False  # closing: run starts nothing more
        self._lock = threading.Lock()
        self.setup_s = 0.0

    def open(self) -> Lab:
        started = time.perf_counter()
        try:
            self.logs.mkdir()
            shutil.copytree(self.model_source, self.model_dir, copy_function=_link_or_copy)
            self.say(f"scratch home {self.home}: starting its own embedded server")
            self.url = self.server.up()
            schema.install(self.url)
            config = {
                "home": str(self.home),
                "database": {"url": self.url},
                "embedding": {"model": "all-MiniLM-L6-v2-int8", "model_dir": str(self.model_dir)},
            }
            self.config.write_text(yaml.safe_dump(config))
        except BaseException:  # __exit__ never runs for a failed __enter__: stop the server, remove the home
            self.close()
            raise
        self.setup_s = time.perf_counter() - started
        self.say(f"server up and schema installed in {self.setup_s:.1f} s")
        return self

    def __enter__(self) -> Lab:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(config_file=self.config, environ={})
        return self._settings

    @property
    def embedder(self) -> Embedder:
        return load_embedder(self.settings)

    @property
    def env(self) -> dict[str, str]:
        """The environment of the processes started here: only the scratch config (no SPARK_PG_* of the
        caller), no progress bars' colours, unbuffered output."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_PG_")}
        return env | {"SPARK_PG_CONFIG": str(self.config), "PYTHONUNBUFFERED": "1"}

    def connect(self, *, autocommit: bool = False) -> psycopg.Connection[Any]:
        return connect(self.url, autocommit=autocommit)

    def spawn(
        self, name: str, args: list[str], *, python: bool = False, stdin: bool = False
    ) -> subprocess.Popen[bytes]:
        """Start ``spark-pg ARGS`` (or ``python ARGS``) in a process group of its own, with stderr to
        ``logs/NAME.log``, stdout piped (and stdin, with ``stdin``)."""
        command = [sys.executable, *args] if python else [*spark_pg_command(), *args]
        with (self.logs / f"{name}.log").open("ab") as err:
            proc = subprocess.Popen(
                command,
                env=self.env,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                process_group=0,
            )
        self._procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        return tail(self.logs / f"{name}.log", 100_000)

    def run(
        self, name: str, args: list[str], timeout: float = 120, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``spark-pg ARGS`` to its end (stderr kept in ``logs/NAME.log`` too), ``stdin`` as its input.
        It runs in a process group of its own, killed if the wait ends early (a timeout, an interrupt)."""
        with self._lock:
            if self._stopping:
                raise FaultError(f"not starting {name}: the scratch home is being closed")
            proc = subprocess.Popen(
                [*spark_pg_command(), *args],
                env=self.env,
                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                process_group=0,
            )
            self._running.add(proc)
        try:
            with proc:  # its pipes closed however the wait ends
                try:
                    out, err = proc.communicate(stdin, timeout=timeout)
                except BaseException:
                    _kill(proc)
                    raise
        finally:
            with self._lock:
                self._running.discard(proc)
        (self.logs / f"{name}.log").write_text(err)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def run_both(self, first: tuple[str, list[str]], second: tuple[str, list[str]]) -> tuple[Ran, Ran]:
        """Two independent :meth:`run` calls at once, each with its wall time in seconds. An interrupt
        kills both processes (the pool waits for its threads before the interrupt goes on)."""

        def timed(job: tuple[str, list[str]]) -> Ran:
            started = time.perf_counter()
            done = self.run(*job)
            return done, time.perf_counter() - started

        with ThreadPoolExecutor(2) as pool:
            a, b = pool.submit(timed, first), pool.submit(timed, second)
            try:
                return a.result(), b.result()
            except KeyboardInterrupt:
                self._kill_running()
                raise

    def _kill_running(self) -> None:
        """Kill the processes :meth:`run` is waiting for, and start no more."""
        with self._lock:
            self._stopping = True
            running = list(self._running)
        for proc in running:
            _kill(proc)

    def stop(self, proc: subprocess.Popen[bytes], timeout: float = 20) -> int:
        """SIGTERM to its process group, then SIGKILL after ``timeout``; the exit code."""
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _kill(proc)
        return int(proc.returncode)

    def postmaster_pid(self) -> int:
        pid = self.server.status().pid
        if pid is None:
            raise FaultError(f"the scratch server in {self.server.pgdata} is not running")
        return pid

    def kill_server(self) -> float:
        """SIGKILL the postmaster (kill -9) and wait until it and its children are gone: the seconds."""
        pid = self.postmaster_pid()
        postmaster = psutil.Process(pid)
        children = postmaster.children(recursive=True)
        started = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        _, alive = psutil.wait_procs([postmaster, *children], timeout=SERVER_GONE_TIMEOUT_S)
        for proc in alive:  # a backend that did not notice its postmaster died: it must not hold shmem
            with suppress(psutil.Error):
                proc.kill()
        deadline = time.monotonic() + SERVER_GONE_TIMEOUT_S
        while self.server.status().running:
            if time.monotonic() > deadline:
                raise FaultError(f"the postmaster {pid} still looks alive after SIGKILL")
            time.sleep(0.01)
        return time.perf_counter() - started

    def close(self) -> None:
        """Stop every process started here, then the server, and remove the home (unless ``keep``). It runs
        to its end even when a KeyboardInterrupt (Ctrl-C, or a signal under
        :func:`spark_pg.console.stop_signals_interrupt`) lands in it: the step it cut short is finished by
        force (SIGKILL), the others still run, and the interrupt is raised at the end."""
        interrupted: KeyboardInterrupt | None = None
        steps: list[Callable[[], None]] = [*(partial(self._close_proc, p) for p in self._procs)]
        steps += [self._kill_running, self._stop_server, self._remove_home]
        for step in steps:
            try:
                with suppress(Exception):  # a step that failed must not stop the next ones
                    step()
            except KeyboardInterrupt as exc:
                interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted

    def _close_proc(self, proc: subprocess.Popen[bytes]) -> None:
        try:
            self.stop(proc, timeout=10)
        except BaseException:
            _kill(proc)
            raise
        finally:
            if proc.stdout is not None:
                proc.stdout.close()

    def _stop_server(self) -> None:
        try:
            self.server.down()
        except BaseException:  # cannot be stopped cleanly, or interrupted: it must not outlive us
            with suppress(Exception):
                pid = self.server.status().pid
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
            raise

    def _remove_home(self) -> None:
        if self.keep:
            self.say(f"kept {self.home} (server stopped)")
        else:
            shutil.rmtree(self.home, ignore_errors=True)


def _signal_group(proc: subprocess.Popen[Any], sig: int) -> None:
    """Send ``sig`` to the process group ``proc`` leads (spawned with ``process_group=0``)."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _kill(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the process group ``proc`` leads, and reap ``proc``."""
    if proc.poll() is None:
        _signal_group(proc, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(10)


def wait_for(what: str, test: Callable[[], bool], timeout: float, every: float = 0.05) -> float:
    """Poll ``test`` until true: the seconds it took; FaultError after ``timeout``."""
    started = time.perf_counter()
    while not test():
        if time.perf_counter() - started > timeout:
            raise FaultError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)
    return time.perf_counter() - started


def json_line(out: str) -> dict[str, Any]:
    """The last non-blank line of a process's output, as JSON ({} if it is not a JSON object)."""
    lines = [line for line in out.splitlines() if line.strip()]
    try:
        value = json.loads(lines[-1]) if lines else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def last_json(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The last line of a stopped process's stdout, as JSON ({} if it is not)."""
    out = b""
    if proc.stdout is not None and not proc.stdout.closed:
        out = proc.stdout.read()
    return json_line(out.decode(errors="replace"))
