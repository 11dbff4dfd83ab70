"""`spark-pg faults`: break things on purpose and check, by counting rows, that nothing committed is lost.

Everything runs against a scratch embedded server in a temporary home (never the user's server or data),
so the postmaster itself may be killed. Three scenarios, each verified by reading the tables back:

a. **worker killed**: ``spark-pg worker`` is SIGKILLed while it holds a claimed, uncommitted batch. The
   claimed rows must return to the queue; a restarted worker must embed them, and every memory must end
   with exactly one vector and the queue empty.
b. **database killed**: the postmaster is SIGKILLed while an ingest (a child process writing chunk after
   chunk, one transaction each) is running and while a ``spark-pg worker`` and a ``spark-pg serve`` hook
   server are connected. After ``EmbeddedServer.up()`` (crash recovery from the WAL): every chunk the
   ingest reported committed is there whole, no chunk is partial, texts equal the source, nothing is
   duplicated; re-running the same ingest completes the rest; the same worker and hook-server processes
   resume by themselves (the worker embeds memories queued after the restart). Times from the restart
   to the first retrieval, the hook server's first advice and the worker's first batch are measured.
c. **model files removed**: retrieval still answers, lexically, and says why (``why.mode`` is
   ``lexical``, a warning names the missing files); an ingest that needs the model fails with
   ModelNotAvailable and writes nothing; ``--defer-embedding`` still stores; with the files back the
   next process is hybrid again and a worker drains what was deferred.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg
import yaml

from spark_pg import schema, synthetic
from spark_pg.config import Settings, load_settings
from spark_pg.db import EmbeddedServer, connect
from spark_pg.embedding import MODELS, Embedder, load_embedder, model_dir_for
from spark_pg.errors import InputError, ModelNotAvailable, SparkPgError
from spark_pg.ingest import ingest
from spark_pg.model_files import missing_files
from spark_pg.records import MemoryIn, read_file

Say = Callable[[str], None]
SERVER_GONE_TIMEOUT_S = 30.0
HOOK_TENANT = "faults-hooks"
HOOK_MEMORIES = (
    (
        "alembic-sql",
        "database",
        "Run `alembic upgrade head --sql` first and review the generated SQL before migrating a shared "
        "database.",
    ),
    ("pytest-x", "testing", "Run pytest with -x when a suite is slow, so the first failure stops the run."),
)
HOOK_COMMAND = "alembic upgrade head on the staging database"
QUERY = "review the database migration before pushing to main"


class FaultError(SparkPgError):
    """A scenario could not be run to its end (a process did not start, a wait timed out)."""


@dataclass(frozen=True)
class Check:
    what: str
    actual: Any
    expected: Any
    ok: bool

    def as_json(self) -> dict[str, Any]:
        return {"what": self.what, "actual": self.actual, "expected": self.expected, "ok": self.ok}


@dataclass
class Scenario:
    """One scenario's verdict: the counts checked, the times measured (seconds), what happened."""

    name: str
    title: str
    checks: list[Check] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.checks) and all(c.ok for c in self.checks)

    def equal(self, what: str, actual: Any, expected: Any) -> bool:
        same = bool(actual == expected)
        self.checks.append(Check(what, actual, expected, same))
        return same

    def that(self, what: str, ok: bool, actual: Any = None) -> bool:
        """A check that is not an equality (a range, a text found): ``what`` says what was expected."""
        self.checks.append(Check(what, actual, "yes", bool(ok)))
        return bool(ok)

    def check(self, name: str) -> Check:
        """The check whose ``what`` starts with ``name`` (for tests)."""
        for c in self.checks:
            if c.what.startswith(name):
                return c
        raise KeyError(name)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "ok": self.ok,
            "seconds": round(self.seconds, 2),
            "checks": [c.as_json() for c in self.checks],
            "counts": self.counts,
            "timings_s": {k: round(v, 3) for k, v in self.timings.items()},
            "notes": self.notes,
            "error": self.error,
        }


@dataclass
class FaultReport:
    scenarios: list[Scenario] = field(default_factory=list)
    setup_s: float = 0.0
    seconds: float = 0.0
    server: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.scenarios) and all(s.ok for s in self.scenarios)

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "seconds": round(self.seconds, 1),
            "setup_s": round(self.setup_s, 2),
            "server": self.server,
            "cores": os.cpu_count(),
            "scenarios": [s.as_json() for s in self.scenarios],
        }


def _quiet(message: str) -> None:
    pass


