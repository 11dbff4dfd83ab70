"""A thin typed wrapper over ``spark.retrieve`` and ``spark.explain``: Python never ranks anything itself."""

from __future__ import annotations

import numbers
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import psycopg
from pgvector import Vector as PgVector
from psycopg.rows import class_row

from spark_pg import queries
from spark_pg.connection_modes import autocommit, usable, vectors_adaptable
from spark_pg.embedding import Vector
from spark_pg.errors import InputError
from spark_pg.refusals import refusals
from spark_pg.sql_args import flag_arg, nullable_text_arg, params_arg, plain_numbers

MAX_DIMENSIONS = 16_000  # pgvector's limit for a vector

# what the embedding argument takes; converted to a float32 numpy array, which psycopg sends as a vector
EmbeddingArg = Vector | Sequence[float] | PgVector


@dataclass(frozen=True)
class Retrieved:
    """One surfaced memory with its final score, the separate signals, the pools and the explanation."""

    memory_id: int
    key: str
    text: str
    category: str
    kind: str
    system_default: bool
    created_at: datetime
    score: float
    semantic_sim: float | None
    keyword_score: float
    recency: float
    outcome: float
    trigger_conf: float
    priority: float
    pools: list[str]
    why: dict[str, Any]

    @property
    def reason(self) -> str:
        """One readable line: which signals carried it and which pools found it."""
        parts = []
        if self.semantic_sim is not None:
            parts.append(f"similarity {self.semantic_sim:.2f}")
        if self.keyword_score > 0:
            parts.append(f"keyword {self.keyword_score:.2f}")
        parts.append(f"recency {self.recency:.2f}")
        if self.priority:
            parts.append(f"priority {self.why.get('priority')}")
        origin = "cold-start pack" if self.system_default else f"own {self.kind}"
        pools = ", ".join(f"{p} #{r}" for p, r in sorted(self.why.get("pools", {}).items()))
        return f"score {self.score:.2f} ({'; '.join(parts)}); {origin}; found by {pools}"


@dataclass(frozen=True)
class Candidate(Retrieved):
    """A row of ``spark.explain``: every candidate, surfaced or not, with its status."""

    rank: int | None = None
    status: str = ""


@contextmanager
def one_statement(conn: psycopg.Connection[Any]) -> Iterator[bool]:
    """Run the block's one statement as a transaction of its own in a single round trip; yields True then.

    A statement sent outside a transaction is one (atomic, rolled back whole on error), so on an idle
    connection the block runs in autocommit mode: no BEGIN and COMMIT round trips (each ~0.1-1 ms). Inside the
    caller's transaction, or when the connection sets read_only, isolation_level or deferrable (which only
    BEGIN applies), it runs in ``conn.transaction()`` and yields False. Like psycopg connections themselves,
    not for a connection that several threads use at once. An argument the SQL function refuses (SQLSTATE
    class 22) is raised as :class:`~spark_pg.errors.ArgumentRefused`."""
    plain = conn.read_only is None and conn.isolation_level is None and conn.deferrable is None
    with refusals():
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE or not plain:
            with conn.transaction():
                yield False
        else:
            with autocommit(conn):
                yield True


def embedding_arg(value: Any) -> Vector | None:
    """``value`` as the float32 array psycopg sends as pgvector's ``vector``: a 1-D numpy array of numbers, a
    list or tuple of numbers, or a pgvector ``Vector``, of 1 to 16,000 finite float32 numbers; None stays
    None (no vector: the query cache, or lexical mode). Anything else is an InputError naming ``embedding``:
    psycopg sends a list as double precision[], which picks no spark.retrieve (42883), and pgvector's adapter
    raises a bare ValueError for an array of two dimensions."""
    if value is None:
        return None
    if isinstance(value, PgVector):
        value = value.to_numpy()
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            shape = value.shape
            raise InputError(f"embedding must be one vector (a 1-D array), got an array of shape {shape}")
        if not (np.issubdtype(value.dtype, np.integer) or np.issubdtype(value.dtype, np.floating)):
            raise InputError(f"embedding must hold numbers, got an array of {value.dtype}")
    elif isinstance(value, list | tuple):
        for i, x in enumerate(value):
            if isinstance(x, bool | np.bool_) or not isinstance(x, int | float | np.integer | np.floating):
                raise InputError(f"embedding must hold numbers, got {type(x).__name__} at index {i}")
    else:
        raise InputError(
            f"embedding must be a 1-D numpy array or a list or tuple of numbers, got {type(value).__name__}"
        )
    if not 1 <= len(value) <= MAX_DIMENSIONS:
        raise InputError(f"embedding must have 1 to {MAX_DIMENSIONS} dimensions, got {len(value)}")
    try:
        with np.errstate(over="ignore"):  # a number past float32's range becomes inf, refused below
            vector = np.asarray(value, dtype=np.float32)
    except OverflowError:  # a Python int past even a double's range
        raise InputError("embedding must hold finite float32 numbers, got a huge integer") from None
    bad = np.flatnonzero(~np.isfinite(vector))
    if bad.size:
        i = int(bad[0])
        raise InputError(f"embedding must hold finite float32 numbers, got {value[i]!r:.40} at index {i}")
    return vector


