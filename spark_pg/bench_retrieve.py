"""`spark-pg bench`: spark.retrieve latency on a synthetic corpus with real embeddings.

The corpus (N memories over T tenants of Zipf-skewed sizes, created over the past year) is embedded once
with the configured model and cached under ``<home>/bench``; it is loaded once into a scratch database
``spark_bench_<N>_<T>`` that later runs reuse. Each measured call is the Python wrapper's single round
trip (spark.retrieve plus the query-vector cache write), timed on the client, after a warm-up.
"""

from __future__ import annotations

import hashlib
import platform
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from spark_pg import schema, scratch, synthetic
from spark_pg.config import Settings
from spark_pg.db import connect
from spark_pg.embedding import Embedder, Vector
from spark_pg.ingest import ensure_model
from spark_pg.retrieve import retrieve

COPY_BENCH = """COPY spark.memories (tenant, key, kind, category, text, descriptor, content_hash, importance,
                                   created_at) FROM STDIN"""
STAGE_VECTORS = "CREATE TEMP TABLE _bench_vectors (key text PRIMARY KEY, embedding vector) ON COMMIT DROP"
COPY_VECTORS = "COPY _bench_vectors (key, embedding) FROM STDIN"
STORE_VECTORS = """
INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding)
SELECT m.tenant, m.id, %(model_id)s, m.created_at, v.embedding
FROM _bench_vectors v JOIN spark.memories m ON m.key = v.key
"""
NOW = datetime(2026, 11, 1, tzinfo=UTC)
PERCENTILES = (("p50", 50), ("p95", 95), ("p99", 99))


@dataclass(frozen=True)
class BenchSpec:
    memories: int
    tenants: int
    queries: int = 300
    k: int = 8
    seed: int = 7

    @property
    def db_name(self) -> str:
        return f"spark_bench2_{self.memories}_{self.tenants}_{self.seed}"  # 2: interleaved layout


def tenant_sizes(spec: BenchSpec) -> list[int]:
    """Zipf-skewed tenant sizes summing to spec.memories, every tenant at least 1."""
    weights = [1 / (i + 1) for i in range(spec.tenants)]
    total = sum(weights)
    sizes = [max(1, int(spec.memories * w / total)) for w in weights]
    sizes[0] += spec.memories - sum(sizes)
    return sizes


def embed_cached(embedder: Embedder, texts: list[str], cache: Path, label: str, progress: bool) -> np.ndarray:
    """Embed ``texts`` (documents) once; later runs load the .npy file."""
    digest = hashlib.sha256(("\n".join(texts) + embedder.spec.name).encode()).hexdigest()[:16]
    path = cache / f"{label}-{len(texts)}-{digest}.npy"
    if path.exists():
        cached: np.ndarray = np.load(path)
        return cached
    cache.mkdir(parents=True, exist_ok=True)
    out = np.zeros((len(texts), embedder.spec.dim), dtype=np.float32)
    step = 512
    with tqdm(total=len(texts), desc=f"embed {label}", unit="text", disable=not progress) as bar:
        for start in range(0, len(texts), step):
            batch = texts[start : start + step]
            out[start : start + len(batch)] = np.stack(embedder.embed_documents(batch, batch_size=32))
            bar.update(len(batch))
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, out)
    tmp.replace(path)
    return out


def _load(
    url: str, spec: BenchSpec, texts: list[str], vectors: np.ndarray, embedder: Embedder, progress: bool
) -> None:
    schema.install(url)
    rng = random.Random(spec.seed)
    with connect(url) as conn:
        model_id = ensure_model(conn, embedder)
        conn.execute(f"DROP INDEX IF EXISTS spark.embeddings_hnsw_m{model_id}")  # build once, after the load
        # rows arrive in time order, the tenants interleaved, as they would in a shared database
        owner = [f"tenant-{t:04d}" for t, size in enumerate(tenant_sizes(spec)) for _ in range(size)]
        created = [NOW - timedelta(days=rng.random() * 365) for _ in texts]
        order = sorted(range(len(texts)), key=lambda i: created[i])
        with (
            conn.cursor() as cur,
            tqdm(total=len(texts), desc="load", unit="mem", disable=not progress) as bar,
        ):
            with cur.copy(COPY_BENCH) as copy:
                for n, i in enumerate(order, 1):
                    text = texts[i]
                    copy.write_row(
                        (
                            owner[i],
                            f"m{i}",
                            rng.choice(synthetic.KINDS),
                            rng.choice(synthetic.CATEGORIES),
                            text,
                            text,
                            hashlib.sha256(text.encode()).digest(),
                            round(rng.random(), 2),
                            created[i],
                        )
                    )
                    if n % 1000 == 0:
                        bar.update(1000)
            cur.execute(STAGE_VECTORS)
            with cur.copy(COPY_VECTORS) as copy:
                for i in order:
                    copy.write_row((f"m{i}", vectors[i]))
            cur.execute(STORE_VECTORS, {"model_id": model_id})
            bar.update(len(texts) % 1000)
        conn.commit()
        with tqdm(total=1, desc="build HNSW index", disable=not progress) as bar:
            conn.execute("SET maintenance_work_mem = '512MB'")
            conn.execute("SELECT spark.ensure_model_index(%s::smallint)", (model_id,))
            conn.commit()
            conn.autocommit = True  # VACUUM (visibility map for index-only counts) runs outside a transaction
            conn.execute("VACUUM ANALYZE spark.memories")
            conn.execute("VACUUM ANALYZE spark.embeddings")
            bar.update(1)


