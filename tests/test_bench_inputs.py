"""The benchmark commands refuse what would make their figures wrong, before any long work: bad counts,
more tenants than the memories can spread over, and a cached corpus that is not the one a run would build."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from spark_pg import bench_ingest, bench_retrieve, scratch
from spark_pg.bench_retrieve import BenchSpec, tenant_sizes
from spark_pg.cli import main
from spark_pg.config import Settings
from spark_pg.db import connect
from spark_pg.embedding import Embedder
from spark_pg.errors import InputError
from tests.conftest import bench_corpus, usage_error


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("bench", "--queries", "0"), "--queries: must be from 1 to 100,000, got 0"),
        (("bench", "--memories", "-5"), "--memories: must be at least 1, got -5"),
        (("bench", "--tenants", "0"), "--tenants: must be at least 1, got 0"),
        (("bench", "--k", "0"), "k must be between 1 and 1000, got 0"),
        (("bench", "--real", "0"), "--real: must be from 1 to 10,000,000, got 0"),
        (("bench", "ingest", "--n", "0"), "--n: must be from 1 to 1,000,000, got 0"),
        (("bench", "--hooks", "--parallel", "-3"), "--parallel: must be from 1 to 64, got -3"),
        (("bench", "scale", "--seconds", "nan"), "must be a finite number of seconds above 0, got nan"),
        (("bench", "scale", "--seconds", "inf"), "must be a finite number of seconds above 0, got inf"),
        (("bench", "scale", "--clients", "0"), "--clients: must be from 1 to 64, got 0"),
        (("bench", "scale", "--ingest-sample", "-1"), "--ingest-sample: must be from 0 to 100,000, got -1"),
        (
            ("bench", "--memories", "3000000000"),
            "--memories: must be at most 10,000,000",
        ),  # was a MemoryError
        (("bench", "--tenants", "200000"), "--tenants: must be at most 100,000"),
    ],
)
def test_bad_counts_are_usage_errors_before_any_work(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], expected: str
) -> None:
    assert expected in usage_error(capsys, argv)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("bench", "ingest", "--hooks"), "--hooks measures the hooks alone"),
        (("bench", "retrieve", "--hooks"), "--hooks measures the hooks alone"),
        (
            ("bench", "--hooks", "--report", "/tmp"),
            "--report is an option of `bench retrieve` or `bench scale`",
        ),
        # a small run asked of the wrong mode started the default one: hours at 1,000,000 memories
        (
            ("bench", "scale", "--memories", "300"),
            "--memories is an option of `bench retrieve` or `bench rls`, not of `bench scale`",
        ),
        (("bench", "--sizes", "300"), "--sizes is an option of `bench scale`, not of `bench retrieve`"),
        (
            ("bench", "ingest", "--clients", "2"),
            "--clients is an option of `bench scale`, not of `bench ingest`",
        ),
        (
            ("bench", "--hooks", "--tenants", "5"),
            "--tenants is an option of `bench retrieve` or `bench scale`",
        ),
        (("bench", "--n", "5"), "--n is an option of `bench ingest`, not of `bench retrieve`"),
        (("bench", "scale", "--sizes", "300,20000000"), "--sizes must each be from 100 to 10,000,000"),
        (("eval", "--scenarios", "--k", "5"), "--k applies to --dataset, not --scenarios"),
        (("eval", "--scenarios", "--limit", "3", "--fresh"), "--limit, --fresh apply to --dataset"),
        (("eval", "--dataset", "/nonexistent", "--split", "tune"), "--split applies to --scenarios"),
        (("eval", "--scenarios", "--conversations", "conv-26"), "--conversations applies to --dataset"),
        (
            ("eval", "--dataset", "/nonexistent", "--conversations", "a,,b"),
            "--conversations must be a comma-separated list",
        ),
    ],
)
def test_options_of_another_mode_are_refused_not_ignored(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], expected: str
) -> None:
    assert main(list(argv)) == 2
    assert expected in capsys.readouterr().err


def test_too_few_memories_for_the_tenants_is_refused(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # before, the first tenant got a negative size (-53 here) and the quality figures read the wrong rows
    with pytest.raises(InputError, match="300 memories are too few for 250 tenants"):
        tenant_sizes(BenchSpec(300, 250))
    assert main(["bench", "--memories", "300", "--tenants", "250", "--quiet"]) == 2
    assert "too few for 250 tenants" in capsys.readouterr().err
    assert main(["bench", "scale", "--sizes", "100", "--quiet"]) == 2  # 100 tenants at the least
    assert "100 memories are too few for 100 tenants" in capsys.readouterr().err
    # the suggestion is found by bisection (one memory at a time took minutes) and is itself enough
    with pytest.raises(InputError, match=r"give more \(e\.g\. (\d+)\)") as refused:
        tenant_sizes(BenchSpec(5, 20_000))
    enough = int(str(refused.value).split("e.g. ")[1].split(")")[0])
    assert tenant_sizes(BenchSpec(enough, 20_000)) and sum(tenant_sizes(BenchSpec(enough, 20_000))) == enough
    with pytest.raises(InputError):
        tenant_sizes(BenchSpec(enough - 1, 20_000))


@pytest.mark.parametrize(("memories", "tenants"), [(10_000, 100), (1_000_000, 1000), (300, 3), (7, 1)])
def test_tenant_sizes_are_positive_skewed_and_sum_up(memories: int, tenants: int) -> None:
    sizes = tenant_sizes(BenchSpec(memories, tenants))
    assert len(sizes) == tenants and sum(sizes) == memories and min(sizes) >= 1
    assert sizes[0] == max(sizes)  # the corpora cached so far: the first tenant the largest


@pytest.fixture
def tiny_corpus(server_url: str, model_settings: Settings, embedder: Embedder) -> Iterator[BenchSpec]:
    with bench_corpus(
        server_url, model_settings, embedder, BenchSpec(60, 3, queries=4, warmup=1, real=60)
    ) as spec:
        yield spec


@pytest.mark.parametrize(
    ("tamper", "expected"),
    [
        (None, None),
        ("DROP TABLE public.spark_bench_build", "has no record of a finished build"),  # killed mid-build
        ("DELETE FROM spark.memories WHERE key = 'm59'", "holds 59 memories and 59 vectors, not 60"),
        # with triggers on, a changed text loses its vector too (the count catches it); off, only the text
        (
            "SET session_replication_role = replica; UPDATE spark.memories SET text = 'something else' "
            "WHERE key = 'm0'",
            "holds other texts",
        ),
        (
            "UPDATE spark.memories SET text = 'something else' WHERE key = 'm0'",
            "holds 60 memories and 59 vectors",
        ),
        ("UPDATE spark.embedding_models SET active = false", "was embedded with None"),
    ],
)
def test_a_cached_corpus_is_reused_only_when_it_is_the_one_the_run_would_build(
    tiny_corpus: BenchSpec,
    server_url: str,
    model_settings: Settings,
    embedder: Embedder,
    tamper: str | None,
    expected: str | None,
) -> None:
    url = scratch.with_dbname(server_url, tiny_corpus.db_name)
    if tamper is not None:
        with connect(url) as conn:
            conn.execute(tamper)
            conn.commit()
    if expected is None:
        result = bench_retrieve.run(model_settings, server_url, embedder, tiny_corpus, progress=False)
        assert result["corpus_reused"] and len(result["timings_ms"]) == 4
        return
    with pytest.raises(InputError, match=f"{tiny_corpus.db_name} {expected}.*--fresh"):
        bench_retrieve.run(model_settings, server_url, embedder, tiny_corpus, progress=False)
    fresh = bench_retrieve.run(model_settings, server_url, embedder, tiny_corpus, progress=False, fresh=True)
    assert not fresh["corpus_reused"]


def test_bench_ingest_leaves_no_vector_index_of_its_tenant(
    db_url: str, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_ingest = bench_ingest.ingest
    seen: list[str] = []

    def ingest_past_the_index_threshold(
        conn: psycopg.Connection[Any], records: Any, *a: Any, **kw: Any
    ) -> Any:
        result = real_ingest(conn, records, *a, **kw)
        # as if the tenant had index_min_vectors (1,500) vectors: it gets its own HNSW index
        conn.execute("SELECT spark.refresh_tenant_stats(%s, true, 1)", (records[0].tenant,))
        conn.commit()
        seen.append(records[0].tenant)
        return result

    monkeypatch.setattr(bench_ingest, "ingest", ingest_past_the_index_threshold)
    with connect(db_url) as conn:
        timed = bench_ingest.timed_ingest(conn, ["Rotate the signing keys", "Pin the base image"], embedder)
        assert timed.rows == 2 and len(seen) == 1
        left = conn.execute(
            """SELECT (SELECT count(*) FROM spark.tenant_vector_indexes WHERE tenant = %(t)s),
                      (SELECT count(*) FROM pg_class
                       WHERE relname LIKE 'embeddings_hnsw_m%%_t' || left(md5(%(t)s), 16)),
                      (SELECT count(*) FROM spark.tenant_stats WHERE tenant = %(t)s),
                      (SELECT count(*) FROM spark.memories WHERE tenant = %(t)s)""",
            {"t": seen[0]},
        ).fetchone()
    assert left == (0, 0, 0, 0)


def test_a_corpus_another_bench_holds_is_refused_not_read_or_dropped(
    model_settings: Settings, server_url: str, embedder: Embedder, tiny_corpus: BenchSpec
) -> None:
    """Two runs on one corpus: the second read the first's half-built corpus as damaged, failed to create
    the database, or with --fresh dropped it under the first one's measurement."""
    with scratch.claimed(server_url, tiny_corpus.db_name) as mine:
        assert mine
        with pytest.raises(InputError, match=f"another spark-pg bench .* {tiny_corpus.db_name}"):
            bench_retrieve.run(model_settings, server_url, embedder, tiny_corpus, progress=False, fresh=True)


