"""Scenario b, **database killed**: the postmaster is SIGKILLed while an ingest (a child process writing
chunk after chunk, one transaction each) is running and while a ``spark-pg worker`` and a ``spark-pg
serve`` hook server are connected. The kill lands when chunk ``kill_after`` has written its rows (embedded,
upserted, vectors stored) and not committed them: the child reports the rows it sees in its transaction
and holds the commit until the server is gone. After ``EmbeddedServer.up()`` (crash recovery from the
WAL): every chunk the ingest reported committed is there whole, the chunk in flight is absent, no chunk
is partial, texts equal the source, nothing is duplicated; re-running the same ingest completes the rest;
the same worker and hook-server processes resume by themselves (the worker embeds memories queued after
the restart). Times from the restart to the first retrieval, the hook server's first advice and the
worker's first batch are measured."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from spark_pg.errors import InputError
from spark_pg.faults.chunked_ingest import (
    ChildLines,
    Commit,
    committed,
    present_by_chunk,
    spawn_ingest,
    written,
)
from spark_pg.faults.harness import FaultError, Lab, last_json, tail, wait_for
from spark_pg.faults.memories import counts, records, write_jsonl
from spark_pg.faults.probes import ask_hook, direct_retrieval, hook_memories, wait_until_ready
from spark_pg.faults.report import Say, Scenario, quiet, scenario
from spark_pg.ingest import ingest
from spark_pg.records import MemoryIn

Popen = subprocess.Popen[bytes]


def database_killed(
    lab: Lab,
    n: int = 1000,
    chunk: int = 100,
    kill_after: int = 3,
    downtime_s: float = 2.0,
    late: int = 16,
    say: Say = quiet,
) -> Scenario:
    tenant = "faults-ingest"
    with scenario("b", "database server SIGKILLed mid-ingest, then restarted", say) as s:
        if n < chunk * (kill_after + 2):
            raise InputError(f"n must be at least chunk * (kill_after + 2) = {chunk * (kill_after + 2)}")
        source = records(tenant, "k", n, seed=31)
        path = write_jsonl(lab.home / "ingest.jsonl", source)
        with lab.connect() as conn:
            ingest(conn, hook_memories(), lab.embedder)
        sock = lab.home / "hooks.sock"
        say("b: starting a long-running `spark-pg worker` and a `spark-pg serve` hook server")
        worker = lab.spawn("worker-b", ["worker", "--quiet", "--poll", "5", "--json"])
        server = lab.spawn("serve", ["serve", "--socket", str(sock)])
        child = spawn_ingest(lab, "ingest-1", path, chunk, hold=kill_after)
        try:
            lines = ChildLines(child)
            wait_until_ready(lab, worker, server, sock, s)
            pids = (worker.pid, server.pid)
            reported, killed_at = _kill_mid_ingest(lab, s, child, lines, n, chunk, kill_after, say)
            restarted = _restart(lab, s, sock, killed_at, downtime_s, tenant, say)
            _resumed(lab, s, sock, late, restarted, worker, server, pids)
            present = _check_chunks(lab, s, tenant, source, chunk, reported, kill_after)
            _rerun(lab, s, tenant, source, path, chunk, present, say)
            log = lab.log("worker-b")
            s.equal("worker log: connection lost (once)", log.count("lost the database connection"), 1)
            s.equal("worker log: connected again (once)", log.count("connected again"), 1)
            s.equal("worker exits 0 on SIGTERM", lab.stop(worker), 0)
            s.equal("worker summary: reconnects", last_json(worker).get("reconnects"), 1)
            s.equal("hook server exits 0 on SIGTERM", lab.stop(server), 0)
        finally:
            for proc in (child, worker, server):
                lab.stop(proc)
            # stopped between the kill and the restart: scenario c needs the server (not after Ctrl-C)
            if sys.exc_info()[0] is not KeyboardInterrupt and not lab.server.status().running:
                say("b: starting the scratch server again for what follows")
                try:
                    lab.server.up()
                except Exception as exc:  # c then fails on its own; b's own error is the one reported
                    say(f"b: the scratch server did not start again: {exc}")
    return s


def _kill_mid_ingest(
    lab: Lab, s: Scenario, child: Popen, lines: ChildLines, n: int, chunk: int, kill_after: int, say: Say
) -> tuple[list[Commit], float]:
    """Let the ingest commit ``kill_after`` chunks and write the next one, then SIGKILL the postmaster
    while that chunk's transaction holds its rows uncommitted: the chunks the ingest reported committed
    and when the server was killed."""
    first = lines.get(timeout=120)
    if first is None or first[1] != "ready":
        raise FaultError(f"the ingest did not start: {lab.log('ingest-1')}")
    say(f"b: ingesting {n} memories in chunks of {chunk} (one transaction each), with embedding")
    assert child.stdin is not None
    child.stdin.write(b"go\n")
    child.stdin.flush()
    seen: list[tuple[float, str]] = []
    while kill_after not in written([t for _, t in seen]):
        item = lines.get(timeout=120)
        if item is None:
            raise FaultError(f"the ingest ended early: {lab.log('ingest-1')}")
        seen.append(item)
    in_flight = written([t for _, t in seen])[kill_after]
    s.counts["in_flight_rows_written"] = in_flight
    s.equal("rows of the chunk in flight written, uncommitted, at the kill", in_flight, chunk)
    say(
        f"b: kill -9 of the postmaster (pid {lab.postmaster_pid()}) with chunk {kill_after} written, "
        "uncommitted"
    )
    killed_at = time.perf_counter()
    s.timings["server_processes_gone"] = lab.kill_server()
    child.stdin.write(b"commit\n")  # the held chunk now tries to commit, on a server that is gone
    child.stdin.close()
    try:
        child.wait(60)
    except subprocess.TimeoutExpired:
        raise FaultError("the ingest did not stop after the server died") from None
    reported = committed([t for _, t in seen] + lines.rest(10))
    s.that("the ingest stopped with an error", child.returncode != 0, child.returncode)
    s.notes.append(f"ingest: {tail(lab.logs / 'ingest-1.log', 300)}")
    return reported, killed_at


def _restart(
    lab: Lab, s: Scenario, sock: Path, killed_at: float, downtime_s: float, tenant: str, say: Say
) -> float:
    """Ask the hook server while the database is down, then restart the server: when it was restarted."""
    # the hook server while the database is down: a fast answer without advice, no hang, no crash
    down_answer = time.perf_counter()
    answer = ask_hook(sock, deadline_ms=500)
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
        + wait_for("a retrieval on a new connection", lambda: direct_retrieval(lab, tenant), 60, 0.02)
    )
    return restarted


def _resumed(
    lab: Lab,
    s: Scenario,
    sock: Path,
    late: int,
    restarted: float,
    worker: Popen,
    server: Popen,
    pids: tuple[int, int],
) -> None:
    """Queue ``late`` memories and wait until the running worker embeds them and the hook server advises."""
    late_tenant = "faults-late"
    with lab.connect() as conn:  # deferred: only the worker that was running can embed these
        ingest(conn, records(late_tenant, "late", late, seed=41), None)
    queued_at = time.perf_counter()
    advice_at = worker_at = None
    deadline = time.monotonic() + 90
    while advice_at is None or worker_at is None:
        if advice_at is None and ask_hook(sock).get("output"):
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
    s.equal("memories queued after the restart, embedded by the same worker", late_counts["vectors"], late)


def _check_chunks(
    lab: Lab,
    s: Scenario,
    tenant: str,
    source: list[MemoryIn],
    chunk: int,
    reported: list[Commit],
    in_flight: int,
) -> dict[str, Any]:
    """Every chunk reported committed is whole in the table, the one in flight is absent, no chunk is
    partial: what is present."""
    present = present_by_chunk(lab, tenant, source, chunk)
    got = {c for c, _, _, _ in reported}
    whole = set(present["whole"])
    s.counts.update(
        memories=len(source),
        chunk=chunk,
        chunks_reported=len(got),
        chunks_present=len(whole),
        rows_present=present["rows"],
    )
    s.equal("chunks reported committed that are whole in the table", len(got & whole), len(got))
    s.equal("partial chunks", present["partial"], [])
    s.equal("chunks reported committed", sorted(got), list(range(in_flight)))
    s.equal("chunks present but not reported (the one in flight was rolled back)", sorted(whole - got), [])
    s.equal("texts different from the source", present["mismatched"], 0)
    s.equal("rows not in the source", present["unknown"], 0)
    s.equal("duplicate keys", counts(lab, tenant)["memories"] - counts(lab, tenant)["keys"], 0)
    s.equal("present rows with their vector", present["with_vector"], present["rows"])
    return present


def _rerun(
    lab: Lab,
    s: Scenario,
    tenant: str,
    source: list[MemoryIn],
    path: Path,
    chunk: int,
    present: dict[str, Any],
    say: Say,
) -> None:
    """Run the same ingest again: it inserts the rows missing and updates, without embedding, the others."""
    n = len(source)
    say("b: re-running the same ingest")
    again_at = time.perf_counter()
    redo = spawn_ingest(lab, "ingest-2", path, chunk)
    try:
        out, _ = redo.communicate(b"go\n", timeout=300)
    except subprocess.TimeoutExpired:
        raise FaultError("the re-run ingest did not finish in 300 s") from None
    s.timings["reingest"] = time.perf_counter() - again_at
    rerun = committed(out.decode().splitlines())
    s.equal("re-run exits 0", redo.returncode, 0)
    s.equal("re-run inserted (the rows missing)", sum(i for _, i, _, _ in rerun), n - present["rows"])
    s.equal(
        "re-run unchanged (the rows present, neither written nor embedded again)",
        (sum(u for _, _, u, _ in rerun), sum(k for _, _, _, k in rerun)),
        (0, present["rows"]),
    )
    final = counts(lab, tenant)
    done = present_by_chunk(lab, tenant, source, chunk)
    s.equal("memories after the re-run", final["memories"], n)
    s.equal("distinct keys after the re-run", final["keys"], n)
    s.equal("vectors after the re-run (one per memory)", (final["vectors"], final["with_vector"]), (n, n))
    s.equal("texts different from the source after the re-run", done["mismatched"], 0)
    s.equal("queue after the re-run", final["queued"], 0)
