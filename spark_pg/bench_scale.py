"""`spark-pg bench scale`: spark.retrieve from 10,000 to 1,000,000 memories, one client and eight.

For each corpus size it runs :func:`spark_pg.bench_retrieve.run` (corpus built once per size and reused:
COPY load, HNSW builds and their figures; single-client latency; the Python-side hybrid on the same queries),
then the same calls from ``clients`` concurrent connections for ``seconds`` (throughput and latency under
load), then the product write path at that size: ``ingest`` of a sample with embedding, and the same
sample written with deferred embedding (the database's share alone). The corpus database's claim
(:func:`spark_pg.bench_retrieve.corpus_claim`) is held over all three: another bench on that corpus is
refused until the size is done. Vectors past ``real`` texts are derived from real ones
(:mod:`spark_pg.bench_corpus`). The report goes to JSON and a plot of latency against corpus size.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from spark_pg import bench_retrieve, scratch, synthetic
from spark_pg.bench_corpus import REAL_DEFAULT
from spark_pg.bench_ingest import timed_ingest
from spark_pg.bench_retrieve import BenchSpec
from spark_pg.cli_args import DEFAULT_BENCH_REPORT, MAX_BENCH_MEMORIES, writable_dir
from spark_pg.config import Settings
from spark_pg.db import connect
from spark_pg.embedding import Embedder, Vector
from spark_pg.file_writes import replace_file
from spark_pg.retrieve import retrieve

SIZES = (10_000, 100_000, 1_000_000)


@dataclass(frozen=True)
class ScaleSpec:
    sizes: tuple[int, ...] = SIZES
    tenants: int | None = None  # None: max(100, size // 1000) per size
    queries: int = 300
    k: int = 8
    clients: int = 8
    seconds: float = 20.0
    ingest_sample: int = 500
    real: int = REAL_DEFAULT
    baseline: bool = True
    warmup: int | None = None  # None: every query once (steady state)
    fresh: bool = False  # rebuild the corpus databases

    def bench(self, size: int) -> BenchSpec:
        tenants = self.tenants if self.tenants is not None else max(100, size // 1000)
        warmup = self.queries if self.warmup is None else self.warmup
        return BenchSpec(size, tenants, self.queries, self.k, real=self.real, warmup=warmup)


def _ms(values: list[float]) -> dict[str, float]:
    arr = np.array(values)
    return {f"p{q}": round(float(np.percentile(arr, q)), 2) for q in (50, 95, 99)}


def concurrent(
    url: str,
    calls: list[tuple[str, str, Vector]],
    k: int,
    clients: int,
    seconds: float,
    progress: bool,
) -> dict[str, Any]:
    """``clients`` connections each calling retrieve over ``calls`` (from its own offset) for ``seconds``."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[BaseException] = []
    start_gate = threading.Barrier(clients + 1)
    stop = threading.Event()

    def client(c: int) -> None:
        try:
            with connect(url) as conn:
                # warm this connection with the statement measured below (the same call: query-cache write,
                # its own transaction), prepare_threshold + 1 times: psycopg prepares a statement on the run
                # after its first prepare_threshold ones, so every measured call finds it prepared
                for w in range((conn.prepare_threshold or 0) + 1):
                    tenant, text, vec = calls[w % len(calls)]
                    retrieve(conn, tenant, text, embedding=vec, k=k)
                start_gate.wait()
                j = c * len(calls) // clients
                while True:  # at least one measured call a client, however short --seconds (no empty figures)
                    tenant, text, vec = calls[j % len(calls)]
                    t0 = time.perf_counter()
                    retrieve(conn, tenant, text, embedding=vec, k=k)
                    latencies[c].append((time.perf_counter() - t0) * 1000)
                    j += 1
                    if stop.is_set():
                        break
        except BaseException as exc:  # reported below; the barrier must not hang the others
            errors.append(exc)
            start_gate.abort()

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(clients)]
    for t in threads:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        start_gate.wait()
    began = time.perf_counter()
    with tqdm(total=round(seconds, 1), desc=f"{clients} clients", unit="s", disable=not progress) as bar:
        while (left := seconds - (time.perf_counter() - began)) > 0 and not errors:
            step = min(1.0, left)  # the last step only what is left: --seconds 0.2 ran a whole second
            time.sleep(step)
            bar.update(round(step, 1))
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise errors[0]
    done = [x for per in latencies for x in per]
    return {
        "clients": clients,
        "seconds": round(elapsed, 1),
        "calls": len(done),
        "calls_per_s": round(len(done) / elapsed, 1),
        "latency_ms": _ms(done),
    }


