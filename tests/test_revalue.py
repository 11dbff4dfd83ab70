"""Importance revaluation: spark.revalue_sample / spark.revalue_apply edges and errors, the auto and
interactive deciders, the decisions file, and `spark-pg revalue` end to end, on a real database."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors

from spark_pg import schema
from spark_pg.cli import main
from spark_pg.errors import ArgumentRefused, InputError
from spark_pg.revalue import (
    SKIPPED,
    SKIPPED_DECIDED,
    SKIPPED_DELETED,
    Decision,
    Sampled,
    apply,
    decide_auto,
    decide_interactive,
    propose,
    read_decisions,
    sample,
    write_sample,
)
from spark_pg.traces.descriptor import make_trace
from tests.conftest import point_cli, rolled_back, temp_database

Conn = psycopg.Connection[Any]
OLD = timedelta(days=30)


@pytest.fixture(scope="module")
def rv_db(server_url: str) -> Iterator[str]:
    """This module's own fresh install."""
    with temp_database(server_url, install=True) as url:
        yield url


@pytest.fixture
def conn(rv_db: str) -> Iterator[Conn]:
    with rolled_back(rv_db) as connection:
        yield connection


def add(
    conn: Conn,
    tenant: str,
    key: str,
    importance: float = 0.2,
    age: timedelta = OLD,
    text: str | None = None,
    **columns: Any,
) -> int:
    """Insert one memory directly (no model needed); returns its id."""
    names = ", ".join(columns)
    values = ", ".join(f"%({c})s" for c in columns)
    row = conn.execute(
        f"""INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash, importance, created_at
                                        {", " + names if names else ""})
            VALUES (%(tenant)s, %(key)s, %(text)s, %(text)s, '\\x00', %(importance)s, now() - %(age)s
                    {", " + values if values else ""})
            RETURNING id""",
        {"tenant": tenant, "key": key, "text": text or f"memory {key}", "importance": importance, "age": age}
        | columns,
    ).fetchone()
    assert row is not None
    return int(row[0])


def sample_keys(conn: Conn, tenant: str | None, n: Any = 100, **params: Any) -> list[str]:
    casts = {"max_importance": "::real"}  # a Python float is a double precision
    args = "".join(f", {name} => %({name})s{casts.get(name, '')}" for name in params)
    rows = conn.execute(
        f"SELECT key FROM spark.revalue_sample(tenant => %(tenant)s, n => %(n)s{args})",
        {"tenant": tenant, "n": n} | params,
    ).fetchall()
    return [r[0] for r in rows]


def revalue(conn: Conn, tenant: str | None, decisions: Any, by: str = "test") -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT * FROM spark.revalue_apply(%s, %s::jsonb, %s)",
        (tenant, decisions if decisions is None or isinstance(decisions, str) else json.dumps(decisions), by),
    ).fetchall()


def importances(conn: Conn, tenant: str) -> dict[str, float]:
    rows = conn.execute("SELECT key, importance FROM spark.memories WHERE tenant = %s", (tenant,))
    return {k: round(v, 3) for k, v in rows.fetchall()}


def logged(conn: Conn, tenant: str) -> int:
    row = conn.execute("SELECT count(*) FROM spark.revaluations WHERE tenant = %s", (tenant,)).fetchone()
    assert row is not None
    return int(row[0])


# ------------------------------------------------------------------------------------ spark.revalue_sample


def test_sample_takes_old_low_importance_memories_not_revalued_lately(conn: Conn, tenant: str) -> None:
    add(conn, tenant, "low")
    add(conn, tenant, "floor", importance=0.3)
    add(conn, tenant, "default", importance=0.5)
    add(conn, tenant, "young", age=timedelta(days=1))
    kept = add(conn, tenant, "kept")
    add(conn, "other-tenant", "theirs")
    revalue(conn, tenant, [{"id": kept, "importance": 0.2, "reason": "fine as it is"}])
    assert sorted(sample_keys(conn, tenant)) == ["floor", "low"]
    assert sorted(sample_keys(conn, tenant, cooldown=timedelta(0))) == ["floor", "kept", "low"]
    assert sorted(sample_keys(conn, tenant, max_importance=0.5, min_age=timedelta(0))) == [
        "default",
        "floor",
        "low",
        "young",
    ]
    assert sample_keys(conn, tenant, max_importance=0.1) == []


def test_sample_edges_empty_tenant_zero_and_huge_n(conn: Conn, tenant: str) -> None:
    assert sample_keys(conn, tenant, 10) == []
    for i in range(5):
        add(conn, tenant, f"m{i}")
    assert sample_keys(conn, tenant, 0) == []
    assert sorted(sample_keys(conn, tenant, 2_000_000_000)) == [f"m{i}" for i in range(5)]
    assert len(sample_keys(conn, tenant, 3)) == 3


def test_sample_is_random_and_a_seed_repeats_it(conn: Conn, tenant: str) -> None:
    for i in range(60):
        add(conn, tenant, f"m{i:02}")
    seeded = sample_keys(conn, tenant, 8, seed=42)
    assert len(seeded) == len(set(seeded)) == 8
    assert sample_keys(conn, tenant, 8, seed=42) == seeded
    samples = {tuple(sorted(sample_keys(conn, tenant, 8, seed=s))) for s in range(8)}
    assert len(samples) >= 6
    assert len({k for s in samples for k in s}) >= 30  # spread over the tenant, not one clump
    unseeded = {tuple(sorted(sample_keys(conn, tenant, 8))) for _ in range(4)}
    assert len(unseeded) >= 2


def test_sample_reads_about_n_rows_of_a_large_tenant(conn: Conn, tenant: str) -> None:
    conn.execute(
        """INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash, importance, created_at)
           SELECT %s, 'k' || g, 'memory ' || g, 'memory ' || g, '\\x00', (g %% 10) / 10.0,
                  now() - interval '30 days'
           FROM generate_series(1, 20000) g""",
        (tenant,),
    )
    conn.execute("ANALYZE spark.memories")
    stats = """SELECT seq_scan, idx_tup_fetch FROM pg_stat_xact_user_tables
               WHERE relid = 'spark.memories'::regclass"""
    before = conn.execute(stats).fetchone()
    assert len(sample_keys(conn, tenant, 10)) == 10
    after = conn.execute(stats).fetchone()
    assert before is not None and after is not None
    assert after[0] == before[0]  # no sequential scan
    assert after[1] - before[1] < 200  # rows read: about 10 / (share at or under 0.3), not 20,000


def test_sample_returns_the_signals_a_reviewer_needs(conn: Conn, tenant: str) -> None:
    mid = add(conn, tenant, "seen", helpful_count=2, ignored_count=1, reliability=0.6, actionability=0.4)
    rid = conn.execute(
        "INSERT INTO spark.retrievals (tenant, query_text) VALUES (%s, 'q'), (%s, 'q') RETURNING id",
        (tenant, tenant),
    ).fetchall()
    for (r,) in rid:
        conn.execute(
            """INSERT INTO spark.retrieval_items (tenant, retrieval_id, memory_id, memory_tenant, rank, score,
                                                  signals, pools)
               VALUES (%s, %s, %s, %s, 1, 0.5, '{}', '{semantic}')""",
            (tenant, r, mid, tenant),
        )
    [memory] = sample(conn, tenant, 5)
    assert (memory.id, memory.key, memory.helpful_count, memory.ignored_count) == (mid, "seen", 2, 1)
    assert memory.successes == 2 and memory.outcomes == 3
    assert memory.reliability == pytest.approx(0.6) and memory.actionability == pytest.approx(0.4)
    assert memory.times_surfaced == 2 and memory.last_surfaced_at is not None
    assert memory.last_revalued_at is None and 29 < memory.age_days() < 31


@pytest.mark.parametrize(
    ("tenant", "n", "params", "code", "message"),
    [
        (None, 5, {}, "22004", "tenant must not be NULL"),
        ("", 5, {}, "22023", "tenant must be 1 to 128"),
        ("t", None, {}, "22004", "n must not be NULL"),
        ("t", -1, {}, "22023", "n must be 0 or more"),
        ("t", 5, {"max_importance": 1.5}, "22023", "max_importance must be between 0 and 1"),
        ("t", 5, {"max_importance": float("nan")}, "22023", "max_importance must be between 0 and 1"),
        ("t", 5, {"max_importance": None}, "22004", "max_importance must not be NULL"),
        ("t", 5, {"min_age": timedelta(days=-1)}, "22023", "min_age must not be negative"),
        ("t", 5, {"min_age": None}, "22004", "min_age must not be NULL"),
        ("t", 5, {"cooldown": timedelta(days=-1)}, "22023", "cooldown must not be negative"),
    ],
)
def test_sample_rejects_bad_input_with_an_errcode(
    conn: Conn, tenant: str | None, n: Any, params: dict[str, Any], code: str, message: str
) -> None:
    with pytest.raises(psycopg.Error, match=message) as raised:
        sample_keys(conn, tenant, n, **params)
    assert raised.value.sqlstate == code


