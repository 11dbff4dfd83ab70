"""Model changes without outage: ``spark-pg reembed --model NAME``.

1. **Register** the new model (inactive) with its own partial HNSW index; retrieval keeps using the active
   model's vectors throughout. Going back to a retired model whose vectors were kept, the index is built
   ``CONCURRENTLY`` over them (spark.register_model leaves it out: built there, it would block every
   writer of vectors for the whole build).
2. **Build** the new model's vectors beside the old ones, in batches of one transaction each (keyset order,
   so a stopped run resumes where it was), then catch up with memories written meanwhile.
3. **Canaries**: for a deterministic sample of memories, compare each one's nearest neighbours (within its
   tenant, itself left out) under the old and the new model; the mean top-k overlap beyond chance must
   reach ``min_overlap`` (a broken model, wrong pooling or wrong dimensions scores near 0). Only tenants
   holding more than ``CANARY_SPREAD * k`` vectors give canaries; with none, the check cannot be made and
   nothing is switched (``canaries=0`` skips the check).
4. **Switch** in one transaction (``spark.activate_model``): the new model becomes the one retrieval
   compares against and the queue is rebuilt for it (workers must now run the new model; a worker still on
   the old one refuses to start). A client still embedding queries with the old model is told so: its
   vector is ignored (lexical mode), never compared with the new vectors.
5. **Drop** the old model's HNSW indexes (``DROP INDEX CONCURRENTLY``: queries are not blocked) and, if
   asked, its vectors; then refresh per-tenant statistics so large tenants get their own index again.

Run again for the model that is active by then, it finishes what a run stopped after step 4 left undone:
the indexes of every retired model (``spark.embedding_models.retired_at``), the vectors of the one the
active model replaced when asked, and the per-tenant statistics.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from tqdm import tqdm

from spark_pg import queries
from spark_pg.embedding import Embedder
from spark_pg.errors import InputError
from spark_pg.ingest import register_model
from spark_pg.maintain import maintain
from spark_pg.tenant_indexes import ddl_turn
from spark_pg.worker import embed_and_store

# A canary counts only from a tenant holding more than CANARY_SPREAD * k vectors of the old model: two top-k
# lists drawn from n - 1 neighbours share k / (n - 1) of them by chance, all of them at n <= k + 1 (a model
# returning random vectors scored 1.0 on tenants of 5 memories). Above 3k, chance is under 1/3, and what is
# left of it is taken out of the score.
CANARY_SPREAD = 3

# for a fixed pseudo-random sample of memories with vectors of both models, in tenants large enough: how many
# of its k nearest neighbours (in its tenant, itself left out) both models agree on, and the tenant's size
CANARY_OVERLAP = """
WITH sizes AS (
    SELECT tenant, count(*) AS vectors FROM spark.embeddings WHERE model_id = %(old)s
    GROUP BY tenant HAVING count(*) > %(min_vectors)s),
sample AS (
    SELECT o.tenant, o.memory_id, o.embedding AS old_vec, n.embedding AS new_vec, z.vectors
    FROM spark.embeddings o
    JOIN sizes z ON z.tenant = o.tenant
    JOIN spark.embeddings n ON n.tenant = o.tenant AND n.memory_id = o.memory_id AND n.model_id = %(new)s
    WHERE o.model_id = %(old)s
    ORDER BY hashint8(o.memory_id), o.tenant
    LIMIT %(n)s)
SELECT (SELECT count(*) FROM
            (SELECT e.memory_id FROM spark.embeddings e
             WHERE e.tenant = s.tenant AND e.model_id = %(old)s AND e.memory_id <> s.memory_id
             ORDER BY e.embedding <=> s.old_vec LIMIT %(k)s) a
        JOIN
            (SELECT e.memory_id FROM spark.embeddings e
             WHERE e.tenant = s.tenant AND e.model_id = %(new)s AND e.memory_id <> s.memory_id
             ORDER BY e.embedding <=> s.new_vec LIMIT %(k)s) b USING (memory_id)) AS shared,
       s.vectors
