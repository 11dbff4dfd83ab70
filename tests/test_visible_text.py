"""A memory's text must show something: Python's ingest and the database's CHECK memories_text_visible
(migration 0016) refuse the same texts, those of white space, control and invisible format characters only."""

from __future__ import annotations

import runpy
import unicodedata
from itertools import pairwise
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors

from spark_pg import schema
from spark_pg.errors import IngestError
from spark_pg.records import validate_row
from spark_pg.rowfiles import INVISIBLE_RANGES, shows_nothing
from spark_pg.schema import MigrationWarning

SRC = Path("memories.jsonl")
INVISIBLE = [
    " \t\n",
    "\u200b",  # zero-width space
    "\ufeff\u200d\u2060",  # BOM, zero-width joiner, word joiner
    "\u00a0\u3000\u2028",  # no-break space, ideographic space, line separator
    "\x01\x7f\x85",  # control characters
    "\u202e\u00ad",  # right-to-left override, soft hyphen
    "\U000e0041\U000e007f",  # tag characters
]
SHOWS = ["x", "\u200bx\u200b", "é", "\U0001f600", "\u0301", "\u2800", "-"]


def visible_pattern() -> str:
    """The migration's pattern, read from its file (alembic/versions is not a package)."""
    path = Path(__file__).parent.parent / "alembic" / "versions" / "0016_visible_text.py"
    pattern = runpy.run_path(str(path))["VISIBLE"]
    assert isinstance(pattern, str)
    return pattern


@pytest.mark.parametrize("text", INVISIBLE)
def test_ingest_refuses_a_text_of_invisible_characters_only(text: str) -> None:
    with pytest.raises(IngestError, match=r"field 'text': must not be empty"):
        validate_row({"tenant": "t", "text": text}, SRC, 1, None)


@pytest.mark.parametrize("text", SHOWS)
def test_ingest_takes_a_text_with_one_character_that_shows(text: str) -> None:
    assert validate_row({"tenant": "t", "text": text}, SRC, 1, None).text == text


def test_only_the_text_must_show_something() -> None:
    row = validate_row({"tenant": "t", "text": "x", "category": "\u200b", "key": "\u200b"}, SRC, 1, None)
    assert (row.category, row.key) == ("\u200b", "\u200b")


def test_the_ranges_are_unicode_categories_cc_cf_and_z_sorted_and_disjoint() -> None:
    assert all(a <= b for a, b in INVISIBLE_RANGES)
    assert all(b1 < a2 - 1 for (_, b1), (a2, _) in pairwise(INVISIBLE_RANGES))
    if unicodedata.unidata_version == "14.0.0":  # the frozen ranges are Unicode 14's (Python 3.11)
        invisible = {"Cc", "Cf", "Zs", "Zl", "Zp"}
        for cp in range(0x110000):
            if 0xD800 <= cp <= 0xDFFF:
                continue
            expected = unicodedata.category(chr(cp)) in invisible
            assert shows_nothing(chr(cp)) is expected, hex(cp)


def test_the_check_and_python_agree_on_every_code_point(conn: psycopg.Connection[Any]) -> None:
    pattern = visible_pattern()
    rows = conn.execute(
        "SELECT i FROM generate_series(1, 1114111) i WHERE (i < 55296 OR i > 57343) AND chr(i) !~ %s",
        (pattern,),
    ).fetchall()
    in_sql = {r[0] for r in rows}
    in_python = {cp for a, b in INVISIBLE_RANGES for cp in range(max(a, 1), b + 1)}
    assert in_sql == in_python
    assert len(in_sql) > 200


@pytest.mark.parametrize("text", INVISIBLE)
def test_sql_refuses_an_invisible_text_on_insert_and_update(conn: psycopg.Connection[Any], text: str) -> None:
    with pytest.raises(errors.CheckViolation, match="memories_text_visible"), conn.transaction():
        conn.execute("INSERT INTO spark.memories (tenant, key, text) VALUES ('vis', 'k', %s)", (text,))
    conn.execute("INSERT INTO spark.memories (tenant, key, text) VALUES ('vis', 'k', 'shows')")
    with pytest.raises(errors.CheckViolation, match="memories_text_visible"), conn.transaction():
        conn.execute("UPDATE spark.memories SET text = %s WHERE tenant = 'vis' AND key = 'k'", (text,))
    assert conn.execute("SELECT text FROM spark.memories WHERE tenant = 'vis'").fetchall() == [("shows",)]