def _spark_pg_command() -> list[str]:
    script = Path(sys.executable).parent / "spark-pg"
    return [str(script)] if script.exists() else [sys.executable, "-m", "spark_pg.cli"]


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def _tail(path: Path, chars: int = 800) -> str:
    try:
        return path.read_text(errors="replace")[-chars:].strip()
    except OSError:
        return "(no log)"


class Lab:
    """A scratch home: its own embedded server, the schema, a copy of the model files and a config file
    naming them. Processes started through :meth:`spawn` are stopped, the server shut down and the home
    removed (unless ``keep``) by :meth:`close`, on failure too."""

    def __init__(self, model_source: Path, *, keep: bool = False, say: Say = _quiet) -> None:
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
        self._procs: list[subprocess.Popen[bytes]] = []
        self.setup_s = 0.0

    def open(self) -> Lab:
        started = time.perf_counter()
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
        """Start ``spark-pg ARGS`` (or ``python ARGS``) with stderr to ``logs/NAME.log``, stdout piped
        (and stdin, with ``stdin``)."""
        command = [sys.executable, *args] if python else [*_spark_pg_command(), *args]
        with (self.logs / f"{name}.log").open("ab") as err:
            proc = subprocess.Popen(
                command,
                env=self.env,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        self._procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        return _tail(self.logs / f"{name}.log", 100_000)

    def run(self, name: str, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``spark-pg ARGS`` to its end (stderr kept in ``logs/NAME.log`` too)."""
        done = subprocess.run(
            [*_spark_pg_command(), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        (self.logs / f"{name}.log").write_text(done.stderr)
        return done

    def run_both(
        self, first: tuple[str, list[str]], second: tuple[str, list[str]]
    ) -> tuple[
        tuple[subprocess.CompletedProcess[str], float], tuple[subprocess.CompletedProcess[str], float]
    ]:
        """Two independent :meth:`run` calls at once, each with its wall time in seconds."""

        def timed(job: tuple[str, list[str]]) -> tuple[subprocess.CompletedProcess[str], float]:
            started = time.perf_counter()
            done = self.run(*job)
            return done, time.perf_counter() - started

        with ThreadPoolExecutor(2) as pool:
            a, b = pool.submit(timed, first), pool.submit(timed, second)
            return a.result(), b.result()

    def stop(self, proc: subprocess.Popen[bytes], timeout: float = 20) -> int:
        """SIGTERM, then SIGKILL after ``timeout``; the exit code."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
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
        for proc in self._procs:
            with suppress(Exception):
                self.stop(proc, timeout=10)
            if proc.stdout is not None:
                proc.stdout.close()
        try:
            self.server.down()
        except Exception:
            with suppress(Exception):  # cannot be stopped cleanly: it must not outlive us
                pid = self.server.status().pid
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
        if self.keep:
            self.say(f"kept {self.home} (server stopped)")
        else:
            shutil.rmtree(self.home, ignore_errors=True)


# --- reading the tables back ---------------------------------------------------------------------------


def tenant_counts(conn: psycopg.Connection[Any], tenant: str) -> dict[str, int]:
    """memories, distinct keys, vectors, memories with a vector, most vectors of one memory, queued."""
    row = conn.execute(
        """SELECT (SELECT count(*) FROM spark.memories WHERE tenant = %(t)s),
                  (SELECT count(DISTINCT key) FROM spark.memories WHERE tenant = %(t)s),
                  (SELECT count(*) FROM spark.embeddings WHERE tenant = %(t)s),
                  (SELECT count(DISTINCT memory_id) FROM spark.embeddings WHERE tenant = %(t)s),
                  (SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM spark.embeddings
                     WHERE tenant = %(t)s GROUP BY memory_id) x),
                  (SELECT count(*) FROM spark.embed_queue WHERE tenant = %(t)s)""",
        {"t": tenant},
    ).fetchone()
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
        conn.rollback()
    assert row is not None
    names = ("memories", "keys", "vectors", "with_vector", "most_per_memory", "queued")
    return dict(zip(names, (int(v) for v in row), strict=True))


def counts(lab: Lab, tenant: str) -> dict[str, int]:
    with lab.connect() as conn:
        return tenant_counts(conn, tenant)


def _wait_for(what: str, test: Callable[[], bool], timeout: float, every: float = 0.05) -> float:
    """Poll ``test`` until true: the seconds it took; FaultError after ``timeout``."""
    started = time.perf_counter()
    while not test():
        if time.perf_counter() - started > timeout:
            raise FaultError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)
    return time.perf_counter() - started


def _records(tenant: str, prefix: str, n: int, seed: int) -> list[MemoryIn]:
    return [
        MemoryIn(tenant=tenant, key=f"{prefix}{i:05d}", text=text)
        for i, text in enumerate(synthetic.texts(n, seed=seed))
    ]


def _write_jsonl(path: Path, records: list[MemoryIn]) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps({"tenant": r.tenant, "key": r.key, "text": r.text}) + "\n")
    return path


