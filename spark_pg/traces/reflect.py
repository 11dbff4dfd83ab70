"""Reflection in Python: one call of ``spark.reflect`` (sql/070-reflect.sql) and its rows, typed.

The SQL does the work (candidates, similarity on the active model's vectors, the lexical fallback, the
recency half-life, the gate, the linked learnings); this module only maps rows, and says which of them warn
(:meth:`Reflection.warns`, the rule spark.advise_with_warnings applies). The advisor's entry point is
:meth:`spark_pg.advisor.Advisor.reflect`, which embeds the query first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from spark_pg import queries
from spark_pg.db import register_vector_if_present
from spark_pg.errors import InputError
from spark_pg.refusals import refusals
from spark_pg.retrieve import embedding_arg
from spark_pg.sql_args import integer_arg, params_arg, plain_numbers, text_arg

MAX_QUERY = 1000  # characters of a plain-text reflection query
# a failure matched on words alone warns only when it holds at least this many of the query's words (as
# spark.advise_with_warnings, which sets spark.reflect's lexical_min_words to it; docs/traces.md)
LEXICAL_WARNING_MIN_WORDS = 2
# pgvector's type, named with its schema (which need not be on the search path)
VECTOR_TYPE = """SELECT format('%I.vector', n.nspname) FROM pg_extension e
JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'"""


def ensure_vector_adapters(conn: psycopg.Connection[Any]) -> None:
    """pgvector's adapters on ``conn``, so that a vector (a numpy array) can be sent: a connection from
    :func:`spark_pg.db.connect` (and so a SparkClient's) has them; on a plain ``psycopg.connect`` without
    them the vector was psycopg's ProgrammingError "cannot adapt type 'ndarray'". Registered here, once per
    connection: outside a transaction by :func:`spark_pg.db.register_vector_if_present`, which also puts
    the extension's schema on the session's search path (its own statements end in a commit or rollback,
    and there is nothing of the caller's to end); inside the caller's open transaction the adapters only,
    read in that transaction, which is neither committed nor rolled back."""
    if conn.adapters.types.get("vector") is not None:
        return
    status = conn.info.transaction_status
    if status == psycopg.pq.TransactionStatus.IDLE:
        register_vector_if_present(conn)
    elif status == psycopg.pq.TransactionStatus.INTRANS:
        from pgvector.psycopg.vector import register_vector_info
        from psycopg.types import TypeInfo

        row = conn.execute(VECTOR_TYPE).fetchone()
        if row is not None:  # without pgvector there is no spark schema either: its call says so
            register_vector_info(conn, TypeInfo.fetch(conn, row[0]))


@dataclass(frozen=True)
class Reflection:
    """One past trace or learning that resembles the task at hand, and why it came back."""

    rank: int
    memory_id: int
    key: str
    kind: str  # trace | learning
    text: str  # a trace's descriptor, a learning's handle
    category: str
    outcome: str | None  # success | failure for a trace (from its metadata), None for a learning
    score: float  # relevance x recency factor
    similarity: float | None  # cosine similarity on the active model's vectors; None when matched on words
    keyword_score: float  # share of the query's words the text holds (not the relevance of a word match)
    recency: float
    age_days: float
    created_at: datetime
    linked_to: str | None  # a learning: the returned trace it is linked to
    metadata: dict[str, Any]
    why: dict[str, Any]

    @property
    def failure(self) -> bool:
        return self.kind == "trace" and self.outcome == "failure"

    @property
    def match(self) -> str:
        """semantic, lexical or linked."""
        return str(self.why.get("match", ""))

    @property
    def keyword_hits(self) -> int:
        """How many of the query's words (English lexemes, the descriptor's labels not counted) it holds."""
        hits = self.why.get("keyword_hits")
        return hits if isinstance(hits, int) else 0

    def warns(self, warning_min_score: float) -> bool:
        """A past failure to warn about: a trace whose outcome was failure, matched on its own (not linked),
        whose score reaches ``warning_min_score`` and, matched on words alone, that holds at least
        LEXICAL_WARNING_MIN_WORDS of the query's words (spark.advise_with_warnings' rule)."""
        return (
            self.failure
            and self.match != "linked"
            and self.score >= warning_min_score
            and (self.similarity is not None or self.keyword_hits >= LEXICAL_WARNING_MIN_WORDS)
        )

    @property
    def reason(self) -> str:
        """One readable line: how it matched, how old it is, what the gate said."""
        if self.match == "linked":
            how = f"learned from trace {self.linked_to}"
        elif self.similarity is not None:
            how = f"similarity {self.similarity:.2f}"
        else:
            words, relevance = self.why.get("query_words"), float(self.why.get("relevance") or 0)
            plural = "" if words == 1 else "s"
            how = f"{self.keyword_hits} of {words} query word{plural} (lexical, relevance {relevance:.2f})"
        seen = self.metadata.get("occurrences")
        times = f", seen {seen} times" if isinstance(seen, int) and seen > 1 else ""
        return (
            f"{how}; {self.age_days:.0f} days old (recency {self.recency:.2f}){times}; score {self.score:.2f}"
        )


def _json(value: Any) -> dict[str, Any]:
    data = value if isinstance(value, dict) else json.loads(value) if value else {}
    return dict(data)


def from_row(row: Mapping[str, Any]) -> Reflection:
    return Reflection(
        rank=int(row["rank"]),
        memory_id=int(row["memory_id"]),
        key=str(row["key"]),
        kind=str(row["kind"]),
        text=str(row["text"]),
        category=str(row["category"]),
        outcome=row["outcome"],
        score=float(row["score"]),
        similarity=None if row["similarity"] is None else float(row["similarity"]),
        keyword_score=float(row["keyword_score"] or 0.0),
        recency=float(row["recency"]),
        age_days=float(row["age_days"]),
        created_at=row["created_at"],
        linked_to=row["linked_to"],
        metadata=_json(row["metadata"]),
        why=_json(row["why"]),
    )


def query_text(text: str) -> str:
    """A plain reflection query: whitespace squashed, at most MAX_QUERY characters."""
    return " ".join(text.split())[:MAX_QUERY]


def reflect(
    conn: psycopg.Connection[Any],
    tenant: str,
    text: str,
    embedding: Any,
    *,
    k: int = 5,
    params: Mapping[str, Any] | None = None,
    query_model: str | None = None,
) -> list[Reflection]:
    """One round trip to spark.reflect. ``embedding`` None: the lexical fallback. ``query_model``: the
    model that made ``embedding`` (params.query_model, unless ``params`` names one): while another model
    is active, spark.reflect ignores the vector and runs lexically instead of comparing two models'
    vectors. Arguments of the wrong type are refused here (InputError naming them), not by the server;
    numpy's numbers are taken as Python's (``k=np.int64(5)``, in ``params`` too)."""
    tenant, text = text_arg("tenant", tenant), text_arg("query text", text)
    if query_model is not None and not isinstance(query_model, str):
        raise InputError(f"query_model must be a model name, got {type(query_model).__name__}")
    params = plain_numbers(params)
    params_arg("params", params)  # a params that is no mapping is named before anything is merged into it
    merged = dict(params or {})
    if embedding is not None and query_model is not None:
        merged.setdefault("query_model", query_model)
    args = {
        "tenant": tenant,
        "query": text,
        "embedding": embedding_arg(embedding),
        "k": integer_arg("k", k),
        "params": params_arg("params", merged),
    }
    if args["embedding"] is not None:
        ensure_vector_adapters(conn)
    with refusals(), conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(queries.REFLECT, args).fetchall()
    return [from_row(r) for r in rows]
