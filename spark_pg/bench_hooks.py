"""`spark-pg bench --hooks`: hook latency as Claude Code sees it, from process start to answer.

Loads the advisor scenarios' memory pool (233 memories of one developer) into a scratch tenant, starts its
own ``spark-pg serve`` on a private socket (never the default one: a server already running there may
serve another database, where the scratch tenant does not exist) or, with ``--socket``, uses the server
answering there (the caller's choice: it must serve the same database as this process) or starts one
there, then runs N real ``spark-pg hook pre-tool-use`` processes (P at once) on the scenarios'
tool calls as PreToolUse events, each followed by its ``post-tool-use``, and times each process from spawn
to exit. Reports p50/p95/p99, how many calls got advice, the errors (a hook that wrote to stderr or exited
non-zero), the unanswered calls (a pre-tool-use call that needed the advisor and that the database has not
logged: a hook prints nothing and exits 0 when it reaches no server; none answered stops the run), the
server's RSS and a bare Python start-up for reference; deletes the tenant's rows afterwards.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from tqdm import tqdm

from spark_pg.client import SparkClient
from spark_pg.config import Settings
from spark_pg.errors import InputError
from spark_pg.eval.scenarios import Scenario, default_folder, load_scenarios, unlabelled
from spark_pg.hooks import wire
from spark_pg.hooks.protocol import PRE, parse_event
from spark_pg.hooks.server import HookServerError, SocketClaim
from spark_pg.intent import clean_input, extract_intent
from spark_pg.records import read_file

WARMUP = 5
SERVER_START_TIMEOUT_S = 180
CLEANUP = (
    "DELETE FROM spark.outcomes WHERE tenant = %(t)s",
    "DELETE FROM spark.retrievals WHERE tenant = %(t)s",
    "DELETE FROM spark.query_embeddings WHERE tenant = %(t)s",
    "DELETE FROM spark.tenant_stats WHERE tenant = %(t)s",
    "DELETE FROM spark.memories WHERE tenant = %(t)s",
)


def hook_command() -> list[str]:
    """The installed `spark-pg` script next to this Python, as a settings.json hook would run it."""
    script = Path(sys.executable).parent / "spark-pg"
    return [str(script)] if script.exists() else [sys.executable, "-m", "spark_pg.cli"]


def events(scenario: Scenario, i: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A PreToolUse event and its PostToolUse as Claude Code sends them (four sessions interleaved)."""
    base = {
        "session_id": f"bench-session-{i % 4}",
        "transcript_path": "/home/dev/.claude/projects/shop-api/bench.jsonl",
        "cwd": "/home/dev/shop-api",
        "permission_mode": "default",
        "tool_name": scenario.tool_name,
        "tool_input": scenario.tool_input,
        "tool_use_id": f"toolu_bench_{i:05d}",
    }
    response = {"stdout": "ok", "stderr": "", "interrupted": False, "isImage": False}
    return base | {"hook_event_name": "PreToolUse"}, base | {
        "hook_event_name": "PostToolUse",
        "tool_response": response,
    }


class Timed(NamedTuple):
    """One hook process: milliseconds from spawn to exit, whether it printed an answer, what went wrong
    (its stderr, else its exit status when not 0; empty when nothing did)."""

    ms: float
    answered: bool
    error: str


def time_hook(cmd: list[str], event: dict[str, Any]) -> Timed:
    """Run one hook process on ``event`` and time it (:class:`Timed`)."""
    payload = json.dumps(event).encode()
    started = time.perf_counter()
    proc = subprocess.run(cmd, input=payload, capture_output=True, check=False)
    ms = (time.perf_counter() - started) * 1000
    error = proc.stderr.decode(errors="replace").strip()
    if not error and proc.returncode != 0:  # a hook exits 0 whatever happens: anything else is a failure
        error = f"exit status {proc.returncode}, nothing on stderr"
    return Timed(ms, bool(proc.stdout.strip()), error)


def needs_advisor(event: dict[str, Any]) -> bool:
    """Whether the server runs the advisor for this PreToolUse event, and so logs it in spark.retrievals:
    every call but a trivial read-only one (HookService.pre and Advisor.advise skip those unlogged)."""
    hook_event = parse_event(PRE, event)
    intent = extract_intent(hook_event.tool_name, clean_input(hook_event.tool_input))
    return not intent.trivial and bool(intent.text.strip())


