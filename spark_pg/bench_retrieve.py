"""`spark-pg bench`: spark.retrieve latency on a synthetic corpus with real embeddings.

The corpus (N memories over T tenants of Zipf-skewed sizes, created over the past year) is embedded once
with the configured model and cached under ``<home>/bench`` (past ``real`` texts the vectors are derived:
:mod:`spark_pg.bench_corpus`); it is loaded once into a scratch database
``spark_bench2_<N>_<T>_<seed>[_r<real>]`` that later runs reuse, with the figures of its build. Each measured
call is the Python wrapper's single round trip (spark.retrieve plus the query-vector cache write), timed on
the client, after a warm-up.

With ``baseline=True`` the same queries also run through the common Python-side hybrid
(:mod:`spark_pg.bench_baseline`) on a second connection to the same database, the two systems alternating
query by query (which one goes first alternates too), and both are scored against references derived from
the synthetic corpus (:func:`quality`).
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pgvector import Vector as PgVector
from psycopg.types.json import Jsonb
from tqdm import tqdm

from spark_pg import schema, scratch, synthetic
from spark_pg.bench_baseline import Phases, PythonHybrid
from spark_pg.bench_corpus import REAL_DEFAULT, corpus_vectors, embed_cached
from spark_pg.config import Settings
from spark_pg.db import connect
from spark_pg.embedding import Embedder, Vector
from spark_pg.errors import InputError
from spark_pg.index_progress import index_build_progress, vacuum_progress
from spark_pg.ingest import ensure_model
from spark_pg.report_meta import add_footer
from spark_pg.report_meta import machine as machine  # bench_scale's and bench_rls's too
from spark_pg.report_meta import run_info as run_info
from spark_pg.retrieve import retrieve

STAGE_VECTORS = "CREATE TEMP TABLE _bench_vectors (key text PRIMARY KEY, embedding vector) ON COMMIT DROP"
COPY_VECTORS = "COPY _bench_vectors (key, embedding) FROM STDIN (FORMAT BINARY)"  # ~35x text format's rate
BUILD_TABLE = """CREATE TABLE IF NOT EXISTS public.spark_bench_build (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, figures jsonb NOT NULL)"""
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
    real: int = REAL_DEFAULT  # texts embedded for real; past them, vectors are derived (bench_corpus)
    warmup: int = 30  # queries run through both systems before the measured ones

    @property
    def db_name(self) -> str:
        derived = f"_r{self.real}" if self.memories > self.real else ""
        return f"spark_bench2_{self.memories}_{self.tenants}_{self.seed}{derived}"  # 2: interleaved layout


def _zipf_sizes(memories: int, tenants: int) -> list[int] | None:
    """Zipf-skewed sizes summing to ``memories``, every tenant at least 1 (the first takes the rounding);
    None when the memories are too few for that."""
    weights = [1 / (i + 1) for i in range(tenants)]
    total = sum(weights)
    sizes = [max(1, int(memories * w / total)) for w in weights]
    if not sizes:
        return None
    sizes[0] += memories - sum(sizes)
    return sizes if sizes[0] >= 1 else None


def tenant_sizes(spec: BenchSpec) -> list[int]:
    """The corpus's tenant sizes (:func:`_zipf_sizes`); InputError when the memories are too few."""
    sizes = _zipf_sizes(spec.memories, spec.tenants)
    if sizes is None:
        # the fewest memories that work, found by doubling, then bisection (a search one memory at a time
        # took minutes for 20,000 tenants)
        low, high = spec.memories, max(spec.memories, spec.tenants, 1) * 2
        while _zipf_sizes(high, spec.tenants) is None:
            low, high = high, high * 2
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if _zipf_sizes(middle, spec.tenants) is not None else (middle, high)
        raise InputError(
            f"{spec.memories} memories are too few for {spec.tenants} tenants of Zipf-skewed sizes (tenant i "
            f"holds about 1/i of the largest, at least 1, and the largest takes what rounding leaves): give "
            f"more (e.g. {high}) or fewer tenants"
        )
    return sizes


def owners(spec: BenchSpec) -> list[str]:
    """The tenant of each corpus text (index order): tenant-0000 holds the first, largest block."""
    return [f"tenant-{t:04d}" for t, size in enumerate(tenant_sizes(spec)) for _ in range(size)]


