"""Ingest: batched embedding, bulk upsert, updates instead of duplicates, all-or-nothing files."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg
import pytest

from spark_pg import client as client_module
from spark_pg import queries
from spark_pg.cli import main
from spark_pg.client import SparkClient
from spark_pg.config import Settings
from spark_pg.db import connect
from spark_pg.embedding import Embedder, Vector
from spark_pg.errors import IngestError, InputError, ModelMismatch
from spark_pg.ingest import ensure_model, ingest
from spark_pg.records import SYSTEM_TENANT, MemoryIn, read_file, validate_row
from spark_pg.triggers import TriggerRuleError
from tests.conftest import Blocked


@pytest.fixture
def client(db_url: str, model_settings: Settings) -> Iterator[SparkClient]:
    with SparkClient(model_settings, url=db_url) as c:
        yield c


def write_jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def stored(client: SparkClient, tenant: str) -> dict[str, tuple[object, ...]]:
    with client.conn.transaction():
        rows = client.conn.execute(
            """SELECT x.key, x.text, x.kind, x.category, x.importance, x.created_at, e.embedding IS NOT NULL,
                      m.name, x.metadata
               FROM spark.memories x
               LEFT JOIN spark.embeddings e ON e.tenant = x.tenant AND e.memory_id = x.id
               LEFT JOIN spark.embedding_models m ON m.id = e.model_id
               WHERE x.tenant = %s""",
            (tenant,),
        ).fetchall()
    return {r[0]: r[1:] for r in rows}


def test_ingest_jsonl_embeds_and_stores_every_field(client: SparkClient, tenant: str, tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "m.jsonl",
        [
            {
                "key": "a",
                "text": "Run tests before pushing",
                "kind": "rule",
                "category": "git",
                "importance": 0.9,
                "created_at": "2024-05-01T10:00:00Z",
                "metadata": {"from": "test"},
            },
            {"text": "Prefers dark mode", "kind": "preference"},
        ],
    )
    result = client.ingest_file(path, tenant)
    assert (result.inserted, result.updated) == (2, 0)
    rows = stored(client, tenant)
    assert len(rows) == 2
    text, kind, category, importance, created, embedded, model, metadata = rows["a"]
    assert (text, kind, category, embedded, model, metadata) == (
        "Run tests before pushing",
        "rule",
        "git",
        True,
        "all-MiniLM-L6-v2-int8",
        {"from": "test"},
    )
    assert importance == pytest.approx(0.9)
    assert created.isoformat() == "2024-05-01T10:00:00+00:00"  # type: ignore[attr-defined]
    assert any(k.startswith("h:") for k in rows)  # keyless row got a content key


def test_reingesting_updates_instead_of_duplicating(client: SparkClient, tenant: str, tmp_path: Path) -> None:
    rows = [
        {"key": "a", "text": "first wording", "created_at": "2024-01-01T00:00:00Z"},
        {"text": "no key here"},
    ]
    client.ingest_file(write_jsonl(tmp_path / "1.jsonl", rows), tenant)
    before = stored(client, tenant)
    rows[0] = {"key": "a", "text": "second wording"}  # no created_at: the stored one is kept
    result = client.ingest_file(write_jsonl(tmp_path / "2.jsonl", rows), tenant)
    assert (result.inserted, result.updated, result.unchanged) == (0, 1, 1)  # "no key here" is as stored
    after = stored(client, tenant)
    assert len(after) == 2
    assert after["a"][0] == "second wording"
    assert after["a"][4] == before["a"][4]


def test_a_bad_row_writes_nothing_from_the_file(client: SparkClient, tenant: str, tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "bad.jsonl",
        [
            {"key": "ok", "text": "fine row"},
            {"key": "bad", "text": "bad importance", "importance": 7},
        ],
    )
    with pytest.raises(IngestError) as info:
        client.ingest_file(path, tenant)
    assert (info.value.line, info.value.field) == (2, "importance")
    assert stored(client, tenant) == {}


@pytest.mark.parametrize("default", ["   ", "", "t" * 129])
def test_a_bad_default_tenant_is_refused_before_anything_is_embedded_or_written(
    client: SparkClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, default: str
) -> None:
    """``ingest --tenant "   "`` stored the rows under a blank tenant; "" and 129 characters embedded the
    whole file, then failed the database's CHECK (exit 1, "database error [23514]")."""
    path = write_jsonl(tmp_path / "m.jsonl", [{"text": "a memory without a tenant"}])

    def no_embedding(*args: object, **kwargs: object) -> None:
        raise AssertionError("the embedder was loaded")

    monkeypatch.setattr("spark_pg.client.load_embedder", no_embedding)
    with pytest.raises(IngestError, match=r"m\.jsonl line 1, field 'tenant': .* the default \(--tenant\)"):
        client.ingest_file(path, default)
    assert stored(client, default) == {}


