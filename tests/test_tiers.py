"""spark.assign_tiers at its thresholds and around the user's own tiers (sql/060-tiers.sql): a stored
reliability of exactly 0.9 earns the pin the docs promise, and an archive the user set is left alone, as a
user's pin is."""

from __future__ import annotations

import json
from typing import Any

import psycopg

Conn = psycopg.Connection[Any]
PIN_REASON = "validated 15+ times with reliability 0.9+"
YEAR_REASON = "a year unused, importance under 0.3"


def add(conn: Conn, tenant: str, key: str, importance: float = 0.5, **columns: Any) -> int:
    """Insert one memory directly (no model needed); returns its id."""
    names = "".join(f", {c}" for c in columns)
    values = "".join(f", %({c})s" for c in columns)
    row = conn.execute(
        f"""INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash, importance{names})
            VALUES (%(tenant)s, %(key)s, %(text)s, %(text)s, '\\x00', %(importance)s{values})
            RETURNING id""",
        {"tenant": tenant, "key": key, "text": f"memory {key}", "importance": importance} | columns,
    ).fetchone()
    assert row is not None
    return int(row[0])


def outcomes(conn: Conn, tenant: str, memory_id: int, **counts: int) -> float:
    """Record ``counts`` outcomes of each kind through spark.record_outcome; returns the last reliability."""
    reliability = 0.0
    for outcome, n in counts.items():
        for _ in range(n):
            row = conn.execute(
                "SELECT spark.record_outcome(%s, %s, %s)", (tenant, memory_id, outcome)
            ).fetchone()
            assert row is not None
            reliability = row[0]
    return reliability


def tiers(conn: Conn, tenant: str) -> list[tuple[Any, ...]]:
    """What spark.assign_tiers moved: (key, old tier, new tier, reason) each."""
    return conn.execute("SELECT * FROM spark.assign_tiers(%s)", (tenant,)).fetchall()


def stored(conn: Conn, memory_id: int) -> tuple[str, dict[str, Any]]:
    row = conn.execute("SELECT tier, metadata FROM spark.memories WHERE id = %s", (memory_id,)).fetchone()
    assert row is not None
    return row[0], row[1]


def test_a_reliability_of_exactly_0_9_earns_the_pin(conn: Conn, tenant: str) -> None:
    """Was: 17 helpful and 1 unhelpful store reliability 0.9 as a real (0.8999999761...), which the rule
    compared with the double 0.9 and found short: the documented "0.9 or more" pinned nothing."""
    mid = add(conn, tenant, "proven")
    assert outcomes(conn, tenant, mid, helpful=17, unhelpful=1) == 0.9
    assert conn.execute(
        "SELECT reliability::float8 < 0.9 FROM spark.memories WHERE id = %s", (mid,)
    ).fetchone() == (True,)  # the value the old comparison missed
    assert tiers(conn, tenant) == [("proven", "active", "pinned", PIN_REASON)]
    assert tiers(conn, tenant) == []  # and the pin holds on the next run


def test_the_archive_thresholds_read_the_stored_values_as_stored(conn: Conn, tenant: str) -> None:
    """A stored reliability or importance of exactly 0.3 is not under 0.3 (a guard: the double 0.3 sits
    below the real 0.3, so these held before the thresholds became reals too)."""
    judged = add(conn, tenant, "judged")
    assert outcomes(conn, tenant, judged, helpful=2, unhelpful=6) == 0.3  # (2 + 1) / (8 + 2)
    add(conn, tenant, "old", 0.3, created_at="2020-01-01T00:00:00Z")
    assert tiers(conn, tenant) == []
    add(conn, tenant, "older", 0.29, created_at="2020-01-01T00:00:00Z")
    assert tiers(conn, tenant) == [("older", "active", "archive", YEAR_REASON)]


