"""`spark-pg stats` (spark_pg.health): the figures it reports, read back against the tables."""

from __future__ import annotations

from typing import Any

import psycopg

from spark_pg.health import collect, format_report
from spark_pg.ingest import ingest
from spark_pg.records import MemoryIn

MODEL = "all-MiniLM-L6-v2-int8"


def test_the_backlog_counts_the_rows_given_up_apart_from_those_awaiting_a_vector(
    conn: psycopg.Connection[Any], tenant: str
) -> None:
    """It said "3 awaiting a vector; 1 given up after 5 failures" of 2 waiting and 1 given up: the count of
    rows awaiting a vector was the whole queue's."""
    ingest(
        conn,
        [MemoryIn(tenant=tenant, key=f"k{i}", text=f"Deferred memory number {i}.") for i in range(3)],
        None,
    )
    conn.execute(
        "UPDATE spark.embed_queue SET attempts = 5 WHERE tenant = %s AND memory_id = "
        "(SELECT id FROM spark.memories WHERE tenant = %s AND key = 'k0')",
        (tenant, tenant),
    )
    report = collect(conn, tenant, None, MODEL)
    text = format_report(report)
    assert "backlog       2 awaiting a vector (oldest " in text
    assert "; 1 given up after 5 failures" in text
    backlog = report["backlog"]
    assert (backlog["queued"], backlog["pending"], backlog["given_up"]) == (3, 2, 1)
    assert backlog["oldest_s"] is not None  # of the two still waiting
    with_ten = collect(conn, tenant, None, MODEL, max_attempts=10)["backlog"]  # a worker giving up later
    assert (with_ten["queued"], with_ten["pending"], with_ten["given_up"]) == (3, 3, 0)


def test_an_empty_backlog(conn: psycopg.Connection[Any], tenant: str) -> None:
    backlog = collect(conn, tenant, None, MODEL)["backlog"]
    assert backlog == {"queued": 0, "pending": 0, "given_up": 0, "max_attempts": 5, "oldest_s": None}
    assert "backlog       0 awaiting a vector\n" in format_report(collect(conn, tenant, None, MODEL))


def test_a_tenant_name_is_shown_with_its_control_characters_as_escapes(conn: psycopg.Connection[Any]) -> None:
    """Found in review: stats printed a tenant's name raw (SQL takes any text, ESC sequences included)."""
    tenant = "evil\x1b[2J"
    ingest(conn, [MemoryIn(tenant=tenant, key="k", text="A memory of an oddly named tenant.")], None)
    text = format_report(collect(conn, tenant, None, MODEL))
    assert "\x1b" not in text and "tenant evil\\x1b[2J" in text
