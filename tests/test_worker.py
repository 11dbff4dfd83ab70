"""Write-behind embedding: the queue triggers, the worker (once, concurrent, failing, killed mid-batch) and
retrieval's degrade mode while a backlog waits."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from spark_pg import queries
from spark_pg.config import Settings
from spark_pg.db import connect
from spark_pg.embedding import Embedder, Vector, model_dir_for
from spark_pg.errors import EmbeddingError, InputError, ModelMismatch
from spark_pg.ingest import ensure_model, ingest
from spark_pg.records import MemoryIn
from spark_pg.worker import (
    WorkerStats,
    backlog,
    connection_lost,
    embed_batch,
    run_reconnecting,
    run_worker,
    store_vectors,
)
from tests.conftest import Blocked, temp_database

Conn = psycopg.Connection[Any]
TEXTS = [
    "Verify JWT signatures on the server before trusting any claim.",
    "Write an Alembic revision for every schema change.",
    "Run pytest -x when the suite is slow.",
    "Take a database backup before a destructive migration.",
    "Pin Docker base images by digest.",
]


@pytest.fixture
def wdb(server_url: str) -> Iterator[str]:
    """A fresh database per test: workers commit, and queue state must not leak between tests."""
    with temp_database(server_url, install=True) as url:
        yield url


def records(tenant: str, n: int, prefix: str = "m") -> list[MemoryIn]:
    return [
        MemoryIn(tenant=tenant, key=f"{prefix}{i}", text=f"{TEXTS[i % len(TEXTS)]} (note {i})")
        for i in range(n)
    ]


def counts(url: str) -> tuple[int, int]:
    """(queued, embedded) over the whole database."""
    with connect(url) as c:
        row = c.execute(
            "SELECT (SELECT count(*) FROM spark.embed_queue), (SELECT count(*) FROM spark.embeddings)"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def work(url: str, embedder: Embedder, **kwargs: Any) -> WorkerStats:
    with connect(url, autocommit=True) as c:
        return run_worker(c, embedder, once=True, **kwargs)


class Truncated(Embedder):
    """An embedder every call of which fails, as with a truncated model file: a broken model."""

    def embed_documents(self, texts: Sequence[str], batch_size: int = 16) -> list[Vector]:
        raise RuntimeError("model file truncated")


class Refuses(Embedder):
    """A working model that cannot take the queued texts (poison rows): only the worker's check text
    embeds."""

    def embed_documents(self, texts: Sequence[str], batch_size: int = 16) -> list[Vector]:
        from spark_pg.worker import MODEL_CHECK_TEXT

        if list(texts) != [MODEL_CHECK_TEXT]:
            raise RuntimeError("text too odd to embed")
        return super().embed_documents(texts, batch_size)


@pytest.fixture
def cli_db(wdb: str, model_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``wdb``, with the CLI run in-process pointed at it (the test model's folder, no user config)."""
    config = tmp_path / "config.yaml"
    config.write_text(f"embedding:\n  model_dir: {model_dir_for(model_settings)}\n")
    monkeypatch.setenv("SPARK_PG_DATABASE_URL", wdb)
    monkeypatch.setenv("SPARK_PG_CONFIG", str(config))
    return wdb


def past_backoff(url: str) -> None:
    """Move the failed rows' backoff into the past, so that they can be claimed again at once."""
    with connect(url) as c:
        c.execute("UPDATE spark.embed_queue SET not_before = now() - interval '1 second'")
        c.commit()


def retrieve_why(
    url: str, embedder: Embedder, tenant: str, query: str, **params: Any
) -> list[dict[str, Any]]:
    with connect(url) as c:
        rows = c.execute(
            "SELECT key, why FROM spark.retrieve(%s, %s, %s, 5, %s)",
            (tenant, query, embedder.embed_query(query), Jsonb({"include_system": False, **params})),
        ).fetchall()
    return [{"key": k, **w} for k, w in rows]


def test_a_deferred_write_is_keyword_findable_at_once_and_embedded_by_the_worker(
    wdb: str, embedder: Embedder
) -> None:
    with connect(wdb) as c:
        ingest(c, records("t", 5), None)
        c.commit()
        hits = c.execute("SELECT key FROM spark.retrieve('t', 'Alembic revision schema', NULL, 5)").fetchall()
    assert ("m1",) in hits  # lexical, before any vector exists
    assert counts(wdb) == (5, 0)
    stats = work(wdb, embedder)
    assert (stats.embedded, stats.failed) == (5, 0)
    assert counts(wdb) == (0, 5)
    why = retrieve_why(wdb, embedder, "t", "schema changes need migrations")
    assert why and all(w["mode"] == "hybrid" for w in why)
    assert work(wdb, embedder).embedded == 0  # nothing left: a second run is harmless