# ------------------------------------------------------------------------------------- spark.revalue_apply


def test_apply_updates_logs_and_reports_each_decision(conn: Conn, tenant: str) -> None:
    up, same, down = add(conn, tenant, "up"), add(conn, tenant, "same"), add(conn, tenant, "down")
    rows = revalue(
        conn,
        tenant,
        [
            {"id": up, "importance": 0.6, "reason": "chose not to force it", "key": "up"},
            {"id": same, "importance": 0.2},
            {"id": down, "importance": 0, "reason": None},
        ],
    )
    assert [(r[1], round(r[2], 3), round(r[3], 3), r[4], r[5], r[6]) for r in rows] == [
        ("up", 0.2, 0.6, True, "active", "raised"),
        ("same", 0.2, 0.2, False, "active", "kept"),
        ("down", 0.2, 0.0, True, "active", "lowered"),
    ]
    assert importances(conn, tenant) == {"up": 0.6, "same": 0.2, "down": 0.0}
    log = conn.execute(
        """SELECT m.key, round(v.old_importance::numeric, 2), round(v.new_importance::numeric, 2), v.reason,
                  v.decided_by
           FROM spark.revaluations v JOIN spark.memories m ON m.tenant = v.tenant AND m.id = v.memory_id
           WHERE v.tenant = %s ORDER BY v.id""",
        (tenant,),
    ).fetchall()
    assert [tuple(map(str, r)) for r in log] == [
        ("up", "0.20", "0.60", "chose not to force it", "test"),
        ("same", "0.20", "0.20", "None", "test"),
        ("down", "0.20", "0.00", "None", "test"),
    ]
    assert sample_keys(conn, tenant) == []  # all three decided: out of the samples for the cooldown
    assert revalue(conn, tenant, []) == []


def test_apply_keeps_tiers_consistent_with_assign_tiers(conn: Conn, tenant: str) -> None:
    archived = {"tier": "archive", "age": timedelta(days=800)}
    by_importance = add(
        conn, tenant, "quiet", **archived,
        metadata='{"tier_by_rule": true, "tier_reason": "a year unused, importance under 0.3"}',
    )  # fmt: skip
    by_outcomes = add(
        conn, tenant, "wrong", **archived, unhelpful_count=5, reliability=0.14,
        metadata='{"tier_by_rule": true, "tier_reason": "reliability under 0.3 after 4+ outcomes"}',
    )  # fmt: skip
    assert conn.execute("SELECT count(*) FROM spark.assign_tiers(%s)", (tenant,)).fetchone() == (0,)
    rows = revalue(
        conn, tenant, [{"id": by_importance, "importance": 0.5}, {"id": by_outcomes, "importance": 0.5}]
    )
    assert [(r[1], r[5]) for r in rows] == [("quiet", "active"), ("wrong", "archive")]
    # what assign_tiers would now decide agrees: neither moves
    assert conn.execute("SELECT count(*) FROM spark.assign_tiers(%s)", (tenant,)).fetchone() == (0,)
    # and a lowered importance archives at its next run
    revalue(conn, tenant, [{"id": by_importance, "importance": 0.1}])
    moved = conn.execute("SELECT key, new_tier FROM spark.assign_tiers(%s)", (tenant,)).fetchall()
    assert moved == [("quiet", "archive")]


def test_apply_skips_a_decision_made_on_an_importance_that_has_changed(conn: Conn, tenant: str) -> None:
    """Review item 1: a decision carries the importance it was made on; a memory changed since is skipped,
    neither written nor logged, while the rest of the batch applies."""
    old = datetime(2020, 1, 1, tzinfo=UTC)
    ids = {
        key: add(conn, tenant, key, 0.1, updated_at=old) for key in ("raced", "up", "same", "free", "tiny")
    }
    # a reviewer sets "raced" to 0.8 after a sweep sampled it at 0.1
    conn.execute("UPDATE spark.memories SET importance = 0.8 WHERE id = %s", (ids["raced"],))
    row_version = "SELECT ctid, updated_at FROM spark.memories WHERE id = %s"
    before = conn.execute(row_version, (ids["same"],)).fetchone()
    rows = revalue(
        conn,
        tenant,
        [
            {"id": ids["raced"], "importance": 0.1, "expected": 0.1, "reason": "kept: looked fine"},
            {"id": ids["up"], "importance": 0.6, "expected": 0.1},
            {"id": ids["same"], "importance": 0.1, "expected": 0.1, "reason": "kept"},
            {"id": ids["free"], "importance": 0.3, "expected": None},  # hand-written: no check
            {"id": ids["tiny"], "importance": 1e-50},  # a number too small for a real is 0
        ],
    )
    assert [(r[1], round(r[2], 3), round(r[3], 3), r[4], r[6]) for r in rows] == [
        ("raced", 0.8, 0.1, False, SKIPPED),
        ("up", 0.1, 0.6, True, "raised"),
        ("same", 0.1, 0.1, False, "kept"),
        ("free", 0.1, 0.3, True, "raised"),
        ("tiny", 0.1, 0.0, True, "lowered"),
    ]
    assert SKIPPED == "skipped: changed since sampled"
    assert importances(conn, tenant) == {"raced": 0.8, "up": 0.6, "same": 0.1, "free": 0.3, "tiny": 0.0}
    # kept: logged, the row not written (same tuple, same updated_at)
    assert conn.execute(row_version, (ids["same"],)).fetchone() == before
    assert before is not None and before[1] == old
    log = conn.execute(
        "SELECT memory_id FROM spark.revaluations WHERE tenant = %s ORDER BY id", (tenant,)
    ).fetchall()
    assert [r[0] for r in log] == [ids["up"], ids["same"], ids["free"], ids["tiny"]]
    # the skipped memory was not logged: it stays in the samples for the next sweep
    assert sample_keys(conn, tenant, max_importance=1.0) == ["raced"]
    # decided again on what it is now, it applies
    [row] = revalue(conn, tenant, [{"id": ids["raced"], "importance": 0.5, "expected": 0.8}])
    assert (row[4], row[6]) == (True, "lowered")


def test_apply_skips_a_memory_deleted_edited_or_rekeyed_since_it_was_sampled(conn: Conn, tenant: str) -> None:
    """A decision made on a sample (expected given) whose memory has since been deleted, whose text was
    edited (text_md5) or whose key changed is skipped, and the rest of the batch applies; the deleted one
    used to fail the whole batch (22023), the edited one was applied to text nobody reviewed."""
    ids = {key: add(conn, tenant, key, 0.2) for key in ("gone", "edited", "rekeyed", "fine")}
    sampled_md5 = hashlib.md5(b"memory edited").hexdigest()
    conn.execute("DELETE FROM spark.memories WHERE id = %s", (ids["gone"],))
    conn.execute(
        "UPDATE spark.memories SET text = 'Always deploy on Fridays' WHERE id = %s", (ids["edited"],)
    )
    conn.execute("UPDATE spark.memories SET key = 'rekeyed-2' WHERE id = %s", (ids["rekeyed"],))
    rows = revalue(
        conn,
        tenant,
        [
            {"id": ids["gone"], "key": "gone", "importance": 0.1, "expected": 0.2},
            {"id": ids["edited"], "key": "edited", "importance": 0.1, "expected": 0.2,
             "text_md5": sampled_md5},
            {"id": ids["rekeyed"], "key": "rekeyed", "importance": 0.1, "expected": 0.2},
            {"id": ids["fine"], "key": "fine", "importance": 0.5, "expected": 0.2,
             "text_md5": hashlib.md5(b"memory fine").hexdigest()},
        ],
    )  # fmt: skip
    assert [(r[0], r[1], r[2] is None, r[4], r[5], r[6]) for r in rows] == [
        (ids["gone"], "gone", True, False, None, SKIPPED_DELETED),
        (ids["edited"], "edited", False, False, "active", SKIPPED),
        (ids["rekeyed"], "rekeyed-2", False, False, "active", SKIPPED),
        (ids["fine"], "fine", False, True, "active", "raised"),
    ]
    assert importances(conn, tenant) == {"edited": 0.2, "rekeyed-2": 0.2, "fine": 0.5}
    assert logged(conn, tenant) == 1
    # without expected (a hand-written decision) an id that is not a memory is still an error
    with pytest.raises(errors.InvalidParameterValue, match=r"decisions\[0\]: id .* is not a memory"):
        revalue(conn, tenant, [{"id": ids["gone"], "importance": 0.1}])