def ingest_sample(url: str, embedder: Embedder, n: int, progress: bool) -> dict[str, Any]:
    """Memories/s through the product write path at this corpus size, with and without embedding."""
    texts = [f"{t} (sample {uuid.uuid4().hex[:6]})" for t in synthetic.texts(n, seed=99)]
    embedder.embed_query("warm up")  # model load is not ingest time
    out: dict[str, Any] = {"memories": n}
    with connect(url) as conn:
        for label, model in (("with_embedding", embedder), ("deferred_embedding", None)):
            timed = timed_ingest(conn, texts, model, progress=progress, label=f"ingest {label}")
            out[f"{label}_per_s"] = round(timed.rate, 1)
    # the sample's rows are deleted, their dead tuples and index entries are not: the cached corpus the next
    # run measures would collect them run after run (autovacuum waits for 20% of a table)
    with connect(url, autocommit=True) as conn:
        conn.execute("VACUUM spark.memories, spark.embeddings, spark.embed_queue")
    return out


def run(
    settings: Settings,
    server_url: str,
    embedder: Embedder,
    spec: ScaleSpec,
    *,
    progress: bool = True,
    on_size: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Every size in turn; ``on_size`` gets the report so far after each but the last (``complete``
    False)."""
    rows: list[dict[str, Any]] = []
    machine, started = bench_retrieve.machine(), bench_retrieve.run_info()

    def report(complete: bool) -> dict[str, Any]:
        return {
            "sizes": rows,
            "k": spec.k,
            "queries": spec.queries,
            "model": embedder.spec.name,
            "machine": machine,
            "run": started,
            "complete": complete,
        }

    for size in spec.sizes:
        bench = spec.bench(size)
        # the corpus claim is held over the size's whole run, not only its single-client part: another bench
        # on this corpus would otherwise measure under the concurrent clients' load, count the ingest
        # sample's rows as a damaged corpus, or (--fresh) drop the database under them
        with bench_retrieve.corpus_claim(server_url, bench):
            rows.append(_one_size(settings, server_url, embedder, spec, bench, progress))
        if on_size is not None and len(rows) < len(spec.sizes):
            on_size(report(False))
    return report(True)


def _one_size(
    settings: Settings,
    server_url: str,
    embedder: Embedder,
    spec: ScaleSpec,
    bench: BenchSpec,
    progress: bool,
) -> dict[str, Any]:
    """The report row of one corpus size; the caller holds the corpus claim."""
    result = bench_retrieve.run(
        settings,
        server_url,
        embedder,
        bench,
        progress=progress,
        fresh=spec.fresh,
        baseline=spec.baseline,
        claim=False,
    )
    url = scratch.with_dbname(server_url, bench.db_name)
    tenants, texts, qvecs = bench_retrieve.workload(bench, embedder, settings.home / "bench", progress)
    row: dict[str, Any] = {
        "memories": bench.memories,
        "tenants": bench.tenants,
        "largest_tenant": max(bench_retrieve.tenant_sizes(bench)),
        "single_client_ms": result["retrieve_ms"],
        "mean_results": result["mean_results"],
        "build": result["build"],
        "vectors": result["vectors"],
        "corpus_reused": result["corpus_reused"],
        "warmup_queries": result["warmup_queries"],
        "server": result["server"],
    }
    base = result.get("baseline")
    if base is not None:
        row["baseline_ms"] = base["baseline_ms"]
        row["baseline_ratio"] = base["ratio"]
        # the share of queries spark.retrieve answered first, and both systems by the query's tenant size
        row["retrieve_faster_share"] = base["retrieve_faster_share"]
        row["by_tenant_size"] = base["by_tenant_size"]
        row["recall_at_k"] = {
            "spark_retrieve": base["quality"]["spark_retrieve"]["recall_at_k"],
            "baseline": base["quality"]["baseline"]["recall_at_k"],
        }
    calls = list(zip(tenants, texts, qvecs, strict=True))
    row["concurrent"] = concurrent(url, calls, bench.k, spec.clients, spec.seconds, progress)
    if spec.ingest_sample > 0:
        row["ingest"] = ingest_sample(url, embedder, spec.ingest_sample, progress)
    return row


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """``path`` replaced whole (:func:`spark_pg.file_writes.replace_file`): never a half-written report;
    readable like the plot beside it (0644)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, json.dumps(data, indent=1), mode=0o644)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%} of queries"


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _triple(ms: dict[str, Any]) -> str:
    return " / ".join(str(ms.get(q, "-")) for q in ("p50", "p95", "p99")) if ms else "-"


