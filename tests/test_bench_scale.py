"""`spark-pg bench scale`: derived corpus vectors (spark_pg/bench_corpus.py) and one tiny end-to-end run."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from spark_pg import bench_ingest, bench_retrieve, bench_scale, queries, scratch, synthetic
from spark_pg.bench_corpus import LEVELS, derive, embed_cached
from spark_pg.bench_retrieve import BenchSpec
from spark_pg.config import Settings
from spark_pg.embedding import Embedder, load_embedder
from spark_pg.errors import InputError


def _fake_real(templates: list[tuple[str, str, str, str]], dim: int = 64) -> np.ndarray:
    """Unit vectors where texts of one template sit together (a shared direction, a little of their own)."""
    rng = np.random.default_rng(1)
    direction = {t: rng.normal(size=dim) for t in sorted(set(templates))}
    rows = np.stack([direction[t] + 0.3 * rng.normal(size=dim) for t in templates]).astype(np.float32)
    out: np.ndarray = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return out


def test_derived_vectors_keep_the_real_ones_and_sit_by_a_same_template_source() -> None:
    templates = synthetic.templates(6000, seed=3)
    real = _fake_real(templates[:4000])
    vectors, how = derive(real, templates, seed=5, progress=False)
    assert vectors.shape == (6000, 64)
    assert np.array_equal(vectors[:4000], real)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert how.real == 4000 and how.derived == 2000 and sum(how.sources.values()) == 2000
    assert set(how.sources) <= set(LEVELS)
    # the noise puts a derived vector at about the measured same-template cosine from its source: for each
    # derived text with a full-template twin among the real ones, the best such twin is about that close
    twins: dict[tuple[str, str, str, str], list[int]] = {}
    for i, t in enumerate(templates[:4000]):
        twins.setdefault(t, []).append(i)
    sims = [
        float(np.max(real[twins[t]] @ vectors[4000 + j]))
        for j, t in enumerate(templates[4000:])
        if t in twins
    ]
    assert len(sims) > 100
    assert abs(float(np.median(sims)) - how.template_cosine) < 0.06
    # and far from unrelated texts
    assert float(np.median(real[:200] @ vectors[4000:4200].T)) < 0.3


def test_a_corpus_no_larger_than_the_real_vectors_is_all_real() -> None:
    templates = synthetic.templates(50)
    real = _fake_real(templates)
    vectors, how = derive(real, templates, seed=1, progress=False)
    assert np.array_equal(vectors, real) and how.derived == 0 and how.sources == {}


def test_a_tiny_scale_run_reports_every_figure(
    server_url: str, model_settings: Settings, tmp_path: Path
) -> None:
    spec = bench_scale.ScaleSpec(
        sizes=(300, 400), tenants=3, queries=12, clients=2, seconds=0.4, ingest_sample=4, real=300
    )
    partials: list[dict[str, Any]] = []
    try:
        report = bench_scale.run(
            model_settings,
            server_url,
            load_embedder(model_settings),
            spec,
            progress=False,
            on_size=lambda partial: partials.append(json.loads(json.dumps(partial))),  # as it was then
        )
    finally:
        for size in spec.sizes:
            if scratch.exists(server_url, spec.bench(size).db_name):
                scratch.drop(server_url, spec.bench(size).db_name)
    # the report so far after the first size (what an interrupted run keeps), then the whole
    assert [(p["complete"], len(p["sizes"])) for p in partials] == [(False, 1)]
    assert report["complete"] and [r["memories"] for r in report["sizes"]] == [300, 400]
    # what docs/ must cite with a figure: when, by which command and code, on which machine
    assert report["run"]["at"].endswith("+00:00") and report["run"]["command"].startswith("spark-pg")
    assert report["machine"]["cores"] >= 1 and report["machine"]["memory_gib"] > 0
    bench_scale._write_json(tmp_path / "scale.json", report)
    assert (tmp_path / "scale.json").stat().st_mode & 0o777 == 0o644  # readable like the plot beside it
    row = report["sizes"][1]
    assert row["memories"] == 400 and row["tenants"] == 3 and row["largest_tenant"] > 133
    assert row["vectors"]["real_vectors"] == 300 and row["vectors"]["derived_vectors"] == 100
    assert row["warmup_queries"] == 12 and row["server"]["shared_buffers"] and row["server"]["pgvector"]
    build = row["build"]
    assert build["load_rows_per_s"] > 0 and build["index_build_s"] >= 0 and build["index_bytes"] > 0
    assert build["maintenance_work_mem_mb"] == 512
    assert row["concurrent"]["clients"] == 2 and row["concurrent"]["calls"] > 2
    assert row["concurrent"]["seconds"] < 0.9  # --seconds 0.4, not a whole second (audit Z)
    assert row["single_client_ms"]["p50"] > 0 and row["baseline_ratio"]["p50"] > 0
    assert 0 <= row["retrieve_faster_share"] <= 1
    # every query counted once, in the bucket of its tenant's size (all three tenants are under 1,500)
    assert [(b["tenant_memories"], b["queries"]) for b in row["by_tenant_size"]] == [("<1,500", 12)]
    assert (
        row["by_tenant_size"][0]["retrieve_ms"]["p50"] > 0
        and row["by_tenant_size"][0]["baseline_ms"]["p50"] > 0
    )
    assert row["ingest"]["with_embedding_per_s"] > 0 and row["ingest"]["deferred_embedding_per_s"] > 0
    table = bench_scale.format_table(report)
    assert table.count("\n") == 3 and "| 400 | 3 (" in table and "% of queries |" in table
    assert "| 2 clients: calls/s" in table  # the run's clients, not a fixed 8
    base, recall = row["baseline_ms"], row["recall_at_k"]
    assert f"| {base['p50']} / {base['p95']} / {base['p99']} |" in table  # both systems, as in the doc
    assert f"| {recall['spark_retrieve']} / {recall['baseline']} |" in table


@pytest.mark.parametrize("memories", [1_000, 100_000, 1_000_000])
def test_scratch_names_say_when_vectors_are_derived(memories: int) -> None:
    spec = BenchSpec(memories, 100, real=100_000)
    assert spec.db_name.endswith("_r100000") == (memories > 100_000)


def test_a_corpus_larger_than_the_cache_gets_a_hint() -> None:
    row = {
        "memories": 1_000_000,
        "server": {"shared_buffers": "512MB"},
        "build": {"table_bytes": 2_900 * 2**20, "all_index_bytes": 3_300 * 2**20},
    }
    (hint,) = bench_scale.cache_hints({"sizes": [row, {**row, "server": {"shared_buffers": "4GB"}}]})
    assert "1,000,000 memories: 6,200 MB" in hint and "shared_buffers 512MB" in hint
    assert bench_scale.cache_hints({"sizes": [{**row, "build": None}]}) == []


def test_bench_queries_are_embedded_as_queries_with_the_models_prefix(
    embedder: Embedder, tmp_path: Path
) -> None:
    """The bench embedded its queries as documents: for a model with a query instruction (BGE) it searched
    with vectors the product never makes. A query file is also never the documents' file."""
    bge_like = Embedder(replace(embedder.spec, query_prefix="Represent this sentence: "), embedder._model)
    texts = ["fix the flaky login test", "deploy the service to staging"]
    queries = embed_cached(bge_like, texts, tmp_path, "queries", False, queries=True)
    documents = embed_cached(bge_like, texts, tmp_path, "queries", False)
    for i, text in enumerate(texts):
        assert np.allclose(queries[i], bge_like.embed_query(text), atol=1e-5)
        assert np.allclose(documents[i], bge_like.embed_documents([text])[0], atol=1e-5)
    assert not np.allclose(queries, documents, atol=1e-3)
    assert len(list(tmp_path.glob("queries-2-*.npy"))) == 2
    again = embed_cached(bge_like, texts, tmp_path, "queries", False, queries=True)  # from its file
    assert np.array_equal(again, queries)


