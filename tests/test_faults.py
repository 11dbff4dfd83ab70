"""Fault drills (spark_pg.faults) on their own scratch embedded server: a worker SIGKILLed mid-batch, the
postmaster SIGKILLed mid-ingest with a worker and a hook server connected, the model files removed. The
counts are read back from the tables here, not only taken from the scenarios' own checks."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from spark_pg.config import Settings
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