def format_table(report: dict[str, Any]) -> str:
    """The Markdown table of a run: the columns of docs/performance.md's scale table (latency of both systems,
    their ratio and recall@k, the concurrent run), then the build and ingest figures."""
    clients = report["sizes"][0]["concurrent"]["clients"] if report["sizes"] else "-"
    lines = [
        "| memories | tenants (largest) | spark.retrieve p50 / p95 / p99 ms | "
        "Python hybrid p50 / p95 / p99 ms | hybrid / retrieve p50 / p95 / p99 | retrieve faster on | "
        f"recall@k retrieve / hybrid | {clients} clients: calls/s, p50 / p95 ms | load rows/s | "
        "HNSW build s (shared + per-tenant) | index MB | ingest/s (embedding, deferred) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["sizes"]:
        one, b = r["single_client_ms"], r.get("build") or {}
        conc = r["concurrent"]
        base, ratio = r.get("baseline_ms", {}), r.get("baseline_ratio", {})
        recall = r.get("recall_at_k", {})
        ing = r.get("ingest", {})
        lines.append(
            f"| {r['memories']:,} | {r['tenants']} ({r['largest_tenant']:,}) | {one['p50']} / {one['p95']} / "
            f"{one['p99']} | {_triple(base)} | {_triple(ratio)} | {_share(r.get('retrieve_faster_share'))} | "
            f"{_or_dash(recall.get('spark_retrieve'))} / {_or_dash(recall.get('baseline'))} | "
            f"{conc['calls_per_s']}, "
            f"{conc['latency_ms']['p50']} / {conc['latency_ms']['p95']} | "
            f"{b.get('load_rows_per_s', '-')} | "
            f"{b.get('index_build_s', '-')} + {b.get('tenant_indexes_s', '-')} | "
            f"{round(b['all_index_bytes'] / 2**20) if 'all_index_bytes' in b else '-'} | "
            f"{ing.get('with_embedding_per_s', '-')}, {ing.get('deferred_embedding_per_s', '-')} |"
        )
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> Path:
    """Latency percentiles against corpus size (log x), one client and under load, with the baseline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["sizes"]
    sizes = [r["memories"] for r in rows]
    fig, (ax, tput) = plt.subplots(1, 2, figsize=(12, 4.5))
    for q, style in (("p50", "-o"), ("p95", "-s"), ("p99", "-^")):
        ax.plot(
            sizes, [r["single_client_ms"][q] for r in rows], style, color="#4c72b0", label=f"{q}, 1 client"
        )
    ax.plot(
        sizes,
        [r["concurrent"]["latency_ms"]["p95"] for r in rows],
        "--s",
        color="#55a868",
        label=f"p95, {rows[0]['concurrent']['clients']} clients",
    )
    if all("baseline_ms" in r for r in rows):
        for q, style in (("p50", ":o"), ("p95", ":s")):
            ax.plot(
                sizes,
                [r["baseline_ms"][q] for r in rows],
                style,
                color="#dd8452",
                label=f"{q}, Python hybrid",
            )
    ax.axhline(25, color="grey", linewidth=0.8, label="target p95 25 ms at 1M")
    ax.set_xscale("log")
    ax.set_yscale("log")  # the hybrid's tail is an order of magnitude above
    ax.set_xlabel("memories in the database")
    ax.set_ylabel("spark.retrieve round trip (ms)")
    ax.set_title(f"latency against corpus size (k={report['k']})")
    ax.legend(fontsize=8)
    tput.bar([f"{s:,}" for s in sizes], [r["concurrent"]["calls_per_s"] for r in rows], color="#55a868")
    tput.set_ylabel("retrieve calls per second")
    tput.set_title(f"throughput, {rows[0]['concurrent']['clients']} concurrent clients")
    path.parent.mkdir(parents=True, exist_ok=True)
    from spark_pg.report_meta import add_footer

    fig.tight_layout(rect=(0, add_footer(fig, report), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _megabytes(setting: str) -> float | None:
    """PostgreSQL's shown size ("512MB", "4GB", "128kB") in MB."""
    units = {"kB": 1 / 1024, "MB": 1.0, "GB": 1024.0, "TB": 1024.0**2}
    for unit, factor in units.items():
        if setting.endswith(unit) and setting[: -len(unit)].isdigit():
            return int(setting[: -len(unit)]) * factor
    return None


def cache_hints(report: dict[str, Any]) -> list[str]:
    """A hint for each size whose tables and HNSW indexes exceed twice the server's shared_buffers: its
    latency then measures reads from the OS cache or the disk as much as retrieval (docs/performance.md)."""
    hints = []
    for row in report["sizes"]:
        build, server = row.get("build") or {}, row.get("server") or {}
        buffers = _megabytes(str(server.get("shared_buffers") or ""))
        data_mb = (build.get("table_bytes", 0) + build.get("all_index_bytes", 0)) / 2**20
        if buffers is not None and data_mb > 2 * buffers:
            hints.append(
                f"{row['memories']:,} memories: {data_mb:,.0f} MB of tables and indexes against "
                f"shared_buffers {server['shared_buffers']}; for steady-state figures give the server more "
                "(the embedded one: SPARK_PG_DATABASE_SHARED_BUFFERS_MB, then `spark-pg db down` and `db up`)"
            )
    return hints


def main(args: Any, settings: Settings) -> int:
    """`spark-pg bench scale`: run, print the table (or JSON), write the JSON report and the plot."""
    from spark_pg.db import database_url
    from spark_pg.embedding import load_embedder
    from spark_pg.errors import InputError

    try:
        sizes = tuple(int(x) for x in args.sizes.split(","))
    except ValueError as exc:
        raise InputError(f"--sizes must be comma-separated integers, got {args.sizes!r}") from exc
    if not sizes or min(sizes) < 100 or max(sizes) > MAX_BENCH_MEMORIES:  # the rest: checked by their types
        raise InputError(f"--sizes must each be from 100 to {MAX_BENCH_MEMORIES:,}, got {args.sizes!r}")
    spec = ScaleSpec(
        sizes=sizes,
        tenants=args.tenants,
        queries=args.queries,
        k=args.k,
        clients=args.clients,
        seconds=args.seconds,
        ingest_sample=args.ingest_sample,
        real=args.real,
        baseline=args.baseline,
        fresh=args.fresh,
    )
    # an explicit --report was checked when the arguments were parsed, the default is checked here: both
    # before the run
    for size in spec.sizes:  # too few memories for the tenants: refused now, not after the first sizes
        bench_retrieve.tenant_sizes(spec.bench(size))
    folder = args.report or writable_dir(Path(DEFAULT_BENCH_REPORT))
    server_url = database_url(settings)
    # the clients, the single-client connection and the corpus claim's; refused now, not after the build
    scratch.check_free_connections(server_url, spec.clients + 3, "give fewer --clients")

    def partial(report: dict[str, Any]) -> None:
        """The report so far, after each size: an interrupted run keeps the sizes it finished. The previous
        run's plot goes with the report it drew (it showed that run's figures beside this partial one)."""
        _write_json(folder / "scale.json", report)
        (folder / "scale.png").unlink(missing_ok=True)

    report = run(
        settings, server_url, load_embedder(settings), spec, progress=not args.quiet, on_size=partial
    )
    # the report before the plot (a plot that fails loses no figure), the previous run's plot gone with it
    (folder / "scale.png").unlink(missing_ok=True)
    _write_json(folder / "scale.json", report)
    figure = plot(report, folder / "scale.png")
    if args.json:
        print(json.dumps(report | {"plot": str(figure)}))
    else:
        print(format_table(report))
        print(f"plot: {figure}; report: {folder / 'scale.json'}")
    for hint in cache_hints(report):
        print(f"hint: {hint}", file=sys.stderr)
    bench_retrieve.warn_few_samples(spec.queries)
    return 0