def test_synchronous_ingest_leaves_nothing_queued_and_changed_content_is_queued_again(
    wdb: str, embedder: Embedder
) -> None:
    with connect(wdb) as c:
        ingest(c, records("t", 3), embedder)
        c.commit()
        assert counts(wdb) == (0, 3)
        # an edit from any client (psql here): the stale vector goes, the memory is queued again
        c.execute(
            """UPDATE spark.memories SET text = 'Rotate refresh tokens on every use.',
                      descriptor = 'Rotate refresh tokens on every use.',
                      content_hash = sha256('Rotate refresh tokens on every use.'::bytea)
               WHERE tenant = 't' AND key = 'm0'"""
        )
        c.execute("UPDATE spark.memories SET importance = 0.9 WHERE tenant = 't' AND key = 'm1'")
        c.commit()
    assert counts(wdb) == (1, 2)  # only the content change counts
    assert work(wdb, embedder).embedded == 1
    assert counts(wdb) == (0, 3)


def test_plain_sql_writes_get_a_descriptor_and_hash_that_follow_the_text(
    wdb: str, embedder: Embedder
) -> None:
    """docs/lifecycle.md: any client may INSERT a memory with only its text, and an UPDATE of the text alone
    re-indexes and re-queues it (schema 0013). Python's writes set both and are left as they are."""
    first, edited = "Rotate refresh tokens on every use, café rules.", "Pin Docker base images by digest."
    with connect(wdb) as c:
        ingest(c, [MemoryIn(tenant="t", key="py", text=TEXTS[1], category="migrations")], embedder)
        c.execute("INSERT INTO spark.memories (tenant, key, text) VALUES ('t', 'sql', %s)", (first,))
        c.commit()
        rows = {
            k: (d, bytes(h))
            for k, d, h in c.execute("SELECT key, descriptor, content_hash FROM spark.memories")
        }
        py = MemoryIn(tenant="t", key="py", text=TEXTS[1], category="migrations")
        assert rows["py"] == (py.descriptor, py.content_hash)  # Python's own values, untouched
        assert rows["sql"] == (first, hashlib.sha256(first.encode()).digest())  # same hash as Python's
        assert counts(wdb) == (1, 1)
        assert work(wdb, embedder).embedded == 1

        c.execute("UPDATE spark.memories SET text = %s WHERE tenant = 't' AND key = 'py'", (edited,))
        c.commit()
        descriptor, digest = c.execute(
            "SELECT descriptor, content_hash FROM spark.memories WHERE tenant = 't' AND key = 'py'"
        ).fetchone() or (None, None)
        assert descriptor == py.descriptor.removesuffix(TEXTS[1]) + edited  # the tags stay
        assert bytes(digest) == hashlib.sha256(descriptor.encode()).digest()
        assert counts(wdb) == (1, 1)  # the stale vector went, the memory is queued again
        found = c.execute("SELECT key FROM spark.retrieve('t', 'Docker digest', NULL, 5)").fetchall()
        gone = c.execute("SELECT key FROM spark.retrieve('t', 'Alembic revision', NULL, 5)").fetchall()
        assert ("py",) in found and ("py",) not in gone

        c.execute("UPDATE spark.memories SET descriptor = 'Pin images.' WHERE tenant = 't' AND key = 'sql'")
        c.commit()
        assert c.execute(
            "SELECT content_hash = sha256('Pin images.'::bytea) FROM spark.memories WHERE key = 'sql'"
        ).fetchone() == (True,)
        # a hash sent along with a text edit was made for another descriptor: the stored one's is kept
        c.execute("UPDATE spark.memories SET text = 'Scan images.', content_hash = '\\x00' WHERE key = 'py'")
        c.commit()
        assert c.execute(
            "SELECT content_hash = sha256(convert_to(descriptor, 'UTF8')), action_domain, actionability "
            "FROM spark.memories WHERE key = 'py'"
        ).fetchone() == (True, None, None)  # the old text's scores went with it
    assert counts(wdb) == (2, 0)
    assert work(wdb, embedder).embedded == 2


def test_python_moving_a_tag_into_the_text_keeps_its_descriptor_and_vector(
    wdb: str, embedder: Embedder
) -> None:
    """Python may change the text and keep the descriptor (a category tag moved into the text): the
    trigger must leave that write as it is, or the synchronous ingest's vector would be dropped."""
    moved = MemoryIn(tenant="t", key="k", text="[python] Use uv for installs.")
    with connect(wdb) as c:
        ingest(c, [MemoryIn(tenant="t", key="k", text="Use uv for installs.", category="python")], embedder)
        ingest(c, [moved], embedder)
        c.commit()
        row = c.execute(
            "SELECT text, descriptor, content_hash FROM spark.memories WHERE key = 'k'"
        ).fetchone()
    assert row is not None and (row[0], row[1], bytes(row[2])) == (
        moved.text,
        moved.descriptor,
        moved.content_hash,
    )
    assert counts(wdb) == (0, 1)