def _backend_peak_rss_mb(conn: psycopg.Connection[Any]) -> float | None:
    """Peak resident memory of this connection's server process (VmHWM: shared buffers it touched included,
    parallel workers not), when the server runs on this host (reached over a Unix socket); else None."""
    row = conn.execute("SELECT pg_backend_pid(), inet_server_addr() IS NULL").fetchone()
    if not row or not row[1]:
        return None
    try:
        status = Path(f"/proc/{row[0] if row else 0}/status").read_text()
    except OSError:
        return None
    line = next((x for x in status.splitlines() if x.startswith("VmHWM:")), None)
    return round(int(line.split()[1]) / 1024, 1) if line else None


def _index_bytes(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        """SELECT coalesce(sum(pg_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_am a ON a.oid = c.relam
           WHERE a.amname = 'hnsw' AND c.relnamespace = 'spark'::regnamespace"""
    ).fetchone()
    return int(row[0]) if row else 0


def maintenance_work_mem_mb(memories: int) -> int:
    """Room for the HNSW graph of ``memories`` 384-d vectors in memory, at least 512 MB: ~2.4 kB each (at
    2.2 kB a 1,000,000-vector build overflowed after 990,348 tuples)."""
    return max(512, -(-memories * 2400 // 2**20))


def _load(
    url: str, spec: BenchSpec, texts: list[str], vectors: np.ndarray, embedder: Embedder, progress: bool
) -> dict[str, Any]:
    """Load the corpus with COPY, build the indexes; returns the build figures (also kept in the database)."""
    schema.install(url)
    rng = random.Random(spec.seed)
    figures: dict[str, Any] = {"built_at": datetime.now(UTC).isoformat(timespec="seconds")}
    with connect(url) as conn:
        model_id = ensure_model(conn, embedder)
        conn.execute(f"DROP INDEX IF EXISTS spark.embeddings_hnsw_m{model_id}")  # build once, after the load
        # rows arrive in time order, the tenants interleaved, as they would in a shared database
        owner = owners(spec)
        created = [NOW - timedelta(days=rng.random() * 365) for _ in texts]
        order = sorted(range(len(texts)), key=lambda i: created[i])
        started = time.perf_counter()
        with (
            conn.cursor() as cur,
            tqdm(
                total=2 * len(texts), desc="load (rows, then vectors)", unit="row", disable=not progress
            ) as bar,
        ):
            with cur.copy(synthetic.COPY_MEMORIES) as copy:
                for n, i in enumerate(order, 1):
                    text = texts[i]
                    copy.write_row(synthetic.memory_row(owner[i], f"m{i}", text, rng, created[i]))
                    if n % 1000 == 0:
                        bar.update(1000)
            bar.update(len(texts) % 1000)
            cur.execute(STAGE_VECTORS)
            with cur.copy(COPY_VECTORS) as copy:
                copy.set_types(["text", "vector"])
                for n, i in enumerate(order, 1):
                    copy.write_row((f"m{i}", vectors[i]))
                    if n % 1000 == 0:
                        bar.update(1000)
            cur.execute(STORE_VECTORS, {"model_id": model_id})
            bar.update(len(texts) % 1000)
        conn.commit()
        load_s = time.perf_counter() - started
        figures["load_s"] = round(load_s, 1)
        figures["load_rows_per_s"] = round(len(texts) / load_s)
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
        mwm = maintenance_work_mem_mb(spec.memories)
        pid = conn.info.backend_pid
        with index_build_progress(url, pid, "build the shared HNSW index", enabled=progress):
            conn.execute(f"SET maintenance_work_mem = '{mwm}MB'")
            started = time.perf_counter()
            conn.execute("SELECT spark.ensure_model_index(%s::integer)", (model_id,))
            conn.commit()
            figures["index_build_s"] = round(time.perf_counter() - started, 1)
        figures["index_bytes"] = _index_bytes(conn)
        with index_build_progress(url, pid, "per-tenant HNSW indexes", enabled=progress):
            started = time.perf_counter()
            conn.execute("SELECT spark.refresh_tenant_stats()")
            conn.commit()
            figures["tenant_indexes_s"] = round(time.perf_counter() - started, 1)
        figures["all_index_bytes"] = _index_bytes(conn)
        counted = conn.execute("SELECT count(*) FROM spark.tenant_vector_indexes").fetchone()
        figures["tenant_indexes"] = counted[0] if counted else 0
        figures["maintenance_work_mem_mb"] = mwm
        figures["backend_peak_rss_mb"] = _backend_peak_rss_mb(conn)
        figures["notices"] = [n for n in notices if "hnsw" in n.lower()]
        conn.commit()
        conn.autocommit = True  # VACUUM (visibility map for index-only counts) runs outside a transaction
        started = time.perf_counter()
        with vacuum_progress(url, pid, "vacuum and analyze", enabled=progress):
            conn.execute("VACUUM ANALYZE spark.memories")
            conn.execute("VACUUM ANALYZE spark.embeddings")
        figures["vacuum_s"] = round(time.perf_counter() - started, 1)
        sized = conn.execute(
            "SELECT pg_total_relation_size('spark.memories') + pg_relation_size('spark.embeddings')"
        ).fetchone()
        figures["table_bytes"] = sized[0] if sized else 0
        conn.execute(BUILD_TABLE)
        conn.execute("INSERT INTO public.spark_bench_build (figures) VALUES (%s)", (Jsonb(figures),))
    return figures


def _cached_build(
    url: str, spec: BenchSpec, texts: list[str], vectors: np.ndarray, embedder: Embedder
) -> dict[str, Any]:
    """The figures recorded when the reused corpus database was built, once it is checked to hold what this
    run would load: a finished build, the active model this run embeds queries with, every row and its
    vector, and the same texts and vectors (a sample of 200 rows compared: a vector within float32 rounding
    of ``vectors``); else InputError (a build killed before its clean-up, another model, a changed
    generator or vector derivation, damaged rows)."""
    problem = None
    figures: dict[str, Any] = {}
    with connect(url) as conn:
        finished = conn.execute("SELECT to_regclass('public.spark_bench_build') IS NOT NULL").fetchone()
        recorded = (
            conn.execute("SELECT figures FROM public.spark_bench_build ORDER BY id DESC LIMIT 1").fetchone()
            if finished and finished[0]
            else None
        )
        row = conn.execute(
            """SELECT (SELECT name FROM spark.active_model()), (SELECT count(*) FROM spark.memories),
                      (SELECT count(*) FROM spark.embeddings e JOIN spark.embedding_models m
                       ON m.id = e.model_id AND m.active)"""
        ).fetchone()
        assert row is not None
        if recorded is None:
            problem = "has no record of a finished build"
        elif row[0] != embedder.spec.name:
            problem = f"was embedded with {row[0]}, not {embedder.spec.name}"
        elif (row[1], row[2]) != (spec.memories, spec.memories):
            problem = f"holds {row[1]} memories and {row[2]} vectors, not {spec.memories} of each"
        else:
            figures = dict(recorded[0])
            owner = owners(spec)
            sample = sorted({round(i * (len(texts) - 1) / 199) for i in range(200)})
            stored = {
                key: (text, embedding)
                for key, text, embedding in conn.execute(
                    """SELECT m.key, m.text, e.embedding FROM spark.memories m
                       JOIN unnest(%s::text[], %s::text[]) k(tenant, key)
                         ON m.tenant = k.tenant AND m.key = k.key
                       LEFT JOIN spark.embeddings e ON e.tenant = m.tenant AND e.memory_id = m.id
                        AND e.model_id = (SELECT id FROM spark.active_model())""",
                    ([owner[i] for i in sample], [f"m{i}" for i in sample]),
                ).fetchall()
            }
            if any(stored.get(f"m{i}", (None, None))[0] != texts[i] for i in sample):
                problem = "holds other texts than this version's corpus generator makes"
            elif not all(_same_vector(stored[f"m{i}"][1], vectors[i]) for i in sample):
                # quality() scores against `vectors`: the server must have searched those
                problem = "holds other vectors than this version computes for its texts"
    if problem:
        raise InputError(f"the cached corpus {spec.db_name} {problem}: run again with --fresh to rebuild it")
    return figures


def _same_vector(stored: Any, expected: np.ndarray) -> bool:
    """Whether a stored vector (as psycopg reads pgvector's type: a Vector, or a numpy array; None when the
    row has none) is ``expected`` up to float32 rounding."""
    if stored is None:
        return False
    got = np.asarray(stored.to_numpy() if isinstance(stored, PgVector) else stored, dtype=np.float32)
    want = np.asarray(expected, dtype=np.float32)
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=1e-5, atol=1e-6))


