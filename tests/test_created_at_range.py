"""Migration 0017: a memory's created_at lies between 0001-01-02 and 9999-12-30 (UTC), so every client can
read it back as a date. A row written in SQL at 1 BC or 10000 AD made every spark.retrieve that surfaced it
fail in psycopg, for the whole tenant."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest
from psycopg import errors

from spark_pg import schema
from spark_pg.records import EARLIEST, LATEST
from spark_pg.schema import MigrationWarning
from tests.test_visible_text import convalidated as validated

INSERT = "INSERT INTO spark.memories (tenant, key, text, created_at) VALUES ('ca', %s, 'a dated memory', %s)"


def convalidated(url: str) -> bool | None:
    return validated(url, "memories_created_at_range")


@pytest.mark.parametrize(
    "when",
    ["0001-01-01 12:00:00+00", "0001-01-01 00:30:00+01", "0002-01-01 BC", "9999-12-31 00:00:00+00",
     "10000-01-01 00:00:00+00", "infinity", "-infinity"],
)  # fmt: skip
def test_a_time_no_client_can_read_back_is_refused_in_sql(installed_db: str, when: str) -> None:
    refused = pytest.raises(errors.CheckViolation, match="memories_created_at_range")
    with psycopg.connect(installed_db) as c, refused:
        c.execute(INSERT, ("k", when))


def test_the_bounds_are_ingests_and_read_back_in_any_time_zone(installed_db: str) -> None:
    with psycopg.connect(installed_db) as c:
        c.execute(INSERT, ("first", EARLIEST))
        c.execute(INSERT, ("last", LATEST))
        for zone in ("Pacific/Kiritimati", "Etc/GMT+12"):  # +14 and -12 hours
            c.execute("SELECT set_config('TimeZone', %s, false)", (zone,))
            got = dict(c.execute("SELECT key, created_at FROM spark.memories WHERE tenant = 'ca'").fetchall())
            assert {k: v.astimezone(UTC) for k, v in got.items()} == {"first": EARLIEST, "last": LATEST}


def test_the_migration_validates_the_check_when_no_row_breaks_it(fresh_db: str) -> None:
    schema.upgrade(fresh_db, "0016_visible_text")
    with psycopg.connect(fresh_db) as c:
        c.execute(INSERT, ("k", datetime(2024, 5, 1, tzinfo=UTC)))
    schema.upgrade(fresh_db, "0017_plausible_created_at")
    assert convalidated(fresh_db) is True
    schema.downgrade(fresh_db, "0016_visible_text")
    assert convalidated(fresh_db) is None


def test_the_migration_keeps_old_rows_out_of_range_and_checks_every_new_one(fresh_db: str) -> None:
    schema.upgrade(fresh_db, "0016_visible_text")
    with psycopg.connect(fresh_db) as c:
        c.execute(INSERT, ("old", "0001-01-01 00:30:00+01"))  # 1 BC in UTC
    with pytest.warns(
        MigrationWarning, match="^1 memories were created before 0001-01-02 or after 9999-12-30"
    ):
        schema.upgrade(fresh_db, "0017_plausible_created_at")
    assert convalidated(fresh_db) is False  # not validated: the old row breaks it
    with psycopg.connect(fresh_db) as c:
        assert c.execute("SELECT count(*) FROM spark.memories WHERE tenant = 'ca'").fetchone() == (1,)
        with pytest.raises(errors.CheckViolation, match="memories_created_at_range"):
            c.execute(INSERT, ("new", "10000-01-01 00:00:00+00"))
        c.rollback()
        c.execute("UPDATE spark.memories SET created_at = '2024-05-01' WHERE tenant = 'ca' AND key = 'old'")
        c.execute("ALTER TABLE spark.memories VALIDATE CONSTRAINT memories_created_at_range")
        c.commit()
    assert convalidated(fresh_db) is True


def test_spark_pg_init_prints_the_migrations_warning(
    fresh_db: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The warning went only to the server's log: `spark-pg init` said nothing of the rows left unchecked."""
    from spark_pg.cli import main

    schema.upgrade(fresh_db, "0016_visible_text")
    with psycopg.connect(fresh_db) as c:
        c.execute(INSERT, ("old", "10000-06-01 00:00:00+00"))
    monkeypatch.setenv("SPARK_PG_DATABASE_URL", fresh_db)
    assert main(["init"]) == 0
    err = capsys.readouterr().err
    assert "spark-pg: warning: 1 memories were created before 0001-01-02 or after 9999-12-30 (UTC)" in err
    assert main(["init"]) == 0  # nothing left to migrate: nothing to say
    assert "warning" not in capsys.readouterr().err