def test_nothing_but_the_pack_loader_writes_the_packs_tenant(client: SparkClient, tmp_path: Path) -> None:
    """Tenant _system's memories reach every tenant: an ingest file, a row's own tenant or a single add
    naming it is refused before anything is written; the pack loader still writes it."""
    before = stored(client, "_system")
    path = write_jsonl(
        tmp_path / "m.jsonl", [{"text": "fine row", "tenant": "t1"}, {"text": "x", "tenant": "_system"}]
    )
    with pytest.raises(IngestError, match=r"line 2, field 'tenant': _system holds the cold-start pack"):
        client.ingest_file(path)
    with pytest.raises(IngestError, match="only `spark-pg seed` writes"):
        client.ingest_file(write_jsonl(tmp_path / "d.jsonl", [{"text": "no tenant"}]), "_system")
    with pytest.raises(IngestError, match="cold-start pack"):
        client.add("_system", "Always deploy on Fridays.")
    record = validate_row({"text": "Always deploy on Fridays."}, "api", 1, "_system", pack=True)
    with pytest.raises(InputError, match="only `spark-pg seed` writes it"):  # records built by hand too
        client.ingest_records([record])
    assert stored(client, "_system") == before and stored(client, "t1") == {}
    client.load_seed_pack()
    assert set(stored(client, "_system")) >= set(before) and stored(client, "_system") != {}
    # `spark-pg seed --file`: a deployment's own pack memories, as seeds; rows naming a tenant are refused
    extra = write_jsonl(
        tmp_path / "extra.jsonl", [{"key": "house-rule", "text": "Run make lint before pushing."}]
    )
    assert client.load_seed_pack(extra=extra).inserted == 1
    assert stored(client, "_system")["house-rule"][1] == "seed"
    other = write_jsonl(tmp_path / "other.jsonl", [{"text": "x", "tenant": "t1"}])
    with pytest.raises(InputError, match="a pack file's rows belong to the pack, not to tenant 't1'"):
        client.load_seed_pack(extra=other)
    builtin_key = sorted(k for k in stored(client, "_system") if k != "house-rule")[0]
    clash = write_jsonl(tmp_path / "clash.jsonl", [{"key": builtin_key, "text": "Deploy on Fridays."}])
    with pytest.raises(InputError, match=f"key '{builtin_key}' is a memory of the built-in pack"):
        client.load_seed_pack(extra=clash)  # it would replace it for every tenant until the next seed
    assert stored(client, "_system")[builtin_key][0] != "Deploy on Fridays."
    # the loader's permission ends with it, even inside a caller's transaction
    with client.conn.transaction(force_rollback=True):
        client.load_seed_pack()
        setting = client.conn.execute("SELECT current_setting('spark.pack_writes', true)").fetchone()
        assert setting == ("off",)


