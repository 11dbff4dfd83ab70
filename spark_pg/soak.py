"""`spark-pg soak`: writers, readers and embedding workers together for minutes, then a reconciliation.

In a scratch database on the configured server (dropped at the end unless ``keep``):
- **writers** store memories with deferred embedding in small batches; each batch also rewrites a few
  keys it wrote before (same key, new text), so upserts race with the workers embedding the old text, and
  upserts two keys of a small key space every writer shares, so writers race each other on the same rows
  (the ingest's ordered row locks). A batch runs in one transaction the writer opens (ingest's own blocks
  are savepoints in it), and its commit and its record of the expected text happen under one lock, so
  "last write wins" is checked against the real commit order;
- **readers** call spark.retrieve with real query vectors across the tenants, all along;
- **workers** (``spark-pg worker`` loops, LISTEN/NOTIFY) embed what the writers queue.
Then the writers stop, the workers drain the queue, and the counts must reconcile: every key written is
stored exactly once (no lost memories, no duplicate keys), every memory has exactly one vector of the
active model for its current text, the queue is empty, and no call failed (deadlocks included).
"""

from __future__ import annotations

import random
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm import tqdm

from spark_pg import queries, report_meta, schema, scratch, synthetic
from spark_pg.db import connect
from spark_pg.embedding import Embedder
from spark_pg.errors import InputError
from spark_pg.ingest import ensure_model, ingest
from spark_pg.records import MemoryIn
from spark_pg.worker import WorkerStats, run_worker

TENANTS = 8
SHARED_KEYS = 64  # keys every writer upserts (2 a batch): contention on the same rows


@dataclass
class SoakReport:
    seconds: float = 0.0  # writers and readers running
    drain_seconds: float = 0.0  # then one worker embedding what was left
    written: int = 0  # upserts sent (new keys and rewrites)
    keys: int = 0  # distinct keys written
    rewrites: int = 0
    shared: int = 0  # upserts of the keys all writers share
    reads: int = 0
    read_ms: list[float] = field(default_factory=list)
    embedded: int = 0
    errors: list[str] = field(default_factory=list)
    reconcile: dict[str, Any] = field(default_factory=dict)
    database: str | None = None  # the scratch database, when kept (--keep)
    # what it ran on; when it started, by which command and code (spark_pg.report_meta)
    machine: dict[str, Any] = field(default_factory=report_meta.machine)
    run: dict[str, Any] = field(default_factory=report_meta.run_info)

    @property
    def ok(self) -> bool:
        return not self.errors and all(bool(v) for k, v in self.reconcile.items() if k.endswith("_ok"))

    def as_json(self) -> dict[str, Any]:
        ms = np.asarray(self.read_ms) if self.read_ms else None
        return {
            "ok": self.ok,
            "database": self.database,
            "seconds": round(self.seconds, 1),
            "drain_seconds": round(self.drain_seconds, 1),
            "writes": self.written,
            "keys": self.keys,
            "rewrites": self.rewrites,
            "shared_key_writes": self.shared,
            "writes_per_s": round(self.written / self.seconds, 1) if self.seconds else 0.0,
            "reads": self.reads,
            "read_ms": None
            if ms is None
            else {
                p: round(float(np.percentile(ms, q)), 2) for p, q in (("p50", 50), ("p95", 95), ("p99", 99))
            },
            "embedded": self.embedded,
            "errors": self.errors[:10],
            "error_count": len(self.errors),
            "reconcile": self.reconcile,
            "machine": self.machine,
            "run": self.run,
        }