def test_apply_skips_a_memory_revalued_since_it_was_sampled(conn: Conn, tenant: str) -> None:
    """last_revalued_at, as sampled: a decision on a memory revalued since is skipped, even one that keeps
    it (a decisions file applied twice, two sweeps over one sample logged each kept decision twice);
    absent, nothing is checked."""
    ids = {key: add(conn, tenant, key, 0.2) for key in ("never", "before", "absent")}
    revalue(conn, tenant, [{"id": ids["before"], "importance": 0.2}])
    [(before,)] = conn.execute(  # an hour ago: this test's applies share one transaction, and its now()
        """UPDATE spark.revaluations SET decided_at = decided_at - interval '1 hour' WHERE memory_id = %s
           RETURNING decided_at""",
        (ids["before"],),
    ).fetchall()
    first = [
        {"id": ids["never"], "importance": 0.2, "expected": 0.2, "last_revalued_at": None},
        {"id": ids["before"], "importance": 0.2, "expected": 0.2, "last_revalued_at": before.isoformat()},
        {"id": ids["absent"], "importance": 0.2, "expected": 0.2},
    ]
    assert [r[6] for r in revalue(conn, tenant, first)] == ["kept", "kept", "kept"]
    assert [r[6] for r in revalue(conn, tenant, first)] == [SKIPPED_DECIDED, SKIPPED_DECIDED, "kept"]
    assert logged(conn, tenant) == 1 + 3 + 1
    for value, message in (
        ("2026-11-23 10:00:00", "last_revalued_at must be an ISO 8601 time with its offset"),  # no offset
        ("2026-13-45T10:00:00Z", "last_revalued_at must be"),
        ("yesterday", "last_revalued_at must be"),
        (17, "last_revalued_at must be"),
    ):
        with pytest.raises(errors.InvalidParameterValue, match=message), conn.transaction():
            revalue(conn, tenant, [{"id": ids["never"], "importance": 0.1, "last_revalued_at": value}])


def test_apply_takes_any_bigint_id_and_checks_text_md5(conn: Conn, tenant: str) -> None:
    for entry, message in (
        ({"id": 9223372036854775807}, "id 9223372036854775807 is not a memory"),  # was "not an integer"
        ({"id": 9223372036854775808}, "id must be an integer"),
        ({"id": 1, "text_md5": "nope"}, "text_md5 must be 32 lower-case hex digits"),
    ):
        with pytest.raises(errors.InvalidParameterValue, match=message), conn.transaction():
            revalue(conn, tenant, [entry | {"importance": 0.1}])


@pytest.mark.parametrize("offset", ["+99:99", "+16:00", "-16:00", "+24:00"])
def test_apply_names_an_offset_postgresql_cannot_hold(conn: Conn, tenant: str, offset: str) -> None:
    """Was: an ISO 8601 offset of 16 hours or more raised 22009 "time zone displacement out of range" past
    the entry checks, instead of 22023 naming the entry."""
    mid = add(conn, tenant, "m")
    value = f"2026-01-01T00:00:00{offset}"
    assert conn.execute("SELECT spark._revalued_at(%s)", (value,)).fetchone() == (None,)
    message = r"decisions\[0\]: last_revalued_at must be an ISO 8601 time with its offset or null, got"
    with pytest.raises(errors.InvalidParameterValue, match=message), conn.transaction():
        revalue(conn, tenant, [{"id": mid, "importance": 0.5, "last_revalued_at": value}])
    # from Python, a datetime Python holds and PostgreSQL does not
    far = datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=16)))
    with pytest.raises(ArgumentRefused, match=message) as refused:
        apply(conn, tenant, [Decision(mid, 0.5, last_revalued_at=far, check_revalued=True)])
    assert refused.value.sqlstate == "22023"
    # the largest offset PostgreSQL holds is read: not this memory's last revaluation (it has none)
    [row] = revalue(conn, tenant, [{"id": mid, "importance": 0.5, "last_revalued_at": f"{value[:19]}+15:59"}])
    assert row[6] == SKIPPED_DECIDED


def test_python_sample_and_apply_check_their_arguments_types(conn: Conn, tenant: str) -> None:
    """Was: sample(conn, 5, 5) raised psycopg's UndefinedFunction (42883, naming no argument), a dict for a
    Decision AttributeError, a NaN importance JSON the database could not read, a bool seed CannotCoerce,
    and a dry_run of "no" applied nothing without a word. Each is an InputError naming the argument."""
    mid = add(conn, tenant, "m")
    for args, kwargs, message in (
        ((5, 5), {}, "tenant must be a string, got int"),
        ((b"t", 5), {}, "tenant must be a string, got bytes"),
        ((tenant, 2**40), {}, "n must be an integer"),
        ((tenant,), {"max_importance": True}, "max_importance must be a number from 0 to 1, got True"),
        ((tenant,), {"max_importance": "0.2"}, "max_importance must be a number from 0 to 1"),
        ((tenant,), {"seed": 1.5}, "seed must be an integer"),
        ((tenant,), {"seed": True}, "seed must be an integer"),
    ):
        with pytest.raises(InputError, match=message):
            sample(conn, *args, **kwargs)  # type: ignore[arg-type]
    good = Decision(mid, 0.5)
    for args, kwargs, message in (
        ((5, [good]), {}, "tenant must be a string, got int"),
        ((tenant, [good]), {"decided_by": 5}, "decided_by must be a string"),
        ((tenant, [good]), {"dry_run": "no"}, "dry_run must be True or False"),
        ((tenant, good), {}, "decisions must be a sequence of Decision, got Decision"),
        ((tenant, None), {}, "decisions must be a sequence of Decision, got NoneType"),
        (
            (tenant, [good, {"id": mid, "importance": 0.5}]),
            {},
            r"decisions\[1\] must be a Decision, got dict",
        ),
        ((tenant, [Decision(mid, float("nan"))]), {}, r"decisions\[0\]\.importance must be a number"),
        ((tenant, [Decision(mid, 0.5, expected=True)]), {}, r"decisions\[0\]\.expected must be a number"),
        ((tenant, [Decision("1", 0.5)]), {}, r"decisions\[0\]\.id must be an integer"),
        ((tenant, [Decision(mid, 0.5, reason=5)]), {}, r"decisions\[0\]\.reason must be a string"),
        ((tenant, [Decision(mid, 0.5, reason="a\x00b")]), {}, r"decisions\[0\]\.reason must not contain NUL"),
        (
            (tenant, [Decision(mid, 0.5, last_revalued_at="x", check_revalued=True)]),
            {},
            r"decisions\[0\]\.last_revalued_at must be a datetime or None, got str",
        ),
    ):
        with pytest.raises(InputError, match=message):
            apply(conn, *args, **kwargs)  # type: ignore[arg-type]
    assert importances(conn, tenant) == {"m": 0.2} and logged(conn, tenant) == 0
    assert [r.status for r in apply(conn, tenant, (d for d in [good]))] == ["raised"]  # any iterable


def test_sample_refuses_day_counts_it_cannot_use(conn: Conn, tenant: str) -> None:
    for name, days in (
        ("min_age_days", 1e10),
        ("min_age_days", float("nan")),
        ("cooldown_days", float("inf")),
    ):
        with pytest.raises(InputError, match=f"{name} must be a number of days from 0 to 36500"):
            sample(conn, tenant, 5, **{name: days})
    with pytest.raises(InputError, match="n must be an integer"):
        sample(conn, tenant, 2.5)  # type: ignore[arg-type]


def test_apply_compares_exact_importances(conn: Conn, tenant: str) -> None:
    """Review items 1 and 2: the value a sample returned matches the stored real exactly, and a decision
    equal to it is kept (digits past the sixth place included)."""
    ids = [add(conn, tenant, f"m{i}", value) for i, value in enumerate((0.125, 0.12345679, 0.3))]
    memories = {m.id: m for m in sample(conn, tenant, 10)}
    assert [memories[i].importance for i in ids] == [0.125, 0.12345679, 0.3]
    decisions = [Decision(i, memories[i].importance, "kept", expected=memories[i].importance) for i in ids]
    results = apply(conn, tenant, decisions)
    assert [(r.changed, r.status, r.new_importance) for r in results] == [
        (False, "kept", 0.125),
        (False, "kept", pytest.approx(0.12345679)),
        (False, "kept", pytest.approx(0.3)),
    ]
    stored = conn.execute(
        "SELECT importance::text FROM spark.memories WHERE tenant = %s ORDER BY id", (tenant,)
    ).fetchall()
    assert [r[0] for r in stored] == ["0.125", "0.12345679", "0.3"]