def wrapper_params(params: Any) -> Any:
    """``params`` as the Python wrapper sends them (a copy): numbers as Python's
    (:func:`~spark_pg.sql_args.plain_numbers`), and an ``as_of`` string of ISO 8601 without a zone as UTC, as
    a naive datetime is (sent as it is, the server read it in the session's TimeZone). What is not a
    mapping, or not ISO 8601, is left for the checks to name."""
    if not isinstance(params, Mapping):
        return params
    values = dict(plain_numbers(params))
    as_of = values.get("as_of")
    if isinstance(as_of, str):
        try:
            parsed = datetime.fromisoformat(as_of.strip().replace("Z", "+00:00"))
        except ValueError:
            parsed = None  # `now`, `infinity`, ...: spark.retrieve reads or refuses them
        if parsed is not None and parsed.tzinfo is None:
            values["as_of"] = parsed.replace(tzinfo=UTC).isoformat()
    return values


def _params(
    tenant: str, query: str, embedding: Any, k: int, params: Mapping[str, Any], cache: bool
) -> dict[str, Any]:
    if isinstance(k, bool | np.bool_) or not isinstance(k, numbers.Integral) or not -(2**31) <= k < 2**31:
        # else 42883 "function does not exist" (a float, a bool or a bigint picks no spark.retrieve)
        raise InputError(f"k must be an integer between 1 and 1000, got {k!r}")
    return {
        # None goes on to spark.retrieve's own 22004; any other non-str is refused here, naming it (it
        # would pick no function: 42883)
        "tenant": nullable_text_arg("tenant", tenant),
        "query": nullable_text_arg("query text", query),
        "embedding": embedding_arg(embedding),
        "k": int(k),  # numpy's too
        "params": params_arg("params", wrapper_params(params)),
        "cache": flag_arg("cache", cache),
    }


def _ready(conn: Any, args: Mapping[str, Any]) -> psycopg.Connection[Any]:
    """``conn`` checked (:func:`~spark_pg.connection_modes.usable`), with pgvector's adapters when a vector
    is sent: registered before the call's own transaction starts."""
    checked = usable(conn)
    if args["embedding"] is not None:
        vectors_adaptable(checked)
    return checked


def retrieve(
    conn: psycopg.Connection[Any],
    tenant: str,
    query: str,
    *,
    embedding: EmbeddingArg | None = None,
    k: int = 8,
    params: Mapping[str, Any] | None = None,
    cache: bool = True,
) -> list[Retrieved]:
    """Call ``spark.retrieve`` once (and, with ``cache`` and an ``embedding``, cache the query vector in the
    same statement: queries._CACHE_QUERY_VECTOR says which vectors and when; the write never waits for
    another transaction).

    Called outside a transaction, the call is its own transaction (one round trip, see :func:`one_statement`)
    and the cache write does not wait for the WAL flush (queries.RETRIEVE_OWN_TRANSACTION); inside the
    caller's transaction it commits with it. Without ``cache`` or an ``embedding`` the statement writes
    nothing, so it runs on a read-only connection or a standby too. The cache is left alone where it cannot
    be written: on a connection set ``read_only``, and on a server or session whose transactions are
    read-only (a standby, ``default_transaction_read_only``), where the call, its own transaction, is sent
    again without the write. Only a read-only transaction the caller opened in SQL refuses the write
    (psycopg's ReadOnlySqlTransaction: pass ``cache=False`` there)."""
    args = _params(tenant, query, embedding, k, params or {}, cache)
    conn = _ready(conn, args)
    with one_statement(conn) as own, conn.cursor(row_factory=class_row(Retrieved)) as cur:
        if not (args["cache"] and args["embedding"] is not None) or conn.read_only:
            statement = queries.RETRIEVE_UNCACHED
        else:
            statement = queries.RETRIEVE_OWN_TRANSACTION if own else queries.RETRIEVE
        try:
            cur.execute(statement, args)
        except psycopg.errors.ReadOnlySqlTransaction:
            if not own or statement == queries.RETRIEVE_UNCACHED:
                raise
            # its own transaction, refused before anything ran: the same call without the cache write
            cur.execute(queries.RETRIEVE_UNCACHED, args)
        return cur.fetchall()


def explain(
    conn: psycopg.Connection[Any],
    tenant: str,
    query: str,
    *,
    embedding: EmbeddingArg | None = None,
    k: int = 8,
    params: Mapping[str, Any] | None = None,
) -> list[Candidate]:
    """Every candidate ``spark.retrieve`` would consider, surfaced first, with the reason for the rest."""
    args = _params(tenant, query, embedding, k, params or {}, False)
    conn = _ready(conn, args)
    with one_statement(conn), conn.cursor() as cur:
        cur.execute(queries.EXPLAIN, args)
        names = [d.name for d in cur.description or ()]
        rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    return [Candidate(**row) for row in rows]