class _Soak:
    def __init__(self, url: str, embedder: Embedder, seconds: float, batch: int, run: dict[str, Any]) -> None:
        self.url = url
        self.embedder = embedder
        self.deadline = time.monotonic() + seconds
        self.batch = batch
        self.report = SoakReport(run=run)  # when the run started, not when its database was ready
        self.lock = threading.Lock()
        self.expected: dict[tuple[str, str], str] = {}  # (tenant, key) -> the last text written
        self.texts = synthetic.texts(5000, seed=11)
        self.query_texts = synthetic.texts(40, seed=12)
        self.queries = [embedder.embed_query(t) for t in self.query_texts]

    def _fail(self, where: str, exc: BaseException) -> None:
        with self.lock:
            self.report.errors.append(f"{where}: {type(exc).__name__}: {exc}"[:1500])

    def writer(self, n: int) -> None:
        rng = random.Random(n)
        mine: list[tuple[str, str]] = []
        i = 0
        try:
            with connect(self.url) as conn:
                while time.monotonic() < self.deadline:
                    rows = []
                    for _ in range(self.batch):
                        tenant = f"t{rng.randrange(TENANTS)}"
                        key = f"w{n}-{i}"
                        i += 1
                        rows.append((tenant, key, self.texts[rng.randrange(len(self.texts))] + f" ({key})"))
                    for tenant, key in rng.sample(mine, min(2, len(mine))):  # rewrites race the workers
                        rows.append(
                            (tenant, key, self.texts[rng.randrange(len(self.texts))] + f" ({key}, again)")
                        )
                    shared = [(f"t{j % TENANTS}", f"shared-{j}") for j in rng.sample(range(SHARED_KEYS), 2)]
                    for tenant, key in shared:  # other writers upsert the same rows
                        rows.append(
                            (tenant, key, self.texts[rng.randrange(len(self.texts))] + f" ({key}, w{n})")
                        )
                    # psycopg opens the transaction at the first statement; ingest's blocks are then
                    # savepoints, and nothing is committed until the commit below
                    conn.execute("SELECT 1")
                    ingest(conn, [MemoryIn(tenant=t, key=k, text=x) for t, k, x in rows], None)
                    with self.lock:  # commit order = the order the expected texts are recorded in
                        conn.commit()
                        self.report.shared += len(shared)
                        for t, k, x in rows:
                            if (t, k) in self.expected:
                                self.report.rewrites += 1
                            self.expected[(t, k)] = x
                        self.report.written += len(rows)
                    mine.extend((t, k) for t, k, _ in rows[: self.batch])
        except Exception as exc:
            self._fail(f"writer {n}", exc)

    def reader(self, n: int) -> None:
        rng = random.Random(100 + n)
        try:
            # autocommit: the timer holds the statement's one round trip, not a BEGIN and a ROLLBACK too
            with connect(self.url, autocommit=True) as conn:
                while time.monotonic() < self.deadline:
                    tenant = f"t{rng.randrange(TENANTS)}"
                    q = rng.randrange(len(self.queries))
                    started = time.perf_counter()
                    rows = conn.execute(
                        queries.SOAK_READ,
                        {"tenant": tenant, "query": self.query_texts[q], "embedding": self.queries[q]},
                    ).fetchall()
                    elapsed = (time.perf_counter() - started) * 1000
                    if any(t not in (tenant, "_system") for (t,) in rows):
                        raise AssertionError(f"another tenant's memory in {tenant}'s results")
                    with self.lock:
                        self.report.reads += 1
                        self.report.read_ms.append(elapsed)
        except Exception as exc:
            self._fail(f"reader {n}", exc)


MAX_SECONDS = 86_400.0  # a day
STOP_WAIT_S = 10.0  # after an interrupt, how long each thread gets to end its step
MAX_THREADS = 64  # writers + readers + workers (each holds a connection)


def check_soak_args(seconds: float, writers: int, readers: int, workers: int, batch: int) -> None:
    """InputError unless the soak can run as asked: at least one writer (without one there is nothing to
    reconcile), thread counts 0 or more and at most MAX_THREADS together, a positive duration of at
    most a day, a batch of 1 to 1000."""
    if not 0 < seconds <= MAX_SECONDS:
        raise InputError(f"seconds must be more than 0 and at most {MAX_SECONDS:.0f} (a day), got {seconds}")
    if min(writers, readers, workers) < 0:
        raise InputError("writers, readers and workers must be 0 or more")
    if writers < 1:
        raise InputError("a soak needs at least one writer: without writes there is nothing to reconcile")
    if writers + readers + workers > MAX_THREADS:
        raise InputError(
            f"writers + readers + workers must be at most {MAX_THREADS} (each holds a connection), "
            f"got {writers + readers + workers}"
        )
    if not 1 <= batch <= 1000:
        raise InputError(f"batch must be from 1 to 1000, got {batch}")