def test_apply_waits_for_a_concurrent_writer_then_skips_what_it_changed(rv_db: str, tenant: str) -> None:
    """Review item 1, the race itself: a reviewer's update holds the row while a sweep applies; the sweep
    waits for the lock, then compares with the committed value and skips instead of writing back."""
    with psycopg.connect(rv_db) as setup:
        raced, calm = add(setup, tenant, "raced", 0.1), add(setup, tenant, "calm", 0.1)
    try:
        decisions = [Decision(raced, 0.1, "kept", expected=0.1), Decision(calm, 0.4, "raised", expected=0.1)]
        # closed in reverse: on a failure the writer lets go of the row before the pool waits for the sweep
        with (
            psycopg.connect(rv_db) as sweep,
            ThreadPoolExecutor(1) as pool,
            psycopg.connect(rv_db) as writer,
            psycopg.connect(rv_db, autocommit=True) as watch,
        ):
            writer.execute("UPDATE spark.memories SET importance = 0.8 WHERE id = %s", (raced,))
            running = pool.submit(apply, sweep, tenant, decisions, decided_by="auto")
            blocked = "SELECT cardinality(pg_blocking_pids(%s)) > 0"
            deadline = time.monotonic() + 20
            while watch.execute(blocked, (sweep.info.backend_pid,)).fetchone() != (True,):
                assert time.monotonic() < deadline and not running.done(), "the sweep did not wait"
                time.sleep(0.02)
            writer.commit()
            results = running.result(timeout=20)
        assert [(r.key, r.old_importance, r.changed, r.status) for r in results] == [
            ("raced", pytest.approx(0.8), False, SKIPPED),
            ("calm", pytest.approx(0.1), True, "raised"),
        ]
        with psycopg.connect(rv_db) as check:
            assert importances(check, tenant) == {"raced": 0.8, "calm": 0.4} and logged(check, tenant) == 1
    finally:
        with psycopg.connect(rv_db) as cleanup:
            cleanup.execute("DELETE FROM spark.memories WHERE tenant = %s", (tenant,))


def test_assign_tiers_judges_a_row_a_revaluation_changed_meanwhile_as_committed(
    rv_db: str, tenant: str
) -> None:
    """assign_tiers racing revalue_apply: it waited for the row, then archived it 'for importance under
    0.3' from its older snapshot although the committed importance was 0.6."""
    with psycopg.connect(rv_db) as setup:
        old = add(setup, tenant, "old", 0.2, age=timedelta(days=800))
    try:
        with (
            psycopg.connect(rv_db) as sweep,
            ThreadPoolExecutor(1) as pool,
            psycopg.connect(rv_db) as reviewer,
            psycopg.connect(rv_db, autocommit=True) as watch,
        ):
            revalue(reviewer, tenant, [{"id": old, "importance": 0.6, "expected": 0.2}])  # not committed
            tiers = "SELECT key, old_tier, new_tier FROM spark.assign_tiers(%s)"
            running = pool.submit(lambda: sweep.execute(tiers, (tenant,)).fetchall())
            blocked = "SELECT cardinality(pg_blocking_pids(%s)) > 0"
            deadline = time.monotonic() + 20
            while watch.execute(blocked, (sweep.info.backend_pid,)).fetchone() != (True,):
                assert time.monotonic() < deadline and not running.done(), "assign_tiers did not wait"
                time.sleep(0.02)
            reviewer.commit()
            assert running.result(timeout=20) == []  # nothing moved: importance 0.6 is no archive
            sweep.commit()
        with psycopg.connect(rv_db) as check:
            row = check.execute(
                "SELECT importance, tier FROM spark.memories WHERE id = %s", (old,)
            ).fetchone()
            assert row == (pytest.approx(0.6), "active")
    finally:
        with psycopg.connect(rv_db) as cleanup:
            cleanup.execute("DELETE FROM spark.memories WHERE tenant = %s", (tenant,))


def test_a_rule_archive_whose_rule_changed_is_not_lifted_by_a_raise(conn: Conn, tenant: str) -> None:
    """Archived for the year rule, then failing the reliability rule: the reason follows the rule that
    holds, so a revaluation's raise (which lifts only a year-rule archive) leaves it archived."""
    mid = add(conn, tenant, "stale", 0.2, age=timedelta(days=800))
    assert [r[2] for r in conn.execute("SELECT * FROM spark.assign_tiers(%s)", (tenant,))] == ["archive"]
    conn.execute("UPDATE spark.memories SET unhelpful_count = 4, reliability = 0.167 WHERE id = %s", (mid,))
    assert conn.execute("SELECT * FROM spark.assign_tiers(%s)", (tenant,)).fetchall() == []  # no move
    reason = conn.execute("SELECT metadata ->> 'tier_reason' FROM spark.memories WHERE id = %s", (mid,))
    assert reason.fetchone() == ("reliability under 0.3 after 4+ outcomes",)
    [row] = revalue(conn, tenant, [{"id": mid, "importance": 0.4}])
    assert (row[5], row[6]) == ("archive", "raised")


PIN_BY_RULE = {"tier_by_rule": True, "tier_reason": "validated 15+ times with reliability 0.9+"}


def test_a_user_pin_of_a_memory_the_rules_archived_is_never_taken_back(conn: Conn, tenant: str) -> None:
    """Was: the archive left tier_by_rule true, so assign_tiers took the pin for its own and archived the
    memory again; a pin is the rules' only with the pin's reason beside the flag."""
    add(conn, tenant, "old", 0.1, age=timedelta(days=800))
    assert conn.execute("SELECT key, new_tier FROM spark.assign_tiers(%s)", (tenant,)).fetchall() == [
        ("old", "archive")
    ]
    conn.execute("UPDATE spark.memories SET tier = 'pinned' WHERE tenant = %s", (tenant,))  # the user pins it
    assert conn.execute("SELECT count(*) FROM spark.assign_tiers(%s)", (tenant,)).fetchone() == (0,)
    tier = conn.execute("SELECT tier FROM spark.memories WHERE tenant = %s", (tenant,)).fetchone()
    assert tier == ("pinned",)


def test_tier_by_rule_counts_only_as_a_json_true(conn: Conn, tenant: str) -> None:
    """Review item 3: metadata is free-form at ingest; a tier_by_rule that is not a JSON boolean neither
    aborts assign_tiers nor revalue_apply (22P02 before), and only a JSON true marks a rule's tier."""
    rule = "a year unused, importance under 0.3"
    archived = {"tier": "archive", "age": timedelta(days=800)}
    ids = {
        "pin-maybe": add(conn, tenant, "pin-maybe", 0.5, tier="pinned", metadata='{"tier_by_rule": "maybe"}'),
        "pin-text": add(conn, tenant, "pin-text", 0.5, tier="pinned", metadata='{"tier_by_rule": "true"}'),
        "pin-rule": add(conn, tenant, "pin-rule", 0.5, tier="pinned", metadata=json.dumps(PIN_BY_RULE)),
        "arch-maybe": add(
            conn,
            tenant,
            "arch-maybe",
            **archived,
            metadata=json.dumps({"tier_by_rule": "maybe", "tier_reason": rule}),
        ),
        "arch-rule": add(
            conn,
            tenant,
            "arch-rule",
            **archived,
            metadata=json.dumps({"tier_by_rule": True, "tier_reason": rule}),
        ),
    }
    # only the pin the rules made (a JSON true) is taken back; the others count as the user's
    moved = conn.execute("SELECT key, new_tier FROM spark.assign_tiers(%s)", (tenant,)).fetchall()
    assert moved == [("pin-rule", "active")]
    rows = revalue(
        conn,
        tenant,
        [{"id": ids["arch-maybe"], "importance": 0.5}, {"id": ids["arch-rule"], "importance": 0.5}],
    )
    assert [(r[1], r[5], r[6]) for r in rows] == [
        ("arch-maybe", "archive", "raised"),
        ("arch-rule", "active", "raised"),
    ]