def logged_calls(settings: Settings, tenant: str) -> int:
    """How many advise calls the database holds for ``tenant``: each one the server answered in time."""
    with SparkClient(settings) as client:
        row = client.conn.execute(
            "SELECT count(*) FROM spark.retrievals WHERE tenant = %s", (tenant,)
        ).fetchone()
    return int(row[0]) if row else 0


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    arr = np.asarray(values)
    return {
        "p50": round(float(np.percentile(arr, 50)), 1),
        "p95": round(float(np.percentile(arr, 95)), 1),
        "p99": round(float(np.percentile(arr, 99)), 1),
        "max": round(float(arr.max()), 1),
    }


class _Server:
    """The server to measure against: one started here on a private socket in ``workdir`` (and stopped), or
    with an explicit ``socket`` the one answering there (else one started there)."""

    def __init__(self, socket: Path | None, workdir: Path) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_s: float | None = None
        if socket is not None and wire.ping(socket) is not None:
            self.path = socket
            return
        self.path = socket or workdir / "hooks.sock"
        log = workdir / "serve.log"
        started = time.monotonic()
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [*hook_command(), "serve", "--socket", str(self.path)], stdout=out, stderr=subprocess.STDOUT
            )
        try:
            while wire.ping(self.path) is None:
                if self.proc.poll() is not None or time.monotonic() - started > SERVER_START_TIMEOUT_S:
                    said = log.read_text(errors="replace")[-2000:]
                    raise HookServerError(f"spark-pg serve did not start: {' '.join(said.split())}")
                time.sleep(0.1)
        except BaseException:  # a failed start, or Ctrl-C while waiting: the server is stopped, not orphaned
            self.stop()
            raise
        self.ready_s = round(time.monotonic() - started, 2)

    def rss_mb(self) -> float | None:
        answer = wire.ping(self.path)
        return round(answer["rss"] / 2**20, 1) if answer and isinstance(answer.get("rss"), int) else None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _load_tenant(settings: Settings, tenant: str) -> int:
    records = read_file(default_folder() / "insights.yaml", tenant)
    clean = unlabelled(records)
    with SparkClient(settings) as client:
        return client.ingest_records(clean, label="bench hooks").total


def _drop_tenant(settings: Settings, tenant: str) -> None:
    with SparkClient(settings) as client, client.conn.transaction():
        for statement in CLEANUP:
            client.conn.execute(statement, {"t": tenant})


def run(
    settings: Settings, calls: int, parallel: int = 1, socket: Path | None = None, *, progress: bool = True
) -> dict[str, Any]:
    """Measure ``calls`` pre-tool-use and as many post-tool-use hook processes, ``parallel`` at once."""
    if socket is not None and socket.exists() and not socket.is_socket():
        raise InputError(f"--socket {socket} exists and is not a socket: name a socket or a free path")
    if socket is not None and wire.ping(socket) is None:
        # a server is to be started there: what `spark-pg serve` would refuse is refused now, before the
        # tenant is loaded (the lock is taken and released at once)
        SocketClaim(socket).release()
    scenarios = load_scenarios(default_folder())
    tenant = f"bench-hooks-{uuid.uuid4().hex[:8]}"
    memories = _load_tenant(settings, tenant)
    try:
        with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
            server = _Server(socket, Path(tmp))
            try:
                cmd = [*hook_command(), "hook", "{event}", "--socket", str(server.path), "--tenant", tenant]
                cmd += ["--no-fallback", "--timeout", "5"]
                result = _measure(
                    cmd, scenarios, calls, max(1, parallel), progress, lambda: logged_calls(settings, tenant)
                )
                result["server_ms"] = _server_side(server.path, tenant, scenarios, calls)
                rss = server.rss_mb()
            finally:
                server.stop()
    finally:
        _drop_tenant(settings, tenant)
    startup = [time_hook([sys.executable, "-c", "pass"], {}).ms for _ in range(20)]
    return {
        "calls": calls,
        "parallel": max(1, parallel),
        **result,
        "python_startup_ms": percentiles(startup)["p50"],
        "server": {"started": server.proc is not None, "ready_s": server.ready_s, "rss_mb": rss},
        "tenant_memories": memories,
        "machine": {
            "cores": os.cpu_count(),
            "machine": platform.machine(),
            "python": platform.python_version(),
            "bytecode_cache": not sys.dont_write_bytecode,
        },
        "date": datetime.now(UTC).date().isoformat(),
    }