@contextmanager
def _scenario(name: str, title: str, say: Say) -> Iterator[Scenario]:
    result = Scenario(name, title)
    started = time.perf_counter()
    say(f"{name}. {title}")
    try:
        yield result
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"
        say(f"{name}: stopped by {result.error}")
    finally:
        result.seconds = time.perf_counter() - started
        say(f"{name}: {'PASS' if result.ok else 'FAIL'} ({result.seconds:.1f} s)")


# --- a. the worker killed mid-batch ---------------------------------------------------------------------

IN_FLIGHT = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL
"""
UNCLAIMED = (
    "SELECT count(*) FROM (SELECT 1 FROM spark.embed_queue WHERE tenant = %s FOR UPDATE SKIP LOCKED) x"
)


def worker_killed(lab: Lab, n: int = 600, batch: int = 64, say: Say = _quiet) -> Scenario:
    tenant = "faults-worker"
    with _scenario("a", "worker SIGKILLed mid-batch", say) as s:
        with lab.connect() as conn:
            ingest(conn, _records(tenant, "w", n, seed=21), None)
        say(f"a: {n} memories stored with deferred embedding; starting `spark-pg worker --batch {batch}`")
        worker = lab.spawn("worker-a1", ["worker", "--batch", str(batch), "--quiet", "--poll", "5"])
        in_flight = 0
        try:
            with lab.connect(autocommit=True) as conn:
                deadline = time.monotonic() + 120
                while True:
                    if worker.poll() is not None:
                        raise FaultError(f"the worker exited ({worker.returncode}): {lab.log('worker-a1')}")
                    if time.monotonic() > deadline:
                        raise FaultError("no batch was seen in flight within 120 s")
                    vectors = tenant_counts(conn, tenant)["vectors"]
                    row = conn.execute(IN_FLIGHT).fetchone()
                    in_flight = int(row[0]) if row else 0
                    if 0 < vectors < n and in_flight > 0:  # a batch committed, the next one is claimed
                        worker.send_signal(signal.SIGKILL)
                        break
                    time.sleep(0.01)
        finally:
            lab.stop(worker)
        s.that("a claimed batch was in flight when the worker was SIGKILLed", in_flight > 0, in_flight)
        released = _wait_for("the killed worker's rows to be released", lambda: _unclaimed(lab, tenant), 30)
        s.timings["rows_released_after_kill"] = released
        after = counts(lab, tenant)
        s.counts.update(memories=n, vectors_at_kill=after["vectors"], queued_after_kill=after["queued"])
        s.that(
            f"some but not all vectors committed before the kill (0 < {after['vectors']} < {n})",
            0 < after["vectors"] < n,
            after["vectors"],
        )
        s.equal("rows back in the queue (memories - vectors)", after["queued"], n - after["vectors"])
        say(f"a: killed with {after['vectors']} embedded; {after['queued']} back in the queue; restarting")
        started = time.perf_counter()
        first_batch: float | None = None
        again = lab.spawn("worker-a2", ["worker", "--batch", str(batch), "--quiet", "--poll", "5", "--json"])
        try:
            deadline = time.monotonic() + 180
            while (now := counts(lab, tenant))["queued"] > 0:
                if first_batch is None and now["vectors"] > after["vectors"]:
                    first_batch = time.perf_counter() - started
                if again.poll() is not None or time.monotonic() > deadline:
                    raise FaultError(f"the restarted worker did not drain the queue: {lab.log('worker-a2')}")
                time.sleep(0.05)
            s.timings["restart_to_first_batch"] = first_batch or time.perf_counter() - started
            s.timings["restart_to_queue_empty"] = time.perf_counter() - started
            code = lab.stop(again)
        finally:
            lab.stop(again)
        summary = _last_json(again)
        s.equal("restarted worker exits 0 on SIGTERM", code, 0)
        s.equal("restarted worker embedded exactly the rows left", summary.get("embedded"), after["queued"])
        final = counts(lab, tenant)
        s.equal("memories", final["memories"], n)
        s.equal("memories with a vector", final["with_vector"], n)
        s.equal("vectors (exactly one per memory)", final["vectors"], n)
        s.equal("most vectors of one memory", final["most_per_memory"], 1)
        s.equal("queue", final["queued"], 0)
    return s


def _unclaimed(lab: Lab, tenant: str) -> bool:
    with lab.connect(autocommit=True) as conn:
        queued = tenant_counts(conn, tenant)["queued"]
        row = conn.execute(UNCLAIMED, (tenant,)).fetchone()
    return row is not None and int(row[0]) == queued


def _last_json(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The last line of a stopped process's stdout, as JSON ({} if it is not)."""
    out = b""
    if proc.stdout is not None and not proc.stdout.closed:
        out = proc.stdout.read()
    lines = [line for line in out.decode(errors="replace").splitlines() if line.strip()]
    try:
        value = json.loads(lines[-1]) if lines else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# --- b. the database server killed mid-ingest -----------------------------------------------------------

