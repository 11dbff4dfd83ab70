"""Run an evaluation: load a dataset into a scratch database, ask every question of every system, score.

The scratch database ``spark_eval_<hash>`` lives on the configured server; the hash covers what gets stored
(each row as ingest writes it, see :mod:`spark_pg.eval.dataset`) and the embedding model, so a re-run reuses
it and only asks the questions. Every run re-applies the schema (``schema.install``), so the scratch database
always has the current ``spark.retrieve``. Each system's statement runs in its own transaction, rolled back,
so a run cannot change what the next run sees.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg.types.json import Jsonb
from tqdm import tqdm

from spark_pg import report_meta, schema, scratch
from spark_pg.config import Settings
from spark_pg.db import connect, database_url
from spark_pg.embedding import Embedder, load_embedder
from spark_pg.errors import InputError, ModelMismatch, SparkPgError
from spark_pg.eval.dataset import Dataset, Query, load_dataset
from spark_pg.eval.metrics import METRICS, mean_scores, recall_at, score_query
from spark_pg.eval.systems import SYSTEMS, Ask, System, missing_function, run
from spark_pg.ingest import ingest
from spark_pg.refusals import one_line
from spark_pg.scratch import with_dbname

SCRATCH_PREFIX = "spark_eval_"
# in the scratch database only: what was loaded, written once the load has committed
INFO_TABLE = "public.spark_eval_info"
CREATE_INFO = f"""
CREATE TABLE IF NOT EXISTS {INFO_TABLE} (
    content_hash text PRIMARY KEY, model text NOT NULL, dataset text NOT NULL, memories integer NOT NULL,
    loaded_at timestamptz NOT NULL DEFAULT now())
"""
RECORD_LOAD = f"""
INSERT INTO {INFO_TABLE} (content_hash, model, dataset, memories) VALUES (%s, %s, %s, %s)
ON CONFLICT (content_hash) DO UPDATE
SET model = EXCLUDED.model, memories = EXCLUDED.memories, loaded_at = now()
"""
LOADED = f"""
SELECT (SELECT count(*) FROM {INFO_TABLE} WHERE content_hash = %(hash)s AND model = %(model)s) > 0
   AND (SELECT count(*) FROM spark.embeddings) = %(memories)s