FROM sample s
"""

# the most vectors of the model any tenant holds (NULL without any)
LARGEST_TENANT = """
SELECT max(vectors) FROM (SELECT count(*) AS vectors FROM spark.embeddings WHERE model_id = %(old)s
                          GROUP BY tenant) t
"""


@dataclass
class ReembedReport:
    model: str
    previous: str | None
    embedded: int = 0
    build_seconds: float = 0.0
    canaries: int = 0
    overlap: float | None = None  # mean top-k neighbour overlap beyond chance, old vs new model (0 to 1)
    switched: bool = False
    queued_after_switch: int = 0
    dropped_indexes: list[str] = field(default_factory=list)
    dropped_vectors: int = 0
    # tenants whose indexes and statistics the refresh left undone (a lock timeout): spark-pg maintain's
    tenants_left: list[str] = field(default_factory=list)
    failed: int = 0  # memories the new model could not embed (left without its vector, queued at the switch)
    errors: list[str] = field(default_factory=list)
    too_many_failed: bool = False  # more than max_failed_share failed (or all): a switch is held back
    decision: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "previous": self.previous,
            "embedded": self.embedded,
            "build_seconds": round(self.build_seconds, 2),
            "canaries": self.canaries,
            "overlap": None if self.overlap is None else round(self.overlap, 4),
            "switched": self.switched,
            "queued_after_switch": self.queued_after_switch,
            "dropped_indexes": self.dropped_indexes,
            "dropped_vectors": self.dropped_vectors,
            "tenants_left": self.tenants_left,
            "failed": self.failed,
            "errors": self.errors[-5:],
            "too_many_failed": self.too_many_failed,
            "decision": self.decision,
        }


def register(conn: psycopg.Connection[Any], embedder: Embedder) -> tuple[int, str | None]:
    """Register ``embedder``'s model without activating it; returns (its id, the active model's name)."""
    with conn.transaction():
        active = conn.execute(queries.ACTIVE_MODEL).fetchone()
        model_id = register_model(conn, embedder.spec)
        # built again, a retired model is wanted again: a later run does not drop its index as a leftover
        conn.execute(queries.UNRETIRE_MODEL, {"model_id": model_id})
    return model_id, (None if active is None else str(active[1]))


def build_index(conn: psycopg.Connection[Any], model_id: int) -> None:
    """The model's shared HNSW index, when spark.register_model left it out (a way back to a retired model
    whose vectors were kept): built CONCURRENTLY, so ingest, the worker and edits go on meanwhile. One
    an interrupted build left invalid is dropped and built again. ``conn`` is in autocommit mode."""
    row = conn.execute(queries.MODEL_INDEX_STATE, {"model_id": model_id}).fetchone()
    valid = None if row is None else row[0]  # None: no such index
    if valid:
        return
    name = f"embeddings_hnsw_m{model_id}"
    row = conn.execute(queries.MODEL_INDEX_DDL, {"model_id": model_id}).fetchone()
    assert row is not None  # registered above
    with ddl_turn(conn, patient=True):  # a builder's tenant index at the same time would deadlock with it
        if valid is not None:
            conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS spark.{}").format(sql.Identifier(name)))
        conn.execute(str(row[0]))


def build(
    conn: psycopg.Connection[Any],
    embedder: Embedder,
    model_id: int,
    *,
    batch: int,
    progress: bool,
    errors: dict[tuple[str, int], str] | None = None,
) -> int:
    """Embed every memory that lacks a vector of ``model_id``; returns how many were stored. A text the
    model cannot embed is left without its vector and recorded in ``errors`` ((tenant, id) -> error): one
    bad memory does not stop the others."""
    total = _count(conn, queries.COUNT_MISSING_FOR_MODEL, model_id)
    stored = 0
    after: tuple[str, int] = ("", 0)
    desc = f"reembed {embedder.spec.name}"
    with tqdm(total=total, desc=desc, unit="mem", disable=not progress) as bar:
        while True:
            with conn.transaction():
                rows = conn.execute(
                    queries.MISSING_FOR_MODEL,
                    {"model_id": model_id, "tenant": after[0], "id": after[1], "n": batch},
                ).fetchall()
                if not rows:
                    return stored
                added, _, failed = embed_and_store(conn, embedder, model_id, rows, claimed=False)
                stored += added
                if errors is not None:
                    errors.update(((str(rows[i][0]), int(rows[i][1])), e) for i, e in failed.items())
            after = (str(rows[-1][0]), int(rows[-1][1]))
            bar.update(len(rows))


def canary_overlap(
    conn: psycopg.Connection[Any], old_id: int, new_id: int, *, canaries: int, k: int
) -> tuple[int, float | None]:
    """(canaries compared, mean overlap of the k nearest neighbours under both models beyond chance): each
    canary's shared share s of its tenant of n vectors scores (s - c) / (1 - c), c = k / (n - 1), so a model
    no better than random scores about 0 (the mean is floored there) and the same neighbours 1. Only tenants
    of more than CANARY_SPREAD * k vectors give canaries: (0, None) when none does."""
    rows = conn.execute(
        CANARY_OVERLAP,
        {"old": old_id, "new": new_id, "n": canaries, "k": k, "min_vectors": CANARY_SPREAD * k},
    ).fetchall()
    scores = []
    for shared, vectors in rows:
        chance = k / (int(vectors) - 1)
        scores.append((int(shared) / k - chance) / (1 - chance))
    if not scores:
        return 0, None
    return len(scores), max(0.0, sum(scores) / len(scores))


def reembed(
    conn: psycopg.Connection[Any],
    embedder: Embedder,
    *,
    batch: int = 64,
    canaries: int = 20,
    k: int = 10,
    min_overlap: float = 0.3,
    switch: bool = True,
    drop_old_vectors: bool = False,
    max_failed_share: float = 0.01,
    progress: bool = False,
) -> ReembedReport:
    """Build ``embedder``'s vectors, check them on canaries, switch and drop the old index (see module).

    ``conn`` must be in autocommit mode: each batch is its own transaction and indexes are dropped
    concurrently."""
    if not conn.autocommit:
        raise InputError("reembed needs a connection in autocommit mode")
    if not 1 <= batch <= 1000:
        raise InputError(f"batch must be from 1 to 1000, got {batch}")
    if not 0 <= min_overlap <= 1:
        raise InputError(f"min_overlap must be from 0 to 1, got {min_overlap}")
    if canaries < 0 or not 1 <= k <= 100:
        raise InputError(f"canaries must be 0 or more and k from 1 to 100, got {canaries} and {k}")
    if not 0 <= max_failed_share <= 1:
        raise InputError(f"max_failed_share must be from 0 to 1, got {max_failed_share}")
    model_id, previous = register(conn, embedder)
    report = ReembedReport(model=embedder.spec.name, previous=previous)
    started = time.perf_counter()
    build_index(conn, model_id)
    failures: dict[tuple[str, int], str] = {}
    for _ in range(3):  # then catch up with what was written during the pass
        added = build(conn, embedder, model_id, batch=batch, progress=progress, errors=failures)
        report.embedded += added
        if added == 0:
            break
    report.build_seconds = time.perf_counter() - started
    missing = _still_missing(conn, model_id, failures)  # a retry in a later pass may have stored some
    report.failed = len(missing)
    report.errors = [
        f"{tenant} memory {memory_id}: {failures[(tenant, memory_id)]}" for tenant, memory_id in missing
    ]
    if previous == embedder.spec.name:  # nothing to switch: the failures wait in the queue for a worker
        _finish_switch(conn, report, switch=switch, drop_old_vectors=drop_old_vectors, progress=progress)
        return report
    have = _count(conn, queries.COUNT_HAVING_MODEL, model_id)  # this run's and a stopped run's
    report.too_many_failed = bool(report.failed) and (
        have == 0 or report.failed > max_failed_share * (have + report.failed)
    )
    if previous is None:  # the first model registered: spark.register_model made it the active one
        # nothing was switched from, so too many failures hold nothing back: they are said, and wait
        name = embedder.spec.name
        failed = (
            f"; {report.failed} memories could not be embedded by it: they wait in the queue for a worker "
            "(fix the model or the texts, or run a worker)"
            if report.failed
            else ""
        )
        if switch:  # the queue rebuilt for it: what the build could not embed waits there
            _switch(conn, report)
            # said "nothing to switch" before, followed by the CLI's line for a switch that ran
            report.decision = (
                f"no model was active before: {name} is the active model now, its vectors built{failed}"
            )
        else:
            report.decision = (
                f"no model was active before: {name} became the active model when it was registered (the "
                f"first model registered always does, --no-switch or not); its vectors are built{failed}"
            )
        return report
    if report.too_many_failed:
        report.decision = (
            f"not switched: {report.failed} memories could not be embedded by {embedder.spec.name} (more "
            f"than {max_failed_share:.0%}); the vectors built so far are kept, fix the model or the texts "
            "and run again"
        )
        return report
    old_row = conn.execute(queries.MODEL_ID, {"name": previous}).fetchone()
    assert old_row is not None
    old_id = int(old_row[0])
    report.canaries, report.overlap = canary_overlap(conn, old_id, model_id, canaries=canaries, k=k)
    if canaries and report.overlap is None:  # asked for, and not made: never a silent switch
        report.decision = _no_canaries(conn, old_id, k)
        return report
    if report.overlap is not None and report.overlap < min_overlap:
        report.decision = (
            f"not switched: canary overlap {report.overlap:.2f} is under {min_overlap} "
            "(the new vectors disagree with the old ones; check the model)"
        )
        return report
    if not switch:
        report.decision = "built and checked; not switched (--no-switch)"
        return report
    _switch(conn, report)
    report.dropped_indexes = _drop_indexes(conn, old_id)
    if drop_old_vectors:
        report.dropped_vectors = _drop_vectors(conn, old_id)
    report.tenants_left = _refresh_tenants(conn, progress=progress)
    report.decision = f"switched from {previous} to {embedder.spec.name}" + _left(report)
    return report


def _no_canaries(conn: psycopg.Connection[Any], old_id: int, k: int) -> str:
    """The decision when no tenant is large enough for a canary: what would make the check possible."""
    row = conn.execute(LARGEST_TENANT, {"old": old_id}).fetchone()
    largest = int(row[0]) if row and row[0] is not None else 0
    fits = (largest - 1) // CANARY_SPREAD  # the largest k the largest tenant allows
    way = f"run again with --k {fits} or less, " if fits >= 1 else "add memories, "
    return (
        f"not switched: the canary check could not be made: no tenant holds more than {CANARY_SPREAD * k} "
        f"memories embedded by both models (the largest: {largest}), and in a smaller one the top-{k} "
        f"neighbours of any two models largely agree by chance; {way}or run with --canaries 0 to switch "
        "without the check"
    )


def _finish_switch(
    conn: psycopg.Connection[Any],
    report: ReembedReport,
    *,
    switch: bool,
    drop_old_vectors: bool,
    progress: bool,
) -> None:
    """The model is the active one already: finish what a run stopped after its switch left undone. The
    indexes of every retired model go, the vectors of the one retired last when asked, and the per-tenant
    statistics are refreshed (again on every such run: a stop during the refresh leaves no other trace)."""
    retired = [(int(r[0]), str(r[1])) for r in conn.execute(queries.RETIRED_MODELS).fetchall()]
    name = report.model
    if not retired:
        report.decision = (
            f"{name} is already active, nothing to switch; no retired model to clean up (models replaced "
            "before schema 0012 are not recorded: see docs/lifecycle.md)"
        )
        return
    if not switch:
        report.decision = (
            f"{name} is already active, nothing to switch; the clean-up of retired models is not run "
            "(--no-switch)"
        )
        return
    for model_id, _ in retired:
        report.dropped_indexes += _drop_indexes(conn, model_id)
    if drop_old_vectors:
        report.dropped_vectors = _drop_vectors(conn, retired[0][0])
    report.tenants_left = _refresh_tenants(conn, progress=progress)
    if report.dropped_indexes or report.dropped_vectors:
        done = [f"{len(report.dropped_indexes)} indexes of retired models dropped"]
        if drop_old_vectors:
            done.append(f"{report.dropped_vectors} vectors of {retired[0][1]} deleted")
        what = f"the switch from {retired[0][1]} is finished: " + ", ".join(done)
    else:
        what = "nothing of the retired models was left to drop"
    refreshed = "; per-tenant statistics refreshed" if not report.tenants_left else _left(report)
    report.decision = f"{name} is already active, nothing to switch; {what}{refreshed}"


def _left(report: ReembedReport) -> str:
    """What the decision adds for tenants the refresh left undone (a lock timeout, a cancel), or ''."""
    if not report.tenants_left:
        return ""
    return (
        f"; the indexes and statistics of {len(report.tenants_left)} tenants were left undone (a lock "
        "timeout): run spark-pg maintain"
    )


def _still_missing(
    conn: psycopg.Connection[Any], model_id: int, failures: dict[tuple[str, int], str]
) -> list[tuple[str, int]]:
    """The failed memories that still lack a vector of ``model_id`` (and still exist), in key order."""
    if not failures:
        return []
    rows = conn.execute(
        queries.STILL_MISSING_FOR_MODEL,
        {"model_id": model_id, "tenants": [t for t, _ in failures], "ids": [i for _, i in failures]},
    ).fetchall()
    return [(str(r[0]), int(r[1])) for r in rows]


def _count(conn: psycopg.Connection[Any], query: str, model_id: int) -> int:
    row = conn.execute(query, {"model_id": model_id}).fetchone()
    assert row is not None
    return int(row[0])


def _refresh_tenants(conn: psycopg.Connection[Any], *, progress: bool) -> list[str]:
    """Every tenant's per-tenant indexes and statistics, as `spark-pg maintain` brings them up to date
    (spark_pg.maintain): the new model's indexes are built CONCURRENTLY (writers go on), then each tenant's
    statistics are refreshed in a transaction of its own. Returns the tenants left undone (a lock timeout, a
    cancel), which `spark-pg maintain` finishes."""
    return maintain(conn, progress=progress).failed


def _switch(conn: psycopg.Connection[Any], report: ReembedReport) -> None:
    with conn.transaction():
        row = conn.execute(queries.ACTIVATE_MODEL, {"name": report.model}).fetchone()
    assert row is not None
    report.switched = True
    report.queued_after_switch = int(row[2])


def _drop_indexes(conn: psycopg.Connection[Any], old_id: int) -> list[str]:
    """The old model's shared and per-tenant HNSW indexes, dropped without blocking queries; returns the
    names of those that existed."""
    names = [f"embeddings_hnsw_m{old_id}"] + [
        str(r[0]) for r in conn.execute(queries.MODEL_TENANT_INDEXES, {"model_id": old_id}).fetchall()
    ]
    dropped = []
    for name in names:
        row = conn.execute(queries.INDEX_EXISTS, {"name": name}).fetchone()
        if row is not None and row[0]:
            drop = sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS spark.{}").format(sql.Identifier(name))
            with ddl_turn(conn, patient=True):
                conn.execute(drop)
            dropped.append(name)
    conn.execute(queries.FORGET_MODEL_TENANT_INDEXES, {"model_id": old_id})
    return dropped


def _drop_vectors(conn: psycopg.Connection[Any], old_id: int, chunk: int = 5000) -> int:
    """Delete the old model's vectors in short transactions."""
    total = 0
    while True:
        n = conn.execute(queries.DELETE_MODEL_VECTORS, {"model_id": old_id, "n": chunk}).rowcount
        total += n
        if n < chunk:
            return total