INGEST_CHILD = "import sys; from spark_pg.faults import ingest_child; sys.exit(ingest_child(sys.argv[1:]))"


def ingest_child(argv: list[str]) -> int:
    """``CONFIG FILE CHUNK``: load the model, connect, print ``ready`` and wait for a line on stdin; then
    ingest FILE chunk by chunk, one transaction each (with embedding), printing ``committed INDEX INSERTED
    UPDATED`` after each commit. Run as a child process by scenario b."""
    from spark_pg.client import SparkClient

    config, path, chunk = Path(argv[0]), Path(argv[1]), int(argv[2])
    try:
        settings = load_settings(config_file=config, environ={})
        records = read_file(path)
        with SparkClient(settings) as client:
            client.embedder  # noqa: B018 - load the model first
            client.conn  # noqa: B018
            print("ready", flush=True)
            sys.stdin.readline()
            for index, start in enumerate(range(0, len(records), chunk)):
                result = client.ingest_records(records[start : start + chunk])
                print(f"committed {index} {result.inserted} {result.updated}", flush=True)
    except (SparkPgError, psycopg.Error) as exc:
        print(f"ingest stopped: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
        return 1
    print("done", flush=True)
    return 0


class _Lines:
    """A child's stdout lines, read by a thread, each with the time it arrived."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.lines: queue.Queue[tuple[float, str] | None] = queue.Queue()
        self._proc = proc
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            self.lines.put((time.perf_counter(), raw.decode(errors="replace").strip()))
        self.lines.put(None)

    def get(self, timeout: float) -> tuple[float, str] | None:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise FaultError(f"no output from the ingest within {timeout:.0f} s") from None

    def rest(self, timeout: float) -> list[str]:
        self._thread.join(timeout)
        out: list[str] = []
        while True:
            try:
                item = self.lines.get_nowait()
            except queue.Empty:
                return out
            if item is not None:
                out.append(item[1])


def _committed(lines: list[str]) -> list[tuple[int, int, int]]:
    """(chunk, inserted, updated) of each ``committed`` line."""
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) == 4 and parts[0] == "committed":
            out.append((int(parts[1]), int(parts[2]), int(parts[3])))
    return out


def _hook_request(deadline_ms: int) -> dict[str, Any]:
    from spark_pg.hooks import wire
    from spark_pg.hooks.protocol import PRE, HookEvent

    event = HookEvent(PRE, "Bash", {"command": HOOK_COMMAND}, "faults-session")
    return {
        "v": wire.VERSION,
        "op": "hook",
        "tenant": HOOK_TENANT,
        "interrupts": False,
        "deadline_ms": deadline_ms,
        "event": event.to_wire(),
    }


def _ask_hook(sock: Path, deadline_ms: int = 2000) -> dict[str, Any]:
    """The hook server's answer to a PreToolUse request (``unreachable`` when nothing answers)."""
    from spark_pg.hooks import wire

    try:
        return wire.ask(sock, _hook_request(deadline_ms), deadline_ms / 1000 + 3)
    except (OSError, SparkPgError) as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "unreachable": True}


def _direct_retrieval(lab: Lab, tenant: str) -> bool:
    """One spark.retrieve on a new connection, with the query embedded: True when it answered."""
    from spark_pg.client import SparkClient

    try:
        with SparkClient(lab.settings, url=lab.url) as client:
            client.search(tenant, QUERY, k=5)
    except (SparkPgError, psycopg.Error):
        return False
    return True