def test_percentiles_of_too_few_calls_come_with_a_note() -> None:
    # `bench --queries 3` reported a p99 and a baseline ratio at p99 from 3 calls, with nothing said
    assert "p95 and p99 are taken from 3 calls" in (bench_retrieve.few_samples_note(3) or "")
    assert (bench_retrieve.few_samples_note(50) or "").startswith("p99 is taken from 50 calls")
    assert bench_retrieve.few_samples_note(100) is None


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # each had no ceiling (audit Z): --n filled the machine's memory, --parallel ran 300 hook processes
        (("bench", "ingest", "--n", "99999999999"), "--n: must be from 1 to 1,000,000"),
        (("bench", "--queries", "99999999999"), "--queries: must be from 1 to 100,000"),
        (("bench", "scale", "--seconds", "1e12"), "--seconds: must be at most 86,400 seconds"),
        (("bench", "--hooks", "--parallel", "9999"), "--parallel: must be from 1 to 64"),
        (("bench", "scale", "--clients", "300"), "--clients: must be from 1 to 64"),
        (("bench", "scale", "--ingest-sample", "10000000"), "--ingest-sample: must be from 0 to 100,000"),
        (("bench", "scale", "--real", "20000000"), "--real: must be from 1 to 10,000,000"),
    ],
)
def test_bench_counts_and_times_have_a_ceiling(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], expected: str
) -> None:
    assert usage_error(capsys, argv).count(expected) == 1