@pytest.fixture(scope="module")
def observed_scale_run(server_url: str, model_settings: Settings) -> Iterator[dict[str, Any]]:
    """One tiny scale run in which, mid-run, a second bench on the same corpus is tried (in the concurrent
    phase, and in the ingest phase between the sample's ingest and its deletion), and every spark.retrieve
    statement is recorded with the thread that ran it."""
    spec = bench_scale.ScaleSpec(
        sizes=(300,), tenants=3, queries=8, clients=2, seconds=1.0, ingest_sample=3, real=300, baseline=False
    )
    bench = spec.bench(300)
    embedder = load_embedder(model_settings)
    seen: dict[str, Any] = {"second_bench": {}, "statements": []}

    def second_bench(phase: str) -> None:
        try:
            bench_retrieve.run(model_settings, server_url, embedder, bench, progress=False)
            seen["second_bench"][phase] = "ran"
        except InputError as exc:
            seen["second_bench"][phase] = str(exc)

    real_concurrent, real_ingest, real_execute = (
        bench_scale.concurrent,
        bench_ingest.ingest,
        psycopg.Cursor.execute,
    )

    def concurrent(*args: Any, **kwargs: Any) -> dict[str, Any]:
        second_bench("concurrent")
        return real_concurrent(*args, **kwargs)

    def ingest(*args: Any, **kwargs: Any) -> Any:
        result = real_ingest(*args, **kwargs)
        if "ingest" not in seen["second_bench"]:
            second_bench("ingest")
        return result

    def execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(query, str) and "spark.retrieve(" in query:
            seen["statements"].append((threading.get_ident(), query))
        return real_execute(self, query, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench_scale, "concurrent", concurrent)
        patch.setattr(bench_ingest, "ingest", ingest)
        patch.setattr(psycopg.Cursor, "execute", execute)
        try:
            seen["report"] = bench_scale.run(model_settings, server_url, embedder, spec, progress=False)
        finally:
            if scratch.exists(server_url, bench.db_name):
                scratch.drop(server_url, bench.db_name)
    yield seen


def test_another_bench_on_the_corpus_is_refused_for_the_whole_of_a_size(
    observed_scale_run: dict[str, Any],
) -> None:
    """The claim covered only the single-client part: a bench started during the 8-client phase measured
    under their load (with --fresh, dropped the database under them), and one started during the ingest
    sample counted its rows and asked for --fresh."""
    refused = "another spark-pg bench is building or measuring the corpus database spark_bench2_300_3_7"
    second = observed_scale_run["second_bench"]
    assert set(second) == {"concurrent", "ingest"}
    for phase, said in second.items():
        assert said.startswith(refused), (phase, said)
    assert observed_scale_run["report"]["complete"]


def test_each_warm_up_runs_the_statement_then_measured(observed_scale_run: dict[str, Any]) -> None:
    """The warm-ups ran spark.retrieve without the query-cache write, the measured calls with it: psycopg
    prepares a statement after 5 uses, so the first measured calls ran another, unprepared statement. The
    single-client calls (main thread) and each concurrent client (a thread of its own) run one statement."""
    by_thread: dict[int, set[str]] = {}
    for thread, statement in observed_scale_run["statements"]:
        by_thread.setdefault(thread, set()).add(statement)
    assert len(by_thread) == 3  # the single-client run and the 2 concurrent clients
    assert all(len(statements) == 1 for statements in by_thread.values()), by_thread
    assert {s for statements in by_thread.values() for s in statements} == {queries.RETRIEVE_OWN_TRANSACTION}
