"""Database and model fixtures.

Server order: PG_TEST_DSN if set, else a testcontainers pgvector/pgvector container when a Docker engine
answers, else the embedded server (its own data directory under pytest's temp folder, stopped at the end).
The session gets a fresh database with the schema installed; `conn` rolls back after each test;
`fresh_db` gives an empty database for install/upgrade tests.
"""

from __future__ import annotations

import gc
import os
import subprocess
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from spark_pg import schema, scratch
from spark_pg.config import Settings, load_settings
from spark_pg.db import EmbeddedServer, connect
from spark_pg.embedding import Embedder, load_embedder, model_dir_for
from spark_pg.hooks import wire
from spark_pg.model_files import install_offline_model
from spark_pg.scratch import with_dbname


def _docker_url() -> Iterator[str] | None:
    """A container's URL generator when a Docker engine answers, else None."""
    try:
        import docker
    except ImportError:
        return None
    # the failed probe leaves docker-py's socket to the garbage collector: collect it here, not mid-test
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            client = docker.from_env()
            try:
                client.ping()
            finally:
                client.close()
        except Exception:
            return None
        finally:
            gc.collect()
    try:
        from testcontainers.postgres import PostgresContainer
    except ImportError:  # older layout
        from testcontainers.community.postgres import PostgresContainer  # type: ignore[no-redef]

    def run() -> Iterator[str]:
        with PostgresContainer("pgvector/pgvector:pg17", driver=None) as container:
            yield container.get_connection_url()

    return run()


@pytest.fixture(scope="session")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Admin URL of the PostgreSQL + pgvector server the tests use."""
    if os.environ.get("PG_TEST_DSN"):
        yield os.environ["PG_TEST_DSN"]
        return
    container = _docker_url()
    if container is not None:
        yield from container
        return
    server = EmbeddedServer(tmp_path_factory.mktemp("pg-home"))
    try:
        yield server.up()
    finally:
        server.down()


def _create_db(server: str) -> str:
    name = f"spark_test_{uuid.uuid4().hex[:10]}"
    scratch.create(server, name)
    return name


def _drop_db(server: str, name: str) -> None:
    scratch.drop(server, name)


@pytest.fixture(scope="session")
def db_url(server_url: str) -> Iterator[str]:
    """A database with the schema installed, shared by the session."""
    with temp_database(server_url, install=True) as url:
        yield url


@contextmanager
def temp_database(server: str, *, install: bool) -> Iterator[str]:
    name = _create_db(server)
    url = with_dbname(server, name)
    try:
        if install:
            schema.install(url)
        yield url
    finally:
        _drop_db(server, name)


@pytest.fixture
def fresh_db(server_url: str) -> Iterator[str]:
    """An empty database, dropped after the test."""
    with temp_database(server_url, install=False) as url:
        yield url


@pytest.fixture
def installed_db(server_url: str) -> Iterator[str]:
    """A database with a fresh install and nothing else, dropped after the test."""
    with temp_database(server_url, install=True) as url:
        yield url


@contextmanager
def rolled_back(url: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection to ``url`` inside a transaction that is rolled back at the end."""
    connection = connect(url)
    try:
        with connection.transaction(force_rollback=True):
            yield connection
    finally:
        connection.close()


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection whose work is rolled back at the end of the test."""
    with rolled_back(db_url) as connection:
        yield connection


@pytest.fixture(scope="session")
def model_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Settings whose model folder is the user's (installed once by `make`), everything else default."""
    settings = load_settings()
    install_offline_model(model_dir_for(settings))
    return settings


@pytest.fixture(scope="session")
def embedder(model_settings: Settings) -> Embedder:
    return load_embedder(model_settings)


@pytest.fixture
def tenant() -> str:
    """A tenant name no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"


def point_cli(url: str, monkeypatch: pytest.MonkeyPatch, folder: Path, config: str = "{}\n") -> str:
    """Point the CLI at ``url``, with ``config`` as its config file (in ``folder``) instead of the user's;
    returns ``url``."""
    monkeypatch.setenv("SPARK_PG_DATABASE_URL", url)
    path = folder / "config.yaml"
    path.write_text(config)
    monkeypatch.setenv("SPARK_PG_CONFIG", str(path))
    return url


@pytest.fixture
def cli_env(db_url: str, model_settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """Point the CLI at the test database (and no user config file)."""
    config = "embedding:\n  model_dir: " + str(model_dir_for(model_settings)) + "\n"
    return point_cli(db_url, monkeypatch, tmp_path, config)


def usage_error(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> str:
    """The CLI's message for ``argv``, which argparse must refuse (exit 2) before running anything."""
    from spark_pg.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(list(argv))
    assert stopped.value.code == 2
    return capsys.readouterr().err


