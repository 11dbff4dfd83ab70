"""`spark-pg serve` at its edges: start-up without a database, the pool's size, input sent straight to the
socket."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from spark_pg.cli import build_parser
from spark_pg.config import Settings
from spark_pg.embedding import Embedder
from spark_pg.errors import DatabaseError
from spark_pg.hooks import wire
from spark_pg.hooks.protocol import POST, PRE, HookEvent, parse_event
from spark_pg.hooks.server import open_pool
from tests.conftest import hook_server, model_dir_for, seeded_database

T = "hook-edges"
SPARK_PG = Path(sys.executable).parent / "spark-pg"
REFUSED = "postgresql://postgres@localhost:1/postgres"  # nothing listens on port 1: refused at once
MEMORIES = [
    (
        "alembic-sql",
        "database",
        "Run `alembic upgrade head --sql` first and review the generated SQL before migrating a shared "
        "database.",
    ),
]


@pytest.fixture(scope="module")
def edb(server_url: str, model_settings: Settings, embedder: Embedder) -> Iterator[str]:
    with seeded_database(server_url, model_settings, embedder, T, MEMORIES) as url:
        yield url


@pytest.fixture(scope="module")
def sock(edb: str, embedder: Embedder, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with hook_server(edb, embedder, tmp_path_factory.mktemp("edges") / "s.sock") as path:
        yield path


def test_serve_without_a_database_fails_at_once_in_one_line_naming_the_cause(
    model_settings: Settings, tmp_path: Path
) -> None:
    """Was: 36 s with the lock held and no socket, then a line about "the next request" (there is none at
    start) and "pool initialization incomplete after 30 sec", which hid the refused connection."""
    config = tmp_path / "config.yaml"
    config.write_text("embedding:\n  model_dir: " + str(model_dir_for(model_settings)) + "\n")
    env = os.environ | {"SPARK_PG_DATABASE_URL": REFUSED, "SPARK_PG_CONFIG": str(config)}
    path = tmp_path / "s.sock"
    started = time.monotonic()
    proc = subprocess.run(
        [str(SPARK_PG), "serve", "--socket", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    spent = time.monotonic() - started
    assert proc.returncode != 0 and spent < 10, (spent, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot connect to the database" in proc.stderr and "Connection refused" in proc.stderr
    assert "next request" not in proc.stderr
    assert not path.exists()


def test_open_pool_refuses_an_unreachable_database_at_once_and_logs_no_reconnect_line() -> None:
    logged: list[str] = []
    started = time.monotonic()
    with pytest.raises(DatabaseError, match=r"cannot connect to the database: .*Connection refused"):
        open_pool(REFUSED, 2, logged.append)
    assert time.monotonic() - started < 5
    assert logged == []


@pytest.mark.parametrize("size", ["65", "100000"])
def test_a_pool_size_over_the_bound_is_a_usage_error(size: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: `--pool-size 100000` started a server that met connection errors only under load."""
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(["serve", "--pool-size", size])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert f"--pool-size: must be at most {wire.MAX_POOL_SIZE}, got {size}" in err, err
    assert build_parser().parse_args(["serve", "--pool-size", "64"]).pool_size == 64


def test_a_pool_larger_than_the_database_allows_is_refused_naming_max_connections(edb: str) -> None:
    with psycopg.connect(edb) as conn:
        row = conn.execute("SELECT current_setting('max_connections')::int").fetchone()
    assert row is not None
    with pytest.raises(DatabaseError, match=r"--pool-size .* max_connections"):
        open_pool(edb, int(row[0]) + 1)


def odd_event(kind: str, session: str) -> dict[str, Any]:
    """An event as the wire protocol carries it, with a NUL in the session id, in a tool_input key and in
    a value, and a lone surrogate (half an emoji)."""
    return {
        "kind": kind,
        "tool_name": "Bash",
        "tool_input": {"command": "alembic upgrade\x00head \ud83d", "descrip\x00tion": "migrate"},
        "session_id": session,
        "failed": False,
    }


def test_the_server_cleans_an_event_as_the_hook_client_does() -> None:
    raw = odd_event(PRE, "sess\x00odd")
    from_client = parse_event(PRE, {**raw, "hook_event_name": "PreToolUse"}).to_wire()
    assert HookEvent.from_wire(raw).to_wire() == from_client
    assert from_client["session_id"] == "sess odd"
    assert from_client["tool_input"] == {"command": "alembic upgrade head ?", "descrip tion": "migrate"}


def retrievals(url: str, session: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM spark.retrievals WHERE tenant = %s AND session_id = %s", (T, session)
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_request_sent_straight_to_the_socket_with_a_nul_is_answered(sock: str, edb: str) -> None:
    """Was: DataError (PostgreSQL text cannot hold a NUL) for post-tool-use and ArgumentRefused for
    pre-tool-use: only the hook client cleaned the event."""
    request: dict[str, Any] = {"v": wire.VERSION, "op": "hook", "tenant": T, "interrupts": False}
    pre = wire.ask(sock, request | {"event": odd_event(PRE, "sess\x00wire")}, 10)
    assert pre["ok"] is True and pre["output"], pre
    assert retrievals(edb, "sess wire") == 1  # logged under the cleaned session id, as the client sends it
    post = wire.ask(sock, request | {"event": odd_event(POST, "sess\x00wire")}, 10)
    assert post["ok"] is True, post