@pytest.mark.parametrize("text", SHOWS)
def test_sql_takes_a_text_with_one_character_that_shows(conn: psycopg.Connection[Any], text: str) -> None:
    conn.execute("INSERT INTO spark.memories (tenant, key, text) VALUES ('vis', 'k', %s)", (text,))
    assert conn.execute("SELECT text FROM spark.memories WHERE tenant = 'vis'").fetchone() == (text,)


def convalidated(url: str, constraint: str = "memories_text_visible") -> bool | None:
    """Whether spark.memories' CHECK ``constraint`` is validated; None when there is none."""
    with psycopg.connect(url) as c:
        row = c.execute(
            "SELECT convalidated FROM pg_constraint "
            "WHERE conname = %s AND conrelid = 'spark.memories'::regclass",
            (constraint,),
        ).fetchone()
    return None if row is None else bool(row[0])


def test_the_migration_validates_the_check_when_no_text_breaks_it(fresh_db: str) -> None:
    schema.upgrade(fresh_db, "0015_outcome_per_item")
    with psycopg.connect(fresh_db) as c:
        c.execute("INSERT INTO spark.memories (tenant, key, text) VALUES ('vis', 'k', 'shows')")
    schema.upgrade(fresh_db, "0016_visible_text")
    assert convalidated(fresh_db) is True
    schema.downgrade(fresh_db, "0015_outcome_per_item")
    assert convalidated(fresh_db) is None


def test_the_migration_keeps_old_blank_texts_and_checks_every_new_row(fresh_db: str) -> None:
    schema.upgrade(fresh_db, "0015_outcome_per_item")
    with psycopg.connect(fresh_db) as c:
        c.execute("INSERT INTO spark.memories (tenant, key, text) VALUES ('vis', 'blank', %s)", ("\u200b ",))
    with pytest.warns(
        MigrationWarning, match="^1 memories hold a text of white space and invisible characters"
    ):
        schema.upgrade(fresh_db, "0016_visible_text")
    assert convalidated(fresh_db) is False  # not validated: the old row breaks it
    with psycopg.connect(fresh_db) as c:
        assert c.execute("SELECT count(*) FROM spark.memories WHERE tenant = 'vis'").fetchone() == (1,)
        with pytest.raises(errors.CheckViolation, match="memories_text_visible"):
            c.execute("INSERT INTO spark.memories (tenant, key, text) VALUES ('vis', 'new', ' ')")
        c.rollback()
        c.execute("UPDATE spark.memories SET text = 'now it shows' WHERE tenant = 'vis' AND key = 'blank'")
        c.execute("ALTER TABLE spark.memories VALIDATE CONSTRAINT memories_text_visible")
        c.commit()
    assert convalidated(fresh_db) is True


@pytest.mark.parametrize("descriptor", ["   ", "\u200b", "\t\n"])
def test_a_descriptor_that_shows_nothing_is_refused_in_sql(installed_db: str, descriptor: str) -> None:
    """Was (audit T): accepted; the worker then failed on it ("document texts must not be empty") until it
    gave up, and the row stayed in the backlog for good."""
    refused = pytest.raises(errors.CheckViolation, match="memories_descriptor_visible")
    with psycopg.connect(installed_db) as c, refused:
        c.execute(
            "INSERT INTO spark.memories (tenant, key, text, descriptor) VALUES ('vis', 'k', 'shows', %s)",
            (descriptor,),
        )


def test_the_descriptor_migration_warns_and_keeps_old_rows(fresh_db: str) -> None:
    schema.upgrade(fresh_db, "0018_tier_marks_follow")
    with psycopg.connect(fresh_db) as c:
        c.execute(
            "INSERT INTO spark.memories (tenant, key, text, descriptor) VALUES ('vis', 'k', 'shows', ' ')"
        )
    with pytest.warns(MigrationWarning, match="^1 memories hold a descriptor of white space"):
        schema.upgrade(fresh_db, "0019_visible_descriptor")
    with psycopg.connect(fresh_db) as c:
        c.execute("UPDATE spark.memories SET descriptor = text WHERE key = 'k'")
        c.execute("ALTER TABLE spark.memories VALIDATE CONSTRAINT memories_descriptor_visible")
    schema.downgrade(fresh_db, "0018_tier_marks_follow")
