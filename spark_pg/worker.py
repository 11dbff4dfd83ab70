"""The write-behind embedder: ``spark-pg worker`` embeds the memories waiting in spark.embed_queue.

A batch is one transaction: claim up to ``batch`` queued rows ``FOR UPDATE SKIP LOCKED`` (other workers
take other rows), embed their descriptors, store the vectors; the embeddings trigger takes the rows off the
queue as the vectors land, and the commit makes both visible at once. A worker killed mid-batch never
commits: its rows return to the queue for the next worker, and nothing is stored twice (one vector per
memory and model). A vector is stored only if the memory still has the content that was embedded; a memory
changed meanwhile stays queued (its update re-queued it) and is embedded again with the new text. A model
switch waits for the batch in flight; the next batch sees the new model and stops the worker.

Between batches the worker sleeps on ``LISTEN spark_embed`` (the queue triggers notify), waking at least
every ``poll_s`` seconds. A text the model cannot embed gets an attempt counted, its error kept and a
backoff; the rest of its batch is stored. Rows that failed ``max_attempts`` times are left for a person
(they show in ``spark-pg stats``). A database error rolls the batch back and stops the worker, except a
lost connection (the server crashed, restarts or is not reachable yet): :func:`run_reconnecting` then logs
one line, waits (0.25 s, doubling up to ``max_backoff_s``) and connects again; the rows of the batch in
flight were never committed and are claimed again once the server is back. With ``give_up_after_s`` (60 s
for ``spark-pg worker --once``) it gives up once the database has been unreachable that long.
"""

from __future__ import annotations

import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import psycopg
from tqdm import tqdm

from spark_pg import queries
from spark_pg.embed_queue import MAX_ATTEMPTS
from spark_pg.embedding import Embedder
from spark_pg.errors import DatabaseError, EmbeddingError, InputError, ModelMismatch, SchemaError
from spark_pg.ingest import ensure_model, hold_active_model, refresh_after_write

CHANNEL = "spark_embed"
KEPT_ERRORS = 100  # the latest embedding errors a worker keeps for its summary
DRAIN_POLL_S = 0.05  # a drain of waiting notifications waits this long for more (the server sends in chunks)
DRAIN_MAX_PASSES = 10  # and makes at most this many such passes (0.5 s) before the worker claims its batch
REFRESH_EVERY_S = 30.0  # a long drain refreshes the written tenants' statistics and indexes this often
RECONNECT_FIRST_S = 0.25  # the first wait after a lost connection; doubled per failed attempt
# how long a batch's claim may sit idle in its transaction, the worker embedding, before the server ends the
# session and the rows go back to the queue (claim_idle_timeout_s)
CLAIM_IDLE_FLOOR_S = 120
CLAIM_IDLE_PER_ROW_S = 0.5
IDLE_TIMEOUT_STATE = "25P03"  # idle_in_transaction_session_timeout ended the session
# server states that end a session but not the server for good: shutdown (57P01), crash of another backend
# (57P02), starting up or in recovery (57P03), this worker's batch idle past claim_idle_timeout_s (25P03);
# class 08 is a connection exception
_TRANSIENT_STATES = frozenset({"57P01", "57P02", "57P03", IDLE_TIMEOUT_STATE})


def claim_idle_timeout_s(batch: int) -> int:
    """The idle_in_transaction_session_timeout of a batch of ``batch`` rows: CLAIM_IDLE_PER_ROW_S a row, at
    least CLAIM_IDLE_FLOOR_S (the default batch of 32 embeds in well under a second on 2 cores). A worker
    stopped mid-batch (SIGSTOP, a frozen container, a model call that hangs) held its claimed rows, and every
    write of those memories waited, for as long as it stayed stopped; now the server ends its session after
    this long. :func:`run_reconnecting` then halves the batch, and stops at a single row."""
    return max(CLAIM_IDLE_FLOOR_S, math.ceil(batch * CLAIM_IDLE_PER_ROW_S))


