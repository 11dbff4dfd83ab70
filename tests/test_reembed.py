"""Model changes without outage: build another model's vectors beside the active ones, check them on
canaries, switch, drop the old index; retrieval answers all along and never compares two models' vectors.

The second model: only one model's weights install offline here (all-MiniLM-L6-v2, int8), so the new model
is those weights with CLS pooling instead of mean (a real fastembed configuration, registered under its own
name): its vectors differ from the active model's, which is what a switch has to handle.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from spark_pg.config import Settings
from spark_pg.db import connect
from spark_pg.embedding import Embedder, ModelSpec, Vector, model_dir_for
from spark_pg.errors import InputError, ModelMismatch
from spark_pg.ingest import ingest
from spark_pg.records import MemoryIn
from spark_pg.reembed import reembed
from spark_pg.worker import run_worker
from tests.conftest import Blocked, temp_database

NEW = "minilm-int8-cls"
TOPICS = [
    "Verify JWT signatures on the server before trusting a claim",
    "Write an Alembic revision for every schema change",
    "Take a database backup before a destructive migration",
    "Pin Docker base images by digest for reproducible builds",
    "Run pytest -x when the test suite is slow",
    "Rotate refresh tokens on every use",
]


@pytest.fixture(scope="module")
def cls_embedder(model_settings: Settings) -> Embedder:
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType

    name = "spark-pg-test/minilm-int8-cls"
    if not any(d["model"] == name for d in TextEmbedding.list_supported_models()):
        TextEmbedding.add_custom_model(
            model=name,
            pooling=PoolingType.CLS,
            normalization=True,
            sources=ModelSource(hf=name),
            dim=384,
            model_file="model.onnx",
        )
    folder = model_dir_for(model_settings)
    model = TextEmbedding(
        name, specific_model_path=str(folder), cache_dir=str(model_settings.home / "fastembed")
    )
    return Embedder(ModelSpec(NEW, name, 384, "cls", 256, offline_files=True), model)


@pytest.fixture
def rdb(server_url: str, embedder: Embedder) -> Iterator[str]:
    with temp_database(server_url, install=True) as url:
        with connect(url) as c:
            rows = [
                MemoryIn(tenant=t, key=f"{t}{i}", text=f"{TOPICS[i % len(TOPICS)]} (case {i})")
                for t in ("a", "b")
                for i in range(30)
            ]
            ingest(c, rows, embedder)
            c.commit()
        yield url


def search(url: str, embedder: Embedder, query: str) -> tuple[int, str]:
    with connect(url) as c:
        rows = c.execute(
            "SELECT why ->> 'mode' FROM spark.retrieve('a', %s, %s, 5, %s)",
            (query, embedder.embed_query(query), Jsonb({"query_model": embedder.spec.name})),
        ).fetchall()
    return len(rows), (rows[0][0] if rows else "")


def index_exists(url: str, name: str) -> bool:
    with connect(url) as c:
        row = c.execute("SELECT to_regclass(%s) IS NOT NULL", (f"spark.{name}",)).fetchone()
    return bool(row and row[0])


def test_a_switch_under_continuous_queries_always_answers(
    rdb: str, embedder: Embedder, cls_embedder: Embedder
) -> None:
    answers: list[tuple[int, str]] = []
    stop = threading.Event()

    def query_all_along() -> None:
        while not stop.is_set():
            answers.append(search(rdb, embedder, "schema migration safety"))
            time.sleep(0.01)

    thread = threading.Thread(target=query_all_along)
    thread.start()
    try:
        time.sleep(0.3)
        with connect(rdb, autocommit=True) as c:
            report = reembed(c, cls_embedder, batch=8, canaries=10, k=5, min_overlap=0.05)
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert report.switched and report.previous == "all-MiniLM-L6-v2-int8", report.decision
    assert report.embedded == 60 and report.canaries == 10 and report.overlap is not None
    assert report.queued_after_switch == 0
    assert len(answers) > 10 and all(n > 0 for n, _ in answers)  # never without an answer
    modes = [m for _, m in answers]
    assert modes[0] == "hybrid" and modes[-1] == "lexical"  # the old model's query vector is never compared
    found, mode = search(rdb, cls_embedder, "schema migration safety")
    assert found > 0 and mode == "hybrid"
    assert not index_exists(rdb, "embeddings_hnsw_m1") and index_exists(rdb, "embeddings_hnsw_m2")
    with connect(rdb) as c:
        assert c.execute("SELECT name FROM spark.active_model()").fetchone() == (NEW,)
        kept = c.execute("SELECT count(*) FROM spark.embeddings WHERE model_id = 1").fetchone()
    assert kept == (60,)  # the old vectors stay unless asked (a way back)


def test_the_configured_old_model_is_refused_after_the_switch(
    rdb: str, embedder: Embedder, cls_embedder: Embedder
) -> None:
    with connect(rdb, autocommit=True) as c:
        reembed(c, cls_embedder, canaries=0, drop_old_vectors=True)
        assert c.execute("SELECT count(*) FROM spark.embeddings WHERE model_id = 1").fetchone() == (0,)
        with pytest.raises(ModelMismatch, match=r"reembed|embedding\.model"):
            run_worker(c, embedder, once=True)
    with connect(rdb) as c, pytest.raises(ModelMismatch):
        ingest(c, [MemoryIn(tenant="a", key="late", text="A late memory")], embedder)


def test_canaries_that_disagree_stop_the_switch_and_a_rerun_catches_up(
    rdb: str, embedder: Embedder, cls_embedder: Embedder
) -> None:
    with connect(rdb, autocommit=True) as c:
        refused = reembed(c, cls_embedder, canaries=10, k=5, min_overlap=1.0)
        assert not refused.switched and refused.decision.startswith("not switched")
        assert c.execute("SELECT name FROM spark.active_model()").fetchone() == ("all-MiniLM-L6-v2-int8",)
    with connect(rdb) as c:  # written with the active model while the new one waits
        ingest(c, [MemoryIn(tenant="a", key="late", text="Never force-push to main")], embedder)
        c.commit()
    with connect(rdb, autocommit=True) as c:
        done = reembed(c, cls_embedder, canaries=10, k=5, min_overlap=0.0)
    assert done.switched and done.embedded == 1  # only what the first run had not built


def test_activation_and_arguments_are_checked(rdb: str, embedder: Embedder, cls_embedder: Embedder) -> None:
    with connect(rdb) as c:
        for name, error, message in (
            ("nope", psycopg.errors.InvalidParameterValue, "'nope' is not registered"),
            ("", psycopg.errors.InvalidParameterValue, "name must be a registered model name"),
            (None, psycopg.errors.NullValueNotAllowed, "name must not be NULL"),
        ):
            with pytest.raises(error, match=message), c.transaction():
                c.execute("SELECT * FROM spark.activate_model(%s)", (name,))
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="query_model"), c.transaction():
            c.execute("SELECT * FROM spark.retrieve('a', 'x', NULL, 5, '{\"query_model\": 3}')")
    with connect(rdb) as c, pytest.raises(InputError, match="autocommit"):
        reembed(c, cls_embedder)
    with connect(rdb, autocommit=True) as c:
        for kwargs in ({"batch": 0}, {"min_overlap": 2.0}, {"k": 0}, {"canaries": -1}):
            with pytest.raises(InputError):
                reembed(c, cls_embedder, **kwargs)  # type: ignore[arg-type]
        same = reembed(c, embedder)  # the active model itself: nothing to build or switch
    assert (same.embedded, same.switched) == (0, False) and "nothing to switch" in same.decision


def stop_after_the_switch(monkeypatch: pytest.MonkeyPatch, c: psycopg.Connection, model: Embedder) -> None:
    """A reembed run interrupted (Ctrl-C) right after its switch, before any clean-up."""
    import spark_pg.reembed as module

    def stop(*_: object) -> list[str]:
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(module, "_drop_indexes", stop)
        with pytest.raises(KeyboardInterrupt):
            reembed(c, model, canaries=0)
    assert c.execute("SELECT name FROM spark.active_model()").fetchone() == (model.spec.name,)


def vectors_of(c: psycopg.Connection, model_id: int) -> int:
    row = c.execute("SELECT count(*) FROM spark.embeddings WHERE model_id = %s", (model_id,)).fetchone()
    return int(row[0]) if row else -1


def test_a_run_stopped_after_the_switch_is_finished_by_the_next(
    rdb: str, embedder: Embedder, cls_embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    with connect(rdb, autocommit=True) as c:
        c.execute("SELECT spark.refresh_tenant_stats(NULL, true, 10)")  # per-tenant indexes of the old model
        old_tenant_indexes = [r[0] for r in c.execute("SELECT index_name FROM spark.tenant_vector_indexes")]
        assert len(old_tenant_indexes) == 2
        built = reembed(c, cls_embedder, canaries=0, switch=False)  # the new model, built but not active
        assert not built.switched and index_exists(rdb, "embeddings_hnsw_m2")
        again = reembed(c, embedder)  # for the active model: no model was ever retired, nothing to drop
        assert "nothing to switch" in again.decision and again.dropped_indexes == []
        assert index_exists(rdb, "embeddings_hnsw_m2")  # a model never active keeps its index

        stop_after_the_switch(monkeypatch, c, cls_embedder)
        assert index_exists(rdb, "embeddings_hnsw_m1")  # left behind
        held = reembed(c, cls_embedder, canaries=0, switch=False, drop_old_vectors=True)
        assert "not run (--no-switch)" in held.decision and held.dropped_indexes == []
        assert index_exists(rdb, "embeddings_hnsw_m1") and vectors_of(c, 1) == 60
        c.execute("DELETE FROM spark.tenant_stats")  # as if the stop had come before the refresh too
        done = reembed(c, cls_embedder, canaries=0, drop_old_vectors=True)
        assert not done.switched and "finished" in done.decision, done.decision
        assert sorted(done.dropped_indexes) == sorted(["embeddings_hnsw_m1", *old_tenant_indexes])
        assert done.dropped_vectors == 60 and vectors_of(c, 1) == 0
        assert not any(index_exists(rdb, n) for n in done.dropped_indexes)
        assert index_exists(rdb, "embeddings_hnsw_m2")
        left = c.execute("SELECT count(*) FROM spark.tenant_vector_indexes WHERE model_id = 1").fetchone()
        assert left == (0,)
        refreshed = c.execute("SELECT count(*) FROM spark.tenant_stats").fetchone()
        assert refreshed == (2,)  # tenants a and b
        retired = c.execute(
            "SELECT name, retired_at IS NOT NULL FROM spark.embedding_models ORDER BY id"
        ).fetchall()
        assert retired == [("all-MiniLM-L6-v2-int8", True), (NEW, False)]
        twice = reembed(c, cls_embedder, canaries=0)  # nothing left to finish
    assert twice.dropped_indexes == [] and twice.dropped_vectors == 0
    assert "nothing of the retired models was left" in twice.decision, twice.decision


def test_finishing_drops_only_what_the_retired_models_left(
    rdb: str, embedder: Embedder, cls_embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    third = Embedder(
        ModelSpec("minilm-int8-cls-b", cls_embedder.spec.fastembed_name, 384, "cls", 256, offline_files=True),
        cls_embedder._model,
    )
    with connect(rdb, autocommit=True) as c:
        # A -> B finished; A's vectors kept (a way back)
        assert reembed(c, cls_embedder, canaries=0).switched
        # B -> C stopped after the switch: B is retired after A
        stop_after_the_switch(monkeypatch, c, third)
        done = reembed(c, third, canaries=0, drop_old_vectors=True)
        assert done.dropped_indexes == ["embeddings_hnsw_m2"]  # A's went at its own switch
        assert (vectors_of(c, 1), vectors_of(c, 2), vectors_of(c, 3)) == (60, 0, 60)  # only B's, the last
        # the way back to A: built again without a switch, A is wanted again and keeps what it rebuilt
        back = reembed(c, embedder, canaries=0, switch=False)
        assert not back.switched and index_exists(rdb, "embeddings_hnsw_m1")
        later = reembed(c, third, canaries=0, drop_old_vectors=True)
        assert later.dropped_indexes == [] and later.dropped_vectors == 0, later.decision
        assert index_exists(rdb, "embeddings_hnsw_m1") and vectors_of(c, 1) == 60
        # rolled back to A and stopped after that switch: C is retired, A active again (not retired)
        stop_after_the_switch(monkeypatch, c, embedder)
        rolled = reembed(c, embedder, canaries=0)
        assert rolled.dropped_indexes == ["embeddings_hnsw_m3"] and vectors_of(c, 3) == 60
        states = "SELECT name, active, retired_at IS NOT NULL FROM spark.embedding_models ORDER BY id"
        assert c.execute(states).fetchall() == [
            ("all-MiniLM-L6-v2-int8", True, False),
            (NEW, False, True),
            ("minilm-int8-cls-b", False, True),
        ]
        c.execute("SELECT * FROM spark.activate_model(%s)", (NEW,))  # by hand: the same stamps
        assert c.execute(states).fetchall() == [
            ("all-MiniLM-L6-v2-int8", False, True),
            (NEW, True, False),
            ("minilm-int8-cls-b", False, True),
        ]


def test_cli_refuses_an_unknown_model(cli_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    from spark_pg.cli import main

    assert main(["reembed", "--model", "no-such-model"]) == 2
    assert "unknown model" in capsys.readouterr().err


def test_cli_for_the_active_model_says_no_canaries_were_compared(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from spark_pg.cli import main

    assert main(["reembed", "--model", "all-MiniLM-L6-v2-int8", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "canaries: none compared" in out and "None" not in out


def test_cli_on_a_database_without_a_model_says_that_it_activated_one(
    installed_db: str,
    model_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Rows written with their embedding deferred, no model registered yet: the run said "no other model
    was active: the vectors are built, nothing to switch", then "set embedding.model to ... (0 memories
    queued for the worker)" for the switch it had run all the same."""
    from spark_pg.cli import main

    with connect(installed_db) as c:
        ingest(c, [MemoryIn(tenant="a", key=f"a{i}", text=TOPICS[i]) for i in range(3)], None)
        c.commit()
    config = tmp_path / "config.yaml"
    config.write_text(f"embedding:\n  model_dir: {model_dir_for(model_settings)}\n")
    monkeypatch.setenv("SPARK_PG_DATABASE_URL", installed_db)
    monkeypatch.setenv("SPARK_PG_CONFIG", str(config))
    name = "all-MiniLM-L6-v2-int8"
    assert main(["reembed", "--model", name, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "nothing to switch" not in out, out
    assert f"no model was active before: {name} is the active model now, its vectors built\n" in out
    assert f"set embedding.model to {name} for every worker and client (0 memories queued" in out


def test_cli_to_the_offline_model_uses_the_configured_folder_that_holds_it(
    cli_env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Configured for the network model, with embedding.model_dir pointing at the offline model's files:
    was exit 2, "not in <home>/models/... or set embedding.model_dir", though it was set."""
    from spark_pg.cli import main

    monkeypatch.setenv("SPARK_PG_HOME", str(tmp_path / "empty-home"))  # no model folder of its own
    monkeypatch.setenv("SPARK_PG_EMBEDDING_MODEL", "BAAI/bge-small-en-v1.5")
    assert main(["reembed", "--model", "all-MiniLM-L6-v2-int8", "--quiet"]) == 0, capsys.readouterr().err


def test_a_memory_the_new_model_cannot_embed_does_not_stop_the_others(
    rdb: str, cls_embedder: Embedder
) -> None:
    class Picky(Embedder):  # one descriptor the new model refuses (another client wrote something odd)
        def embed_documents(self, texts: Sequence[str], batch_size: int = 16) -> list[Vector]:
            if any("(case 7)" in t for t in texts):
                raise ValueError("cannot tokenise")
            return cls_embedder.embed_documents(texts, batch_size)

    picky = Picky(cls_embedder.spec, cls_embedder._model)
    with connect(rdb, autocommit=True) as c:  # 2 of 60 is more than the default 1%: no switch
        held = reembed(c, picky, batch=8, canaries=5, k=5, min_overlap=0.0)
        assert not held.switched and held.failed == 2 and held.decision.startswith("not switched: 2 memories")
        report = reembed(c, picky, batch=8, canaries=5, k=5, min_overlap=0.0, max_failed_share=0.05)
    # the second run resumes: the 58 stored by the first are kept, the 2 are tried again and fail again
    assert held.embedded == 58 and report.embedded == 0 and report.failed == 2
    assert report.switched  # case 7 of tenants a and b
    assert all("ValueError: cannot tokenise" in e for e in report.errors)
    with connect(rdb) as c:  # the two wait in the queue for a worker on the new model
        queued = c.execute(
            "SELECT m.key FROM spark.embed_queue q JOIN spark.memories m ON m.id = q.memory_id ORDER BY 1"
        ).fetchall()
    assert queued == [("a7",), ("b7",)]


def test_a_model_that_embeds_nothing_is_never_switched_to(rdb: str, cls_embedder: Embedder) -> None:
    class Broken(Embedder):
        def embed_documents(self, texts: Sequence[str], batch_size: int = 16) -> list[Vector]:
            raise RuntimeError("model file truncated")

    with connect(rdb, autocommit=True) as c:
        report = reembed(
            c,
            Broken(cls_embedder.spec, cls_embedder._model),
            canaries=5,
            k=5,
            min_overlap=0.0,
            drop_old_vectors=True,
            max_failed_share=1.0,
        )
        kept = c.execute("SELECT count(*) FROM spark.embeddings").fetchone()
    assert not report.switched and report.failed == 60 and report.dropped_vectors == 0
    assert kept == (60,)  # the old vectors are all still there


def test_a_switch_during_an_edit_in_flight_keeps_the_memory_queued(rdb: str, cls_embedder: Embedder) -> None:
    """An edit (no vector stored, so no lock taken) has queued a1 again and not committed; the switch's
    queue rebuild finds a1 without a vector of the new model and waits for the edit's queue row. Was: 23505
    once the edit committed, and the switch rolled back."""
    with connect(rdb, autocommit=True) as c:
        c.execute("SELECT spark.register_model(%s, 384, 'cls', 256)", (NEW,))  # no vector built
    with connect(rdb) as edit:
        edit.execute("UPDATE spark.memories SET text = 'Rotate refresh tokens on every use' WHERE key = 'a1'")
        switch = Blocked(rdb, "SELECT * FROM spark.activate_model(%s)", (NEW,)).start()
        edit.commit()
    assert switch.join() is None
    with connect(rdb) as c:
        queued = c.execute("SELECT count(*) FROM spark.embed_queue").fetchone()
        active = c.execute("SELECT name FROM spark.active_model()").fetchone()
    assert queued == (60,) and active == (NEW,)


class Uncommitted:
    """A write left open on its own connection while reembed embeds its first batch, and committed once the
    batch's store waits for it (or after ``patience`` seconds, when nothing waits: the old code)."""

    def __init__(self, url: str, sql: str, patience: float = 3.0) -> None:
        self.url, self.sql, self.patience = url, sql, patience
        self.store_pid: int | None = None
        self.waited = False
        self._thread: threading.Thread | None = None

    def embedder(self, model: Embedder) -> Embedder:
        outer = self

        class DuringTheBatch(Embedder):
            def embed_documents(self, texts: Sequence[str], batch_size: int = 16) -> list[Vector]:
                if outer._thread is None:
                    outer._begin()
                return model.embed_documents(texts, batch_size)

        return DuringTheBatch(model.spec, model._model)

    def _begin(self) -> None:
        holder = psycopg.connect(self.url)
        holder.execute(self.sql)  # not committed yet: reembed read the row as it was

        def commit_later() -> None:
            give_up = time.monotonic() + self.patience
            with connect(self.url, autocommit=True) as watch:
                while time.monotonic() < give_up and not self.waited:
                    row = watch.execute(
                        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (self.store_pid,)
                    ).fetchone()
                    self.waited = row is not None and row[0] == "Lock"
                    time.sleep(0.02)
            holder.commit()
            holder.close()

        self._thread = threading.Thread(target=commit_later, daemon=True)
        self._thread.start()

    def join(self) -> None:
        assert self._thread is not None
        self._thread.join(30)


def test_an_edit_during_the_build_never_leaves_the_old_texts_vector(
    rdb: str, embedder: Embedder, cls_embedder: Embedder
) -> None:
    """Was: the vector of a1's old text was stored after the edit's trigger had removed a1's vectors, and
    the switch, which queues only what lacks a vector of the new model, kept it."""
    edit = Uncommitted(
        rdb, "UPDATE spark.memories SET text = 'Rotate refresh tokens on every use' WHERE key = 'a1'"
    )
    with connect(rdb, autocommit=True) as c:
        edit.store_pid = c.info.backend_pid
        first = reembed(c, edit.embedder(cls_embedder), canaries=5, k=5, min_overlap=0.0, switch=False)
        edit.join()
        # a1 waited for the edit and was skipped; the catch-up pass embedded its new text
        assert edit.waited and first.embedded == 60
        report = reembed(c, cls_embedder, canaries=5, k=5, min_overlap=0.0)
        assert report.switched
        run_worker(c, cls_embedder, once=True)  # whatever the switch queued
        descriptor, stored = c.execute(
            "SELECT m.descriptor, e.embedding FROM spark.memories m JOIN spark.embeddings e "
            "ON e.tenant = m.tenant AND e.memory_id = m.id AND e.model_id = (spark.active_model()).id "
            "WHERE m.key = 'a1'"
        ).fetchone()  # type: ignore[misc]
    assert "Rotate refresh tokens" in descriptor
    fresh = cls_embedder.embed_documents([descriptor])[0]
    assert float(fresh @ stored.to_numpy()) > 0.999  # the vector of the text it has now


def test_a_memory_deleted_during_the_build_is_skipped(rdb: str, cls_embedder: Embedder) -> None:
    """Was: the batch failed on the foreign key (23503) and the whole reembed with it."""
    delete = Uncommitted(rdb, "DELETE FROM spark.memories WHERE key = 'a3'")
    with connect(rdb, autocommit=True) as c:
        delete.store_pid = c.info.backend_pid
        report = reembed(c, delete.embedder(cls_embedder), canaries=5, k=5, min_overlap=0.0)
        delete.join()
        left = c.execute("SELECT count(*) FROM spark.memories WHERE key = 'a3'").fetchone()
    assert delete.waited and report.switched and report.embedded == 59 and left == (0,)


def test_the_way_back_builds_the_old_index_without_blocking_writers(
    rdb: str, embedder: Embedder, cls_embedder: Embedder
) -> None:
    """Switching drops the old model's index and keeps its vectors. Going back, spark.register_model built
    that index in its own transaction, holding a SHARE lock on spark.embeddings over every kept vector: each
    vector write and edit waited for the whole build (328 s at 1M vectors). Now reembed builds it
    CONCURRENTLY; and a model whose index exists is registered without waiting for that lock at all."""
    with connect(rdb, autocommit=True) as c:
        assert reembed(c, cls_embedder, canaries=0).switched
        assert not index_exists(rdb, "embeddings_hnsw_m1") and vectors_of(c, 1) == 60
    with connect(rdb) as writer, connect(rdb) as registrar:
        # a writer holds a vector row (an uncommitted store), as the worker does mid-batch
        writer.execute(
            "UPDATE spark.embeddings SET created_at = created_at WHERE model_id = 2 AND memory_id = 1"
        )
        registrar.execute("SET lock_timeout = '1s'")
        for model in (embedder, cls_embedder):  # the retired model with its vectors, the active one indexed
            registrar.execute(
                "SELECT spark.register_model(%s, 384, %s, 256)", (model.spec.name, model.spec.pooling)
            )
        registrar.rollback()
        writer.rollback()
    assert not index_exists(rdb, "embeddings_hnsw_m1")  # left for reembed
    with connect(rdb, autocommit=True) as c:
        back = reembed(c, embedder, canaries=0)
        assert back.switched and back.embedded == 0  # every kept vector reused
        valid = c.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = 'spark.embeddings_hnsw_m1'::regclass"
        ).fetchone()
    assert valid == (True,)
    assert search(rdb, embedder, "rotate refresh tokens")[1] == "hybrid"


def test_the_first_model_failing_on_many_memories_is_said_to_be_active_with_them_queued(
    installed_db: str, cls_embedder: Embedder
) -> None:
    """No model registered, 1 of 3 deferred memories the model cannot embed (more than the 1% allowed):
    the run said "not switched ... the vectors built so far are kept", though registering the first model
    had made it the active one, and the memory it failed on was in no queue."""

    class Picky(Embedder):
        def embed_documents(self, texts: Sequence[str], batch_size: int = 16) -> list[Vector]:
            if any("backup" in t for t in texts):
                raise ValueError("cannot tokenise")
            return cls_embedder.embed_documents(texts, batch_size)

    with connect(installed_db) as c:
        ingest(c, [MemoryIn(tenant="a", key=f"a{i}", text=TOPICS[i]) for i in range(3)], None)
        c.commit()
    with connect(installed_db, autocommit=True) as c:
        report = reembed(c, Picky(cls_embedder.spec, cls_embedder._model), batch=1, canaries=0)
        active = c.execute("SELECT name FROM spark.embedding_models WHERE active").fetchone()
        queued = c.execute(
            "SELECT m.key FROM spark.embed_queue q JOIN spark.memories m ON m.id = q.memory_id ORDER BY 1"
        ).fetchall()
    assert active == (NEW,) and report.failed == 1 and report.embedded == 2 and report.too_many_failed
    assert not report.decision.startswith("not switched"), report.decision
    assert report.decision.startswith(f"no model was active before: {NEW} is the active model now"), report
    assert "1 memories could not be embedded" in report.decision and "wait in the queue" in report.decision
    assert queued == [("a2",)]


def test_cli_no_switch_on_a_database_without_a_model_still_says_to_set_it(
    installed_db: str,
    model_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--no-switch where no model was registered: registering made the model active all the same, and the
    run said so, but not to configure it for the workers and clients, as a switch does."""
    from spark_pg.cli import main

    with connect(installed_db) as c:
        ingest(c, [MemoryIn(tenant="a", key="a0", text=TOPICS[0])], None)
        c.commit()
    config = tmp_path / "config.yaml"
    config.write_text(f"embedding:\n  model_dir: {model_dir_for(model_settings)}\n")
    monkeypatch.setenv("SPARK_PG_DATABASE_URL", installed_db)
    monkeypatch.setenv("SPARK_PG_CONFIG", str(config))
    name = "all-MiniLM-L6-v2-int8"
    assert main(["reembed", "--model", name, "--no-switch", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "became the active model when it was registered" in out, out
    assert f"set embedding.model to {name} for every worker and client\n" in out, out