def warn_few_samples(calls: int) -> None:
    """:func:`few_samples_note` on stderr, if there is one."""
    note = few_samples_note(calls)
    if note:
        print(f"spark-pg: note: {note}", file=sys.stderr)


def few_samples_note(calls: int) -> str | None:
    """What the percentiles of ``calls`` measured calls can't say, or None: a p99 of fewer than 100 calls is
    (close to) the slowest one, a p95 of fewer than 20 too (a bench with --queries 3 reported both)."""
    if calls >= 100:
        return None
    which = "p95 and p99 are" if calls < 20 else "p99 is"
    return f"{which} taken from {calls} calls, close to the slowest one: measure 100 or more (--queries)"


def percentiles(values: list[float]) -> dict[str, float]:
    """Latencies (ms) as p50 / p95 / p99 (linear interpolation), mean and max, to 0.01 ms."""
    ms = np.array(values)
    return {p: round(float(np.percentile(ms, q)), 2) for p, q in PERCENTILES} | {
        "mean": round(float(ms.mean()), 2),
        "max": round(float(ms.max()), 2),
    }


def _template(text: str) -> tuple[str, str]:
    """The (object, context) a synthetic memory or query was built from (each occurs once in any of them)."""
    obj = next(o for o in synthetic.OBJECTS if f" {o} " in text)
    ctx = next(c for c in synthetic.CONTEXTS if f" {c}" in text)
    return obj, ctx