@dataclass
class WorkerStats:
    embedded: int = 0
    batches: int = 0
    failed: int = 0  # rows whose text the model could not embed (an attempt counted on each)
    skipped_changed: int = 0  # claimed, but the memory changed before its vector was stored
    reconnects: int = 0  # connections lost and opened again (run_reconnecting)
    seconds: float = 0.0
    busy_seconds: float = 0.0  # of them, spent in batches that claimed rows (the rate's time: not the idle)
    errors: list[str] = field(default_factory=list)
    # left in the queue after a one-off run: rows still to embed (a run stopped early; rows another worker
    # holds count too), failed rows waiting out their backoff, and given up. pending None: not known (a
    # serving worker, or a run stopped while the database was unreachable)
    pending: int | None = None
    backing_off: int = 0
    given_up: int = 0

    def as_json(self) -> dict[str, Any]:
        rate = self.embedded / self.busy_seconds if self.busy_seconds > 0 else 0.0
        return {
            "embedded": self.embedded,
            "batches": self.batches,
            "failed": self.failed,
            "skipped_changed": self.skipped_changed,
            "reconnects": self.reconnects,
            "seconds": round(self.seconds, 2),
            "per_second": round(rate, 1),
            "errors": self.errors[-5:],
            "pending": self.pending,
            "backing_off": self.backing_off,
            "given_up": self.given_up,
        }


def queue_state(conn: psycopg.Connection[Any], max_attempts: int) -> tuple[int, int, int]:
    """Rows of spark.embed_queue: (claimable now, waiting out a failure's backoff, given up after
    ``max_attempts``)."""
    row = conn.execute(queries.QUEUE_STATE, {"max_attempts": max_attempts}).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def backlog(conn: psycopg.Connection[Any], max_attempts: int | None = None) -> int:
    """Rows waiting in spark.embed_queue (those still to be tried, when ``max_attempts`` is given)."""
    ready, backing_off, _ = queue_state(conn, 2**31 - 1 if max_attempts is None else max_attempts)
    return ready + backing_off


def store_vectors(
    conn: psycopg.Connection[Any],
    model_id: int,
    rows: Sequence[Any],
    vectors: Sequence[Any],
    *,
    claimed: bool = True,
) -> int:
    """Store one model's vectors of rows (tenant, memory_id, descriptor, content_hash) where the memory still
    has that content; returns how many were stored. ``claimed``: the rows were claimed from the queue in
    this transaction (the worker); else (reembed) the memories are locked as they are stored."""
    if not rows:
        return 0
    args = {
        "model_id": model_id,
        "tenants": [r[0] for r in rows],
        "ids": [r[1] for r in rows],
        "hashes": [r[3] for r in rows],
        "vectors": list(vectors),
    }
    if not claimed:  # a worker's batch holding some of their queue rows is waited for (no deadlock)
        conn.execute(queries.LOCK_QUEUED_IDS, args)
    return conn.execute(queries.STORE_CLAIMED if claimed else queries.STORE_UNCLAIMED, args).rowcount


def embed_each(embedder: Embedder, texts: list[str]) -> tuple[dict[int, Any], dict[int, str]]:
    """Embed ``texts`` as one batch or, if the batch fails, one by one: (vectors, errors) by position."""
    try:
        return dict(enumerate(embedder.embed_documents(texts, batch_size=min(len(texts), 32)))), {}
    except Exception:  # find the text that breaks it: the others are embedded still
        vectors: dict[int, Any] = {}
        errors: dict[int, str] = {}
        for i, text in enumerate(texts):
            try:
                vectors[i] = embedder.embed_documents([text], batch_size=1)[0]
            except Exception as exc:
                errors[i] = f"{type(exc).__name__}: {exc}"[:500]
        return vectors, errors


def embed_and_store(
    conn: psycopg.Connection[Any],
    embedder: Embedder,
    model_id: int,
    rows: Sequence[Any],
    *,
    claimed: bool = True,
) -> tuple[int, int, dict[int, str]]:
    """Embed the descriptors of ``rows`` (tenant, memory_id, descriptor, content_hash) with
    :func:`embed_each` and store the vectors made (:func:`store_vectors`): (stored, embedded, errors by
    position in ``rows``)."""
    vectors, errors = embed_each(embedder, [r[2] for r in rows])
    good = sorted(vectors)
    picked = [rows[i] for i in good]
    stored = store_vectors(conn, model_id, picked, [vectors[i] for i in good], claimed=claimed)
    return stored, len(good), errors