"""


def scratch_name(dataset: Dataset, model: str) -> str:
    """spark_eval_ + a short hash of the stored content and the model name."""
    digest = hashlib.sha256(f"{dataset.content_hash()}\n{model}".encode()).hexdigest()
    return SCRATCH_PREFIX + digest[:12]


@dataclass(frozen=True)
class Scratch:
    name: str
    url: str
    reused: bool
    seconds: float  # schema install + load (0 load when reused)


def prepare_scratch(
    server_url: str,
    dataset: Dataset,
    embedder: Embedder,
    settings: Settings,
    *,
    fresh: bool = False,
    progress: bool = False,
    name: str | None = None,
    params: Mapping[str, Any] | None = None,
) -> Scratch:
    """Create (or reuse) the scratch database for ``dataset`` on the server and load it.

    ``server_url`` is any database on the server (the one the settings point at, by default); the
    scratch database is created next to it. ``fresh`` drops and rebuilds it. ``params``: spark.retrieve
    params to check once the schema is installed, before anything is loaded. When anything fails (Ctrl-C
    included) and the database holds no recorded load, it is dropped if this call created it or it is named
    ``spark_eval_...``: no empty or half-loaded database is left behind under a name no run may ask for again.
    """
    name = name or scratch_name(dataset, embedder.spec.name)
    started = time.perf_counter()
    if fresh and params and scratch.exists(server_url, name):
        # a mistyped param is refused before the loaded database is dropped (reloading LoCoMo takes minutes)
        kept = with_dbname(server_url, name)
        schema.install(kept)
        check_params(kept, params)
    if fresh:
        scratch.drop(server_url, name)
    created = not scratch.exists(server_url, name)  # the claim (evaluate) keeps other runs from racing this
    url = scratch.create(server_url, name, exist_ok=True)
    try:
        reused = _load(url, dataset, embedder, settings, progress=progress, params=params)
    except BaseException:
        if (created or name.startswith(SCRATCH_PREFIX)) and not _holds_a_load(url):
            with contextlib.suppress(psycopg.Error, SparkPgError):  # the first error is the one to report
                scratch.drop(server_url, name)
        raise
    return Scratch(name, url, reused, time.perf_counter() - started)


def _holds_a_load(url: str) -> bool:
    """Whether the scratch database at ``url`` records a completed load (of any content); True when that
    cannot be told: a database is only dropped when it surely holds none."""
    try:
        with connect(url, autocommit=True) as conn:
            if conn.execute("SELECT to_regclass(%s)", [INFO_TABLE]).fetchone() == (None,):
                return False
            row = conn.execute(f"SELECT EXISTS (SELECT 1 FROM {INFO_TABLE})").fetchone()
            return bool(row and row[0])
    except (psycopg.Error, SparkPgError):
        return True


def _load(
    url: str,
    dataset: Dataset,
    embedder: Embedder,
    settings: Settings,
    *,
    progress: bool,
    params: Mapping[str, Any] | None,
) -> bool:
    """Install the schema in the scratch database, check ``params``, and load ``dataset`` unless its load
    is already recorded there; returns whether it was (the database is reused)."""
    schema.install(url)
    if params:
        check_params(url, params)
    content_hash = dataset.content_hash()
    model = embedder.spec.name
    with connect(url, statement_timeout_ms=0) as conn:
        conn.execute(CREATE_INFO)
        conn.commit()
        row = conn.execute(
            LOADED, {"hash": content_hash, "model": model, "memories": len(dataset.memories)}
        ).fetchone()
        conn.rollback()
        reused = bool(row and row[0])
        if not reused:
            ingest(
                conn,
                dataset.records(),
                embedder,
                batch_size=settings.get_int("embedding.batch_size"),
                chunk_rows=settings.get_int("ingest.chunk_rows"),
                progress=progress,
                label=f"loading {dataset.name}",
            )
            with conn.transaction():
                conn.execute(RECORD_LOAD, (content_hash, model, dataset.name, len(dataset.memories)))
        with conn.transaction():  # a database loaded before tenant statistics existed gets them now
            conn.execute("SELECT spark.refresh_tenant_stats()")
    return reused


@dataclass
class SystemRun:
    system: System
    # ok | absent (the SQL function it requires does not exist, checked before the first question) | error
    # (a statement failed, whatever its SQLSTATE)
    status: str = "ok"
    message: str | None = None
    ranked: dict[str, list[str]] = field(default_factory=dict)  # query id -> retrieved keys, best first
    latency_ms: list[float] = field(default_factory=list)


@dataclass
class EvalRun:
    dataset: Dataset
    queries: tuple[Query, ...]  # the ones asked (after --conversations and --limit)
    k: int
    depth: int  # results retrieved per query: max(k, 10)
    model: str
    scratch: Scratch
    embed_ms: list[float]
    systems: list[SystemRun]
    date: str
    params: dict[str, Any] = field(default_factory=dict)  # spark.retrieve params besides as_of
    limit: int | None = None  # --limit: only the first N questions were asked
    conversations: tuple[str, ...] | None = None  # --conversations: only the questions of these
    # what it ran on; when it started, by which command and code (spark_pg.report_meta)
    machine: dict[str, Any] = field(default_factory=report_meta.machine)
    run: dict[str, Any] = field(default_factory=report_meta.run_info)


def ask_all(
    url: str,
    queries: Sequence[Query],
    embedder: Embedder,
    systems: Sequence[System],
    *,
    depth: int,
    statement_timeout_ms: int = 0,
    progress: bool = False,
    retrieve_params: Mapping[str, Any] | None = None,
) -> tuple[list[float], list[SystemRun]]:
    """Embed each question once, then ask every system; returns embedding times and per-system runs.

    ``retrieve_params``: spark.retrieve params for every question (each is asked as of its own time)."""
    runs = [SystemRun(system) for system in systems]
    now = datetime.now(UTC)
    extra = retrieve_params or {}
    embed_ms: list[float] = []
    with connect(url, statement_timeout_ms=statement_timeout_ms, autocommit=True) as conn:
        row = conn.execute("SELECT id, name FROM spark.active_model() WHERE id IS NOT NULL").fetchone()
        if row is None or row[1] != embedder.spec.name:
            raise ModelMismatch(
                f"the scratch database's active model is {row[1] if row else 'none'}, "
                f"not {embedder.spec.name}: rebuild it with --fresh"
            )
        model_id = int(row[0])
        for r in runs:
            missing = missing_function(conn, r.system)
            if missing is not None:
                r.status = "absent"
                r.message = f"{missing}() does not exist in the scratch database: {r.system.name} skipped"
        bar = tqdm(queries, desc="questions", unit="q", disable=not progress, leave=True)
        with bar, conn.cursor() as cur:
            for query in bar:
                started = time.perf_counter()
                vector = embedder.embed_query(query.text)
                embed_ms.append((time.perf_counter() - started) * 1000)
                params = Ask(
                    query.conversation_id,
                    query.text,
                    vector,
                    depth,
                    query.as_of or now,
                    model_id,
                    extra,
                ).params()
                for r in runs:
                    if r.status != "ok":
                        continue
                    try:
                        with conn.transaction(force_rollback=True):
                            started = time.perf_counter()
                            keys = run(cur, r.system, params)
                            elapsed = (time.perf_counter() - started) * 1000
                    except psycopg.Error as exc:
                        # 42883 (undefined function or operator) too: the function a system requires exists
                        # (checked above), so this is a bug in its statement, not an absent system
                        state = f" [{exc.sqlstate}]" if exc.sqlstate else ""
                        r.status = "error"
                        r.message = f"{r.system.name} failed on {query.id}{state}: {one_line(exc)}"
                        continue
                    r.ranked[query.id] = keys
                    r.latency_ms.append(elapsed)
    return embed_ms, runs


def evaluate(
    folder: Path,
    settings: Settings,
    *,
    server_url: str | None = None,
    embedder: Embedder | None = None,
    k: int = 10,
    limit: int | None = None,
    conversations: Sequence[str] | None = None,
    fresh: bool = False,
    progress: bool = False,
    scratch_db: str | None = None,
    systems: Sequence[System] = SYSTEMS,
    params: Mapping[str, Any] | None = None,
) -> EvalRun:
    """Load ``folder`` into its scratch database on ``server_url`` (default: the settings' server), ask.

    ``k``: results retrieved per question (at least 10: the metrics are cut at 5 and 10).
    ``limit``: only the first N questions (of ``conversations``, when given).
    ``conversations``: only the questions of these conversations (each one of the dataset's; every
    conversation's memories are loaded all the same, each its own tenant). The defaults were tuned on the
    first five of LoCoMo's ten and checked on the other five this way (docs/results.md).
    ``params``: spark.retrieve params for every question (not ``as_of``: each is asked as of its own time),
    checked by the database before the dataset is loaded.
    """
    if not 1 <= k <= 1000:
        raise InputError(f"k must be between 1 and 1000, got {k}")
    started = report_meta.run_info()
    if limit is not None and limit < 1:
        raise InputError(f"limit must be at least 1, got {limit}")
    retrieve_params = dict(params or {})
    if "as_of" in retrieve_params:
        raise InputError("params must not set as_of: every question is asked as of its own time")
    dataset = load_dataset(folder)
    chosen = _chosen(dataset, conversations)
    embedder = embedder or load_embedder(settings)
    server = server_url or database_url(settings)
    name = scratch_db or scratch_name(dataset, embedder.spec.name)
    # one run at a time per scratch database: another's --fresh dropped it (WITH FORCE) under this one,
    # whose every system then "failed" with 57P01
    with scratch.claimed(server, name) as mine:
        if not mine:
            raise InputError(
                f"another `eval --dataset` of {folder} with {embedder.spec.name} is running (it holds "
                f"{name}): wait for it to finish"
            )
        prepared = prepare_scratch(
            server,
            dataset,
            embedder,
            settings,
            fresh=fresh,
            progress=progress,
            name=name,
            params=retrieve_params,
        )
        asked = tuple(q for q in dataset.queries if chosen is None or q.conversation_id in chosen)
        queries = asked[:limit] if limit else asked
        depth = max(k, 10)
        embed_ms, runs = ask_all(
            prepared.url,
            queries,
            embedder,
            systems,
            depth=depth,
            statement_timeout_ms=settings.get_int("database.statement_timeout_ms"),
            progress=progress,
            retrieve_params=retrieve_params,
        )
    return EvalRun(
        dataset=dataset,
        queries=queries,
        k=k,
        depth=depth,
        model=embedder.spec.name,
        scratch=prepared,
        embed_ms=embed_ms,
        systems=runs,
        date=datetime.now(UTC).isoformat(timespec="seconds"),
        params=retrieve_params,
        limit=limit,
        conversations=chosen,
        run=started,
    )


def _chosen(dataset: Dataset, conversations: Sequence[str] | None) -> tuple[str, ...] | None:
    """``conversations`` checked against the dataset's, sorted, each once; None for all."""
    if conversations is None:
        return None
    known = dataset.conversations
    unknown = [c for c in conversations if c not in known]
    if unknown or not conversations:
        shown = ", ".join(known[:20]) + (", ..." if len(known) > 20 else "")
        what = f"{unknown[0]!r} is not a conversation of {dataset.name}" if unknown else "none given"
        raise InputError(f"conversations: {what}; it has {len(known)}: {shown}")
    wanted = set(conversations)
    return tuple(c for c in known if c in wanted)


def check_params(url: str, params: Mapping[str, Any]) -> None:
    """Raise InputError naming what is wrong when spark.retrieve would refuse ``params`` (the schema,
    spark._retrieve_params included, is installed just before)."""
    with connect(url, autocommit=True) as conn:
        try:
            conn.execute("SELECT spark._retrieve_params(%s)", [Jsonb(dict(params))])
        except psycopg.Error as exc:
            raise InputError((exc.diag.message_primary or str(exc)).strip()) from None


def _category_order(name: str) -> tuple[int, int, str]:
    return (0, int(name), "") if re.fullmatch(r"-?\d+", name) else (1, 0, name)


def _rounded(scores: dict[str, float] | None) -> dict[str, float] | None:
    return None if scores is None else {name: round(value, 4) for name, value in scores.items()}


def _percentiles(values: Sequence[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    p50, p95 = np.percentile(np.asarray(values, dtype=np.float64), [50, 95])
    return round(float(p50), 2), round(float(p95), 2)


def summarize(result: EvalRun) -> dict[str, Any]:
    """The JSON result: per system, metrics overall / no_answer / by_category and latency percentiles."""
    categories = sorted({q.category for q in result.queries}, key=_category_order)
    embed_p50, embed_p95 = _percentiles(result.embed_ms)
    systems: dict[str, Any] = {}
    for r in result.systems:
        if r.status != "ok":
            systems[r.system.name] = {"status": r.status, "message": r.message}
            continue
        per_query: dict[str, dict[str, float]] = {}
        for q in result.queries:
            ranked = r.ranked[q.id]
            scores = score_query(ranked, q.relevant_ids)
            if result.k not in (5, 10):
                scores[f"recall@{result.k}"] = recall_at(ranked, q.relevant_ids, result.k)
            per_query[q.id] = scores
        p50, p95 = _percentiles(r.latency_ms)
        systems[r.system.name] = {
            "status": "ok",
            "description": r.system.description,
            "overall": _rounded(mean_scores(per_query[q.id] for q in result.queries if q.answered)),
            "no_answer": _rounded(mean_scores(per_query[q.id] for q in result.queries if not q.answered)),
            "by_category": {
                c: _rounded(mean_scores(per_query[q.id] for q in result.queries if q.category == c))
                for c in categories
            },
            "latency_ms": {
                "embed_p50": embed_p50,
                "embed_p95": embed_p95,
                "retrieve_p50": p50,
                "retrieve_p95": p95,
            },
        }
    return {
        "dataset": result.dataset.name,
        "k": result.k,
        "queries": len(result.queries),  # asked
        "queries_total": len(result.dataset.queries),  # in the dataset
        "limit": result.limit,
        "conversations_asked": None if result.conversations is None else list(result.conversations),
        # --limit or --conversations left questions out
        "partial": len(result.queries) < len(result.dataset.queries),
        "counts": {
            "answered": sum(1 for q in result.queries if q.answered),
            "no_answer": sum(1 for q in result.queries if not q.answered),
            "by_category": {c: sum(1 for q in result.queries if q.category == c) for c in categories},
        },
        "metrics": [*METRICS, *([] if f"recall@{result.k}" in METRICS else [f"recall@{result.k}"])],
        "retrieved_per_query": result.depth,
        "memories": len(result.dataset.memories),
        "conversations": len(result.dataset.conversations),
        "model": result.model,
        "database": result.scratch.name,
        "database_reused": result.scratch.reused,
        "load_seconds": round(result.scratch.seconds, 1),
        "date": result.date,
        "params": result.params,
        "systems": systems,
        "machine": result.machine,
        "run": result.run,
    }
