"""A trigger rule written in SQL passes put_trigger_rule's pattern checks (revision 0020's triggers).

Was (audit U): an ``INSERT`` straight into spark.trigger_rules, by the owner or by a tenant role that
row-level security lets write its own rules, stored any pattern, and every retrieval of its tenant then failed
on it (2201B inside spark.retrieve; for the pack's rules, every tenant's)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors

from spark_pg import schema
from spark_pg.schema import MigrationWarning
from tests.conftest import rolled_back, temp_database

Conn = psycopg.Connection[Any]
INSERT = (
    "INSERT INTO spark.trigger_rules (tenant, name, pattern, context_pattern, surface) "
    "VALUES ('acme', 'r', %s, %s, '{k}')"
)
# (pattern, context_pattern, what the refusal says)
REFUSED = [
    ("(", None, "rule r: pattern is not a valid regular expression"),
    ("(a+)+$", None, "rule r: pattern nests quantifiers"),
    ("deploy|", None, "rule r: pattern 'deploy|' matches an empty text"),
    ("x(a|b)\\1", None, "rule r: pattern .*backreference"),
    ("deploy", "[", "rule r: context_pattern is not a valid regular expression"),
    ("deploy", "((a*)*)*", "rule r: context_pattern nests quantifiers"),
]


@pytest.fixture(scope="module")
def rules_db(server_url: str) -> Iterator[str]:
    with temp_database(server_url, install=True) as url:
        yield url


@pytest.fixture
def conn(rules_db: str) -> Iterator[Conn]:
    with rolled_back(rules_db) as connection:
        yield connection


def rules(conn: Conn) -> list[tuple[str, str | None]]:
    rows = conn.execute("SELECT pattern, context_pattern FROM spark.trigger_rules WHERE tenant = 'acme'")
    return [(str(r[0]), r[1]) for r in rows.fetchall()]


@pytest.mark.parametrize(("pattern", "context", "message"), REFUSED)
def test_an_insert_in_sql_is_refused_like_put_trigger_rule(
    conn: Conn, pattern: str, context: str | None, message: str
) -> None:
    with pytest.raises(errors.InvalidRegularExpression, match=message), conn.transaction():
        conn.execute(INSERT, (pattern, context))
    # put_trigger_rule says the same
    with pytest.raises(errors.InvalidRegularExpression, match=message), conn.transaction():
        conn.execute(
            "SELECT spark.put_trigger_rule('acme', 'r', %s, '{k}', context_pattern => %s)", (pattern, context)
        )
    assert rules(conn) == []
    # nothing stored, so the tenant's retrievals go on
    conn.execute("SELECT * FROM spark.retrieve('acme', 'deploy the release', NULL, 5)").fetchall()


@pytest.mark.parametrize(("pattern", "context", "message"), REFUSED)
def test_an_update_in_sql_is_refused(conn: Conn, pattern: str, context: str | None, message: str) -> None:
    conn.execute(INSERT, ("deploy", None))
    with pytest.raises(errors.InvalidRegularExpression, match=message), conn.transaction():
        conn.execute(
            "UPDATE spark.trigger_rules SET pattern = %s, context_pattern = %s WHERE tenant = 'acme'",
            (pattern, context),
        )
    assert rules(conn) == [("deploy", None)]


def test_good_rules_written_in_sql_are_kept_and_fire(conn: Conn) -> None:
    conn.execute(INSERT, (r"\mdeploy\M", "release"))
    conn.execute("UPDATE spark.trigger_rules SET confidence = 0.5 WHERE tenant = 'acme'")  # no pattern change
    conn.execute("UPDATE spark.trigger_rules SET pattern = 'ship' WHERE tenant = 'acme'")
    assert rules(conn) == [("ship", "release")]
    conn.execute(
        "INSERT INTO spark.memories (tenant, key, text, category) "
        "VALUES ('acme', 'k', 'Tag the build first.', 'ops')"
    )
    rows = conn.execute(
        "SELECT key, why -> 'trigger' -> 'rules' FROM spark.retrieve('acme', 'ship the release', NULL, 5)"
    ).fetchall()
    assert rows == [("k", ["r"])]


def test_the_upgrade_warns_of_rules_stored_before_and_keeps_them(fresh_db: str) -> None:
    schema.install(fresh_db)  # the functions the upgrade's count uses
    schema.downgrade(fresh_db, "0019_visible_descriptor")
    with psycopg.connect(fresh_db) as c:
        c.execute(INSERT, ("(", None))
        c.execute(INSERT.replace("'r'", "'fine'"), ("deploy", None))
        c.execute(INSERT.replace("'r'", "'every'"), (".*", None))
    with pytest.warns(MigrationWarning, match="^2 trigger rules hold a pattern spark.put_trigger_rule"):
        schema.install(fresh_db)
    with psycopg.connect(fresh_db) as c:
        listed = c.execute(
            "SELECT name, spark._trigger_rule_problem(pattern, context_pattern) FROM spark.trigger_rules "
            "WHERE spark._trigger_rule_problem(pattern, context_pattern) IS NOT NULL ORDER BY name"
        ).fetchall()
        assert [name for name, _ in listed] == ["every", "r"]
        assert "matches an empty text" in listed[0][1] and "not a valid regular expression" in listed[1][1]
        assert c.execute("SELECT count(*) FROM spark.trigger_rules").fetchone() == (3,)