GOOD = {"id": "good", "importance": 0.9}  # first in some batches: it must not be written either
BAD_BATCHES: list[tuple[str, Any, str, str]] = [
    ("unknown id", [GOOD, {"id": -1, "importance": 0.5}], "22023",
     r"decisions\[1\]: id -1 is not a memory of tenant"),
    ("another tenant's", [GOOD, {"id": "theirs", "importance": 0.5}], "22023",
     r"decisions\[1\]: id \d+ is not a memory of tenant"),
    ("over 1", [{"id": "a", "importance": 1.5}], "22023",
     r"decisions\[0\]: importance must be a number from 0 to 1, got 1\.5"),
    ("under 0", [{"id": "a", "importance": -0.1}], "22023", "importance must be a number from 0"),
    ("a word", [{"id": "a", "importance": "high"}], "22023", 'importance must be .*got "high"'),
    ("null importance", [{"id": "a", "importance": None}], "22023", "importance must be a number"),
    ("no importance", [{"id": "a", "reason": "x"}], "22023", "importance is missing"),
    ("no id", [{"importance": 0.5}], "22023", "id is missing"),
    ("string id", [{"id": "'a'", "importance": 0.5}], "22023", "id must be an integer"),
    ("not an object", [GOOD, 7], "22023", r"decisions\[1\]: must be an object, got number"),
    ("unknown field", [{"id": "a", "importance": 0.5, "why": "x"}], "22023", "unknown field 'why'"),
    ("expected a word", [{"id": "a", "importance": 0.5, "expected": "0.2"}], "22023",
     r'decisions\[0\]: expected must be a number from 0 to 1 or null, got "0\.2"'),
    ("expected over 1", [GOOD, {"id": "a", "importance": 0.5, "expected": 2}], "22023",
     r"decisions\[1\]: expected must be a number from 0 to 1 or null, got 2"),
    ("twice", [{"id": "a", "importance": 0.5}, {"id": "a", "importance": 0.4}], "22023",
     r"decisions\[1\]: id \d+ was already decided at decisions\[0\]"),
    ("wrong key", [{"id": "a", "importance": 0.5, "key": "b"}], "22023",
     "key \"b\" does not match memory \\d+, whose key is 'a'"),
    ("reason a number", [{"id": "a", "importance": 0.5, "reason": 3}], "22023", "reason must be a string"),
    ("long reason", [{"id": "a", "importance": 0.5, "reason": "x" * 1001}], "22023", "the limit is 1000"),
    ("an object", {"id": "a", "importance": 0.5}, "22023", "decisions must be a JSON array"),
    ("NULL", None, "22004", "decisions must not be NULL"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "decisions", "code", "message"), BAD_BATCHES, ids=[b[0] for b in BAD_BATCHES]
)
def test_apply_checks_every_decision_and_writes_nothing_on_error(
    conn: Conn, tenant: str, case: str, decisions: Any, code: str, message: str
) -> None:
    ids = {
        "a": add(conn, tenant, "a"),
        "theirs": add(conn, "other-tenant", "theirs"),
        "good": add(conn, tenant, "good"),
    }
    if decisions is not None:  # memory keys stand for their ids; "'a'" for a's id as a JSON string
        text = json.dumps(decisions)
        for key, value in ids.items():
            text = text.replace(f'"id": "{key}"', f'"id": {value}').replace(
                f'"id": "\'{key}\'"', f'"id": "{value}"'
            )
        decisions = text
    with pytest.raises(psycopg.Error, match=message) as raised, conn.transaction():
        revalue(conn, tenant, decisions)
    assert raised.value.sqlstate == code
    assert importances(conn, tenant) == {"a": 0.2, "good": 0.2}
    assert logged(conn, tenant) == 0


@pytest.mark.parametrize(
    ("tenant", "by", "code", "message"),
    [
        (None, "test", "22004", "tenant must not be NULL"),
        ("t", None, "22004", "decided_by must not be NULL"),
        ("t", "", "22023", "decided_by must be 1 to 64"),
    ],
)
def test_apply_rejects_bad_arguments(
    conn: Conn, tenant: str | None, by: Any, code: str, message: str
) -> None:
    with pytest.raises(psycopg.Error, match=message) as raised:
        revalue(conn, tenant, [], by)
    assert raised.value.sqlstate == code


# ------------------------------------------------------------------------------------------------ deciders


def memory(text: str, importance: float = 0.3, **signals: Any) -> Sampled:
    counts = {"helpful_count": 0, "followed_count": 0, "unhelpful_count": 0, "ignored_count": 0}
    counts.update({k: v for k, v in signals.items() if k in counts})
    return Sampled(
        id=1, key="k", text=text, category="general", kind="insight", tier="active", importance=importance,
        created_at=datetime.now(UTC) - OLD, reliability=signals.get("reliability", 0.5), actionability=None,
        times_surfaced=0, last_surfaced_at=None, last_revalued_at=None, **counts,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "importance", "signals", "expected", "reason"),
    [
        # the seed's contemplative memories, recorded at the floor
        ("Nothing happening today; chose not to force it.", 0.3, {}, 0.5, 'foundational ("chose not to")'),
        ("I chose a quiet day and sat with the heaviness instead of shipping.", 0.3, {}, 0.5, "foundational"),
        ("Honestly, the flaky CI was my fault: for the first time I read the runner logs.", 0.4, {}, 0.6, ""),
        # advice an agent can act on
        ("Always run alembic upgrade head on staging before deploying to prod.", 0.2, {}, 0.59, "directive"),
        ("We decided to use UUIDv7 keys instead of serial ids: merges broke.", 0.2, {}, 0.41, "decision"),
        # noise: lowered, never raised
        ("RT @devguru: JWT auth is so hot right now (eng: 12 likes)", 0.3, {}, 0.1, "noise (retweet)"),
        ("[DEPTH:3] Strong reasoning: the model compared JWT and sessions.", 0.25, {}, 0.1, "training log"),
        ("2024-05-01 12:00:01 ERROR connection refused", 0.3, {}, 0.1, "log line"),
        # nothing to move it
        ("Created new architecture for the plugin system.", 0.3, {}, 0.3, "kept: no directive"),
        ("The user ran the tests and they passed.", 0.2, {}, 0.2, "kept: session observation"),
        # outcomes beat the text
        ("Use the staging replica for load tests.", 0.3, {"helpful_count": 5, "followed_count": 1,
         "reliability": 0.875}, 0.8, "proved useful: 6 helpful/followed"),
        ("Use the staging replica for load tests.", 0.3, {"unhelpful_count": 4, "ignored_count": 2,
         "reliability": 0.2}, 0.1, "rarely helps: reliability 0.20 after 6 outcomes"),
        ("[DEPTH:3] Strong reasoning: compare JWT and sessions.", 0.3,
         {"helpful_count": 3, "reliability": 0.8}, 0.65, "proved useful"),
    ],
)  # fmt: skip
def test_auto_decider_on_realistic_memories(
    text: str, importance: float, signals: dict[str, Any], expected: float, reason: str
) -> None:
    decision = propose(memory(text, importance, **signals))
    assert decision.importance == pytest.approx(expected)
    assert reason in (decision.reason or "")
    assert (decision.id, decision.key) == (1, "k")


def test_auto_decider_leaves_traces_and_learnings_to_their_outcomes() -> None:
    """Was (audit V): a failure trace, which reflect and the hooks surface as a warning, was lowered to 0.1 as
    a "code dump": its Intent: ... | Outcome: ... format reads as symbols to the noise detectors."""
    traces = [
        make_trace(
            "Fix auth token refresh", "failure", issue="token expiry compared in local time, not UTC",
            files="auth/tokens.py,auth/session.py", tags="auth,timezone",
        ),
        make_trace("Fix auth token refresh", "failure", issue="token expiry compared in local time"),
    ]  # fmt: skip
    for trace in traces:
        as_insight = memory(trace.descriptor, 0.5)
        assert propose(as_insight).reason == "noise (code dump), not advice"  # what the text alone looks like
        decision = propose(replace(as_insight, kind="trace"))
        assert decision.importance == 0.5 and "noise" not in (decision.reason or "")
    handle = memory("expiry: utc() == local()?", 0.5)
    assert propose(handle).importance == 0.1
    assert "noise" not in (propose(replace(handle, kind="learning")).reason or "")
    # outcomes still lower one that rarely helps
    failing = replace(memory(traces[0].descriptor, 0.5, unhelpful_count=5, reliability=0.1), kind="trace")
    assert propose(failing).importance == 0.1


def test_interactive_decider_keeps_accepts_sets_skips_and_quits(capsys: pytest.CaptureFixture[str]) -> None:
    texts = ["Looked at the logs.", "Chose not to force it.", "Pin numpy below 2.", "Meh.", "Never reached."]
    memories = [
        replace(memory(text, helpful_count=1, reliability=0.67), id=i, key=f"k{i}", times_surfaced=3)
        for i, text in enumerate(texts)
    ]
    # a reason PostgreSQL cannot store (a NUL; invalid UTF-8 read as surrogates) is asked again: it failed
    # the whole session's batch in the database before
    answers = iter(
        ["", "a", "0.8 pinned\x00", "0.8 bad \udcff", "0.8 pinned builds broke twice", "maybe", "2", "s", "q"]
    )
    decisions = decide_interactive(memories, lambda prompt: next(answers), sys.stdout)
    assert [(d.id, d.importance, d.reason) for d in decisions] == [
        (0, 0.3, "kept on review"),
        (1, 0.5, 'foundational ("chose not to")'),
        (2, 0.8, "pinned builds broke twice"),
    ]
    shown = capsys.readouterr().out
    assert "[1/5] #0 k0" in shown and "1 helpful" in shown and "surfaced 3 times" in shown
    assert "auto suggests 0.50" in shown and "'maybe': type k, a, s, q or a number" in shown
    assert shown.count("the reason must not contain NUL characters: type it again") == 1
    assert shown.count("the reason contains a lone surrogate") == 1

    def eof(prompt: str) -> str:
        raise EOFError

    assert decide_interactive(memories, eof, sys.stdout) == []