def test_more_clients_than_the_server_has_connections_for_is_refused_before_the_run(
    cli_env: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Was (audit Z): refused only after the corpus was built and the single-client phase measured."""
    seen: list[int] = []

    def few(url: str, needed: int, fix: str) -> None:
        seen.append(needed)
        raise InputError(f"the run needs {needed} connections and the server has 5 free: {fix}")

    monkeypatch.setattr(scratch, "check_free_connections", few)
    report = tmp_path / "report"
    report.mkdir()
    argv = ["bench", "scale", "--sizes", "10000", "--clients", "64", "--report", str(report)]
    assert main(argv) == 2
    assert "the run needs 67 connections" in capsys.readouterr().err and seen == [67]
    assert list(report.iterdir()) == []  # nothing was built or written


def test_free_connections_are_counted_on_the_server(server_url: str) -> None:
    scratch.check_free_connections(server_url, 1, "fewer")
    too_many = r"the run needs 100000 connections and the server has \d+ free.*: fewer"
    with pytest.raises(InputError, match=too_many):
        scratch.check_free_connections(server_url, 100_000, "fewer")


@pytest.mark.parametrize("fails_at", ["interrupted after a size", "plot"])
def test_a_run_that_stops_before_its_plot_leaves_no_plot_of_the_previous_run(
    cli_env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fails_at: str
) -> None:
    """Was (audit Z, then its review): the previous run's scale.png stayed beside a new scale.json, showing
    that run's figures as this one's."""
    from spark_pg import bench_scale, embedding

    report = tmp_path / "report"
    report.mkdir()
    (report / "scale.png").write_bytes(b"the previous run's plot")
    figures = {"sizes": [], "complete": False}

    def run(*args: Any, on_size: Any = None, **kw: Any) -> dict[str, Any]:
        if fails_at == "interrupted after a size":
            on_size(figures)
            raise KeyboardInterrupt
        return figures | {"complete": True}

    def plot(*args: Any) -> Path:
        raise RuntimeError("matplotlib failed")

    monkeypatch.setattr(scratch, "check_free_connections", lambda *a: None)
    monkeypatch.setattr(embedding, "load_embedder", lambda settings: None)
    monkeypatch.setattr(bench_scale, "run", run)
    monkeypatch.setattr(bench_scale, "plot", plot)
    argv = ["bench", "scale", "--sizes", "10000", "--report", str(report)]
    if fails_at == "plot":
        with pytest.raises(RuntimeError, match="matplotlib failed"):
            main(argv)
    else:
        assert main(argv) == 130
    assert sorted(p.name for p in report.iterdir()) == ["scale.json"]


def test_a_client_measures_at_least_one_call_however_short_the_run(
    db_url: str, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was (review): a short run (--seconds 0.001) could end before a client's first measured call, and
    the percentiles of no latencies raised IndexError after the whole single-client phase."""
    import threading

    from spark_pg import bench_scale

    class StoppedAtOnce(threading.Event):
        """The stop already set when the clients pass the start gate: the shortest run there can be."""

        def is_set(self) -> bool:
            return True

    class Threading:  # the module as bench_scale sees it (threading's own Event must stay as it is)
        def __getattr__(self, name: str) -> Any:
            return StoppedAtOnce if name == "Event" else getattr(threading, name)

    monkeypatch.setattr(bench_scale, "threading", Threading())
    vector = embedder.embed_query("a query")
    result = bench_scale.concurrent(db_url, [("nobody", "a query", vector)], 5, 2, 0.001, False)
    assert result["calls"] >= 2 and set(result["latency_ms"]) == {"p50", "p95", "p99"}