def test_an_edit_that_cuts_the_front_off_the_text_is_followed_by_the_descriptor(
    wdb: str, embedder: Embedder
) -> None:
    """Was (0013): a new text that was the tail of the old descriptor passed for Python's own write, so the
    removed words stayed in the descriptor and the vector, and the next edit glued them in front as tags."""
    with connect(wdb) as c:
        ingest(c, [MemoryIn(tenant="t", key="f", text="Never deploy on Friday afternoons.")], embedder)
        c.commit()
        before = c.execute("SELECT descriptor FROM spark.memories WHERE key = 'f'").fetchone()
        assert before is not None and before[0].endswith("Never deploy on Friday afternoons.")
        tags = before[0].removesuffix("Never deploy on Friday afternoons.")
        for text in ("Friday afternoons.", "Always deploy on Friday afternoons."):
            c.execute("UPDATE spark.memories SET text = %s WHERE key = 'f'", (text,))
            c.commit()
            row = c.execute(
                "SELECT descriptor, content_hash = sha256(convert_to(descriptor, 'UTF8')) "
                "FROM spark.memories WHERE key = 'f'"
            ).fetchone()
            assert row == (tags + text, True)
            assert counts(wdb) == (1, 0)  # the old text's vector went; queued again
            assert work(wdb, embedder).embedded == 1
        # and ingest's own marker is off again once its upsert is done, in the same transaction
        g = MemoryIn(tenant="t", key="g", text="Tag releases from main only.")
        ingest(c, [g], embedder)
        c.execute("UPDATE spark.memories SET text = 'Tag releases.' WHERE key = 'g'")
        assert c.execute("SELECT descriptor FROM spark.memories WHERE key = 'g'").fetchone() == (
            g.descriptor.removesuffix(g.text) + "Tag releases.",
        )
        c.rollback()


def test_the_store_guard_skips_a_memory_whose_content_changed_after_the_claim(
    wdb: str, embedder: Embedder
) -> None:
    with connect(wdb) as c:
        ingest(c, records("t", 1), None)
        model = c.execute("SELECT spark.register_model('m-test', 384, 'mean', 256)").fetchone()
        assert model is not None
        stored = c.execute(
            queries.STORE_CLAIMED,
            {
                "model_id": model[0],
                "tenants": ["t"],
                "ids": [c.execute("SELECT id FROM spark.memories").fetchone()[0]],  # type: ignore[index]
                "hashes": [b"not the content's hash"],
                "vectors": [embedder.embed_query("x")],
            },
        ).rowcount
    assert stored == 0


def test_a_memory_deleted_while_the_worker_holds_it_waits_for_the_worker(
    wdb: str, embedder: Embedder
) -> None:
    """Was a deadlock (40P01) that ended a serving worker: the DELETE locked the memory and its cascade
    waited for the claimed queue row, while storing the vector waited for the memory."""
    with connect(wdb) as c:
        ingest(c, records("t", 3), None)
    deletes: list[Blocked] = []

    class Deleting(Embedder):  # the DELETE comes while the batch is being embedded
        def embed_documents(self, texts: Sequence[str], batch_size: int = 16) -> list[Vector]:
            if not deletes:
                deletes.append(Blocked(wdb, "DELETE FROM spark.memories WHERE key = 'm1'").start())
            return embedder.embed_documents(texts, batch_size)

    stats = work(wdb, Deleting(embedder.spec, embedder._model), batch=5)
    assert deletes and deletes[0].join() is None  # it waited, then deleted
    assert stats.embedded == 3 and stats.failed == 0
    with connect(wdb) as c:
        keys = c.execute(
            "SELECT m.key FROM spark.embeddings e JOIN spark.memories m ON m.id = e.memory_id ORDER BY 1"
        ).fetchall()
    assert keys == [("m0",), ("m2",)] and counts(wdb) == (0, 2)


def test_a_synchronous_ingest_of_a_claimed_memory_waits_for_the_worker(wdb: str, embedder: Embedder) -> None:
    """Was a deadlock (40P01, audit T) that ended a serving worker and rolled back its whole batch: the
    ingest stored the memory's vector, and its dequeue trigger waited for the queue row the worker held, while
    the worker's store of the same vector waited for the ingest's. Now the ingest locks the queue rows of
    the vectors it stores first (in key order), so it waits for the batch, then stores its own."""
    with connect(wdb) as c:
        ingest(c, records("t", 3), None)  # queued
    writes: list[Blocked] = []

    class Writing(Embedder):  # the same memory ingested with its vector while the batch is being embedded
        def embed_documents(self, texts: Sequence[str], batch_size: int = 16) -> list[Vector]:
            if not writes:
                again = records("t", 3)[1:2]
                writes.append(Blocked(wdb, lambda conn: ingest(conn, again, embedder)).start())
            return embedder.embed_documents(texts, batch_size)

    stats = work(wdb, Writing(embedder.spec, embedder._model), batch=5)
    assert writes and writes[0].join() is None  # it waited, then stored
    assert writes[0].result.unchanged == 1 and writes[0].result.embedded == 1
    assert stats.embedded == 3 and stats.failed == 0
    assert counts(wdb) == (0, 3)