def _present_by_chunk(lab: Lab, tenant: str, source: list[MemoryIn], chunk: int) -> dict[str, Any]:
    """Which chunks of ``source`` are in the table, whole or in part, whether texts match, vectors."""
    with lab.connect() as conn:
        rows = conn.execute(
            """SELECT m.key, m.text, count(e.memory_id) FROM spark.memories m
               LEFT JOIN spark.embeddings e ON e.tenant = m.tenant AND e.memory_id = m.id
               WHERE m.tenant = %s GROUP BY m.key, m.text""",
            (tenant,),
        ).fetchall()
    position = {r.key: i for i, r in enumerate(source)}
    per_chunk: dict[int, int] = {}
    mismatched = unknown = with_vector = 0
    for key, text, vectors in rows:
        i = position.get(key)
        if i is None:
            unknown += 1
            continue
        per_chunk[i // chunk] = per_chunk.get(i // chunk, 0) + 1
        mismatched += text != source[i].text
        with_vector += int(vectors) == 1
    sizes = {c: len(source[c * chunk : (c + 1) * chunk]) for c in range(-(-len(source) // chunk))}
    return {
        "rows": len(rows),
        "whole": sorted(c for c, k in per_chunk.items() if k == sizes[c]),
        "partial": sorted(c for c, k in per_chunk.items() if k != sizes[c]),
        "mismatched": mismatched,
        "unknown": unknown,
        "with_vector": with_vector,
    }


def database_killed(
    lab: Lab,
    n: int = 1000,
    chunk: int = 100,
    kill_after: int = 3,
    downtime_s: float = 2.0,
    late: int = 16,
    say: Say = _quiet,
) -> Scenario:
    tenant, late_tenant = "faults-ingest", "faults-late"
    with _scenario("b", "database server SIGKILLed mid-ingest, then restarted", say) as s:
        if n < chunk * (kill_after + 2):
            raise InputError(f"n must be at least chunk * (kill_after + 2) = {chunk * (kill_after + 2)}")
        source = _records(tenant, "k", n, seed=31)
        path = _write_jsonl(lab.home / "ingest.jsonl", source)
        with lab.connect() as conn:
            hook_rows = [MemoryIn(tenant=HOOK_TENANT, key=k, category=c, text=t) for k, c, t in HOOK_MEMORIES]
            ingest(conn, hook_rows, lab.embedder)
        sock = lab.home / "hooks.sock"
        say("b: starting a long-running `spark-pg worker` and a `spark-pg serve` hook server")
        worker = lab.spawn("worker-b", ["worker", "--quiet", "--poll", "5", "--json"])
        server = lab.spawn("serve", ["serve", "--socket", str(sock)])
        child = lab.spawn(
            "ingest-1", ["-c", INGEST_CHILD, str(lab.config), str(path), str(chunk)], python=True, stdin=True
        )
        try:
            lines = _Lines(child)
            _ready(lab, worker, server, sock, s)
            pids = (worker.pid, server.pid)
            first = lines.get(timeout=120)
            if first is None or first[1] != "ready":
                raise FaultError(f"the ingest did not start: {lab.log('ingest-1')}")
            say(f"b: ingesting {n} memories in chunks of {chunk} (one transaction each), with embedding")
            assert child.stdin is not None
            child.stdin.write(b"go\n")
            child.stdin.close()
            went = time.perf_counter()
            seen: list[tuple[float, str]] = []
            while len(_committed([t for _, t in seen])) < kill_after:
                item = lines.get(timeout=120)
                if item is None:
                    raise FaultError(f"the ingest ended early: {lab.log('ingest-1')}")
                seen.append(item)
            stamps = [went] + [at for at, text in seen if text.startswith("committed")]
            per_chunk = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
            time.sleep(per_chunk / 2)  # mid-way through the next chunk's transaction
            say(f"b: kill -9 of the postmaster (pid {lab.postmaster_pid()}) during chunk {kill_after}")
            killed_at = time.perf_counter()
            s.timings["server_processes_gone"] = lab.kill_server()
            try:
                child.wait(60)
            except subprocess.TimeoutExpired:
                raise FaultError("the ingest did not stop after the server died") from None
            reported = _committed([t for _, t in seen] + lines.rest(10))
            s.that("the ingest stopped with an error", child.returncode != 0, child.returncode)
            s.notes.append(f"ingest: {_tail(lab.logs / 'ingest-1.log', 300)}")
            # the hook server while the database is down: a fast answer without advice, no hang, no crash
            down_answer = time.perf_counter()
            answer = _ask_hook(sock, deadline_ms=500)
            s.timings["hook_answer_while_down"] = time.perf_counter() - down_answer
            s.that(
                "the hook server answers (without advice) while the database is down",
                answer.get("output") is None and not answer.get("unreachable"),
                str(answer.get("error") or answer)[:120],
            )
            time.sleep(max(0.0, downtime_s - (time.perf_counter() - killed_at)))
            s.timings["downtime"] = time.perf_counter() - killed_at
            say(f"b: restarting the server after {s.timings['downtime']:.1f} s down (crash recovery)")
            restarted = time.perf_counter()
            url = lab.server.up()
            up = time.perf_counter()
            s.timings["restart_up"] = up - restarted
            s.that("the server comes back at the same URL (socket)", url == lab.url, url)
            lab.embedder.embed_query("warm")  # loaded already: the retrieval below times the database
            s.timings["restart_to_first_retrieval"] = (
                up
                - restarted
                + _wait_for(
                    "a retrieval on a new connection", lambda: _direct_retrieval(lab, tenant), 60, 0.02
                )
            )
            with lab.connect() as conn:  # deferred: only the worker that was running can embed these
                ingest(conn, _records(late_tenant, "late", late, seed=41), None)
            queued_at = time.perf_counter()
            advice_at = worker_at = None
            deadline = time.monotonic() + 90
            while advice_at is None or worker_at is None:
                if advice_at is None and _ask_hook(sock).get("output"):
                    advice_at = time.perf_counter()
                if worker_at is None and counts(lab, late_tenant)["queued"] == 0:
                    worker_at = time.perf_counter()
                if time.monotonic() > deadline:
                    raise FaultError(
                        f"no recovery within 90 s (hook advice {advice_at is not None}, worker "
                        f"{worker_at is not None}): {lab.log('worker-b')[-400:]} {lab.log('serve')[-400:]}"
                    )
                time.sleep(0.05)
            s.timings["restart_to_hook_advice"] = advice_at - restarted
            s.timings["restart_to_worker_batch"] = worker_at - restarted
            s.timings["queued_to_worker_batch"] = worker_at - queued_at
            s.that(
                "the same worker and hook server processes are still running",
                worker.poll() is None and server.poll() is None and pids == (worker.pid, server.pid),
                f"worker pid {worker.pid} ({'running' if worker.poll() is None else worker.returncode}), "
                f"serve pid {server.pid} ({'running' if server.poll() is None else server.returncode})",
            )
            late_counts = counts(lab, late_tenant)
            s.equal(
                "memories queued after the restart, embedded by the same worker", late_counts["vectors"], late
            )
            present = _present_by_chunk(lab, tenant, source, chunk)
            got = {c for c, _, _ in reported}
            whole = set(present["whole"])
            s.counts.update(
                memories=n,
                chunk=chunk,
                chunks_reported=len(got),
                chunks_present=len(whole),
                rows_present=present["rows"],
            )
            s.equal("chunks reported committed that are whole in the table", len(got & whole), len(got))
            s.equal("partial chunks", present["partial"], [])
            s.that(
                "chunks present but not reported: at most the one in flight",
                whole - got <= {max(got) + 1},
                sorted(whole - got),
            )
            s.notes.append(
                "the chunk in flight at the kill was "
                + ("committed just before it" if whole - got else "rolled back (absent)")
            )
            s.equal("texts different from the source", present["mismatched"], 0)
            s.equal("rows not in the source", present["unknown"], 0)
            s.equal("duplicate keys", counts(lab, tenant)["memories"] - counts(lab, tenant)["keys"], 0)
            s.equal("present rows with their vector", present["with_vector"], present["rows"])
            say("b: re-running the same ingest")
            again_at = time.perf_counter()
            redo = lab.spawn(
                "ingest-2",
                ["-c", INGEST_CHILD, str(lab.config), str(path), str(chunk)],
                python=True,
                stdin=True,
            )
            try:
                out, _ = redo.communicate(b"go\n", timeout=300)
            except subprocess.TimeoutExpired:
                raise FaultError("the re-run ingest did not finish in 300 s") from None
            s.timings["reingest"] = time.perf_counter() - again_at
            rerun = _committed(out.decode().splitlines())
            s.equal("re-run exits 0", redo.returncode, 0)
            s.equal("re-run inserted (the rows missing)", sum(i for _, i, _ in rerun), n - present["rows"])
            s.equal(
                "re-run updated (the rows present, not embedded again)",
                sum(u for _, _, u in rerun),
                present["rows"],
            )
            final = counts(lab, tenant)
            done = _present_by_chunk(lab, tenant, source, chunk)
            s.equal("memories after the re-run", final["memories"], n)
            s.equal("distinct keys after the re-run", final["keys"], n)
            s.equal(
                "vectors after the re-run (one per memory)", (final["vectors"], final["with_vector"]), (n, n)
            )
            s.equal("texts different from the source after the re-run", done["mismatched"], 0)
            s.equal("queue after the re-run", final["queued"], 0)
            log = lab.log("worker-b")
            s.equal("worker log: connection lost (once)", log.count("lost the database connection"), 1)
            s.equal("worker log: connected again (once)", log.count("connected again"), 1)
            s.equal("worker exits 0 on SIGTERM", lab.stop(worker), 0)
            s.equal("worker summary: reconnects", _last_json(worker).get("reconnects"), 1)
            s.equal("hook server exits 0 on SIGTERM", lab.stop(server), 0)
        finally:
            for proc in (child, worker, server):
                lab.stop(proc)
    return s


def _ready(
    lab: Lab, worker: subprocess.Popen[bytes], server: subprocess.Popen[bytes], sock: Path, s: Scenario
) -> None:
    """Wait until the hook server gives advice and the worker has embedded a probe memory."""
    started = time.perf_counter()
    with lab.connect() as conn:
        ingest(conn, [MemoryIn(tenant="faults-probe", key="probe", text="probe the worker")], None)

    def up() -> bool:
        for name, proc in (("worker-b", worker), ("serve", server)):
            if proc.poll() is not None:
                raise FaultError(f"{name} exited ({proc.returncode}): {lab.log(name)[-600:]}")
        return counts(lab, "faults-probe")["queued"] == 0 and bool(_ask_hook(sock).get("output"))

    _wait_for("the worker and the hook server to be ready", up, 120, 0.1)
    s.timings["worker_and_server_ready"] = time.perf_counter() - started


# --- c. the model files removed -------------------------------------------------------------------------


def model_removed(lab: Lab, n: int = 40, deferred: int = 20, say: Say = _quiet) -> Scenario:
    tenant, new_tenant = "faults-model", "faults-model-new"
    with _scenario("c", "model files removed, then restored", say) as s:
        with lab.connect() as conn:
            ingest(conn, _records(tenant, "c", n, seed=51), lab.embedder)
        path = _write_jsonl(lab.home / "later.jsonl", _records(new_tenant, "d", deferred, seed=61))
        away = lab.model_dir.with_name("model.removed")
        say(f"c: moving the model files away ({lab.model_dir} -> {away.name})")
        lab.model_dir.rename(away)
        try:
            _without_model(lab, s, tenant, new_tenant, path, deferred)
        finally:
            if away.exists():
                away.rename(lab.model_dir)
        say("c: model files restored; a search and a `spark-pg worker --once`, at once")
        (hits, s.timings["search_after_restore"]), (drained, s.timings["backlog_drained"]) = lab.run_both(
            ("search-hybrid", ["search", QUERY, "--tenant", tenant, "--json"]),
            ("worker-c2", ["worker", "--once", "--quiet", "--json"]),
        )
        modes = sorted({h["why"]["mode"] for h in json.loads(hits.stdout or "[]")})
        s.equal("search after the restore: modes", modes, ["hybrid"])
        s.equal("worker --once after the restore exits 0", drained.returncode, 0)
        s.equal(
            "worker --once embedded the deferred memories",
            _json_line(drained.stdout).get("embedded"),
            deferred,
        )
        final = counts(lab, new_tenant)
        s.equal(
            "deferred memories: with a vector, queued", (final["with_vector"], final["queued"]), (deferred, 0)
        )
    return s


def _without_model(lab: Lab, s: Scenario, tenant: str, new_tenant: str, path: Path, deferred: int) -> None:
    (found, s.timings["lexical_search"]), (refused, _) = lab.run_both(
        ("search-lexical", ["search", QUERY, "--tenant", tenant, "--json"]),
        ("ingest-no-model", ["ingest", str(path), "--quiet"]),
    )
    hits = json.loads(found.stdout or "[]") if found.returncode == 0 else []
    s.equal("search without the model exits 0", found.returncode, 0)
    s.that("search without the model still finds memories", len(hits) > 0, len(hits))
    s.equal("search without the model: modes", sorted({h["why"]["mode"] for h in hits}), ["lexical"])
    s.that(
        "the cause is logged: 'retrieval runs lexically' and the missing model.onnx",
        "retrieval runs lexically" in found.stderr and "model.onnx" in found.stderr,
        found.stderr.strip()[:160],
    )
    s.equal("ingest with embedding exits 2 (a spark_pg error)", refused.returncode, 2)
    s.that(
        "its error is ModelNotAvailable naming the folder and the missing files",
        "spark-pg: error: the model files" in refused.stderr
        and str(lab.model_dir) in refused.stderr
        and "missing: model.onnx, tokenizer.json" in refused.stderr,
        refused.stderr.strip()[:200],
    )
    s.equal("rows written by the refused ingest", counts(lab, new_tenant)["memories"], 0)
    stored = lab.run("ingest-deferred", ["ingest", str(path), "--quiet", "--defer-embedding"])
    s.equal("ingest --defer-embedding without the model exits 0", stored.returncode, 0)
    after = counts(lab, new_tenant)
    s.equal("deferred memories stored, queued", (after["memories"], after["queued"]), (deferred, deferred))
    worker = lab.run("worker-c1", ["worker", "--once", "--quiet"])
    s.that(
        "a worker without the model refuses to start (exit 2, ModelNotAvailable)",
        worker.returncode == 2 and "model files" in worker.stderr,
        worker.returncode,
    )
    s.equal("queue left untouched by it", counts(lab, new_tenant)["queued"], deferred)


def _json_line(out: str) -> dict[str, Any]:
    lines = [line for line in out.splitlines() if line.strip()]
    try:
        value = json.loads(lines[-1]) if lines else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# --- all of them ----------------------------------------------------------------------------------------

SCENARIOS = ("a", "b", "c")


def run_faults(
    settings: Settings,
    *,
    only: tuple[str, ...] = SCENARIOS,
    memories: int = 1000,
    keep: bool = False,
    say: Say = _quiet,
) -> FaultReport:
    """Run the scenarios on a scratch server (the model files are copied from the configured folder)."""
    unknown = [name for name in only if name not in SCENARIOS]
    if unknown:
        raise InputError(f"unknown scenarios {unknown}; choose from {', '.join(SCENARIOS)}")
    if not MODELS[settings.get_str("embedding.model")].offline_files:
        raise InputError("spark-pg faults uses the offline default model all-MiniLM-L6-v2-int8")
    if memories < 500:
        raise InputError(f"memories must be at least 500, got {memories}")
    report = FaultReport()
    started = time.perf_counter()
    with Lab(model_dir_for(settings), keep=keep, say=say) as lab:
        report.setup_s = lab.setup_s
        with lab.connect() as conn:
            row = conn.execute("SELECT current_setting('server_version')").fetchone()
        report.server = f"PostgreSQL {row[0] if row else '?'} (scratch, {lab.home})"
        lab.embedder.embed_query("warm up")
        if "a" in only:
            report.scenarios.append(worker_killed(lab, n=memories * 3 // 5, say=say))
        if "b" in only:
            report.scenarios.append(database_killed(lab, n=memories, chunk=memories // 10, say=say))
        if "c" in only:
            report.scenarios.append(model_removed(lab, say=say))
    report.seconds = time.perf_counter() - started
    return report


def format_report(report: FaultReport) -> str:
    out = [f"spark-pg faults: {report.server}; setup {report.setup_s:.1f} s, total {report.seconds:.0f} s"]
    for s in report.scenarios:
        out.append(f"\n[{'PASS' if s.ok else 'FAIL'}] {s.name}. {s.title} ({s.seconds:.1f} s)")
        for c in s.checks:
            expected = "" if c.expected == "yes" else f" (expected {c.expected})"
            out.append(f"  {'ok ' if c.ok else 'BAD'}  {c.what}: {c.actual}{expected}")
        if s.counts:
            out.append("  counts: " + ", ".join(f"{k} {v}" for k, v in s.counts.items()))
        if s.timings:
            out.append("  times: " + ", ".join(f"{k} {_duration(v)}" for k, v in s.timings.items()))
        out.extend(f"  note: {n}" for n in s.notes)
        if s.error:
            out.append(f"  error: {s.error}")
    out.append(f"\n{'OK: every scenario passed' if report.ok else 'FAILED'}")
    return "\n".join(out)


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"