# a text any working model embeds: when no text of a batch could be embedded, this tells a broken model
# (out of memory, a runtime fault) from a batch of texts it cannot take
MODEL_CHECK_TEXT = "spark_pg model check: remember to run the tests before pushing"


def _check_model(embedder: Embedder, error: str) -> None:
    """Raise EmbeddingError when the model cannot embed even :data:`MODEL_CHECK_TEXT`: then the batch's
    failures are the model's, and no row should be charged an attempt for them (five such episodes gave
    up the whole backlog)."""
    try:
        embedder.embed_documents([MODEL_CHECK_TEXT], batch_size=1)
    except Exception as exc:
        raise EmbeddingError(
            f"the model {embedder.spec.name} embeds nothing, not even a check text ({type(exc).__name__}: "
            f"{exc}; the batch failed with {error}): no queued row was charged an attempt; fix the model "
            "and start the worker again"
        ) from None


def embed_batch(
    conn: psycopg.Connection[Any],
    embedder: Embedder,
    model_id: int,
    *,
    batch: int,
    max_attempts: int,
    stats: WorkerStats,
    tenants: set[str] | None = None,
) -> int:
    """Claim, embed and store one batch in one transaction; returns the rows claimed (0: queue drained).
    ``tenants``: the tenants of the rows stored are added to it.

    A text the model cannot embed costs its row an attempt, with the error kept and a backoff (a minute
    per attempt) before it is claimed again; the rest of the batch is stored. When no text of the batch
    could be embedded and the model cannot embed a check text either, the model is broken: EmbeddingError,
    and the claim is rolled back with no attempt charged. Raises ModelMismatch when
    ``model_id`` is no longer the active model (a `spark-pg reembed` switched models while the worker ran:
    its vectors would never take a row off the queue, which only the active model's vectors do). The check
    holds for the whole batch: a switch waits for the batch's commit."""
    started = time.perf_counter()
    with conn.transaction():
        conn.execute(queries.SET_IDLE_TIMEOUT, {"ms": str(claim_idle_timeout_s(batch) * 1000)})
        active = hold_active_model(conn)  # a switch now waits for this batch's commit
        if active is None or active[0] != model_id:
            now = f"the active model is now {active[1]}" if active is not None else "no model is active now"
            raise ModelMismatch(
                f"the worker embeds with {embedder.spec.name}, but {now}: restart the worker with "
                "embedding.model set to the active model"
            )
        rows = conn.execute(queries.CLAIM_QUEUE, {"n": batch, "max_attempts": max_attempts}).fetchall()
        if not rows:
            return 0
        stored, embedded, errors = embed_and_store(conn, embedder, model_id, rows)
        if errors and len(errors) == len(rows):
            _check_model(embedder, next(iter(errors.values())))  # raises, the claim rolled back
        for i, error in errors.items():
            conn.execute(
                queries.QUEUE_ATTEMPT_FAILED, {"tenant": rows[i][0], "id": rows[i][1], "error": error}
            )
    if tenants is not None and stored:
        tenants.update(str(r[0]) for r in rows)
    stats.batches += 1
    stats.busy_seconds += time.perf_counter() - started
    stats.embedded += stored
    stats.failed += len(errors)
    stats.skipped_changed += embedded - stored
    stats.errors.extend(errors.values())
    del stats.errors[:-KEPT_ERRORS]  # a worker runs for weeks: the latest errors, not all of them
    return len(rows)


def drain(
    conn: psycopg.Connection[Any],
    embedder: Embedder,
    model_id: int,
    *,
    batch: int,
    max_attempts: int,
    stats: WorkerStats,
    stop: threading.Event,
    on_batch: Callable[[int], object] | None = None,
) -> None:
    """Embed batches until the queue has nothing claimable left (or ``stop`` is set). The statistics and
    HNSW indexes of the tenants written are refreshed then, and every REFRESH_EVERY_S of a long drain: a
    tenant the worker fills gets its own index near index_min_vectors (about 1.5 s to build), not at its
    next write (40 s at 20,000 vectors), and built CONCURRENTLY, so no writer waits."""
    written: set[str] = set()
    last = time.monotonic()
    while not stop.is_set():
        claimed = embed_batch(
            conn, embedder, model_id, batch=batch, max_attempts=max_attempts, stats=stats, tenants=written
        )
        if claimed and on_batch is not None:
            on_batch(claimed)
        if written and (not claimed or stop.is_set() or time.monotonic() - last >= REFRESH_EVERY_S):
            refresh_after_write(conn, sorted(written))
            written.clear()
            last = time.monotonic()
        if not claimed:
            return