def test_an_unclaimed_store_of_a_claimed_memory_waits_for_the_worker(wdb: str, embedder: Embedder) -> None:
    """The same deadlock through reembed's store (`spark-pg reembed` finishing a switch to the active model
    while the worker runs): it now locks the queue rows first too."""
    with connect(wdb) as c:
        ingest(c, records("t", 3), None)
        row = c.execute(
            "SELECT tenant, id, descriptor, content_hash FROM spark.memories WHERE key = 'm1'"
        ).fetchone()
        model_id = ensure_model(c, embedder)
        c.commit()
    assert row is not None
    vector = embedder.embed_documents([row[2]])[0]
    writes: list[Blocked] = []

    def store(conn: psycopg.Connection[Any]) -> int:
        with conn.transaction():
            return store_vectors(conn, model_id, [row], [vector], claimed=False)

    class Writing(Embedder):
        def embed_documents(self, texts: Sequence[str], batch_size: int = 16) -> list[Vector]:
            if not writes:
                writes.append(Blocked(wdb, store).start())
            return embedder.embed_documents(texts, batch_size)

    stats = work(wdb, Writing(embedder.spec, embedder._model), batch=5)
    assert writes and writes[0].join() is None and writes[0].result == 1
    assert stats.embedded == 3 and counts(wdb) == (0, 3)


def test_two_workers_share_the_queue_without_embedding_anything_twice(wdb: str, embedder: Embedder) -> None:
    with connect(wdb) as c:
        ingest(c, records("t", 60), None)
        c.commit()
    calls: list[int] = []
    lock = threading.Lock()

    class Counting(Embedder):
        def embed_documents(self, texts: Sequence[str], batch_size: int = 16) -> list[Vector]:
            with lock:
                calls.append(len(texts))
            return embedder.embed_documents(texts, batch_size)

    counting = Counting(embedder.spec, embedder._model)
    results: list[WorkerStats] = []

    def one() -> None:
        results.append(work(wdb, counting, batch=4))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sum(r.embedded for r in results) == 60
    assert sum(calls) == 60  # every memory embedded exactly once across both workers
    assert counts(wdb) == (0, 60)


def test_a_failing_embedding_counts_attempts_and_gives_up_after_max_attempts(
    wdb: str, embedder: Embedder
) -> None:
    with connect(wdb) as c:
        ingest(c, records("t", 3), None)
        c.commit()

    broken = Refuses(embedder.spec, embedder._model)
    for attempt in (1, 2):
        stats = work(wdb, broken, max_attempts=2)
        assert (stats.embedded, stats.failed) == (0, 3), attempt
        assert work(wdb, broken, max_attempts=2).failed == 0  # backing off: not claimed again at once
        past_backoff(wdb)
    with connect(wdb) as c:
        rows = c.execute("SELECT attempts, last_error FROM spark.embed_queue").fetchall()
        assert rows == [(2, "RuntimeError: text too odd to embed")] * 3
        assert backlog(c) == 3 and backlog(c, max_attempts=2) == 0
    assert work(wdb, broken, max_attempts=2).failed == 0  # given up: not claimed again
    assert work(wdb, embedder, max_attempts=3).embedded == 3  # a person raised the limit


