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


def test_a_live_server_is_known_by_its_data_directory_whatever_the_clock_did(home: Path) -> None:
    """A clock stepped after the server started (a virtual machine paused and resumed) moves the creation time
    psutil reports away from the start time in postmaster.pid. Judged by that alone the live server was
    "not running", and `db up` deleted its pid file and failed to start a second one beside it."""
    server = EmbeddedServer(home)
    url = server.up()
    pid_file = server.pgdata / "postmaster.pid"
    saved = pid_file.read_text()
    lines = saved.splitlines()
    lines[2] = str(int(lines[2]) - 3600)  # as if the clock had jumped an hour since the start
    try:
        pid_file.write_text("\n".join(lines) + "\n")
        status = server.status()
        assert (status.running, status.pid) == (True, int(lines[0]))
        assert server.up() == url
        assert pid_file.exists()
    finally:
        pid_file.write_text(saved)  # the postmaster checks its own lock file now and then
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert server.down() is True


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


SUBREAPER = """
import ctypes, os, subprocess, sys
# adopt orphaned descendants and reap none of them until told: a container's PID 1 that is no init
assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
print(subprocess.run([sys.executable, "-c", sys.argv[1], sys.argv[2]], check=True, capture_output=True,
                     text=True).stdout.strip(), flush=True)
sys.stdin.read()
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
"""


def test_a_postmaster_that_died_a_zombie_is_not_running(home: Path) -> None:
    """SIGKILLed under a parent that does not reap it, the postmaster stays a zombie: its PID still exists,
    with the name and start time of the pid file. It used to count as running: `up` returned its URL (every
    command then got "connection refused") and `down` waited 60 s, then failed."""
    with subprocess.Popen(
        [sys.executable, "-c", SUBREAPER, UP, str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as parent:
        assert parent.stdin is not None and parent.stdout is not None
        try:
            url = parent.stdout.readline().strip()
            assert url.startswith("postgresql://")
            server = EmbeddedServer(home)
            pid = server.status().pid
            assert pid is not None and psutil.Process(pid).ppid() == parent.pid  # adopted
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                assert time.monotonic() < deadline, "the postmaster did not die"
                time.sleep(0.05)
            assert server.status().running is False
            started = time.monotonic()
            assert server.down() is False
            assert time.monotonic() - started < 5
            with psycopg.connect(server.up()) as conn:  # a new postmaster beside the zombie's lock files
                assert conn.execute("SELECT 1").fetchone() == (1,)
            assert server.status().pid != pid and psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        finally:
            parent.stdin.close()  # the parent reaps the zombies, then ends
            parent.wait(timeout=60)


def _initdb_running(pgdata: Path) -> bool:
    """Whether initdb's standalone backend holds ``pgdata`` (its postmaster.pid names a negative PID)."""
    try:
        return (pgdata / "postmaster.pid").read_text().startswith("-")
    except OSError:
        return False


def test_a_first_up_killed_during_initdb_is_started_over(home: Path) -> None:
    """initdb runs beside the data directory and is renamed into place when it has finished: a first `db up`
    killed midway used to leave a data directory that never started (its postmaster.pid held initdb's
    negative PID)."""
    first = subprocess.Popen(
        [sys.executable, "-c", UP, str(home)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not any(_initdb_running(d) for d in (home / "pgdata", home / "pgdata.initdb")):
            assert first.poll() is None and time.monotonic() < deadline, "initdb was not seen running"
            time.sleep(0.005)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # with initdb and its backend
        first.wait(timeout=10)
    server = EmbeddedServer(home)
    with psycopg.connect(server.up()) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert not (home / "pgdata.initdb").exists()


def test_a_data_directory_an_older_initdb_left_says_what_to_delete(tmp_path: Path) -> None:
    server = EmbeddedServer(tmp_path)
    server.pgdata.mkdir()
    (server.pgdata / "PG_VERSION").write_text("18\n")
    (server.pgdata / "postmaster.pid").write_text(f"-4242\n{server.pgdata}\n1795486559\n5432\n\n\n  1 2\n")
    assert server.status().running is False
    with pytest.raises(DatabaseError, match=r"initdb left when it was stopped midway.*rm -rf .*pgdata"):
        server.up()


def test_a_data_directory_that_is_no_cluster_is_left_alone(tmp_path: Path) -> None:
    server = EmbeddedServer(tmp_path)
    server.pgdata.mkdir()
    (server.pgdata / "notes.txt").write_text("mine")
    with pytest.raises(DatabaseError, match=r"holds files but no PostgreSQL cluster"):
        server.up()
    assert (server.pgdata / "notes.txt").read_text() == "mine"
