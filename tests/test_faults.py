"""Fault drills (spark_pg.faults) on their own scratch embedded server: a worker SIGKILLed mid-batch, the
postmaster SIGKILLed mid-ingest with a worker and a hook server connected, the model files removed. The
counts are read back from the tables here, not only taken from the scenarios' own checks."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest

from spark_pg.bench_hooks import hook_command
from spark_pg.config import Settings
from spark_pg.console import stop_signals_interrupt
from spark_pg.db import connect
from spark_pg.embedding import model_dir_for
from spark_pg.errors import DatabaseError, SchemaError
from spark_pg.faults import Lab, counts, database_killed, model_removed, worker_killed
from spark_pg.worker import connection_lost, run_reconnecting


@pytest.fixture(scope="module")
def lab(model_settings: Settings) -> Iterator[Lab]:
    """One scratch home and server for the module (its start and schema install cost about 3 s)."""
    with Lab(model_dir_for(model_settings)) as scratch:
        yield scratch
    assert not scratch.home.exists()  # removed, server stopped


def test_a_worker_sigkilled_mid_batch_loses_nothing(lab: Lab) -> None:
    s = worker_killed(lab, n=200, batch=32)
    assert s.error is None, s.error
    at_kill = s.counts["vectors_at_kill"]
    assert 0 < at_kill < 200
    assert s.counts["queued_after_kill"] == 200 - at_kill  # the claimed batch went back to the queue
    assert s.check("restarted worker embedded").actual == 200 - at_kill  # each row embedded once
    assert counts(lab, "faults-worker") == {
        "memories": 200,
        "keys": 200,
        "vectors": 200,
        "with_vector": 200,
        "most_per_memory": 1,
        "queued": 0,
    }
    assert s.ok, [c for c in s.checks if not c.ok]


def test_b_the_database_killed_mid_ingest_keeps_whole_chunks_and_everything_resumes(lab: Lab) -> None:
    s = database_killed(lab, n=250, chunk=50, kill_after=2, downtime_s=1.0, late=8)
    assert s.error is None, s.error
    # killed with chunk 2 written (its 50 rows seen in its transaction) and not committed: rolled back
    assert s.counts["in_flight_rows_written"] == 50
    assert s.counts["chunks_reported"] == 2
    assert s.counts["rows_present"] == 100
    assert s.check("partial chunks").actual == []
    assert s.check("re-run inserted").actual == 250 - s.counts["rows_present"]
    assert counts(lab, "faults-ingest") == {
        "memories": 250,
        "keys": 250,
        "vectors": 250,
        "with_vector": 250,
        "most_per_memory": 1,
        "queued": 0,
    }
    late = counts(lab, "faults-late")  # queued after the restart: only the surviving worker embedded them
    assert (late["memories"], late["vectors"], late["queued"]) == (8, 8, 0)
    assert s.check("worker log: connected again").actual == 1
    assert s.check("worker summary: reconnects").actual == 1
    assert s.check("the same worker and hook server").ok
    for name in ("restart_to_first_retrieval", "restart_to_hook_advice", "restart_to_worker_batch"):
        assert 0 < s.timings[name] < 30, (name, s.timings)
    assert s.ok, [c for c in s.checks if not c.ok]


def test_c_without_model_files_retrieval_is_lexical_and_ingest_writes_nothing(lab: Lab) -> None:
    s = model_removed(lab, n=20, deferred=10)
    assert s.error is None, s.error
    assert s.check("search without the model: modes").actual == ["lexical"]
    assert s.check("rows written by the refused ingest").actual == 0
    assert s.check("deferred memories stored, queued").actual == (10, 10)
    assert s.check("search after the restore: modes").actual == ["hybrid"]
    assert s.check("worker --once embedded").actual == 10
    new = counts(lab, "faults-model-new")
    assert (new["memories"], new["with_vector"], new["queued"]) == (10, 10, 0)
    assert (lab.model_dir / "model.onnx").is_file()  # restored
    assert s.ok, [c for c in s.checks if not c.ok]


def test_only_a_lost_connection_counts_as_transient() -> None:
    assert connection_lost(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert connection_lost(psycopg.errors.AdminShutdown())  # 57P01
    assert connection_lost(psycopg.errors.CannotConnectNow())  # 57P03: starting up, in recovery
    assert not connection_lost(psycopg.errors.QueryCanceled())  # 57014: a statement timeout
    assert not connection_lost(psycopg.errors.UniqueViolation())
    assert not connection_lost(SchemaError("run spark-pg init"))
    wrapped = DatabaseError("cannot connect")
    wrapped.__cause__ = psycopg.OperationalError("refused")
    assert connection_lost(wrapped)
    assert not connection_lost(DatabaseError("not running"))


def test_a_worker_that_never_connected_fails_at_once(lab: Lab) -> None:
    """A wrong URL is a mistake, not an outage: the first connection is not retried."""
    from spark_pg.embedding import load_embedder

    started = time.monotonic()
    with pytest.raises(DatabaseError, match="cannot connect"):
        run_reconnecting(
            lambda: connect(
                "postgresql://postgres@/postgres?host=/nonexistent-spark-faults", autocommit=True
            ),
            load_embedder(lab.settings),
            once=True,
        )
    assert time.monotonic() - started < 5


def test_a_lab_whose_setup_fails_leaves_no_server_or_home_behind(
    model_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psutil

    lab = Lab(model_dir_for(model_settings))
    pids: list[int | None] = []

    def broken(url: str) -> None:  # the server is up by now
        pids.append(lab.server.status().pid)
        raise RuntimeError("schema install failed")

    monkeypatch.setattr("spark_pg.faults.harness.schema.install", broken)
    with pytest.raises(RuntimeError, match="schema install failed"), lab:
        pass
    assert pids and pids[0] is not None
    assert not lab.home.exists()
    assert not psutil.pid_exists(pids[0]) or psutil.Process(pids[0]).status() == psutil.STATUS_ZOMBIE


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_interrupts_the_block_once_and_lets_its_cleanup_finish(sig: signal.Signals) -> None:
    """By default SIGTERM and SIGHUP end the process at once: no finally ran, so `spark-pg faults` left its
    server, worker, hook server and home behind."""
    before = signal.getsignal(sig)
    cleaned = False
    with pytest.raises(KeyboardInterrupt), stop_signals_interrupt():
        try:
            os.kill(os.getpid(), sig)
            time.sleep(5)  # the handler raises at once
            pytest.fail("the signal did not interrupt the block")
        finally:
            os.kill(os.getpid(), sig)  # a second one, during the cleanup: ignored
            time.sleep(0.05)
            cleaned = True
    assert cleaned
    assert signal.getsignal(sig) == before  # restored


def _command(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:  # gone, or a zombie
        return ""


def _left_behind(home: Path) -> list[psutil.Process]:
    """Processes of the scratch home ``home``: its server (named in the command line) and the processes
    started with its config."""
    found = []
    for proc in psutil.process_iter():
        try:
            config = proc.environ().get("SPARK_PG_CONFIG", "")
        except psutil.Error:
            config = ""
        if str(home) in _command(proc) or config.startswith(str(home)):
            found.append(proc)
    return found


def test_a_drill_stopped_by_sigterm_leaves_no_process_and_no_home(
    model_settings: Settings, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("embedding:\n  model_dir: " + str(model_dir_for(model_settings)) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_PG_")}
    drill = subprocess.Popen(
        [*hook_command(), "faults", "--only", "a", "--memories", "500"],
        env=env | {"SPARK_PG_CONFIG": str(config)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert drill.stderr is not None
    reader = threading.Thread(target=lambda: [lines.put(line) for line in drill.stderr or ()], daemon=True)
    reader.start()
    home: Path | None = None
    said: list[str] = []
    try:
        deadline = time.monotonic() + 120
        worker: list[psutil.Process] = []
        while not worker:  # the drill's scratch server is up and its worker started
            assert time.monotonic() < deadline and drill.poll() is None, said
            with contextlib.suppress(queue.Empty):
                said.append(lines.get(timeout=0.1))
            found = re.search(r"scratch home (\S+):", "".join(said))
            home = Path(found.group(1)) if found else None
            if home is not None:
                worker = [p for p in _left_behind(home) if "worker" in _command(p)]
        assert home is not None and home.is_dir()
        running = _left_behind(home)
        assert any("postgres" in _command(p) for p in running), running
        drill.send_signal(signal.SIGTERM)
        code = drill.wait(90)
        reader.join(30)  # every line read
        while not lines.empty():
            said.append(lines.get())
        psutil.wait_procs(running, timeout=10)
        assert code == 130, said
        assert "spark-pg: interrupted" in said[-1] and "a: INTERRUPTED" in "".join(said), said
        assert _left_behind(home) == []
        assert not home.exists()
    finally:
        if drill.poll() is None:
            drill.kill()
        drill.wait(10)
        reader.join(10)
        drill.stderr.close()
        if home is not None:  # what the drill left behind, if it failed to clean up
            for proc in _left_behind(home):
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            shutil.rmtree(home, ignore_errors=True)


def test_the_json_says_when_and_where_it_ran() -> None:
    """The JSON has "machine" and "run" (the drill's start: the report is made first) beside the verdicts,
    as bench's report has (the drills themselves are the tests above)."""
    from spark_pg.faults import FaultReport

    out = FaultReport().as_json()
    assert set(out["machine"]) == {"cores", "cpu", "memory_gib", "arch", "python"} and out["machine"]["cores"]
    assert set(out["run"]) == {"at", "command", "version", "commit"} and out["run"]["at"].endswith("+00:00")
    assert out["cores"] == out["machine"]["cores"] and out["scenarios"] == []  # the keys of before stay