def run_soak(
    server_url: str,
    embedder: Embedder,
    *,
    seconds: float = 120,
    writers: int = 2,
    readers: int = 2,
    workers: int = 2,
    batch: int = 20,
    progress: bool = False,
    keep: bool = False,
) -> SoakReport:
    """Run the soak in a fresh scratch database; see the module docstring."""
    check_soak_args(seconds, writers, readers, workers, batch)
    started_run = report_meta.run_info()
    # + the drain, watch and scratch
    scratch.check_free_connections(
        server_url, writers + readers + workers + 3, "run fewer writers, readers or workers"
    )
    name = f"spark_soak_{int(time.time())}_{uuid.uuid4().hex[:6]}"  # two runs in one second: two databases
    url = scratch.create(server_url, name)
    if keep:  # named now: a run that fails or is interrupted keeps it too
        print(f"scratch database {name} (kept: drop it with DROP DATABASE {name})", file=sys.stderr)
    try:
        schema.install(url)
        with connect(url) as conn:
            ensure_model(conn, embedder)
        soak = _Soak(url, embedder, seconds, batch, started_run)
        stop = threading.Event()
        stats: list[WorkerStats] = []

        def worker() -> None:
            try:
                with connect(url, autocommit=True) as conn:
                    stats.append(run_worker(conn, embedder, batch=32, poll_s=5, stop=stop))
            except Exception as exc:
                soak._fail("worker", exc)

        # daemon threads: a thread stuck in a call cannot keep the process alive after an interrupt
        threads = [threading.Thread(target=soak.writer, args=(i,), daemon=True) for i in range(writers)]
        threads += [threading.Thread(target=soak.reader, args=(i,), daemon=True) for i in range(readers)]
        background = [threading.Thread(target=worker, daemon=True) for _ in range(workers)]
        started = time.monotonic()
        for t in threads + background:
            t.start()
        try:
            with tqdm(total=int(seconds), desc="soak", unit="s", disable=not progress) as bar:
                while any(t.is_alive() for t in threads):
                    time.sleep(1)
                    bar.n = min(int(time.monotonic() - started), int(seconds))
                    bar.refresh()
        except BaseException:
            # Ctrl-C: writers and readers end after their current step, the workers at their next wake; with
            # --keep nothing else ended them (the drop's FORCE did), and the process never exited
            soak.deadline = 0.0
            stop.set()
            for t in threads + background:
                t.join(timeout=STOP_WAIT_S)
            raise
        soak.report.seconds = time.monotonic() - started
        stop.set()
        for t in background:
            t.join(timeout=120)
        drained = time.monotonic()
        with connect(url, autocommit=True) as conn:  # drain what the writers left
            stats.append(run_worker(conn, embedder, once=True, progress=progress))
        soak.report.drain_seconds = time.monotonic() - drained
        soak.report.embedded = sum(s.embedded for s in stats)
        soak.report.keys = len(soak.expected)
        soak.report.reconcile = _reconcile(url, soak.expected, embedder)
        soak.report.database = name if keep else None
        return soak.report
    finally:
        if not keep:
            scratch.drop(server_url, name)


def _reconcile(url: str, expected: dict[tuple[str, str], str], embedder: Embedder) -> dict[str, Any]:
    with connect(url) as conn:
        stored = {(t, k): x for t, k, x in conn.execute(queries.SOAK_STORED).fetchall()}
        row = conn.execute(queries.SOAK_VECTORS).fetchone()
        sample = conn.execute(queries.SOAK_SAMPLE_VECTORS).fetchall()
    # a stored vector must be the vector of the memory's current text, not of a text it had before
    fresh = embedder.embed_documents([d for d, _ in sample]) if sample else []
    stale = sum(1 for (_, v), f in zip(sample, fresh, strict=True) if float(np.dot(v.to_numpy(), f)) < 0.999)
    assert row is not None
    memories, with_one_vector, extra_vectors, queued, duplicate_keys = (int(v) for v in row)
    lost = [k for k in expected if k not in stored]
    wrong_text = [k for k, x in expected.items() if k in stored and stored[k] != x]
    return {
        "keys_written": len(expected),
        "keys_written_ok": len(expected) > 0,  # nothing written is nothing shown
        "memories": memories,
        "lost": len(lost),
        "lost_ok": not lost,
        "unexpected": len(set(stored) - set(expected)),
        "unexpected_ok": not (set(stored) - set(expected)),
        "duplicate_keys": duplicate_keys,
        "duplicate_keys_ok": duplicate_keys == 0,
        "not_last_write": len(wrong_text),
        "not_last_write_keys": [f"{t}/{k}" for t, k in wrong_text[:5]],
        "last_write_wins_ok": not wrong_text,
        "one_vector_each_ok": with_one_vector == memories and extra_vectors == 0,
        "vectors_checked": len(sample),
        "stale_vectors": stale,
        "vectors_current_ok": stale == 0,
        "queue_empty_ok": queued == 0,
    }