def quality(
    spec: BenchSpec,
    texts: list[str],
    vectors: np.ndarray,
    tenants: list[str],
    query_texts: list[str],
    qvecs: list[Vector],
    results: list[list[str]],
) -> dict[str, Any]:
    """Score one system's result keys (query by query) against two references built from the corpus.

    * **relevant** memories of a query: the tenant's memories made from the same object and the same context
      as the query (queries are "<verb> <object> <context>", memories "<action> <object> <context>
      [<reason>] (note i)"; the queries are not drawn from memories, so there is no single source memory).
      ``hit_rate``: share of the queries whose tenant holds at least one relevant memory with one or more
      in the results; ``recall_at_k``: found relevant / min(k, relevant), averaged over the same queries
      (returning fewer than k lowers it); ``precision``: relevant share of what was returned, over the same
      queries that returned anything.
    * **exact cosine top-k**: the k nearest vectors of the tenant by exact cosine (what a perfect semantic
      pool would rank first). ``exact_overlap_at_k``: results among them / min(k, tenant size), over all
      queries. Fusion and diversity are meant to move away from it; it shows by how much.
    Results that are not corpus memories (keys other than ``m<i>``) count as misses.
    """
    starts = np.cumsum([0, *tenant_sizes(spec)])
    templates = [_template(t) for t in texts]
    hits = recalls = overlaps = precisions = 0.0
    eligible = answered = 0
    for tenant, qtext, qvec, keys in zip(tenants, query_texts, qvecs, results, strict=True):
        t = int(tenant.rsplit("-", 1)[1])
        lo, hi = int(starts[t]), int(starts[t + 1])
        got = {int(key[1:]) for key in keys if key.startswith("m") and key[1:].isdigit()}
        want = _template(qtext)
        relevant = {i for i in range(lo, hi) if templates[i] == want}
        if relevant:
            eligible += 1
            found = len(got & relevant)
            hits += found > 0
            recalls += found / min(spec.k, len(relevant))
            if got:
                answered += 1
                precisions += found / len(got)
        block = vectors[lo:hi]
        sims = block @ qvec / (np.linalg.norm(block, axis=1) * float(np.linalg.norm(qvec)) + 1e-12)
        exact = {lo + int(i) for i in np.argsort(-sims, kind="stable")[: spec.k]}
        overlaps += len(got & exact) / min(spec.k, hi - lo)
    n = len(results)

    def share(total: float, count: int) -> float | None:  # None: nothing to measure it on
        return round(total / count, 4) if count else None

    return {
        "hit_rate": share(hits, eligible),
        "recall_at_k": share(recalls, eligible),
        "precision": share(precisions, answered),
        "exact_overlap_at_k": share(overlaps, n),
        "mean_results": round(float(np.mean([len(r) for r in results])), 2),
        "queries_with_relevant": eligible,
    }