def test_kept_is_the_stored_importance_exactly(tmp_path: Path) -> None:
    """Review item 2: keeping an importance keeps it as stored (0.125 stayed 0.12 before: a change, reported
    lowered); only newly decided values are rounded. Every decision carries the sampled importance."""
    plain = memory("The user ran the tests and they passed.", 0.125)
    kept = propose(plain)
    assert (kept.importance, kept.expected) == (0.125, 0.125)
    assert kept.reason is not None and kept.reason.startswith("kept")
    noise = propose(memory("2024-05-01 12:00:01 ERROR connection refused", 0.055))
    assert (noise.importance, noise.expected) == (0.055, 0.055)  # under the ceiling: kept as it is
    raised = propose(memory("Nothing happening today; chose not to force it.", 0.125))
    assert (raised.importance, raised.expected) == (0.5, 0.125)
    lowered = propose(memory("2024-05-01 12:00:01 ERROR connection refused", 0.2345))
    assert (lowered.importance, lowered.expected) == (0.1, 0.2345)
    advice = memory("Always run alembic upgrade head on staging before deploying to prod.", 0.123)
    assert propose(advice).importance == 0.59  # a new value: rounded

    answers = iter(["", "0.4567 rounded"])
    decisions = decide_interactive([plain, replace(plain, id=2)], lambda prompt: next(answers), sys.stdout)
    assert [(d.importance, d.expected) for d in decisions] == [(0.125, 0.125), (0.46, 0.125)]

    path = tmp_path / "sample.jsonl"
    write_sample(path, "acme", [plain])
    [row] = [json.loads(line) for line in path.read_text().splitlines()]
    assert (row["importance"], row["expected"]) == (0.125, 0.125)
    assert read_decisions(path) == [
        Decision(1, 0.125, None, "k", expected=0.125, text_md5=plain.text_md5, check_revalued=True)
    ]
    assert Decision(1, 0.125, expected=0.125).as_json()["expected"] == 0.125
    assert "expected" not in Decision(1, 0.125).as_json()  # a hand-written decision: no check


def test_decisions_file_round_trip_and_errors(tmp_path: Path) -> None:
    memories = [memory("Chose not to force it."), memory("Looked at the logs.")]
    revalued = datetime(2026, 8, 1, 9, 30, 0, 120, tzinfo=UTC)  # to the microsecond, as stored
    memories[1] = replace(memories[1], id=2, key="k2", last_revalued_at=revalued)
    for suffix in ("jsonl", "yaml"):
        path = tmp_path / f"sample.{suffix}"
        write_sample(path, "acme", memories)
        assert read_decisions(path, "acme") == [
            Decision(1, 0.3, None, "k", 0.3, memories[0].text_md5, None, check_revalued=True),
            Decision(2, 0.3, None, "k2", 0.3, memories[1].text_md5, revalued, check_revalued=True),
        ]
        assert read_decisions(path)[1].as_json()["last_revalued_at"] == "2026-08-01T09:30:00.000120+00:00"
        write_sample(path, "acme", memories, [propose(memories[0])])
        assert read_decisions(path)[0] == Decision.on(memories[0], 0.5, 'foundational ("chose not to")')
    bad = {
        '{"id": 1, "importance": 0.5}\n{"id": 1, "importance": 0.2}\n': "line 2: id 1 was already decided",
        '{"id": true, "importance": 0.5}\n': "line 1: id must be an integer",
        '\n{"id": 1, "importance": 1.2}\n': "line 2: importance must be a number from 0 to 1",
        '{"id": 1}\n': "importance must be a number from 0 to 1, got None",
        '{"id": 1, "importance": 0.5, "tenant": "other"}\n': "tenant 'other' is not 'acme'",
        '{"id": 1, "importance": 0.5, "reason": 7}\n': "reason must be a string",
        '{"id": 1, "importance": 0.5, "expected": "0.3"}\n': "expected must be a number from 0 to 1 or null",
        '{"id": 1, "importance": 0.5, "expected": 1.5}\n': "expected must be a number from 0 to 1 or null",
        '{"id": 1, "importance": 0.5, "last_revalued_at": "2026-08-01 09:30"}\n': "last_revalued_at must be "
        "an ISO 8601 time with its offset or null, got '2026-08-01 09:30'",
        '{"id": 1, "importance": 0.5, "last_revalued_at": 17}\n': "last_revalued_at must be an ISO 8601 time",
        '{"id": 1, "importance": 0.5, "last_revalued_at": "soon"}\n': "last_revalued_at must be an ISO 8601",
        "[1, 2]\n": "each decision must be an object",
        "{oops\n": "line 1: is not valid JSON",
    }
    path = tmp_path / "d.jsonl"
    for body, message in bad.items():
        path.write_text(body)
        with pytest.raises(InputError, match=message):
            read_decisions(path, "acme")
    unquoted = tmp_path / "unquoted.yaml"  # YAML makes a time of it, which reads the same
    unquoted.write_text("- id: 1\n  importance: 0.5\n  last_revalued_at: 2026-08-01 09:30:00.000120+00:00\n")
    assert read_decisions(unquoted)[0].last_revalued_at == revalued
    (tmp_path / "d.yaml").write_text("- id: 1\n  importance: 0.5\n- id: 2\n  importance: much\n")
    with pytest.raises(InputError, match=r"d\.yaml line 3: importance must be"):
        read_decisions(tmp_path / "d.yaml")
    (tmp_path / "d.csv").write_text("id,importance\n")
    with pytest.raises(InputError, match="unknown file type"):
        read_decisions(tmp_path / "d.csv")


@pytest.mark.parametrize("suffix", ["jsonl", "yaml"])
def test_an_export_with_line_separators_in_a_text_reads_back(tmp_path: Path, suffix: str) -> None:
    """The export writes U+2028, U+2029 and U+0085 raw (ensure_ascii=False); the reader split lines with
    str.splitlines(), which breaks on them too, so reading the tool's own export failed ("not valid JSON")."""
    text = "first\u2028second\u2029third\x85fourth"
    path = tmp_path / f"sample.{suffix}"
    decided = Decision.on(memory(text), 0.7, "why\u2028not")
    write_sample(path, "acme", [memory(text)], [decided])
    assert read_decisions(path, "acme") == [decided]
    if suffix == "jsonl":
        assert "\u2028" in path.read_text(encoding="utf-8")  # raw, as the bug needs
        crlf = tmp_path / "crlf.jsonl"
        crlf.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
        assert read_decisions(crlf, "acme") == [decided]


@pytest.mark.parametrize(
    ("name", "body", "message"),
    [
        ("d.jsonl", '{"id": 1, "importance": 0.5}\n{"id": ' + "1" * 5000 + ', "importance": 0.5}\n',
         r"d\.jsonl line 2: has an integer over \d+ digits"),
        ("d.jsonl", '{"id": 1, "importance": 0.5}\n' + "[" * 10_000 + "]" * 10_000 + "\n",
         r"d\.jsonl line 2: nests too deeply"),
        ("d.jsonl", '{"id": 1, "importance": 0.5, "reason": "x\\ud800"}\n', r"line 1: reason .*surrogate"),
        ("d.jsonl", '{"id": 1, "importance": 0.5, "reason": "x\\u0000"}\n', r"d\.jsonl line 1: reason .*NUL"),
        ("d.yaml", "- id: 1\n  importance: 0.5\n- id: !!int abc\n  importance: 0.5\n",
         r"d\.yaml line 3: is not valid YAML: 'abc' is not a valid int"),
        ("d.yaml", "- id: 1\n  importance: 0.5\n  when: 2024-13-45\n", r"d\.yaml line 3: is not valid YAML"),
        ("d.yaml", "- &a {id: 1, importance: 0.5}\n- *a\n", r"d\.yaml line 2: .*alias \(\*a\)"),
        ("d.yaml", "- id: 1\n  importance: " + "[" * 10_000 + "]" * 10_000 + "\n",
         r"d\.yaml line 2: .*nests deeper than 100 levels"),
        ("d.yaml", "- id: 1\n  reason: x\x00\n", r"d\.yaml line 2: is not valid YAML: unacceptable"),
        ("d.yaml", "{id: 1, importance: 0.5}\n", r"d\.yaml line 1: a YAML decisions file must be a list"),
    ],
)  # fmt: skip
def test_a_decisions_file_python_cannot_read_is_an_input_error_naming_the_line(
    tmp_path: Path, name: str, body: str, message: str
) -> None:
    """json.loads raised ValueError (an integer over 4,300 digits) or RecursionError (deep nesting) and
    yaml.safe_load ValueError (!!int abc, 2024-13-45), all uncaught; YAML aliases were expanded."""
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    with pytest.raises(InputError, match=message):
        read_decisions(path)


