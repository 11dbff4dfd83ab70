"""Edges of `spark-pg worker`: a steady stream of notifications, a database away for good, an interrupted
one-off run, the rate."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from spark_pg.config import Settings
from spark_pg.db import connect
from spark_pg.embedding import Embedder, model_dir_for
from spark_pg.errors import DatabaseError
from spark_pg.ingest import ingest
from spark_pg.records import MemoryIn
from spark_pg.worker import (
    CHANNEL,
    DRAIN_MAX_PASSES,
    WorkerStats,
    _drain_notifies,
    _wait,
    run_reconnecting,
)
from tests.conftest import temp_database

SENDS = 1500  # notifications a stream sends at most (one per 10 ms: 15 s) before it gives up on the waiter
UNREACHABLE = "postgresql://nobody@127.0.0.1:1/nowhere?connect_timeout=2"


@pytest.fixture
def wdb(server_url: str) -> Iterator[str]:
    with temp_database(server_url, install=True) as url:
        yield url


class Stream:
    """A second connection that sends a NOTIFY on the worker's channel every 10 ms, as a steady stream of
    writes does, until ``done`` is set or it has sent SENDS; ``on_send(n)`` runs after the n-th."""

    def __init__(self, url: str, on_send: Any = None) -> None:
        self.url, self.on_send = url, on_send
        self.done = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with connect(self.url, autocommit=True) as c:
            while not self.done.is_set() and self.sent < SENDS:
                c.execute(f"NOTIFY {CHANNEL}")
                self.sent += 1
                if self.on_send is not None:
                    self.on_send(self.sent)
                self.done.wait(0.01)

    def __enter__(self) -> Stream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=10)


def listening(url: str) -> psycopg.Connection[Any]:
    conn = connect(url, autocommit=True)
    conn.execute(f"LISTEN {CHANNEL}")
    return conn


def test_a_steady_stream_of_notifications_does_not_keep_the_worker_waiting(wdb: str) -> None:
    """One write every 20 ms kept the drain of waiting notifications going for as long as the stream
    lasted: the serving worker embedded nothing (0 of 1,500 rows in 35 s)."""
    with listening(wdb) as conn, Stream(wdb) as stream:
        _wait(conn, 600.0, threading.Event())
        returned_at = stream.sent
    assert returned_at < SENDS  # the stream was still going: the wait did not outlast it
    with listening(wdb) as conn, Stream(wdb) as stream:
        assert _drain_notifies(conn, threading.Event()) == DRAIN_MAX_PASSES
        assert stream.sent < SENDS


def test_a_stop_ends_the_wait_while_notifications_keep_coming(wdb: str) -> None:
    """SIGTERM during a stream of writes took effect only once the stream ended."""
    stop = threading.Event()
    with listening(wdb) as conn, Stream(wdb, on_send=lambda n: n == 5 and stop.set()) as stream:
        _wait(conn, 600.0, stop)
        assert stop.is_set() and stream.sent < SENDS
        assert _drain_notifies(conn, stop) == 0  # a set stop is seen before any pass


class Closed(Exception):
    pass


def test_a_reconnecting_run_gives_up_after_the_bound_when_the_database_stays_away(
    wdb: str, embedder: Embedder
) -> None:
    """`worker --once` retried for the whole outage: a cron or CI job hung while the database was down."""
    calls: list[int] = []
    logged: list[str] = []

    def open_connection() -> psycopg.Connection[Any]:
        calls.append(1)
        if len(calls) == 1:  # connected once, then the connection breaks and the server is unreachable
            conn = connect(wdb, autocommit=True)
            conn.close()
            return conn
        return connect(UNREACHABLE, autocommit=True)

    with pytest.raises(
        DatabaseError, match=r"gave up: the database has been unreachable for [\d.]+ s \(limit 0.3 s"
    ):
        run_reconnecting(
            open_connection, embedder, max_backoff_s=0.25, give_up_after_s=0.3, log=logged.append, once=True
        )
    assert len(calls) >= 2 and any("lost the database connection" in line for line in logged)


def test_an_interrupted_one_off_run_says_when_what_is_left_is_unknown(
    wdb: str,
    model_settings: Settings,
    embedder: Embedder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A --once run stopped while the database was away said "0 memories still to embed"."""
    from spark_pg.cli import main

    config = tmp_path / "config.yaml"
    config.write_text(f"embedding:\n  model_dir: {model_dir_for(model_settings)}\n")
    monkeypatch.setenv("SPARK_PG_DATABASE_URL", wdb)
    monkeypatch.setenv("SPARK_PG_CONFIG", str(config))
    with connect(wdb) as c:
        ingest(c, [MemoryIn(tenant="t", key=f"k{i}", text=f"note {i}") for i in range(3)], None)
        c.commit()
    stops: list[threading.Event] = []
    monkeypatch.setattr("spark_pg.worker.stop_on_signals", stops.append)
    opened: list[int] = []

    from spark_pg import schema

    real_require_current = schema.require_current

    def connect_then_lose(url: str, **kwargs: Any) -> psycopg.Connection[Any]:
        opened.append(1)
        if len(opened) <= 2:  # the CLI's check, then the worker's first connection
            return connect(url, **kwargs)
        stops[0].set()  # SIGTERM while the database is away
        return connect(UNREACHABLE, **kwargs)

    def checked_then_lost(conn: psycopg.Connection[Any]) -> None:
        real_require_current(conn)
        if len(opened) == 2:
            conn.close()  # lost before the worker's first batch

    monkeypatch.setattr("spark_pg.db.connect", connect_then_lose)
    monkeypatch.setattr("spark_pg.schema.require_current", checked_then_lost)
    assert main(["worker", "--once", "--quiet", "--json"]) == 130
    out, err = capsys.readouterr()
    assert json.loads(out)["pending"] is None
    assert "interrupted; an unknown number of memories (the database is unreachable) still to embed" in err


def test_the_rate_is_over_the_time_spent_in_batches() -> None:
    """A serving worker's rate was averaged over its idle time too (5.6/s; its batches ran at 15-60/s)."""
    stats = WorkerStats(embedded=100, seconds=200.0, busy_seconds=2.0)
    assert stats.as_json()["per_second"] == 50.0
    assert WorkerStats().as_json()["pending"] is None
