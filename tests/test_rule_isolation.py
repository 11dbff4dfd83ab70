"""One tenant's trigger rules cost the others nothing: no call tests another tenant's patterns.

The planner puts a regular expression (cost 1) before a tenant's `= ANY(array)` (cost of the array's
length), so without a fence every call compiled every tenant's patterns: with 400 rules of 40 other tenants
a call took about 50 ms instead of 2, and one slow pattern slowed every tenant. A rule whose pattern does
not even compile (stored before revision 0020, whose triggers now refuse it on any write) makes any call
that tests it fail, so these tests see the order of evaluation itself, with no timing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors

from spark_pg.advisor import Advisor, AdvisorOptions, blocking
from spark_pg.config import Settings
from spark_pg.embedding import Embedder
from tests.conftest import rolled_back, seeded_database

Conn = psycopg.Connection[Any]
T = "calm"
MEMORIES = [("backup", "ops", "Before any destructive command on the database, take a backup first.")]


@pytest.fixture(scope="module")
def rdb(server_url: str, model_settings: Settings, embedder: Embedder) -> Iterator[str]:
    with seeded_database(server_url, model_settings, embedder, T, MEMORIES) as url:
        yield url


@pytest.fixture
def conn(rdb: str) -> Iterator[Conn]:
    with rolled_back(rdb) as connection:
        connection.execute("SELECT spark.put_trigger_rule(%s, 'own', 'deploy', ARRAY['backup'])", (T,))
        connection.execute(
            "SELECT spark.put_trigger_rule(%s, 'own-shadow', 'release', ARRAY['backup'], shadow => true, "
            "origin => 'learned')",
            (T,),
        )
        # another tenant's rules with a pattern no regex engine compiles, live, shadow and named as the
        # pack's interrupting rule
        broken = (
            ("broken", False, False),
            ("broken-shadow", True, False),
            ("destructive_commands", False, True),
        )
        # stored as a database upgraded from before revision 0020 may hold them: past the table's triggers
        connection.execute("SET LOCAL session_replication_role = replica")
        for name, shadow, interrupt in broken:
            connection.execute(
                "INSERT INTO spark.trigger_rules (tenant, name, pattern, surface, shadow, interrupt, "
                "priority, origin) VALUES ('noisy', %s, '(', ARRAY['backup'], %s, %s, 'critical', %s)",
                (name, shadow, interrupt, "learned" if shadow else "static"),
            )
        connection.execute("SET LOCAL session_replication_role = origin")
        # the plan of a table whose statistics say it is small (the audit's case, 400 rules just written):
        # a scan of every rule, the pattern tested with the tenant in one filter. Whatever plan is chosen,
        # another tenant's pattern must not be tested
        connection.execute("SET enable_indexscan = off")
        connection.execute("SET enable_bitmapscan = off")
        yield connection


def test_the_broken_rule_fails_its_own_tenant(conn: Conn) -> None:
    """The fixture's rule really is tested when it is the caller's own: the tests below mean something."""
    with pytest.raises(errors.InvalidRegularExpression), conn.transaction():
        conn.execute("SELECT * FROM spark.retrieve('noisy', 'deploy the release', NULL, 5)")


def test_retrieve_and_explain_never_test_another_tenants_patterns(conn: Conn) -> None:
    own = '{"include_system": false}'
    rows = conn.execute("SELECT key FROM spark.retrieve(%s, 'deploy the release', NULL, 5, %s)", (T, own))
    assert ("backup",) in rows.fetchall()  # found by its own rule
    explained = conn.execute("SELECT key FROM spark.explain(%s, 'deploy the release', NULL, 5)", (T,))
    assert ("backup",) in explained.fetchall()


def test_advise_logs_its_own_shadow_hits_only(conn: Conn) -> None:
    conn.execute("SELECT * FROM spark.advise(%s, 'deploy the release', NULL, 5)", (T,)).fetchall()
    hits = conn.execute("SELECT rule_name FROM spark.trigger_shadow_hits WHERE tenant = %s", (T,)).fetchall()
    assert hits == [("own-shadow",)]


def test_the_interrupt_check_never_tests_another_tenants_rule_of_the_same_name(
    conn: Conn, embedder: Embedder
) -> None:
    advisor = Advisor(conn, embedder, T, options=AdvisorOptions(interrupts=True))
    stop = blocking(advisor.advise("Bash", {"command": "rm -rf /var/data"}))
    assert stop is not None and "destructive_commands" in (stop.trigger or {}).get("rules", [])