def test_python_apply_dry_run_writes_nothing_and_errors_are_input_errors(conn: Conn, tenant: str) -> None:
    mid = add(conn, tenant, "a")
    [result] = apply(conn, tenant, [Decision(mid, 0.7, "x")], decided_by="auto", dry_run=True)
    assert (result.key, result.new_importance, result.changed, result.status) == (
        "a",
        pytest.approx(0.7),
        True,
        "raised",
    )
    assert importances(conn, tenant) == {"a": 0.2} and logged(conn, tenant) == 0
    with pytest.raises(InputError, match=r"decisions\[0\]: id -5 is not a memory"):
        apply(conn, tenant, [Decision(-5, 0.7)])
    with pytest.raises(InputError, match="tenant must be 1 to 128 characters"), conn.transaction():
        sample(conn, "")
    apply(conn, tenant, [Decision(mid, 0.7, "x", key="a")], decided_by="auto")
    assert importances(conn, tenant) == {"a": 0.7} and logged(conn, tenant) == 1


# ---------------------------------------------------------------------------------------------- the command


@pytest.fixture
def cli(rv_db: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """Point the CLI at this module's database, with no user config file."""
    return point_cli(rv_db, monkeypatch, tmp_path)


@pytest.fixture
def stored(rv_db: str, tenant: str) -> Iterator[dict[str, int]]:
    """A committed tenant for the CLI: a contemplative memory, advice, noise and a young one."""
    texts = {
        "quiet": ("Nothing happening today; chose not to force it.", OLD),
        "advice": ("Always run alembic upgrade head on staging before deploying to prod.", OLD),
        "noise": ("RT @devguru: JWT auth is so hot right now (eng: 12 likes)", OLD),
        "young": ("Always pin the CI image tag in .github/workflows.", timedelta(days=1)),
    }
    with psycopg.connect(rv_db) as conn:
        ids = {key: add(conn, tenant, key, 0.3, age, text) for key, (text, age) in texts.items()}
    yield ids
    with psycopg.connect(rv_db) as conn:
        conn.execute("DELETE FROM spark.memories WHERE tenant = %s", (tenant,))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_dry_run_then_apply(
    cli: str, tenant: str, stored: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--dry-run", "--json", "--quiet")
    assert code == 0
    result = json.loads(out)
    assert (result["dry_run"], result["decided_by"], result["raised"], result["lowered"]) == (
        True,
        "auto",
        2,
        1,
    )
    proposed = {d["key"]: round(d["new_importance"], 2) for d in result["decisions"]}
    assert proposed == {"quiet": 0.5, "advice": 0.59, "noise": 0.1}  # the young one is not sampled
    with psycopg.connect(cli) as conn:
        assert set(importances(conn, tenant).values()) == {0.3} and logged(conn, tenant) == 0

    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--sample", "10")
    assert code == 0
    assert "applied 3 decisions for tenant" in out and "2 raised, 1 lowered, 0 kept" in out
    assert 'foundational ("chose not to")' in out and "0.30 -> 0.50" in out
    with psycopg.connect(cli) as conn:
        assert importances(conn, tenant) == {"quiet": 0.5, "advice": 0.59, "noise": 0.1, "young": 0.3}
        assert logged(conn, tenant) == 3
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--max-importance", "0.5")
    assert (code, out.startswith("nothing to revalue")) == (0, True)


def test_cli_export_edit_and_apply_from_file(
    cli: str, tenant: str, stored: dict[str, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exported = tmp_path / "sample.jsonl"
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--export", str(exported))
    assert code == 0 and "wrote 3 memories (current importance)" in out
    rows = [json.loads(line) for line in exported.read_text().splitlines()]
    assert {r["key"] for r in rows} == {"quiet", "advice", "noise"}
    assert all(r["importance"] == r["expected"] == 0.3 and r["tenant"] == tenant and r["text"] for r in rows)
    # a decider elsewhere changes one, keeps one and leaves one undecided
    rows[0] |= {"importance": 0.9, "reason": "an LLM thought so"}
    exported.write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--from-file", str(exported), "--json")
    assert code == 0
    result = json.loads(out)
    assert (result["decided_by"], result["raised"], result["kept"]) == ("file", 1, 1)
    with psycopg.connect(cli) as conn:
        assert importances(conn, tenant)[rows[0]["key"]] == 0.9 and logged(conn, tenant) == 2
    # the same file applied again logs nothing: the kept decision was logged a second time before
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--from-file", str(exported))
    assert code == 0 and "0 raised, 0 lowered, 0 kept" in out, out
    # both were decided by the first run: the raised one is no "changed since sampled (left for the next
    # sweep)", as it was reported before (it is in its cooldown)
    assert out.endswith("0 raised, 0 lowered, 0 kept; 2 skipped: decided since sampled\n"), out
    assert "changed since sampled" not in out
    with psycopg.connect(cli) as conn:
        assert logged(conn, tenant) == 2

    auto = tmp_path / "auto.yaml"
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--auto", "--export", str(auto), "--quiet")
    assert code == 0 and "wrote 1 memories (auto decisions)" in out
    [decision] = read_decisions(auto, tenant)
    assert decision.key == rows[2]["key"] and decision.reason


def test_cli_refuses_the_pack_before_sampling(cli: str, capsys: pytest.CaptureFixture[str]) -> None:
    """spark.revalue_apply refuses the pack's tenant: said before a review, not after a whole session."""
    code, out, err = run(capsys, "revalue", "--tenant", "_system", "--interactive", "--max-importance", "1")
    assert (code, out) == (2, "") and "tenant _system holds the cold-start pack" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ("--from-file", "f.jsonl", "--sample", "1", "--max-importance", "0.01"),
            "--sample, --max-importance",
        ),
        (("--export", "f.jsonl", "--dry-run"), "--export applies nothing already"),
    ],
)
def test_cli_refuses_options_it_would_ignore(
    cli: str, tenant: str, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], message: str
) -> None:
    code, out, err = run(capsys, "revalue", "--tenant", tenant, *extra)
    assert (code, out) == (2, "") and message in err