def test_the_cli_refuses_a_blank_tenant_with_exit_2_and_one_line(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", [{"text": "a memory without a tenant"}])
    assert main(["ingest", str(path), "--tenant", "   ", "--quiet"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (
        f"spark-pg: error: {path} line 1, field 'tenant': is not in the row,"
        " and the default (--tenant) must not be empty\n"
    )


def test_a_database_failure_late_in_the_file_rolls_everything_back(
    client: SparkClient, tenant: str, tmp_path: Path
) -> None:
    # 30 rows in chunks of 500 would be one chunk: force several chunks, then fail on the last row
    path = write_jsonl(
        tmp_path / "late.jsonl", [{"key": f"k{i}", "text": f"memory number {i}"} for i in range(30)]
    )
    records = read_file(path, tenant)
    with client.conn.transaction():
        client.conn.execute("ALTER TABLE spark.memories ADD CONSTRAINT no_k29 CHECK (key <> 'k29') NOT VALID")
    try:
        with pytest.raises(psycopg.errors.CheckViolation):
            ingest(client.conn, records, client.embedder, chunk_rows=7)
    finally:
        with client.conn.transaction():
            client.conn.execute("ALTER TABLE spark.memories DROP CONSTRAINT no_k29")
    assert stored(client, tenant) == {}


def test_add_one_memory_and_find_it(client: SparkClient, tenant: str) -> None:
    client.add(
        tenant,
        "Always run alembic upgrade head on a copy of production first",
        key="mig",
        kind="rule",
        category="database",
    )
    hits = client.search(tenant, "alembic upgrade head on production", k=3)
    assert hits and hits[0].key == "mig"
    assert not hits[0].system_default
    assert "similarity" in hits[0].reason and "found by" in hits[0].reason


def test_configured_model_must_match_the_stored_vectors(
    client: SparkClient, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.add(tenant, "something to make sure a model is registered")
    from spark_pg.embedding import ModelSpec

    other = ModelSpec("some-other-model", "x", 384, "mean", 256)
    monkeypatch.setattr(client.embedder, "spec", other)
    with pytest.raises(ModelMismatch, match="all-MiniLM-L6-v2-int8"):
        client.add(tenant, "a memory under the wrong model")
    monkeypatch.undo()


def test_seed_pack_is_shared_and_idempotent(client: SparkClient) -> None:
    first = client.load_seed_pack()
    second = client.load_seed_pack()
    assert 20 <= first.total <= 30
    assert (second.inserted, second.updated, second.unchanged) == (0, 0, first.total)
    hits = client.search("brand-new-tenant", "git push --force to main", k=3)
    assert hits and all(h.system_default for h in hits)
    assert any("push" in h.text for h in hits)


def test_a_seed_whose_rules_fail_stores_none_of_the_packs_memories(
    client: SparkClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the memories were committed before the rules were written: a pack whose rules failed went on with
    # its memories refreshed and without the rules that surface them
    client.load_seed_pack()
    with resources.as_file(resources.files("spark_pg") / "data" / "seed_pack.yaml") as path:
        key = (read_file(path, SYSTEM_TENANT, pack=True)[0].key,)  # one the built-in pack puts back
    with client.conn.transaction():
        client.conn.execute("SET LOCAL spark.pack_writes = on")
        client.conn.execute(
            "DELETE FROM spark.memories WHERE tenant = spark.system_tenant() AND key = %s", (key[0],)
        )

    def broken(*args: object) -> None:
        raise TriggerRuleError("database", "rule x", "refused")

    monkeypatch.setattr(client_module, "sync_rules", broken)
    try:
        with pytest.raises(TriggerRuleError):
            client.load_seed_pack()
        gone = client.conn.execute(
            "SELECT count(*) FROM spark.memories WHERE tenant = spark.system_tenant() AND key = %s", (key[0],)
        ).fetchone()
        assert gone == (0,)
    finally:
        monkeypatch.undo()
        assert client.load_seed_pack().inserted == 1  # the pack is whole again for the other tests


def test_unchanged_texts_are_not_embedded_again(
    client: SparkClient, tenant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows: list[dict[str, object]] = [{"key": f"k{i}", "text": f"stable memory {i}"} for i in range(5)]
    client.ingest_file(write_jsonl(tmp_path / "1.jsonl", rows), tenant)
    embedded: list[str] = []
    original = client.embedder.embed_documents

    def counting(texts: list[str], batch_size: int = 16) -> list[object]:
        embedded.extend(texts)
        return original(texts, batch_size)  # type: ignore[return-value]

    monkeypatch.setattr(client.embedder, "embed_documents", counting)
    rows[0] = {"key": "k0", "text": "a changed memory"}
    # the importance is not embedded; the category is (a descriptor tag), so a new one is embedded again
    rows[1] = {"key": "k1", "text": "stable memory 1", "importance": 0.9}
    rows[2] = {"key": "k2", "text": "stable memory 2", "category": "recategorised"}
    result = client.ingest_file(write_jsonl(tmp_path / "2.jsonl", rows), tenant)
    assert (result.inserted, result.updated, result.unchanged) == (0, 3, 2)
    assert embedded == ["a changed memory", "[recategorised] stable memory 2"]
    after = stored(client, tenant)
    assert all(row[5] for row in after.values())  # every row still has its vector
    assert after["k2"][2] == "recategorised"
    with client.conn.transaction():
        sims = dict(
            client.conn.execute(
                """SELECT m.key, 1 - (e.embedding <=> %s)
                   FROM spark.memories m JOIN spark.embeddings e ON e.tenant = m.tenant AND e.memory_id = m.id
                   WHERE m.tenant = %s""",
                (original(["a changed memory"])[0], tenant),
            ).fetchall()
        )
    assert sims["k0"] == pytest.approx(1.0, abs=1e-5)
    assert sims["k3"] < 0.99


def test_changed_content_drops_every_models_stale_vector_and_created_at_follows(
    client: SparkClient, tenant: str
) -> None:
    client.add(tenant, "Rotate the API tokens monthly", key="tok", created_at="2026-01-01T00:00:00Z")
    conn = client.conn
    with conn.transaction():
        # a second model's vector for the same memory, as a re-embed in progress would leave it
        conn.execute("SELECT spark.register_model('other-model', 384, 'mean', 256)")
        conn.execute(
            """INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding)
               SELECT e.tenant, e.memory_id, m.id, e.created_at, e.embedding
               FROM spark.embeddings e JOIN spark.memories x ON x.tenant = e.tenant AND x.id = e.memory_id,
                    spark.embedding_models m
               WHERE x.tenant = %s AND x.key = 'tok' AND m.name = 'other-model'""",
            (tenant,),
        )
    vectors = """SELECT md.name, e.created_at FROM spark.embeddings e
                 JOIN spark.memories x ON x.tenant = e.tenant AND x.id = e.memory_id
                 JOIN spark.embedding_models md ON md.id = e.model_id
                 WHERE x.tenant = %s AND x.key = 'tok' ORDER BY md.name"""
    with conn.transaction():
        conn.execute("UPDATE spark.memories SET created_at = '2026-02-01Z' WHERE tenant = %s", (tenant,))
        moved = conn.execute(vectors, (tenant,)).fetchall()
    assert len(moved) == 2 and {str(c.date()) for _, c in moved} == {"2026-02-01"}
    client.add(tenant, "Rotate the API tokens weekly", key="tok")  # new text: every old vector is stale
    with conn.transaction():
        left = [name for name, _ in conn.execute(vectors, (tenant,)).fetchall()]
    assert left == [client.embedder.spec.name]  # re-embedded by the active model only


def test_overlapping_ingests_in_opposite_orders_wait_instead_of_deadlocking(db_url: str, tenant: str) -> None:
    # each ingest locks the rows it updates in (tenant, key) order; in file order two writers sharing keys
    # in opposite orders could each hold a row the other needs (40P01, deadlock detected)
    import threading

    from spark_pg.db import connect
    from spark_pg.records import MemoryIn

    keys = [f"k{i:03d}" for i in range(300)]
    with connect(db_url) as c:  # stored first, so that both writers update (and lock) existing rows
        ingest(c, [MemoryIn(tenant=tenant, key=k, text=f"first version of {k}") for k in keys], None)
        c.commit()
    errors: list[BaseException] = []
    for round_ in range(4):
        start = threading.Barrier(2)

        def write(order: list[str], round_: int = round_, start: threading.Barrier = start) -> None:
            try:
                with connect(db_url) as c:
                    records = [MemoryIn(tenant=tenant, key=k, text=f"round {round_} of {k}") for k in order]
                    start.wait(timeout=30)
                    ingest(c, records, None)
                    c.commit()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(o,)) for o in (keys, keys[::-1])]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)  # a hung writer is a failure, not a pass
    assert errors == []
    with connect(db_url) as c:
        row = c.execute("SELECT count(*) FROM spark.memories WHERE tenant = %s", (tenant,)).fetchone()
    assert row == (300,)
    # new keys, each writer giving created_at to the other half of them: one statement inserts them all in
    # one order (two statements, with and without created_at, took them in opposite halves)
    given = datetime(2026, 1, 1, tzinfo=UTC)
    for round_ in range(4):
        fresh = [f"new{round_}-{i:03d}" for i in range(300)]
        start = threading.Barrier(2)

        def insert(dated: set[str], start: threading.Barrier = start, fresh: list[str] = fresh) -> None:
            try:
                with connect(db_url) as c:
                    records = [
                        MemoryIn(
                            tenant=tenant, key=k, text=f"new {k}", created_at=given if k in dated else None
                        )
                        for k in fresh
                    ]
                    start.wait(timeout=30)
                    ingest(c, records, None)
                    c.commit()
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=insert, args=(set(fresh[:150]),)),
            threading.Thread(target=insert, args=(set(fresh[150:]),)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
    assert errors == []


def test_an_unchanged_row_is_not_written_again_and_a_repeated_key_is_refused(
    client: SparkClient, tenant: str
) -> None:
    records = [MemoryIn(tenant=tenant, key=f"u{i}", text=f"unchanged memory {i}") for i in range(3)]
    client.ingest_records(records)
    conn = client.conn

    def versions() -> dict[str, tuple[object, object]]:
        rows = conn.execute(
            "SELECT key, xmin::text, updated_at FROM spark.memories WHERE tenant = %s", (tenant,)
        ).fetchall()
        return {k: (x, u) for k, x, u in rows}

    before = versions()
    again = client.ingest_records([*records[:2], MemoryIn(tenant=tenant, key="u2", text="changed memory")])
    assert (again.inserted, again.updated, again.unchanged) == (0, 1, 2)
    after = versions()
    assert after["u0"] == before["u0"] and after["u1"] == before["u1"]  # no new row version
    assert after["u2"] != before["u2"]
    dated = MemoryIn(
        tenant=tenant, key="u0", text="unchanged memory 0", created_at=datetime(2024, 1, 1, tzinfo=UTC)
    )
    assert client.ingest_records([dated]).updated == 1  # a new created_at is a change
    naive = MemoryIn(tenant=tenant, key="u9", text="naive time", created_at=datetime(2024, 1, 1))
    assert client.ingest_records([naive]).future == 0  # taken as UTC, as the database takes it
    with pytest.raises(InputError, match=r"records\[2\] has the tenant and key of records\[0\]"):
        client.ingest_records([records[0], records[1], records[0]])
    assert versions()["u1"] == after["u1"]


def test_a_load_and_its_refresh_run_as_long_as_they_need(db_url: str, tenant: str) -> None:
    """Under the session's statement timeout (30 s by default) the upsert of ~200,000 rows was cancelled after
    all the embedding and the whole load rolled back; and the per-tenant index that a tenant fed by the
    worker gets at its next write was cancelled on every write, each of which then reported an error for
    rows it had committed. Here the timeout is 40 ms, under what the 4,000-row upsert and the 1,600-vector
    index build take."""
    import random

    from spark_pg.db import connect

    rows = [
        MemoryIn(tenant=tenant, key=f"k{i:05d}", text=f"load row {i} about topic {i % 97}")
        for i in range(4000)
    ]
    with connect(db_url) as c:
        c.execute("SET statement_timeout = '40ms'")
        assert ingest(c, rows, None).inserted == 4000
        assert c.execute("SHOW statement_timeout").fetchone() == ("40ms",)  # the session's, as it was
        c.commit()
        # the worker stored 1,600 vectors (the index threshold is 1,500); the next write builds the index
        model = c.execute("SELECT id FROM spark.embedding_models WHERE active").fetchone()
        if model is None:
            c.execute("SET statement_timeout = 0")
            model = c.execute(
                "SELECT spark.register_model('spark-pg-test/random', 384, 'mean', 256)"
            ).fetchone()
            c.execute("UPDATE spark.embedding_models SET active = true WHERE id = %s", model)
            c.execute("SET statement_timeout = '40ms'")
        rng = random.Random(7)
        vectors = ["[" + ",".join(f"{rng.gauss(0, 1):.4f}" for _ in range(384)) + "]" for _ in range(1600)]
        c.execute("SET statement_timeout = 0")
        c.execute(
            """INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding)
               SELECT m.tenant, m.id, %s, m.created_at, v::vector FROM spark.memories m
               JOIN unnest(%s::text[]) WITH ORDINALITY u(v, n)
                 ON m.key = format('k%%s', lpad((n - 1)::text, 5, '0'))
               WHERE m.tenant = %s""",
            (model[0], vectors, tenant),
        )
        c.execute("DELETE FROM spark.embed_queue WHERE tenant = %s", (tenant,))
        c.commit()
        c.execute("SET statement_timeout = '40ms'")
        built = "SELECT count(*) FROM spark.tenant_vector_indexes WHERE tenant = %s"
        # inside the caller's transaction (the SET opened one) the index is left to a write outside one: built
        # there, it held every tenant's vector writes until this transaction ended
        assert ingest(c, [MemoryIn(tenant=tenant, key="one-more", text="one more row")], None).inserted == 1
        assert c.execute(built, (tenant,)).fetchone() == (0,)
        c.commit()
        assert ingest(c, [MemoryIn(tenant=tenant, key="two-more", text="two more rows")], None).inserted == 1
        c.commit()
        assert c.execute(built, (tenant,)).fetchone() == (1,)


def test_a_row_another_writer_changed_meanwhile_is_embedded_not_left_queued(
    client: SparkClient, db_url: str, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingest A re-sends K as stored (embedded: skipped); before A locks K, ingest B changes it and commits.
    A's upsert puts K's content back, its trigger drops B's vector, and A had no vector to store: K was left
    without one, only queued, after a synchronous ingest."""
    import spark_pg.ingest as ingest_module
    from spark_pg.db import connect

    same = [MemoryIn(tenant=tenant, key="K", text="Run database migrations before the deploy")]
    ingest(client.conn, same, client.embedder)
    client.conn.commit()
    checked = ingest_module._already_embedded

    def then_b_writes(*args: Any, **kwargs: Any) -> set[int]:
        unchanged = checked(*args, **kwargs)
        monkeypatch.setattr(ingest_module, "_already_embedded", checked)  # B checks as usual
        with connect(db_url) as b:  # between A's check and A's lock
            other = [MemoryIn(tenant=tenant, key="K", text="Deploy first, migrate later")]
            ingest(b, other, client.embedder)
            b.commit()
        return unchanged

    monkeypatch.setattr(ingest_module, "_already_embedded", then_b_writes)
    assert ingest(client.conn, same, client.embedder).updated == 1
    client.conn.commit()
    row = client.conn.execute(
        """SELECT m.text,
                  (SELECT count(*) FROM spark.embeddings e WHERE e.tenant = m.tenant AND e.memory_id = m.id),
                  (SELECT count(*) FROM spark.embed_queue q WHERE q.tenant = m.tenant AND q.memory_id = m.id)
           FROM spark.memories m WHERE m.tenant = %s AND m.key = 'K'""",
        (tenant,),
    ).fetchone()
    assert row == ("Run database migrations before the deploy", 1, 0)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"importance": 2.0}, r"records\[1\]\.importance must be a number from 0 to 1, got 2.0"),
        ({"text": "a\x00b"}, r"records\[1\]\.text must not contain NUL"),
        ({"metadata": {"a": float("inf")}}, r"records\[1\]\.metadata holds inf"),
        ({"kind": "nope"}, r"records\[1\]\.kind 'nope' is not one of"),
    ],
)
def test_a_memory_made_in_code_gets_the_files_checks_naming_the_record(
    client: SparkClient, tenant: str, fields: dict[str, Any], message: str
) -> None:
    """A MemoryIn built in code went to the database unchecked: a CheckViolation echoing the whole row, a
    DataError, or a COPY error, none naming the record."""
    records = [MemoryIn(tenant=tenant, key="ok", text="fine"), MemoryIn(tenant=tenant, key="bad", text="x")]
    records[1] = MemoryIn(**{**records[1].__dict__, **fields})
    with pytest.raises(InputError, match=message):
        ingest(client.conn, records, None)
    assert stored(client, tenant) == {}


def test_a_reingest_keeps_what_the_lifecycle_changed_unless_the_file_gives_it(
    client: SparkClient, tenant: str, tmp_path: Path
) -> None:
    """A row that left importance, tier, priority or metadata out reset them to the defaults: a nightly
    re-ingest undid every revaluation, archive, pin and assign_tiers note."""
    rows: list[dict[str, object]] = [
        {"key": "a", "text": "Always run the migrations on staging first"},
        {"key": "b", "text": "Prefer small pull requests", "importance": 0.4},
    ]
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    client.ingest_file(path, tenant)
    with client.conn.transaction():  # (a tier_reason written here would go: that key is assign_tiers' mark)
        client.conn.execute(
            """UPDATE spark.memories SET importance = 0.9, tier = 'pinned', priority = 'high',
                      metadata = '{"note": "pinned by hand"}'
               WHERE tenant = %s""",
            (tenant,),
        )
    again = client.ingest_file(path, tenant)
    assert (again.inserted, again.updated, again.unchanged) == (0, 1, 1)  # b gives its importance
    kept = client.conn.execute(
        "SELECT key, importance, tier, priority, metadata FROM spark.memories WHERE tenant = %s ORDER BY key",
        (tenant,),
    ).fetchall()
    assert [(k, round(i, 2), t, p, m) for k, i, t, p, m in kept] == [
        ("a", 0.9, "pinned", "high", {"note": "pinned by hand"}),
        ("b", 0.4, "pinned", "high", {"note": "pinned by hand"}),
    ]
    rows[0] |= {"tier": "active", "metadata": {}}  # given, even as the defaults: they win
    client.ingest_file(write_jsonl(tmp_path / "m2.jsonl", rows), tenant)
    a = client.conn.execute(
        "SELECT importance, tier, metadata FROM spark.memories WHERE tenant = %s AND key = 'a'", (tenant,)
    ).fetchone()
    assert a is not None and (round(a[0], 2), a[1], a[2]) == (0.9, "active", {})


def register_other_model(url: str, embedder: Embedder) -> None:
    """``embedder``'s model registered (the active one), and a second model of the same shape (not active),
    as `spark-pg reembed` leaves it before its switch."""
    spec = embedder.spec
    with connect(url) as c:
        ensure_model(c, embedder)
        c.execute("SELECT spark.register_model(%s, %s, %s, %s)", ("other/model", spec.dim, spec.pooling, 256))
        c.commit()


def left_out(url: str) -> list[tuple[str, bool, list[str]]]:
    """(key, queued, models of its vectors) of each memory that has no vector of the active model."""
    with connect(url) as c:
        rows = c.execute(
            """SELECT m.key, EXISTS (SELECT 1 FROM spark.embed_queue q
                                     WHERE q.tenant = m.tenant AND q.memory_id = m.id),
                      ARRAY(SELECT em.name FROM spark.embeddings e
                            JOIN spark.embedding_models em ON em.id = e.model_id
                            WHERE e.tenant = m.tenant AND e.memory_id = m.id)
               FROM spark.memories m
               WHERE NOT EXISTS (SELECT 1 FROM spark.embeddings e WHERE e.tenant = m.tenant
                                 AND e.memory_id = m.id AND e.model_id = (spark.active_model()).id)
               ORDER BY m.key"""
        ).fetchall()
    return [(str(k), bool(q), list(v)) for k, q, v in rows]


def test_a_switch_during_the_write_waits_for_it_and_queues_the_new_memory(
    installed_db: str, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: ingest checked the active model in a transaction of its own and wrote in another. A switch that
    committed after its vectors were stored (their trigger took the new memory off the queue) and before its
    commit rebuilt the queue without the memory, still invisible to it: left with a vector of the retired
    model only, not queued, never embedded, and nothing said so."""
    register_other_model(installed_db, embedder)
    stored_vectors, go_on = threading.Event(), threading.Event()
    execute = psycopg.Cursor.execute

    def pause_after_the_store(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        result = execute(self, query, *args, **kwargs)
        if query is queries.STORE_VECTORS:  # the vectors are stored, the commit comes next
            stored_vectors.set()
            go_on.wait(30)
        return result

    monkeypatch.setattr(psycopg.Cursor, "execute", pause_after_the_store)
    results: list[Any] = []

    def write() -> None:
        with connect(installed_db) as c:
            results.append(ingest(c, [MemoryIn(tenant="t", key="during", text="Pin base images")], embedder))
            c.commit()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert stored_vectors.wait(60)
        switch = Blocked(installed_db, "SELECT * FROM spark.activate_model('other/model')").start(seconds=5)
        waited = switch._thread.is_alive()  # waits for the write's commit (the old code did not)
    finally:
        go_on.set()
        writer.join(60)
    assert switch.join() is None and results and results[0].embedded == 1
    assert left_out(installed_db) == [("during", True, [embedder.spec.name])]  # queued for other/model
    assert waited


def test_a_write_after_a_switch_stores_no_vector_of_the_retired_model(
    installed_db: str, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    """A switch that commits while an ingest embeds (before it writes): the rows are written and queued for a
    worker on the new model, as a deferred write's, with a warning; no vector of the retired model."""
    register_other_model(installed_db, embedder)

    class SwitchWhileEmbedding(Embedder):
        def embed_documents(self, texts: Sequence[str], batch_size: int = 16) -> list[Vector]:
            with connect(installed_db, autocommit=True) as c:
                c.execute("SELECT * FROM spark.activate_model('other/model')")
            return embedder.embed_documents(texts, batch_size)

    with connect(installed_db) as c:
        result = ingest(
            c,
            [MemoryIn(tenant="t", key="late", text="Pin base images")],
            SwitchWhileEmbedding(embedder.spec, embedder._model),
        )
        c.commit()
    assert (result.inserted, result.embedded) == (1, 0)
    assert left_out(installed_db) == [("late", True, [])]
    assert "other/model is the active model now" in caplog.text


def test_a_trace_built_in_code_is_stored_scrubbed_like_one_from_a_file(db_url: str, tenant: str) -> None:
    """ingest() stores a trace or learning it is handed as a file's row of that kind is stored: scrubbed
    (it used the scrubbed row only to check the record, and stored the secret)."""
    secret = "hunter2secret"
    record = MemoryIn(
        tenant=tenant,
        key="attempt-1",
        kind="trace",
        text=f"Intent: deploy to prod | Outcome: failure | Key issue: DB_PASSWORD={secret}",
        metadata={"outcome": "Failure", "log": f"export DB_PASSWORD={secret}"},
        actionability=0.9,
    )
    learning = MemoryIn(tenant=tenant, key="rule-1", kind="learning", text=f"Never paste password={secret}")
    with connect(db_url) as conn:
        ingest(conn, [record, learning], None)
        rows = conn.execute(
            "SELECT key, text, metadata::text, actionability FROM spark.memories WHERE tenant = %s "
            "ORDER BY key",
            (tenant,),
        ).fetchall()
    assert [r[0] for r in rows] == ["attempt-1", "rule-1"]
    for key, text, metadata, _ in rows:
        assert secret not in text and secret not in metadata, key
        assert "[REDACTED:password]" in text, key
    trace = rows[0]
    assert (
        json.loads(trace[2])["outcome"] == "failure" and trace[3] == 0
    )  # a record of an attempt, not advice


@pytest.mark.parametrize("option", ["chunk_rows", "batch_size"])
@pytest.mark.parametrize("value", [0, -1])
def test_ingest_refuses_chunk_and_batch_sizes_below_one(
    db_url: str, tenant: str, option: str, value: int
) -> None:
    """chunk_rows=-1 reported success and stored nothing; 0 raised a bare ValueError."""
    with connect(db_url) as conn:
        with pytest.raises(InputError, match=f"{option} must be a whole number from 1, got {value}"):
            ingest(conn, [MemoryIn(tenant=tenant, key="k", text="a note")], None, **{option: value})
        conn.rollback()
        assert conn.execute(
            "SELECT count(*) FROM spark.memories WHERE tenant = %s", (tenant,)
        ).fetchone() == (0,)