def run_worker(
    conn: psycopg.Connection[Any],
    embedder: Embedder,
    *,
    once: bool = False,
    batch: int = 32,
    poll_s: float = 30.0,
    max_attempts: int = MAX_ATTEMPTS,
    progress: bool = False,
    stop: threading.Event | None = None,
    stats: WorkerStats | None = None,
) -> WorkerStats:
    """Embed the queue; with ``once``, the current backlog then return, else keep listening until ``stop``.

    ``conn`` must be in autocommit mode (LISTEN needs it; each batch opens its own transaction). ``stats``:
    counts to add to (a reconnecting caller keeps one across connections)."""
    if batch < 1 or batch > 1000:
        raise InputError(f"batch must be from 1 to 1000, got {batch}")
    if not math.isfinite(poll_s) or poll_s <= 0:
        raise InputError(f"poll_s must be a positive number of seconds, got {poll_s}")
    if max_attempts < 1:
        raise InputError(f"max_attempts must be at least 1, got {max_attempts}")
    if not conn.autocommit:
        raise InputError("the worker's connection must be in autocommit mode")
    stop = stop or threading.Event()
    model_id = ensure_model(conn, embedder)
    stats = stats if stats is not None else WorkerStats()
    started = time.perf_counter()
    try:
        conn.execute(f"LISTEN {CHANNEL}")
        total = queue_state(conn, max_attempts)[0]  # what this run can claim, not what waits or was given up
        with tqdm(total=total, desc="embed", unit="mem", disable=not progress or not once) as bar:
            while not stop.is_set():
                drain(
                    conn,
                    embedder,
                    model_id,
                    batch=batch,
                    max_attempts=max_attempts,
                    stats=stats,
                    stop=stop,
                    on_batch=bar.update,
                )
                if once:
                    break
                _wait(conn, poll_s, stop)
        if once:  # also when a signal came before the first batch
            stats.pending, stats.backing_off, stats.given_up = queue_state(conn, max_attempts)
        conn.execute(f"UNLISTEN {CHANNEL}")
    finally:  # a run ended by a lost connection counts too (the rate spans reconnects)
        stats.seconds += time.perf_counter() - started
    return stats


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the database went away (or is not back yet), not that a statement failed: a
    connection error from libpq (no SQLSTATE, or class 08), an administrator or crash shutdown, a server
    still starting, a batch's claim ended by its idle timeout (25P03: claim_idle_timeout_s), or spark_pg's
    DatabaseError for a connection that could not be opened."""
    if isinstance(exc, SchemaError):
        return False
    if isinstance(exc, DatabaseError):
        return isinstance(exc.__cause__, psycopg.OperationalError)
    if isinstance(exc, psycopg.Error) and exc.sqlstate in _TRANSIENT_STATES:  # 25P03 is no OperationalError
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _TRANSIENT_STATES


def _stderr(message: str) -> None:
    print(f"spark-pg worker: {message}", file=sys.stderr, flush=True)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


def _smaller_batch(batch: int, log: Callable[[str], None]) -> int:
    """The batch after one whose embedding outlasted its claim (claim_idle_timeout_s): half of it, or
    EmbeddingError at one row, whose text the model has taken that long over: stuck, not slow. The rows were
    never charged an attempt (the claim rolled back), so the same batch would time out for ever."""
    if batch <= 1:
        raise EmbeddingError(
            f"embedding one text took over {claim_idle_timeout_s(1)} s, so its claim was ended: the model "
            "looks stuck; nothing was charged, fix the model and start the worker again"
        )
    log(f"a batch of {batch} took over {claim_idle_timeout_s(batch)} s to embed (its claim was ended and its "
        f"rows went back to the queue); the next batches take {batch // 2}")  # fmt: skip
    return batch // 2


def run_reconnecting(
    open_connection: Callable[[], psycopg.Connection[Any]],
    embedder: Embedder,
    *,
    max_backoff_s: float = 10.0,
    give_up_after_s: float | None = None,
    stop: threading.Event | None = None,
    log: Callable[[str], None] = _stderr,
    **options: Any,
) -> WorkerStats:
    """:func:`run_worker` on connections from ``open_connection`` (autocommit), opening a new one whenever
    the database goes away (:func:`connection_lost`): one log line when it is lost, waits that start at
    0.25 s and double up to ``max_backoff_s`` between attempts (never a busy loop), one log line when
    connected again. ``options`` are run_worker's. The first connection is not retried (a wrong URL or a
    server never started fails at once, as before); any other error stops the worker as before.
    ``give_up_after_s``: raise DatabaseError once the database has stayed unreachable that long (None: keep
    trying; a one-off run should not hang for a whole outage)."""
    if not math.isfinite(max_backoff_s) or max_backoff_s <= 0:
        raise InputError(f"max_backoff_s must be a positive number of seconds, got {max_backoff_s}")
    if give_up_after_s is not None and (not math.isfinite(give_up_after_s) or give_up_after_s < 0):
        raise InputError(f"give_up_after_s must be a number of seconds from 0, got {give_up_after_s}")
    stop = stop or threading.Event()
    stats = WorkerStats()
    wait = RECONNECT_FIRST_S
    lost_at: float | None = None
    connected = False
    while not stop.is_set():
        try:
            conn = open_connection()
        except Exception as exc:
            if not connected or not connection_lost(exc):
                raise
            if lost_at is None:
                lost_at = time.monotonic()
                log(f"cannot connect to the database ({_one_line(exc)}); retrying with backoff")
            if give_up_after_s is not None and (away := time.monotonic() - lost_at) >= give_up_after_s:
                raise DatabaseError(
                    f"gave up: the database has been unreachable for {away:.1f} s (limit {give_up_after_s:g} "
                    f"s; {_one_line(exc)})"
                ) from exc
        else:
            connected = True
            if lost_at is not None:
                stats.reconnects += 1
                log(f"connected again after {time.monotonic() - lost_at:.1f} s; draining the queue")
                lost_at = None
            wait = RECONNECT_FIRST_S
            try:
                return run_worker(conn, embedder, stop=stop, stats=stats, **options)
            except Exception as exc:
                if not connection_lost(exc):
                    raise
                if isinstance(exc, psycopg.Error) and exc.sqlstate == IDLE_TIMEOUT_STATE:
                    options["batch"] = _smaller_batch(options.get("batch", 32), log)
                lost_at = time.monotonic()
                log(f"lost the database connection ({_one_line(exc)}); reconnecting with backoff")
            finally:
                conn.close()  # safe on a broken connection; autocommit: nothing is pending
        pause = wait
        if give_up_after_s is not None and lost_at is not None:  # the last attempt comes at the limit
            pause = min(pause, max(0.0, lost_at + give_up_after_s - time.monotonic()))
        stop.wait(pause)
        wait = min(wait * 2, max_backoff_s)
    return stats


def _wait(conn: psycopg.Connection[Any], poll_s: float, stop: threading.Event) -> None:
    """Sleep until a queuing statement notifies, ``stop`` is set or ``poll_s`` passes (a missed notification
    costs one poll); wakes every second to notice ``stop``."""
    deadline = time.monotonic() + poll_s
    while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
        if any(True for _ in conn.notifies(timeout=min(1.0, left), stop_after=1)):
            _drain_notifies(conn, stop)
            return


def _drain_notifies(conn: psycopg.Connection[Any], stop: threading.Event) -> int:
    """Take the notifications already waiting, so that a burst of writes (one per row) wakes the drained
    worker once, not once per row for an empty claim (1,000 writes: about 1,000 empty transactions); returns
    the passes made. A pass waits DRAIN_POLL_S for more (timeout=0 took only what psycopg had read already,
    278 of 300: the server sends the rest once the client has read the first chunk), and the drain ends at a
    pass that finds none, when ``stop`` is set, or after DRAIN_MAX_PASSES passes: a steady stream of writes
    (one every 20 ms) kept an unbounded drain going for as long as it lasted, embedding nothing and deaf to
    SIGTERM."""
    passes = 0
    while passes < DRAIN_MAX_PASSES and not stop.is_set():
        passes += 1
        if not sum(1 for _ in conn.notifies(timeout=DRAIN_POLL_S)):
            break
    return passes


def stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM / SIGINT finish the current batch, then stop the worker."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