def test_cli_sample_zero_says_it_asked_for_none(
    cli: str, tenant: str, stored: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--sample", "0")
    assert code == 0 and out.strip() == "nothing to revalue: --sample 0 asks for no memory"


def test_cli_an_empty_sample_still_writes_its_export_and_answers_in_one_shape(
    cli: str, tenant: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """An old export at the path must not stay to be applied again; a bad suffix is refused either way."""
    stale = tmp_path / "sweep.jsonl"
    stale.write_text('{"id": 1, "importance": 0.9}\n')
    code, out, _ = run(
        capsys, "revalue", "--tenant", tenant, "--sample", "0", "--export", str(stale), "--json"
    )
    assert code == 0 and json.loads(out) == {"tenant": tenant, "exported": 0}
    assert read_decisions(stale) == []
    code, _, err = run(capsys, "revalue", "--tenant", tenant, "--sample", "0", "--export", "x.txt")
    assert code == 2 and "unknown file type" in err
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--sample", "0", "--json")
    assert json.loads(out) == {
        "tenant": tenant, "dry_run": False, "decided_by": "auto",
        "raised": 0, "lowered": 0, "kept": 0, "skipped": 0, "decisions": [],
    }  # fmt: skip


def test_cli_interactive(
    cli: str,
    tenant: str,
    stored: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    answers = iter(["0.75 worth seeing again", "q"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(answers))
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--interactive", "--seed", "7")
    assert code == 0 and "applied 1 decisions" in out and "worth seeing again" in out
    with psycopg.connect(cli) as conn:
        row = conn.execute(
            "SELECT decided_by, reason FROM spark.revaluations WHERE tenant = %s", (tenant,)
        ).fetchall()
    assert row == [("interactive", "worth seeing again")]


def test_cli_interactive_interrupted_applies_nothing_and_saves_the_answers(
    cli: str,
    tenant: str,
    stored: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """Was: Ctrl-C in the middle of a review lost every answer given. Now nothing is applied, the answers are
    saved in a file, and applying that file writes them."""

    def answers() -> Iterator[str]:
        yield "0.75 worth seeing again"
        raise KeyboardInterrupt

    given = answers()
    monkeypatch.setattr("builtins.input", lambda prompt="": next(given))
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "revalue", "--tenant", tenant, "--interactive", "--seed", "7")
    assert code == 130
    saved = sorted(tmp_path.glob("spark-pg-revalue-*.jsonl"))
    assert len(saved) == 1
    assert f"nothing applied; the 1 decisions made are saved in {saved[0]}" in err
    with psycopg.connect(cli) as conn:
        count = conn.execute(
            "SELECT count(*) FROM spark.revaluations WHERE tenant = %s", (tenant,)
        ).fetchone()
    assert count == (0,)
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--from-file", str(saved[0]))
    assert code == 0 and "applied 1 decisions" in out
    with psycopg.connect(cli) as conn:
        rows = conn.execute("SELECT reason FROM spark.revaluations WHERE tenant = %s", (tenant,)).fetchall()
    assert rows == [("worth seeing again",)]


def test_cli_skips_what_changed_between_sample_and_apply(
    cli: str,
    tenant: str,
    stored: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Review item 1 as found: an auto run sampled 0.1, a reviewer then set 0.8, and the run's "kept"
    wrote 0.1 back. Now what changed while the run decided is skipped and left for the next sweep."""
    with psycopg.connect(cli) as conn:
        plain = add(conn, tenant, "plain", 0.1, OLD, "The user ran the tests and they passed.")

    def decide_then_a_reviewer_steps_in(memories: Sequence[Sampled], **kwargs: Any) -> list[Decision]:
        decisions = decide_auto(memories, **kwargs)
        with psycopg.connect(cli) as reviewer:
            for key, value in (("plain", 0.8), ("noise", 0.25)):
                reviewer.execute(
                    "UPDATE spark.memories SET importance = %s WHERE tenant = %s AND key = %s",
                    (value, tenant, key),
                )
        return decisions

    monkeypatch.setattr("spark_pg.revalue.cli.decide_auto", decide_then_a_reviewer_steps_in)
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--quiet")
    assert code == 0
    assert (
        f"applied 2 decisions for tenant {tenant}: 2 raised, 0 lowered, 0 kept; 2 skipped: changed since "
        "sampled (left for the next sweep)"
    ) in out
    assert f"{plain:>10}  plain" in out and "0.80 !! 0.10  skipped: changed since sampled, not applied" in out
    with psycopg.connect(cli) as conn:
        assert importances(conn, tenant) == {
            "quiet": 0.5,
            "advice": 0.59,
            "noise": 0.25,
            "plain": 0.8,
            "young": 0.3,
        }
        assert logged(conn, tenant) == 2
    monkeypatch.setattr("spark_pg.revalue.cli.decide_auto", decide_auto)
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--dry-run", "--json", "--quiet")
    result = json.loads(out)
    assert (result["skipped"], result["lowered"], result["kept"]) == (0, 1, 0)  # noise, decided anew
    assert [(d["key"], d["status"]) for d in result["decisions"]] == [("noise", "lowered")]


def test_cli_names_the_file_line_of_a_decision_the_database_refuses(
    cli: str, tenant: str, stored: dict[str, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: "[22023]: decisions[1]: id 4 is not a memory of tenant ..." for line 3 of a file whose line 2 is
    blank, although the file's own checks name the line."""
    with psycopg.connect(cli) as conn:
        foreign = add(conn, f"{tenant}-other", "theirs")
    try:
        path = tmp_path / "d1.jsonl"
        path.write_text(
            json.dumps({"id": stored["quiet"], "importance": 0.5}) + "\n\n"
            + json.dumps({"id": foreign, "importance": 0.5}) + "\n"
        )  # fmt: skip
        code, out, err = run(capsys, "revalue", "--tenant", tenant, "--from-file", str(path))
        assert (code, out) == (2, "")
        assert err == (
            f"spark-pg: error [22023]: {path} line 3: id {foreign} is not a memory of tenant '{tenant}'\n"
        )
        with psycopg.connect(cli) as conn:
            assert logged(conn, tenant) == 0 and importances(conn, tenant)["quiet"] == 0.3
    finally:
        with psycopg.connect(cli) as conn:
            conn.execute("DELETE FROM spark.memories WHERE tenant = %s", (f"{tenant}-other",))


@pytest.mark.parametrize("name", ["d.jsonl", "d.yaml"])
def test_cli_refuses_an_offset_postgresql_cannot_hold_by_its_line(
    cli: str,
    tenant: str,
    stored: dict[str, int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
) -> None:
    """Was: Python reads +16:00 (offsets up to 24 hours), PostgreSQL does not: "error [22009]: time zone
    displacement out of range", naming neither the file nor the line."""
    rows = [
        {"id": stored["quiet"], "importance": 0.5, "last_revalued_at": None},
        {"id": stored["advice"], "importance": 0.5, "last_revalued_at": "2026-01-01T00:00:00+16:00"},
    ]
    path = tmp_path / name
    if name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        line = 2
    else:  # unquoted: YAML makes a datetime of it
        path.write_text(
            f"- id: {stored['quiet']}\n  importance: 0.5\n"
            f"- id: {stored['advice']}\n  importance: 0.5\n  last_revalued_at: 2026-01-01T00:00:00+16:00\n"
        )
        line = 3
    code, out, err = run(capsys, "revalue", "--tenant", tenant, "--from-file", str(path))
    assert (code, out) == (2, "")
    assert err == (
        f"spark-pg: error: {path} line {line}: last_revalued_at's offset must be under 16 hours (PostgreSQL "
        "holds no more), got '2026-01-01T00:00:00+16:00'\n"
    )
    with psycopg.connect(cli) as conn:
        assert logged(conn, tenant) == 0


def test_cli_errors(
    cli: str, tenant: str, stored: dict[str, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    decisions = tmp_path / "d.jsonl"
    decisions.write_text(
        json.dumps({"id": stored["quiet"], "importance": 0.6}) + '\n{"id": -3, "importance": 0.6}\n'
    )
    code, _, err = run(capsys, "revalue", "--tenant", tenant, "--from-file", str(decisions))
    assert code == 2 and f"{decisions} line 2: id -3 is not a memory of tenant" in err
    with psycopg.connect(cli) as conn:
        assert logged(conn, tenant) == 0 and importances(conn, tenant)["quiet"] == 0.3
    code, _, err = run(capsys, "revalue", "--tenant", tenant, "--interactive", "--export", "x.jsonl")
    assert code == 2 and "--export" in err
    with pytest.raises(SystemExit):
        main(["revalue", "--tenant", tenant, "--max-importance", "2"])
    with pytest.raises(SystemExit):
        main(["revalue", "--tenant", tenant, "--auto", "--interactive"])
    with pytest.raises(SystemExit):  # past bigint: was "database error: bigint out of range", exit 1
        main(["revalue", "--tenant", tenant, "--seed", str(2**64)])
    assert "--seed: must be at most 9223372036854775807 in magnitude" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------- schema


def test_migration_0007_downgrades_and_upgrades(fresh_db: str) -> None:
    schema.install(fresh_db)
    schema.downgrade(fresh_db, "0006_advisor")
    with psycopg.connect(fresh_db) as conn:
        assert conn.execute("SELECT to_regclass('spark.revaluations')").fetchone() == (None,)
        assert conn.execute("SELECT to_regclass('spark.memories_revalue_idx')").fetchone() == (None,)
    schema.install(fresh_db)
    assert schema.current_revision(fresh_db) == schema.head_revision()
    with psycopg.connect(fresh_db) as conn:
        documented = conn.execute(
            """SELECT p.proname, obj_description(p.oid, 'pg_proc') IS NOT NULL, p.provolatile, p.proconfig
               FROM pg_proc p WHERE p.pronamespace = 'spark'::regnamespace AND p.proname LIKE 'revalue%'
               ORDER BY 1"""
        ).fetchall()
    assert [(name, doc, vol) for name, doc, vol, _ in documented] == [
        ("revalue_apply", True, "v"),
        ("revalue_sample", True, "v"),
    ]
    assert all(any(c.startswith("search_path=pg_catalog") for c in config) for *_, config in documented)


def test_bad_sql_errors_surface_with_their_errcode(conn: Conn) -> None:
    with pytest.raises(errors.InvalidParameterValue):
        conn.execute("SELECT * FROM spark.revalue_sample('t', -5)")