def first_ping(path: Path, server: subprocess.Popen[bytes], log: Path, seconds: float = 60) -> dict[str, Any]:
    """The first answer of a `spark-pg serve` started as ``server`` (its stderr in ``log``) on ``path``."""
    deadline = time.monotonic() + seconds
    while (answer := wire.ping(path)) is None:
        assert server.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.1)
    return answer


class Blocked:
    """A statement (or a call given an autocommit connection) run on its own connection in a thread, for a
    test of what waits for what: ``start`` returns once it waits for a lock (or has finished), ``join``
    its error, if any; a call's return value is ``result``."""

    def __init__(
        self, url: str, sql: str | Callable[[psycopg.Connection[Any]], Any], args: Any = None
    ) -> None:
        import threading

        self.url, self.sql, self.args = url, sql, args
        self.error: BaseException | None = None
        self.result: Any = None
        self.pid: int | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            with connect(self.url, autocommit=True) as c:
                self.pid = c.info.backend_pid
                if callable(self.sql):
                    self.result = self.sql(c)
                else:
                    c.execute(self.sql, self.args)
        except BaseException as exc:  # reported by join
            self.error = exc

    def start(self, seconds: float = 20) -> Blocked:
        self._thread.start()
        give_up = time.monotonic() + seconds
        with connect(self.url, autocommit=True) as watch:
            while self._thread.is_alive() and time.monotonic() < give_up:
                if self.pid is not None:
                    row = watch.execute(
                        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (self.pid,)
                    ).fetchone()
                    if row is not None and row[0] == "Lock":
                        return self
                time.sleep(0.02)
        return self

    def join(self, seconds: float = 30) -> BaseException | None:
        self._thread.join(seconds)
        assert not self._thread.is_alive(), f"still waiting: {self.sql}"
        return self.error


@contextmanager
def bench_corpus(server_url: str, settings: Settings, embedder: Embedder, spec: Any) -> Iterator[Any]:
    """The corpus database of ``spec`` (a bench_retrieve.BenchSpec) built fresh by one bench run, dropped
    after the block."""
    from spark_pg import bench_retrieve

    if scratch.exists(server_url, spec.db_name):
        scratch.drop(server_url, spec.db_name)
    try:
        bench_retrieve.run(settings, server_url, embedder, spec, progress=False)
        yield spec
    finally:
        if scratch.exists(server_url, spec.db_name):
            scratch.drop(server_url, spec.db_name)


@contextmanager
def hook_server(url: str, embedder: Embedder, path: Path) -> Iterator[str]:
    """A hook server (spark_pg.hooks.server) in a thread on the socket ``path``, over a pool of 2 connections
    to ``url``; yields the socket's path, and stops the server and the pool on the way out."""
    import threading

    from spark_pg.hooks.server import HookServer, open_pool
    from spark_pg.hooks.service import HookService

    pool = open_pool(url, 2)
    server = HookServer(path, HookService(pool.connection, lambda: embedder), lambda _: None)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield str(path)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        pool.close()


@contextmanager
def seeded_database(
    server_url: str,
    settings: Settings,
    embedder: Embedder | None = None,
    tenant: str = "",
    memories: Sequence[tuple[str, str, str]] = (),
) -> Iterator[str]:
    """A scratch database with the schema, ``memories`` ((key, category, text) each) of ``tenant`` embedded
    by ``embedder``, and the cold-start pack; yields its URL and drops it on the way out."""
    from spark_pg.client import SparkClient
    from spark_pg.ingest import ingest
    from spark_pg.records import MemoryIn

    with temp_database(server_url, install=True) as url:
        if memories:
            with connect(url) as conn:
                ingest(
                    conn,
                    [MemoryIn(tenant=tenant, key=k, category=c, text=t) for k, c, t in memories],
                    embedder,
                )
                conn.commit()
        with SparkClient(settings, url=url) as spark:
            spark.load_seed_pack()
        yield url