def test_an_archive_the_user_set_is_left_alone(conn: Conn, tenant: str) -> None:
    """Was: a memory ingested (or set) as archive, with no rule's mark, came back as active with the reason
    "no archive or pin rule holds any more", while a user's pin was kept."""
    mine = add(conn, tenant, "mine", tier="archive")
    # a rule's mark without an archive rule's reason is not the rules' archive either
    flagged = add(conn, tenant, "flagged", tier="archive", metadata=json.dumps({"tier_by_rule": True}))
    assert tiers(conn, tenant) == []
    assert stored(conn, mine) == ("archive", {})  # nothing written, not even a reason
    assert stored(conn, flagged) == ("archive", {"tier_by_rule": True})


def test_a_users_archive_holds_even_when_the_memory_earns_a_pin(conn: Conn, tenant: str) -> None:
    mine = add(conn, tenant, "mine", tier="archive", metadata=json.dumps({"tier_by_rule": "yes"}))
    outcomes(conn, tenant, mine, helpful=20)
    assert tiers(conn, tenant) == []
    assert stored(conn, mine)[0] == "archive"


def test_a_rules_pin_the_user_archived_stays_archived(conn: Conn, tenant: str) -> None:
    """The rules pinned it (tier_by_rule true, the pin's reason); the user then archived it by hand. That
    archive is the user's: kept, and its metadata left as it was."""
    marks = {"tier_by_rule": True, "tier_reason": PIN_REASON}
    mid = add(conn, tenant, "was-pinned", tier="archive", metadata=json.dumps(marks))
    assert tiers(conn, tenant) == []
    assert stored(conn, mid) == ("archive", marks)


def test_the_rules_own_archive_is_still_taken_back(conn: Conn, tenant: str) -> None:
    """Only the rules' archive (tier_by_rule true with an archive rule's reason) moves when its rule stops
    holding."""
    marks = {"tier_by_rule": True, "tier_reason": YEAR_REASON}
    mid = add(conn, tenant, "lifted", 0.5, tier="archive", metadata=json.dumps(marks))
    assert tiers(conn, tenant) == [("lifted", "archive", "active", "no archive or pin rule holds any more")]
    assert stored(conn, mid) == ("active", {"tier_by_rule": False, "tier_reason": None})


RELIABILITY_REASON = "reliability under 0.3 after 4+ outcomes"


def ingest_row(conn: Conn, row: dict[str, Any]) -> None:
    """Ingest one file row as `spark-pg ingest` would (its fields left out keep their stored values)."""
    from spark_pg.ingest import ingest
    from spark_pg.records import validate_row

    ingest(conn, [validate_row(row, "tiers.jsonl", 1)], None)


def archived_by_rule(conn: Conn, tenant: str, key: str) -> int:
    """A memory ingested from a file, then archived by the reliability rule; returns its id."""
    ingest_row(conn, {"tenant": tenant, "key": key, "text": f"memory {key}"})
    row = conn.execute(
        "SELECT id FROM spark.memories WHERE tenant = %s AND key = %s", (tenant, key)
    ).fetchone()
    assert row is not None
    outcomes(conn, tenant, row[0], unhelpful=4)
    assert tiers(conn, tenant) == [(key, "active", "archive", RELIABILITY_REASON)]
    return int(row[0])


def test_a_row_that_leaves_the_tier_out_keeps_the_rules_marks(conn: Conn, tenant: str) -> None:
    """Was: re-ingesting a rule-archived memory with new metadata (and no tier) kept the archive but replaced
    the metadata, marks included: the rule's archive became the user's, never taken back."""
    mid = archived_by_rule(conn, tenant, "tagged")
    ingest_row(
        conn, {"tenant": tenant, "key": "tagged", "text": "memory tagged", "metadata": {"topic": "db"}}
    )
    marks = {"tier_by_rule": True, "tier_reason": RELIABILITY_REASON}
    assert stored(conn, mid) == ("archive", {"topic": "db"} | marks)
    outcomes(conn, tenant, mid, helpful=6)  # (6 + 1) / (10 + 2): the rule no longer holds
    assert tiers(conn, tenant) == [("tagged", "archive", "active", "no archive or pin rule holds any more")]