def _measure(
    cmd: list[str],
    scenarios: list[Scenario],
    calls: int,
    parallel: int,
    progress: bool,
    logged: Callable[[], int],
) -> dict[str, Any]:
    """Time ``calls`` pre-tool-use hook processes, each followed by its post-tool-use, ``parallel`` at once
    (after WARMUP pairs). A hook prints nothing and exits 0 when it cannot reach the server (--no-fallback),
    as when there is no advice: ``logged`` (the advise calls the database holds for the tenant, counted
    before and after) tells which pre-tool-use calls the server answered in time. Each one that needs the
    advisor (:func:`needs_advisor`) and is not logged counts as unanswered; HookServerError when the server
    answered none of them (its latencies would be those of hooks that got no answer)."""

    def one(i: int) -> tuple[Timed, Timed]:
        pre, post = events(scenarios[i % len(scenarios)], i)
        first = time_hook([a.replace("{event}", "pre-tool-use") for a in cmd], pre)
        second = time_hook([a.replace("{event}", "post-tool-use") for a in cmd], post)
        return first, second

    for i in range(WARMUP):
        one(i)
    before = logged()
    with ThreadPoolExecutor(parallel) as pool:
        done = list(tqdm(pool.map(one, range(calls)), total=calls, disable=not progress, desc="hooks"))
    answered = logged() - before
    expected = sum(needs_advisor(events(scenarios[i % len(scenarios)], i)[0]) for i in range(calls))
    pre = [d[0] for d in done]
    post = [d[1] for d in done]
    errors = [t.error for t in pre + post if t.error]
    if expected and answered <= 0:
        said = f"; the first hook said: {errors[0]}" if errors else ""
        raise HookServerError(
            f"the hook server answered none of the {expected} pre-tool-use calls that needed the advisor "
            f"(none logged in this database's spark.retrievals): the hooks did not reach it, or it serves "
            f"another database{said}"
        )
    return {
        "pre_ms": percentiles([t.ms for t in pre]),
        "post_ms": percentiles([t.ms for t in post]),
        "with_advice": sum(1 for t in pre if t.answered),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "advisor_calls": expected,
        "unanswered": max(0, expected - answered),
    }


def _server_side(path: Path, tenant: str, scenarios: list[Scenario], calls: int) -> dict[str, float]:
    """The server's own time for the same pre-tool-use requests, asked from this process (no spawn)."""
    spent = []
    for i in range(calls):
        pre, _ = events(scenarios[i % len(scenarios)], i)
        event = parse_event(PRE, pre).to_wire()
        request = {"v": wire.VERSION, "op": "hook", "tenant": tenant, "interrupts": False, "event": event}
        spent.append(float(wire.ask(path, request, 10)["ms"]))
    return percentiles(spent)


def format_report(report: dict[str, Any]) -> str:
    pre, post, server = report["pre_ms"], report["post_ms"], report["server"]
    how = f"started, ready in {server['ready_s']} s" if server["started"] else "already running"
    return (
        f"hooks: {report['calls']} pre-tool-use + {report['calls']} post-tool-use processes, "
        f"{report['parallel']} at once, {report['tenant_memories']} memories\n"
        f"  pre-tool-use  p50 {pre['p50']} ms, p95 {pre['p95']} ms, p99 {pre['p99']} ms "
        f"({report['with_advice']} answered with advice)\n"
        f"  post-tool-use p50 {post['p50']} ms, p95 {post['p95']} ms, p99 {post['p99']} ms\n"
        f"  server's own time per pre-tool-use p50 {report['server_ms']['p50']} ms, "
        f"p95 {report['server_ms']['p95']} ms\n"
        f"  python start-up alone p50 {report['python_startup_ms']} ms; errors {report['errors']}; "
        f"unanswered {report['unanswered']} of {report['advisor_calls']} calls that needed the advisor\n"
        f"  server ({how}): RSS {server['rss_mb']} MB"
    )