def test_a_one_off_run_stopped_by_a_signal_exits_130_and_says_what_is_left(
    cli_db: str, embedder: Embedder, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`spark-pg worker --once && next-step` went on after a CI timeout's SIGTERM: exit 0, nothing said of
    the rows still queued."""
    from spark_pg.cli import main

    with connect(cli_db) as c:
        ingest(c, records("t", 3), None)
        c.commit()
    stops: list[threading.Event] = []
    monkeypatch.setattr("spark_pg.worker.stop_on_signals", stops.append)  # the handler's event

    class Signalled(Embedder):
        def embed_documents(self, texts: Sequence[str], batch_size: int = 16) -> list[Vector]:
            stops[0].set()  # as SIGTERM does mid-batch: the batch finishes, the run stops
            return embedder.embed_documents(texts, batch_size)

    monkeypatch.setattr("spark_pg.embedding.load_embedder", lambda settings: Signalled(embedder.spec, None))
    assert main(["worker", "--once", "--quiet", "--batch", "1", "--json"]) == 130
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert (summary["embedded"], summary["pending"]) == (1, 2)
    assert "interrupted; 2 memories still to embed" in err


def test_a_one_off_worker_run_exits_1_when_a_text_was_not_embedded(
    cli_db: str, embedder: Embedder, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from spark_pg.cli import main

    with connect(cli_db) as c:
        ingest(c, records("t", 3), None)
        c.commit()

    monkeypatch.setattr("spark_pg.worker.stop_on_signals", lambda stop: None)  # keep pytest's own handlers
    monkeypatch.setattr(
        "spark_pg.embedding.load_embedder", lambda settings: Refuses(embedder.spec, embedder._model)
    )
    code = main(["worker", "--once", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 1 and "failed: 3" in out
    assert err.count("not embedded: RuntimeError: text too odd to embed") == 3
    monkeypatch.setattr("spark_pg.embedding.load_embedder", lambda settings: embedder)
    # within the backoff nothing is claimed: was "embedded 0 ... failed: 0", exit 0, with 3 rows unembedded
    assert main(["worker", "--once", "--quiet", "--json"]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert (summary["embedded"], summary["failed"], summary["backing_off"], summary["given_up"]) == (
        0,
        0,
        3,
        0,
    )
    assert main(["worker", "--once", "--quiet", "--max-attempts", "1"]) == 1
    assert "0 after a failure, waiting out its backoff; 3 given up after --max-attempts 1" in (
        capsys.readouterr().err
    )
    past_backoff(cli_db)
    assert main(["worker", "--once", "--quiet"]) == 0
    assert "embedded 3 memories" in capsys.readouterr().out


def test_one_bad_text_does_not_hold_back_its_batch(wdb: str, embedder: Embedder) -> None:
    with connect(wdb) as c:
        ingest(c, records("t", 5), None)
        c.commit()

    class Picky(Embedder):
        def embed_documents(self, texts: Sequence[str], batch_size: int = 16) -> list[Vector]:
            if any("(note 2)" in t for t in texts):
                raise ValueError("cannot tokenise")
            return embedder.embed_documents(texts, batch_size)

    stats = work(wdb, Picky(embedder.spec, embedder._model))
    assert (stats.embedded, stats.failed) == (4, 1)
    with connect(wdb) as c:
        row = c.execute(
            """SELECT m.key, q.attempts, q.last_error
               FROM spark.embed_queue q JOIN spark.memories m ON m.id = q.memory_id"""
        ).fetchone()
    assert row == ("m2", 1, "ValueError: cannot tokenise")


def test_bad_worker_arguments_are_refused(wdb: str, embedder: Embedder) -> None:
    with connect(wdb, autocommit=True) as c:
        with pytest.raises(InputError, match="batch"):
            run_worker(c, embedder, once=True, batch=0)
        with pytest.raises(InputError, match="poll_s"):
            run_worker(c, embedder, once=True, poll_s=0)
        with pytest.raises(InputError, match="poll_s"):  # NaN passes a plain <= 0 check: a busy loop
            run_worker(c, embedder, once=True, poll_s=float("nan"))
        with pytest.raises(InputError, match="max_attempts"):  # 0 would claim nothing, silently
            run_worker(c, embedder, once=True, max_attempts=0)
    with pytest.raises(InputError, match="max_backoff_s"):
        run_reconnecting(lambda: connect(wdb, autocommit=True), embedder, max_backoff_s=float("inf"))
    with connect(wdb) as c, pytest.raises(InputError, match="autocommit"):
        run_worker(c, embedder, once=True)


def test_a_worker_stops_when_another_model_becomes_active_under_it(wdb: str, embedder: Embedder) -> None:
    # a reembed switched models while this worker ran: its vectors would never take a row off the queue (the
    # trigger dequeues on the active model's vectors), so it would claim the same rows again forever
    spec = embedder.spec
    with connect(wdb, autocommit=True) as c:
        model_id = ensure_model(c, embedder)
        c.execute(
            queries.REGISTER_MODEL,
            {
                "name": "other/model",
                "dim": spec.dim,
                "pooling": spec.pooling,
                "max_tokens": spec.max_tokens,
                "query_prefix": spec.query_prefix,
                "document_prefix": spec.document_prefix,
            },
        )
        c.execute(queries.ACTIVATE_MODEL, {"name": "other/model"})
    with connect(wdb) as c:
        ingest(c, records("t", 2), None)
        c.commit()
    with connect(wdb, autocommit=True) as c:
        with pytest.raises(ModelMismatch, match="the active model is now other/model"):
            embed_batch(c, embedder, model_id, batch=8, max_attempts=5, stats=WorkerStats())
        with pytest.raises(ModelMismatch):  # and a worker started now refuses at once
            run_worker(c, embedder, once=True)
        assert backlog(c) == 2
    assert counts(wdb) == (2, 0)


def test_a_switch_waits_for_the_batch_in_flight_and_stops_the_next(
    wdb: str, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch checks the active model at its start. Was: a switch could commit between the check and the
    claim; the batch then claimed the rebuilt queue and stored vectors of the retired model, counted as
    embedded, that took nothing off the queue. Now the switch waits for the batch's commit."""
    spec = embedder.spec
    with connect(wdb, autocommit=True) as c:
        model_id = ensure_model(c, embedder)
        c.execute("SELECT spark.register_model('other/model', %s, %s, %s)", (spec.dim, spec.pooling, 256))
    with connect(wdb) as c:
        ingest(c, records("t", 2), None)
        c.commit()
    checked, go_on = threading.Event(), threading.Event()
    execute = psycopg.Cursor.execute

    def pause_before_the_claim(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        if query is queries.CLAIM_QUEUE:  # the model is checked, nothing claimed yet
            checked.set()
            go_on.wait(30)
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", pause_before_the_claim)
    stats = WorkerStats()
    batch = Blocked(wdb, lambda c: embed_batch(c, embedder, model_id, batch=8, max_attempts=5, stats=stats))
    batch._thread.start()
    try:
        assert checked.wait(60)
        switch = Blocked(wdb, "SELECT * FROM spark.activate_model('other/model')").start(seconds=5)
        waited = switch._thread.is_alive()
    finally:
        go_on.set()
    assert batch.join() is None and switch.join() is None
    assert waited  # the old code switched under the batch
    assert stats.embedded == 2 and counts(wdb) == (2, 2)  # queued again for other/model by the switch
    with connect(wdb, autocommit=True) as c, pytest.raises(ModelMismatch, match="now other/model"):
        embed_batch(c, embedder, model_id, batch=8, max_attempts=5, stats=stats)


def test_a_worker_of_another_model_refuses_before_loading_it(
    wdb: str,
    embedder: Embedder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/lifecycle.md: a worker configured with another model refuses to start, and does not spend the
    seconds (offline: tens of seconds of download retries) of loading that model first."""
    from spark_pg.cli import main

    with connect(wdb) as c:
        ingest(c, records("t", 2), embedder)
        c.commit()
    config = tmp_path / "config.yaml"
    config.write_text("embedding:\n  model: BAAI/bge-small-en-v1.5\n")
    monkeypatch.setenv("SPARK_PG_DATABASE_URL", wdb)
    monkeypatch.setenv("SPARK_PG_CONFIG", str(config))
    monkeypatch.setattr("spark_pg.worker.stop_on_signals", lambda stop: None)
    loaded: list[object] = []
    monkeypatch.setattr("spark_pg.embedding.load_embedder", lambda settings: loaded.append(settings))
    code = main(["worker", "--once", "--quiet"])
    err = capsys.readouterr().err
    assert code != 0 and loaded == []
    assert f"the stored vectors were made by {embedder.spec.name}, but embedding.model is BAAI/bge" in err


def test_a_listening_worker_wakes_on_notify_and_stops_on_request(wdb: str, embedder: Embedder) -> None:
    stop = threading.Event()
    result: list[WorkerStats] = []

    def serve() -> None:
        with connect(wdb, autocommit=True) as c:
            result.append(run_worker(c, embedder, poll_s=60, stop=stop))

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        time.sleep(1.0)  # listening, idle
        with connect(wdb) as c:
            ingest(c, records("t", 4), None)
            c.commit()  # the trigger's NOTIFY is delivered at commit
        deadline = time.monotonic() + 30
        while counts(wdb) != (0, 4) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert counts(wdb) == (0, 4)  # long before the 60 s poll
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive() and result[0].embedded == 4


def test_retrieval_degrades_to_lexical_above_the_backlog_watermark(wdb: str, embedder: Embedder) -> None:
    with connect(wdb) as c:
        ingest(c, records("t", 2), embedder)
        ingest(c, records("t", 6, prefix="late"), None)
        c.commit()
    query = "database backup before migrating"
    high = retrieve_why(wdb, embedder, "t", query, backlog_watermark=5)
    assert high and all(w["mode"] == "lexical" for w in high)
    assert "await embedding" in high[0]["query_embedding"]
    assert all(w["mode"] == "hybrid" for w in retrieve_why(wdb, embedder, "t", query, backlog_watermark=6))
    assert all(w["mode"] == "hybrid" for w in retrieve_why(wdb, embedder, "t", query, backlog_watermark=0))
    assert all(
        w["mode"] == "hybrid" for w in retrieve_why(wdb, embedder, "other", query, backlog_watermark=1)
    )
    with connect(wdb) as c, pytest.raises(psycopg.errors.InvalidParameterValue, match="backlog_watermark"):
        c.execute("SELECT * FROM spark.retrieve('t', 'x', NULL, 5, '{\"backlog_watermark\": -1}')")


def test_a_worker_killed_mid_batch_loses_nothing(
    wdb: str, embedder: Embedder, model_settings: Settings, tmp_path: Path
) -> None:
    """SIGKILL while a batch is claimed and uncommitted: the rows return to the queue, and the next worker
    embeds every memory exactly once."""
    with connect(wdb) as c:
        ingest(c, records("t", 400), None)
        c.commit()
    config = tmp_path / "config.yaml"
    config.write_text(f"embedding:\n  model_dir: {model_dir_for(model_settings)}\n")
    env = {**os.environ, "SPARK_PG_DATABASE_URL": wdb, "SPARK_PG_CONFIG": str(config)}
    script = Path(sys.executable).parent / "spark-pg"
    log = tmp_path / "worker.err"
    with log.open("wb") as err:
        command = [str(script), "worker", "--batch", "64", "--quiet"]
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=err)
    locked = 0
    try:
        deadline = time.monotonic() + 120
        with connect(wdb, autocommit=True) as c:
            while time.monotonic() < deadline and proc.poll() is None:
                row = c.execute(
                    """SELECT (SELECT count(*) FROM spark.embeddings),
                              (SELECT count(*) FROM spark.embed_queue) - (SELECT count(*) FROM (
                                  SELECT 1 FROM spark.embed_queue FOR UPDATE SKIP LOCKED) x)"""
                ).fetchone()
                assert row is not None
                embedded, locked = int(row[0]), int(row[1])
                if embedded > 0 and locked > 0:  # a batch committed, the next one is in flight
                    proc.send_signal(signal.SIGKILL)
                    break
                time.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    assert locked > 0, log.read_text()
    queued, embedded = counts(wdb)
    assert 0 < embedded < 400 and queued == 400 - embedded  # the killed batch is back in the queue
    assert work(wdb, embedder).embedded == queued
    assert counts(wdb) == (0, 400)
    with connect(wdb) as c:
        per_memory = c.execute(
            "SELECT count(*), count(DISTINCT (tenant, memory_id)) FROM spark.embeddings"
        ).fetchone()
    assert per_memory == (400, 400)


def test_without_an_embedding_model_search_runs_lexically_and_says_so(
    wdb: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from spark_pg.client import SparkClient
    from spark_pg.config import load_settings

    with connect(wdb) as c:
        ingest(c, records("t", 5), None)
        c.commit()
    empty = tmp_path / "no-model"
    empty.mkdir()
    settings = load_settings({"embedding.model_dir": str(empty)})
    with SparkClient(settings, url=wdb) as client, caplog.at_level("WARNING"):
        hits = client.search("t", "Alembic revision for schema changes")
    assert hits and hits[0].key == "m1"
    assert all(h.why["mode"] == "lexical" for h in hits)
    assert "retrieval runs lexically" in caplog.text


def test_a_worker_keeps_only_its_latest_errors(wdb: str, embedder: Embedder) -> None:
    from spark_pg.worker import KEPT_ERRORS

    with connect(wdb) as c:
        ingest(c, records("t", KEPT_ERRORS + 5), None)
        c.commit()
    stats = work(wdb, Refuses(embedder.spec, embedder._model), batch=KEPT_ERRORS + 5)
    assert stats.failed == KEPT_ERRORS + 5 and len(stats.errors) == KEPT_ERRORS


def test_the_embedding_lag_counts_the_time_spent_embedding(wdb: str, embedder: Embedder) -> None:
    """embedded_at was the batch transaction's start (now()), before the claim and the embedding: a batch
    whose model took 5 s reported a lag of 0.04 s in `spark-pg stats`."""

    class Slow(Embedder):
        def embed_documents(self, texts: Sequence[str], batch_size: int = 16) -> list[Vector]:
            time.sleep(0.6)
            return embedder.embed_documents(texts, batch_size)

    with connect(wdb) as c:
        ingest(c, records("lag", 2), None)
        c.commit()
    assert work(wdb, Slow(embedder.spec, None)).embedded == 2
    with connect(wdb) as c:
        lags = c.execute(
            "SELECT extract(epoch FROM embedded_at - queued_at) FROM spark.embeddings WHERE tenant = 'lag'"
        ).fetchall()
    assert len(lags) == 2 and all(float(lag) >= 0.6 for (lag,) in lags), lags


def test_a_broken_model_charges_no_row_an_attempt(
    cli_db: str, embedder: Embedder, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model that embeds nothing (out of memory, a runtime fault) charged every queued row an attempt: one
    `--once` run charged the whole backlog, five gave it all up. Now the worker stops, saying so, and the
    claim is rolled back."""
    from spark_pg.cli import main
    from spark_pg.errors import EmbeddingError

    with connect(cli_db) as c:
        ingest(c, records("t", 40), None)
        c.commit()
    with pytest.raises(EmbeddingError, match="embeds nothing, not even a check text"):
        work(cli_db, Truncated(embedder.spec, embedder._model), batch=8)
    with connect(cli_db) as c:
        assert c.execute("SELECT max(attempts), count(*) FROM spark.embed_queue").fetchone() == (0, 40)
    monkeypatch.setattr("spark_pg.worker.stop_on_signals", lambda stop: None)
    monkeypatch.setattr(
        "spark_pg.embedding.load_embedder", lambda settings: Truncated(embedder.spec, embedder._model)
    )
    assert main(["worker", "--once", "--quiet"]) == 2
    assert "no queued row was charged an attempt" in capsys.readouterr().err
    assert work(cli_db, embedder).embedded == 40  # the model fixed: every row, none given up


def test_a_wake_up_takes_every_notification_already_waiting(wdb: str) -> None:
    """One notification per wake-up: after a burst of writes the drained worker woke once per row for an
    empty claim."""
    from spark_pg.worker import CHANNEL, _wait

    with connect(wdb, autocommit=True) as listener, connect(wdb, autocommit=True) as writer:
        listener.execute(f"LISTEN {CHANNEL}")
        for _ in range(300):
            writer.execute(f"NOTIFY {CHANNEL}")
        time.sleep(0.2)  # all of them sent before the worker waits
        _wait(listener, 5.0, threading.Event())
        left = sum(1 for _ in listener.notifies(timeout=0.2))
    assert left == 0


def test_a_tenant_the_worker_fills_gets_its_index_when_the_queue_drains(wdb: str, embedder: Embedder) -> None:
    """The worker never refreshed the tenants it wrote: one it filled past the threshold had no index of its
    own until its next write, which then built it with every tenant's vector writes held (40 s at 20,000)."""
    with connect(wdb) as c:
        ingest(c, records("filled", 1500), None)  # deferred: queued, no vectors
        model_id = ensure_model(c, embedder)
        dim = embedder.spec.dim
        # 1,499 of them stored as if embedded earlier (the index does not care where vectors come from)
        c.execute(
            """INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding)
               SELECT m.tenant, m.id, %(model_id)s, m.created_at,
                      (SELECT array_agg(sin(m.id * 7.31 + g * 0.37))::vector
                       FROM generate_series(1, %(dim)s) g)
               FROM spark.memories m WHERE m.tenant = 'filled' AND m.key <> 'm0'""",
            {"model_id": model_id, "dim": dim},
        )
        c.commit()
    assert counts(wdb) == (1, 1499)
    assert work(wdb, embedder).embedded == 1
    with connect(wdb) as c:
        assert c.execute("SELECT tenant, vectors FROM spark.tenant_vector_indexes").fetchall() == [
            ("filled", 1500)
        ]


def test_a_stopped_workers_claim_ends_and_a_write_of_its_rows_goes_through(
    wdb: str, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was (audit X): a worker stopped mid-batch (SIGSTOP, a frozen container) held its claimed rows for as
    long as it stayed stopped, and an edit of one of those memories waited as long, for ever. Now the server
    ends the worker's session once the batch sits idle past claim_idle_timeout_s (1 s here): the claim is
    rolled back, the edit stored, and the next worker embeds the new text."""
    monkeypatch.setattr("spark_pg.worker.CLAIM_IDLE_FLOOR_S", 1)
    with connect(wdb) as c:
        ingest(c, records("stalled", 3), None)
        c.commit()
    edits: list[Blocked] = []
    edited = [MemoryIn(tenant="stalled", key="m1", text="An edited text, written while the worker stopped")]

    class Stopped(Embedder):  # embeds nothing for 6 s: what a stopped worker looks like to the server
        def embed_documents(self, texts: Sequence[str], batch_size: int = 16) -> list[Vector]:
            edits.append(Blocked(wdb, lambda conn: ingest(conn, edited, None)).start())
            time.sleep(6)
            return embedder.embed_documents(texts, batch_size)

    started = time.monotonic()
    with pytest.raises(psycopg.Error) as ended, connect(wdb, autocommit=True) as c:
        embed_batch(c, Stopped(embedder.spec, None), ensure_model(c, embedder), batch=3, max_attempts=3,
                    stats=WorkerStats())  # fmt: skip
    assert edits and edits[0].join() is None and edits[0].result.updated == 1
    assert time.monotonic() - started < 8
    assert connection_lost(ended.value)  # the serving worker connects again and goes on
    assert work(wdb, embedder).embedded == 3
    with connect(wdb) as c:
        stored = c.execute(
            "SELECT m.descriptor, e.embedding FROM spark.memories m JOIN spark.embeddings e "
            "ON e.tenant = m.tenant AND e.memory_id = m.id WHERE m.tenant = 'stalled' AND m.key = 'm1'"
        ).fetchone()
    assert stored is not None and stored[0] == edited[0].text


def test_a_worker_whose_batches_outlast_their_claim_halves_them_then_stops(
    wdb: str, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review: the claim rolled back with no attempt charged, so a worker too slow for its batch's
    idle timeout claimed the same rows again for ever. Now each such batch halves the next; one text alone
    that slow stops the worker (the model is stuck), with nothing charged."""
    monkeypatch.setattr("spark_pg.worker.CLAIM_IDLE_FLOOR_S", 1)
    monkeypatch.setattr("spark_pg.worker.CLAIM_IDLE_PER_ROW_S", 0.01)
    with connect(wdb) as c:
        ingest(c, records("slow", 4), None)
        c.commit()
    sizes: list[int] = []

    class Stuck(Embedder):
        def embed_documents(self, texts: Sequence[str], batch_size: int = 16) -> list[Vector]:
            sizes.append(len(texts))
            time.sleep(2)
            return embedder.embed_documents(texts, batch_size)

    lines: list[str] = []
    stuck = Stuck(embedder.spec, None)
    with pytest.raises(EmbeddingError, match=r"embedding one text took over 1 s.*the model looks stuck"):
        run_reconnecting(lambda: connect(wdb, autocommit=True), stuck, log=lines.append, batch=4, once=True)
    assert sizes == [4, 2, 1]
    assert sum("the next batches take" in line for line in lines) == 2
    with connect(wdb) as c:
        assert c.execute(
            "SELECT count(*), max(attempts) FROM spark.embed_queue WHERE tenant = 'slow'"
        ).fetchone() == (4, 0)
    assert work(wdb, embedder).embedded == 4  # a model that keeps up takes them all