def workload(
    spec: BenchSpec, embedder: Embedder, cache: Path, progress: bool
) -> tuple[list[str], list[str], list[Vector]]:
    """The measured calls: (tenant, query text, query vector) each; tenants drawn by size."""
    query_texts = synthetic.queries(spec.queries, spec.seed + 1)
    qvecs: list[Vector] = list(embed_cached(embedder, query_texts, cache, "queries", progress, queries=True))
    rng = random.Random(spec.seed + 2)
    names = [f"tenant-{t:04d}" for t in range(spec.tenants)]
    return rng.choices(names, weights=tenant_sizes(spec), k=spec.queries), query_texts, qvecs


def run(
    settings: Settings,
    server_url: str,
    embedder: Embedder,
    spec: BenchSpec,
    *,
    progress: bool = True,
    fresh: bool = False,
    baseline: bool = False,
    claim: bool = True,
) -> dict[str, Any]:
    """Build or reuse the corpus of ``spec``, then measure it (see the module's text). ``claim``: take the
    corpus claim (:func:`corpus_claim`) for the run; False when the caller holds it already, as
    ``bench scale`` does over a size's whole run."""
    tenant_sizes(spec)  # memories too few for the tenants: refused before anything is embedded or loaded
    with corpus_claim(server_url, spec) if claim else nullcontext():
        return _run(settings, server_url, embedder, spec, progress=progress, fresh=fresh, baseline=baseline)


@contextmanager
def corpus_claim(server_url: str, spec: BenchSpec) -> Iterator[None]:
    """Hold the claim on the corpus database of ``spec`` for the block (:func:`spark_pg.scratch.claimed`);
    InputError when another run holds it. One run per corpus database at a time: a second one read a
    half-built corpus as damaged, failed to create it, measured while the first loaded the server, or
    (--fresh) dropped it under the first one's measurement."""
    with scratch.claimed(server_url, spec.db_name) as mine:
        if not mine:
            raise InputError(
                f"another spark-pg bench is building or measuring the corpus database {spec.db_name}: "
                "let it finish, or run this one with another --memories or --tenants"
            )
        yield