def run(
    settings: Settings,
    server_url: str,
    embedder: Embedder,
    spec: BenchSpec,
    *,
    progress: bool = True,
    fresh: bool = False,
) -> dict[str, Any]:
    started = time.perf_counter()
    cache = settings.home / "bench"
    texts = synthetic.texts(spec.memories, spec.seed)
    vectors = embed_cached(embedder, texts, cache, "corpus", progress)
    embedded_at = time.perf_counter()
    url = scratch.with_dbname(server_url, spec.db_name)
    if fresh and scratch.exists(server_url, spec.db_name):
        scratch.drop(server_url, spec.db_name)
    reused = scratch.exists(server_url, spec.db_name)
    if reused:
        schema.install(url)  # measure the current functions
    else:
        scratch.create(server_url, spec.db_name)
        try:
            _load(url, spec, texts, vectors, embedder, progress)
        except BaseException:
            scratch.drop(server_url, spec.db_name)
            raise
    with connect(url) as conn:  # the load bypassed ingest; a reused corpus may predate the counts
        with tqdm(total=1, desc="tenant statistics and indexes", disable=not progress) as bar:
            conn.execute("SELECT spark.refresh_tenant_stats()")
            bar.update(1)
        conn.commit()
    loaded_at = time.perf_counter()

    query_texts = synthetic.queries(spec.queries, spec.seed + 1)
    qvecs: list[Vector] = list(embed_cached(embedder, query_texts, cache, "queries", progress))
    sizes = tenant_sizes(spec)
    rng = random.Random(spec.seed + 2)
    tenants = rng.choices([f"tenant-{t:04d}" for t in range(spec.tenants)], weights=sizes, k=spec.queries)
    timings: list[float] = []
    returned: list[int] = []
    with connect(url) as conn:
        for j in range(min(30, spec.queries)):  # warm caches and plans
            retrieve(conn, tenants[j], query_texts[j], embedding=qvecs[j], k=spec.k, cache=False)
        for j in tqdm(range(spec.queries), desc="retrieve", unit="q", disable=not progress):
            t0 = time.perf_counter()
            rows = retrieve(conn, tenants[j], query_texts[j], embedding=qvecs[j], k=spec.k)
            timings.append((time.perf_counter() - t0) * 1000)
            returned.append(len(rows))
    ms = np.array(timings)
    return {
        "memories": spec.memories,
        "tenants": spec.tenants,
        "queries": spec.queries,
        "k": spec.k,
        "retrieve_ms": {
            p: round(float(np.percentile(ms, q)), 2) for p, q in (("p50", 50), ("p95", 95), ("p99", 99))
        }
        | {"mean": round(float(ms.mean()), 2), "max": round(float(ms.max()), 2)},
        "mean_results": round(float(np.mean(returned)), 2),
        "corpus_reused": reused,
        "seconds": {
            "embed": round(embedded_at - started, 1),
            "load": round(loaded_at - embedded_at, 1),
            "total": round(time.perf_counter() - started, 1),
        },
        "model": embedder.spec.name,
        "machine": {
            "cores": __import__("os").cpu_count(),
            "arch": platform.machine(),
            "python": platform.python_version(),
        },
        "timings_ms": [round(t, 3) for t in timings],
    }


def plot(result: dict[str, Any], path: Path) -> Path:
    """Histogram of the per-call latencies."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.hist(result["timings_ms"], bins=50, color="#4c72b0")
    for name, style in (("p50", "--"), ("p95", ":"), ("p99", "-.")):
        ax.axvline(
            result["retrieve_ms"][name],
            color="black",
            linestyle=style,
            label=f"{name} {result['retrieve_ms'][name]} ms",
        )
    ax.set_xlabel("spark.retrieve round trip (ms)")
    ax.set_ylabel("calls")
    ax.set_title(f"{result['memories']:,} memories, {result['tenants']} tenants, k={result['k']}")
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
