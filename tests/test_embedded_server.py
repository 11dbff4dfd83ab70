"""The embedded server survives clients killed with SIGKILL, and its own SIGKILL, and stays stoppable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest

from spark_pg.db import EmbeddedServer
from spark_pg.errors import DatabaseError

CLIENT = """
import sys, time
from spark_pg.db import EmbeddedServer
from spark_pg.errors import DatabaseError
print(EmbeddedServer(__import__('pathlib').Path(sys.argv[1])).up(), flush=True)
time.sleep(120)
"""


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    EmbeddedServer(tmp_path).down()


def test_sigkilled_client_leaves_the_server_usable_and_stoppable(home: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", CLIENT, str(home)], stdout=subprocess.PIPE, text=True
    ) as client:
        assert client.stdout is not None
        url = client.stdout.readline().strip()
        assert url.startswith("postgresql://")
        client.send_signal(signal.SIGKILL)
        client.wait(timeout=10)

    server = EmbeddedServer(home)
    status = server.status()
    assert status.running and status.url == url
    with psycopg.connect(server.up()) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert server.down() is True
    assert server.status().running is False
    assert server.down() is False  # stopping twice is not an error


def test_server_recovers_after_its_postmaster_is_sigkilled(home: Path) -> None:
    server = EmbeddedServer(home)
    url = server.up()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE survives (x int); INSERT INTO survives VALUES (42)")
    pid = server.status().pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    psutil.wait_procs([psutil.Process(pid)] if psutil.pid_exists(pid) else [], timeout=10)
    deadline = time.monotonic() + 10
    while server.status().running and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.status().running is False
    with psycopg.connect(server.up()) as conn:  # restarts, replays WAL
        assert conn.execute("SELECT x FROM survives").fetchone() == (42,)


def test_psql_connects_with_the_printed_url(home: Path) -> None:
    import shutil

    from spark_pg.db import _pgserver

    pg = _pgserver().postgres_server
    psql = shutil.which("psql") or str(pg.POSTGRES_VERSIONS[pg.TARGET_POSTGRES_VERSION] / "psql")
    env = {**os.environ, "SPARK_PG_HOME": str(home)}
    env.pop("SPARK_PG_DATABASE_URL", None)
    url = subprocess.run(
        [sys.executable, "-m", "spark_pg.cli", "db", "url"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    out = subprocess.run(
        [psql, url, "-Atc", "SELECT name FROM pg_available_extensions WHERE name = 'vector'"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    assert out.strip() == "vector"


def test_up_applies_shared_buffers_once(home: Path) -> None:
    server = EmbeddedServer(home, shared_buffers_mb=64)
    url = server.up()
    with psycopg.connect(url) as conn:
        assert conn.execute("SHOW shared_buffers").fetchone() == ("64MB",)
    pid = server.status().pid
    assert server.up() == url and server.status().pid == pid  # already right: no restart


def test_a_home_that_cannot_hold_the_data_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    server = EmbeddedServer(tmp_path / "a-file" / "home")
    assert server.status().running is False  # not a directory: nothing there, nothing running
    with pytest.raises(
        DatabaseError, match=r"cannot create the data directory .*a-file/home/pgdata.*SPARK_PG_HOME"
    ):
        server.up()


def test_a_pid_file_whose_pid_was_reused_is_not_a_server_and_its_process_is_never_signalled(
    home: Path,
) -> None:
    """After a crash or a reboot the pid file may name a PID another process now has: that is no server,
    `down` must not signal it, and `up` starts the real one."""
    server = EmbeddedServer(home)
    server.up()
    saved = (server.pgdata / "postmaster.pid").read_text().splitlines()
    assert server.down() is True
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as other:
        try:
            stale = [str(other.pid), *saved[1:]]
            (server.pgdata / "postmaster.pid").write_text("\n".join(stale) + "\n")
            assert server.status().running is False
            assert server.down() is False
            assert other.poll() is None  # not signalled
            with psycopg.connect(server.up()) as conn:  # the stale file is dropped, the server starts
                assert conn.execute("SELECT 1").fetchone() == (1,)
            assert server.status().pid != other.pid and other.poll() is None
        finally:
            other.kill()


UP = """
import sys
from pathlib import Path
from spark_pg.db import EmbeddedServer
print(EmbeddedServer(Path(sys.argv[1])).up(), flush=True)
"""


def test_two_processes_starting_the_server_at_once_both_get_it(home: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", UP, str(home)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-800:] for _, err in outs]
    urls = {out.strip() for out, _ in outs}
    assert len(urls) == 1 and EmbeddedServer(home).status().running


def test_shared_buffers_the_server_cannot_start_with_are_undone(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = EmbeddedServer(home, shared_buffers_mb=64)
    server.up()
    server.down()
    too_big = EmbeddedServer(home, shared_buffers_mb=psutil.virtual_memory().total // 2**20 + 1)
    for _ in range(2):  # refused before anything starts, so the same on every run
        with pytest.raises(DatabaseError, match=r"more than this machine's.*not started"):
            too_big.up()
        assert not server.status().running
    # a value the server fails to start with: the restart is made to fail as postgres would (it stops the
    # server, then cannot start it); the previous value is put back and the server runs again
    bad = EmbeddedServer(home, shared_buffers_mb=96)
    real = bad._pg_ctl

    def failing(action: str, socket_dir: Path | None = None) -> None:
        if action == "restart":
            real("stop")
            raise DatabaseError("pg_ctl restart failed")
        real(action, socket_dir)

    monkeypatch.setattr(bad, "_pg_ctl", failing)
    with pytest.raises(
        DatabaseError, match=r"did not start with database.shared_buffers_mb = 96.*runs on with 64"
    ):
        bad.up()
    with psycopg.connect(server.up()) as conn:
        assert conn.execute("SHOW shared_buffers").fetchone() == ("64MB",)


def test_a_home_with_a_space_is_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="its path has a space"):
        EmbeddedServer(tmp_path / "my home").up()