def test_a_row_that_sets_the_tier_drops_the_rules_marks(conn: Conn, tenant: str) -> None:
    """Was: a row setting tier archive over the rule's archive (metadata left out) kept the rule's marks, so
    the user's archive was taken back as soon as the rule stopped holding."""
    mid = archived_by_rule(conn, tenant, "shelved")
    ingest_row(conn, {"tenant": tenant, "key": "shelved", "text": "memory shelved", "tier": "archive"})
    assert stored(conn, mid) == ("archive", {})
    outcomes(conn, tenant, mid, helpful=6)
    assert tiers(conn, tenant) == []
    assert stored(conn, mid)[0] == "archive"


def test_a_rows_own_marks_never_make_its_tier_the_rules(conn: Conn, tenant: str) -> None:
    """The marks are spark.assign_tiers' own: a row carrying them (say, a copy of stored rows) sets a user's
    tier, which the rules leave alone."""
    marks = {"tier_by_rule": True, "tier_reason": RELIABILITY_REASON}
    ingest_row(conn, {"tenant": tenant, "key": "copied", "text": "c", "tier": "archive", "metadata": marks})
    row = conn.execute(
        "SELECT id FROM spark.memories WHERE tenant = %s AND key = 'copied'", (tenant,)
    ).fetchone()
    assert row is not None and stored(conn, row[0]) == ("archive", {})
    assert tiers(conn, tenant) == []


def set_tier(conn: Conn, memory_id: int, tier: str) -> None:
    conn.execute("UPDATE spark.memories SET tier = %s WHERE id = %s", (tier, memory_id))


def test_a_pin_set_in_sql_after_the_rules_pin_was_undone_is_the_users(conn: Conn, tenant: str) -> None:
    """Was (audit S): the rule pinned it, the user set it back to active and later pinned it by hand in SQL;
    the rule's marks stayed through both updates, so the next run took the user's pin for the rule's and
    unpinned it ("no archive or pin rule holds any more")."""
    mid = add(conn, tenant, "pinme")
    outcomes(conn, tenant, mid, helpful=17)
    assert tiers(conn, tenant) == [("pinme", "active", "pinned", PIN_REASON)]
    assert stored(conn, mid)[1] == {"tier_by_rule": True, "tier_reason": PIN_REASON}
    set_tier(conn, mid, "active")
    assert stored(conn, mid) == ("active", {})  # the tier is the user's now: no marks
    outcomes(conn, tenant, mid, unhelpful=6)  # the pin rule no longer holds
    assert tiers(conn, tenant) == []
    set_tier(conn, mid, "pinned")
    assert tiers(conn, tenant) == []
    assert stored(conn, mid) == ("pinned", {})


def test_an_archive_set_in_sql_after_the_rules_archive_was_undone_is_the_users(
    conn: Conn, tenant: str
) -> None:
    mid = add(conn, tenant, "arch", 0.5)
    outcomes(conn, tenant, mid, unhelpful=4)
    assert tiers(conn, tenant) == [("arch", "active", "archive", "reliability under 0.3 after 4+ outcomes")]
    set_tier(conn, mid, "active")  # restored by hand
    outcomes(conn, tenant, mid, helpful=3)
    set_tier(conn, mid, "archive")  # and archived by hand
    assert tiers(conn, tenant) == []
    assert stored(conn, mid) == ("archive", {})


def test_an_update_that_keeps_the_tier_keeps_the_marks_and_the_rule_keeps_its_own(
    conn: Conn, tenant: str
) -> None:
    """Only a change of tier makes it the user's: an update of other columns, or of the metadata, leaves the
    rule's archive the rule's, which the rule still takes back."""
    marks = {"tier_by_rule": True, "tier_reason": YEAR_REASON}
    mid = add(conn, tenant, "old", 0.2, tier="archive", metadata=json.dumps(marks))
    conn.execute(
        "UPDATE spark.memories SET importance = 0.5, tier = 'archive', metadata = metadata || '{\"x\": 1}' "
        "WHERE id = %s",
        (mid,),
    )
    assert stored(conn, mid) == ("archive", marks | {"x": 1})
    assert tiers(conn, tenant) == [("old", "archive", "active", "no archive or pin rule holds any more")]
    assert conn.execute("SELECT current_setting('spark.tier_rule_writes', true)").fetchone() == ("off",)
