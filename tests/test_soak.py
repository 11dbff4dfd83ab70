"""The soak command's reconciliation, briefly: writers (with rewrites racing the workers), readers and two
workers together, then every count must agree (the full run is `spark-pg soak`, docs/performance.md)."""

from __future__ import annotations

import _thread
import re
import threading
import time
from pathlib import Path

import pytest

from spark_pg import schema, scratch
from spark_pg.cli import main
from spark_pg.db import connect
from spark_pg.embedding import Embedder
from spark_pg.errors import InputError
from spark_pg.ingest import ingest
from spark_pg.records import MemoryIn
from spark_pg.soak import run_soak


def test_a_short_soak_reconciles(server_url: str, embedder: Embedder) -> None:
    report = run_soak(server_url, embedder, seconds=6, writers=2, readers=1, workers=2, batch=10)
    out = report.as_json()
    assert out["ok"], out
    assert out["writes"] > 0 and out["reads"] > 0 and out["rewrites"] > 0 and out["shared_key_writes"] > 0
    assert out["reconcile"]["memories"] == out["keys"] and out["reconcile"]["vectors_checked"] > 0


def test_soak_arguments_are_checked(server_url: str, embedder: Embedder) -> None:
    with pytest.raises(InputError):
        run_soak(server_url, embedder, seconds=0)
    with pytest.raises(InputError):
        run_soak(server_url, embedder, seconds=1, batch=0)
    for seconds in (float("nan"), float("inf"), 1e9):  # refused before a scratch database is made
        with pytest.raises(InputError, match="more than 0 and at most 86400"):
            run_soak(server_url, embedder, seconds=seconds)
    with pytest.raises(InputError, match="at least one writer"):  # 0 writers "reconciled" nothing
        run_soak(server_url, embedder, seconds=1, writers=0, readers=1)
    with pytest.raises(InputError, match="at most 64"):
        run_soak(server_url, embedder, seconds=1, writers=150)


def test_a_refused_soak_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Options are checked before the embedded server is started or the model loaded."""
    (tmp_path / "config.yaml").write_text("{}\n")
    monkeypatch.setenv("SPARK_PG_CONFIG", str(tmp_path / "config.yaml"))
    monkeypatch.setenv("SPARK_PG_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPARK_PG_EMBEDDING_MODEL_DIR", str(tmp_path / "no-model"))
    monkeypatch.delenv("SPARK_PG_DATABASE_URL", raising=False)
    assert main(["soak", "--seconds", "-1"]) == 2
    assert "seconds must be more than 0" in capsys.readouterr().err
    assert not (tmp_path / "home" / "pgdata").exists()


def test_a_writers_batch_is_committed_only_by_the_writer(db_url: str) -> None:
    """What the soak's last-write-wins check rests on: ingest inside a transaction the caller opened
    commits nothing (its blocks are savepoints), so the writer's own commit is the commit."""
    with connect(db_url) as writer, connect(db_url, autocommit=True) as other:
        writer.execute("SELECT 1")
        ingest(writer, [MemoryIn(tenant="soak-commit", key="k", text="written, not committed")], None)
        seen = "SELECT count(*) FROM spark.memories WHERE tenant = 'soak-commit'"
        assert other.execute(seen).fetchone() == (0,)
        writer.rollback()
        assert other.execute(seen).fetchone() == (0,)


def test_a_kept_database_is_named_even_when_the_run_fails(
    server_url: str, embedder: Embedder, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken_install(url: str) -> None:
        raise RuntimeError("install failed")

    monkeypatch.setattr(schema, "install", broken_install)
    with pytest.raises(RuntimeError, match="install failed"):
        run_soak(server_url, embedder, seconds=1, keep=True)
    named = re.search(r"scratch database (spark_soak_\w+) \(kept", capsys.readouterr().err)
    assert named, "the kept database is not named"
    try:
        assert scratch.exists(server_url, named[1])  # and it is there
    finally:
        scratch.drop(server_url, named[1])


def test_an_interrupted_kept_soak_stops_its_threads(
    server_url: str, embedder: Embedder, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C with --keep: nothing told the writers, readers and workers to stop (the drop's FORCE ended their
    connections without --keep), so the process outlived the interrupt until the end of --seconds, and the
    workers' loops for ever."""
    timer = threading.Timer(6.0, _thread.interrupt_main)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_soak(server_url, embedder, seconds=120, writers=1, readers=1, workers=1, batch=5, keep=True)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 60
    named = re.search(r"scratch database (spark_soak_\w+) \(kept", capsys.readouterr().err)
    assert named
    try:
        with connect(server_url, autocommit=True) as admin:
            for _ in range(50):
                row = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (named[1],)
                ).fetchone()
                if row == (0,):
                    break
                time.sleep(0.2)
            assert row == (0,), f"{row} sessions of the soak still open after the interrupt"
    finally:
        scratch.drop(server_url, named[1])


def test_sigterm_ends_a_soak_as_ctrl_c_does(
    cli_env: str, server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was (audit Z): SIGTERM (timeout, CI) ended the process at once and left its scratch database, under
    a name no later run reuses; Ctrl-C dropped it."""
    import os
    import signal
    import subprocess
    import sys

    monkeypatch.setenv("SPARK_PG_DATABASE_URL", server_url)  # the soak makes its own database there
    listed = "SELECT datname FROM pg_database WHERE datname LIKE 'spark_soak_%'"
    with connect(server_url, autocommit=True) as admin:
        before = {r[0] for r in admin.execute(listed).fetchall()}
        soak = subprocess.Popen(
            [str(Path(sys.executable).parent / "spark-pg"), "soak", "--seconds", "120", "--writers", "1",
             "--readers", "1", "--workers", "1", "--quiet"],
            env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not ({r[0] for r in admin.execute(listed).fetchall()} - before) and soak.poll() is None:
                assert time.monotonic() < deadline, "the soak made no database"
                time.sleep(0.2)
            time.sleep(3)  # writing, reading and embedding by now
            soak.send_signal(signal.SIGTERM)
            _, err = soak.communicate(timeout=60)
        finally:
            if soak.poll() is None:
                soak.kill()
        assert soak.returncode == 130, err
        assert b"spark-pg: interrupted" in err and b"Traceback" not in err
        assert {r[0] for r in admin.execute(listed).fetchall()} - before == set()


def test_the_json_says_when_and_where_it_ran() -> None:
    """The JSON has "machine" and "run" (the soak's start) beside the counts, as bench's report has (the
    whole soak is test_a_short_soak_reconciles)."""
    from spark_pg.soak import SoakReport

    out = SoakReport().as_json()
    assert set(out["machine"]) == {"cores", "cpu", "memory_gib", "arch", "python"} and out["machine"]["cores"]
    assert set(out["run"]) == {"at", "command", "version", "commit"} and out["run"]["at"].endswith("+00:00")
    assert {"ok", "writes", "reads", "reconcile"} <= set(out)  # the counts as before