def _run(
    settings: Settings,
    server_url: str,
    embedder: Embedder,
    spec: BenchSpec,
    *,
    progress: bool,
    fresh: bool,
    baseline: bool,
) -> dict[str, Any]:
    started = time.perf_counter()
    cache = settings.home / "bench"
    texts, vectors, derivation = corpus_vectors(
        embedder, spec.memories, spec.seed, cache, spec.real, progress
    )
    embedded_at = time.perf_counter()
    url = scratch.with_dbname(server_url, spec.db_name)
    if fresh and scratch.exists(server_url, spec.db_name):
        scratch.drop(server_url, spec.db_name)
    reused = scratch.exists(server_url, spec.db_name)
    if reused:
        schema.install(url)  # measure the current functions
        build = _cached_build(url, spec, texts, vectors, embedder)
        with connect(url) as conn:  # a reused corpus may predate the counts
            pid = conn.info.backend_pid
            with index_build_progress(url, pid, "tenant statistics and indexes", enabled=progress):
                conn.execute("SELECT spark.refresh_tenant_stats()")
                conn.commit()
    else:
        scratch.create(server_url, spec.db_name)
        try:
            build = _load(url, spec, texts, vectors, embedder, progress)
        except BaseException:
            scratch.drop(server_url, spec.db_name)
            raise
    loaded_at = time.perf_counter()

    tenants, query_texts, qvecs = workload(spec, embedder, cache, progress)
    sizes = tenant_sizes(spec)
    timings: list[float] = []
    returned: list[list[str]] = []
    base_timings: list[float] = []
    base_returned: list[list[str]] = []
    base_phases: list[Phases] = []
    with ExitStack() as stack:
        conn = stack.enter_context(connect(url))
        # the baseline's own connection, in autocommit: one round trip per statement, as a pool would give
        hybrid = PythonHybrid(stack.enter_context(connect(url, autocommit=True))) if baseline else None
        # warm plans and caches: the first `warmup` queries through both systems (all of them: steady state,
        # every tenant's pages read once; the default 30: plans warm, most tenants met cold). Each system
        # warms the very statement it is measured with: spark's call as measured below (with the query-cache
        # write, its own transaction), which psycopg prepares after 5 uses, as it does the baseline's
        for j in tqdm(range(min(spec.warmup, spec.queries)), desc="warm up", unit="q", disable=not progress):
            retrieve(conn, tenants[j], query_texts[j], embedding=qvecs[j], k=spec.k)
            if hybrid is not None:
                hybrid.search(tenants[j], query_texts[j], qvecs[j], spec.k)
        server = conn.execute(
            "SELECT current_setting('server_version'), current_setting('shared_buffers'), "
            "(SELECT extversion FROM pg_extension WHERE extname = 'vector')"
        ).fetchone()
        conn.commit()  # idle again: each measured call is a transaction of its own, as an agent's would be
        for j in tqdm(range(spec.queries), desc="retrieve", unit="q", disable=not progress):
            # with the baseline, the two systems alternate which goes first, query by query
            for system in ("spark", "baseline") if j % 2 == 0 else ("baseline", "spark"):
                if system == "spark":
                    t0 = time.perf_counter()
                    rows = retrieve(conn, tenants[j], query_texts[j], embedding=qvecs[j], k=spec.k)
                    timings.append((time.perf_counter() - t0) * 1000)
                    returned.append([r.key for r in rows])
                elif hybrid is not None:
                    t0 = time.perf_counter()
                    hits = hybrid.search(tenants[j], query_texts[j], qvecs[j], spec.k)
                    base_timings.append((time.perf_counter() - t0) * 1000)
                    base_returned.append([h.key for h in hits])
                    base_phases.append(hybrid.last)
    side_by_side: dict[str, Any] = {}
    if hybrid is not None:
        side_by_side = {
            "baseline": _baseline_report(
                sizes,
                tenants,
                timings,
                base_timings,
                base_phases,
                hybrid,
                quality(spec, texts, vectors, tenants, query_texts, qvecs, returned),
                quality(spec, texts, vectors, tenants, query_texts, qvecs, base_returned),
            )
        }
    return {
        "memories": spec.memories,
        "tenants": spec.tenants,
        "queries": spec.queries,
        "k": spec.k,
        "retrieve_ms": percentiles(timings),
        "mean_results": round(float(np.mean([len(r) for r in returned])), 2),
        "corpus_reused": reused,
        "build": build,
        "vectors": derivation.as_json(),
        "seconds": {
            "embed": round(embedded_at - started, 1),
            "load": round(loaded_at - embedded_at, 1),
            "total": round(time.perf_counter() - started, 1),
        },
        "model": embedder.spec.name,
        "warmup_queries": min(spec.warmup, spec.queries),
        "server": dict(zip(("postgres", "shared_buffers", "pgvector"), server or (None,) * 3, strict=True)),
        "machine": machine(),
        "run": run_info(),
        "timings_ms": [round(t, 3) for t in timings],
    } | side_by_side


SIZE_BUCKETS = ((0, 1_500, "<1,500"), (1_500, 5_000, "1,500-4,999"), (5_000, 10**12, ">=5,000"))


def _by_tenant_size(
    sizes: list[int], tenants: list[str], timings: list[float], base_timings: list[float]
) -> list[dict[str, Any]]:
    """p50 / p95 of both systems per tenant-size bucket (1,500: where a tenant gets its own HNSW index)."""
    out = []
    size_of = [sizes[int(t.rsplit("-", 1)[1])] for t in tenants]
    for lo, hi, label in SIZE_BUCKETS:
        picked = [j for j, n in enumerate(size_of) if lo <= n < hi]
        if not picked:
            continue
        row: dict[str, Any] = {"tenant_memories": label, "queries": len(picked)}
        for name, series in (("retrieve_ms", timings), ("baseline_ms", base_timings)):
            values = [series[j] for j in picked]
            row[name] = {p: round(float(np.percentile(values, q)), 2) for p, q in PERCENTILES[:2]}
        out.append(row)
    return out


def _baseline_report(
    sizes: list[int],
    tenants: list[str],
    timings: list[float],
    base_timings: list[float],
    phases: list[Phases],
    hybrid: PythonHybrid,
    spark_quality: dict[str, Any],
    base_quality: dict[str, Any],
) -> dict[str, Any]:
    """The "baseline" section of the bench result: latency side by side, the baseline's parts, quality."""
    ours, theirs = percentiles(timings), percentiles(base_timings)
    return {
        "system": (
            "python hybrid: pgvector top-n + ts_rank_cd OR-query top-n (tenant-filtered), vectors of "
            "keyword-only candidates fetched, RRF and MMR in numpy (spark_pg/bench_baseline.py)"
        ),
        "fetch_k": hybrid.fetch_k,
        "rrf_k": hybrid.rrf_k,
        "mmr_lambda": hybrid.mmr_lambda,
        "ef_search": hybrid.ef_search,
        "order": "alternating query by query, first system alternating; separate connections",
        "retrieve_ms": ours,
        "baseline_ms": theirs,
        "ratio": {p: round(theirs[p] / ours[p], 2) for p, _ in PERCENTILES},
        "retrieve_faster_share": round(
            float(np.mean([a < b for a, b in zip(timings, base_timings, strict=True)])), 4
        ),
        "by_tenant_size": _by_tenant_size(sizes, tenants, timings, base_timings),
        "baseline_parts_ms": {
            part: {
                p: round(float(np.percentile([getattr(x, part) for x in phases], q)), 2)
                for p, q in PERCENTILES[:2]
            }
            for part in ("vector_ms", "keyword_ms", "fetch_ms", "python_ms")
        },
        "baseline_round_trips_mean": round(float(np.mean([x.round_trips for x in phases])), 2),
        "quality": {
            "reference": (
                "relevant = the tenant's memories of the query's object and context; exact = exact cosine "
                "top-k over the tenant (bench_retrieve.quality)"
            ),
            "spark_retrieve": spark_quality,
            "baseline": base_quality,
        },
        # per query, in the order of the top-level timings_ms (for the plot; the CLI leaves it out of --json)
        "per_query": {
            "baseline_ms": [round(t, 3) for t in base_timings],
            "tenant_memories": [sizes[int(t.rsplit("-", 1)[1])] for t in tenants],
        },
    }


def plot(result: dict[str, Any], path: Path) -> Path:
    """Histogram of the per-call latencies; with a baseline section, both systems' on shared bins."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = (("p50", "--"), ("p95", ":"), ("p99", "-."))
    base = result.get("baseline")
    title = f"{result['memories']:,} memories, {result['tenants']} tenants, k={result['k']}"
    if base is None:
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.hist(result["timings_ms"], bins=50, color="#4c72b0")
        for name, style in styles:
            ax.axvline(
                result["retrieve_ms"][name],
                color="black",
                linestyle=style,
                label=f"{name} {result['retrieve_ms'][name]} ms",
            )
        ax.set_xlabel("spark.retrieve round trip (ms)")
        ax.set_ylabel("calls")
        ax.set_title(title)
        ax.legend()
    else:
        fig, (ax, by_size) = plt.subplots(1, 2, figsize=(12, 4.5))
        per_query = base["per_query"]
        series = (
            ("spark.retrieve (1 round trip)", result["timings_ms"], result["retrieve_ms"], "#4c72b0"),
            ("Python hybrid (2-3 round trips)", per_query["baseline_ms"], base["baseline_ms"], "#dd8452"),
        )
        top = max(max(result["timings_ms"]), max(per_query["baseline_ms"]))
        bins = np.linspace(0, top * 1.02, 80)
        for label, times, stats, color in series:
            ax.hist(times, bins=bins, color=color, alpha=0.6, label=label)
            for name, style in styles[:2]:
                ax.axvline(stats[name], color=color, linestyle=style, label=f"{name} {stats[name]} ms")
            by_size.scatter(per_query["tenant_memories"], times, s=8, alpha=0.5, color=color, label=label)
        ratio = base["ratio"]
        ax.set_xlabel(
            f"wall time per query (ms); baseline / spark.retrieve: p50 {ratio['p50']}x, p95 {ratio['p95']}x"
        )
        ax.set_ylabel("calls")
        ax.set_title(title + ", same queries interleaved")
        ax.legend(fontsize=8)
        by_size.set_xscale("log")
        by_size.set_xlabel("memories of the query's tenant")
        by_size.set_ylabel("wall time per query (ms)")
        by_size.set_title("by tenant size")
        by_size.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout(rect=(0, add_footer(fig, result), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
