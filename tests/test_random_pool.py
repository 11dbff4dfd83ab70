"""The random pool of spark.retrieve: a seeded sample of the tenant's old memories (created before the recent
window), about pool_random of them and spread evenly, wherever the recent memories sit in the id range.

It used to place its probes over the tenant's whole id range: a probe that fell among recent memories found
no old one after it (the pool held 1 to 4 instead of 10), or all such probes fell on the first old memory
past the run (one memory in every sample)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

Conn = psycopg.Connection[Any]
NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
POOL = 10  # pool_random's default


def add(conn: Conn, tenant: str, prefix: str, count: int, first: datetime, step: timedelta) -> None:
    """``count`` memories keyed prefix1.. in id order, the first created at ``first``, each ``step`` later."""
    conn.execute(
        """INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash, created_at)
           SELECT %(t)s, %(p)s || i, 'plain note ' || %(p)s || i, 'plain note ' || %(p)s || i,
                  sha256(convert_to(%(t)s || %(p)s || i, 'UTF8')), %(first)s::timestamptz + (i - 1) * %(step)s
           FROM generate_series(1, %(n)s) i ORDER BY i""",
        {"t": tenant, "p": prefix, "n": count, "first": first, "step": step},
    )


def old_recent(conn: Conn, tenant: str, layout: list[tuple[str, int, bool]]) -> None:
    """Blocks of memories in id order: (key prefix, count, old). Old ones are 60 days old, recent ones a day
    (well inside and outside the 7-day recent window), each a minute apart."""
    for prefix, count, old in layout:
        first = NOW - (timedelta(days=60) if old else timedelta(days=1))
        add(conn, tenant, prefix, count, first, timedelta(minutes=1))


def sample(conn: Conn, tenant: str, query: str, seed: int = 0, as_of: datetime = NOW) -> list[str]:
    """The keys the random pool brought for one query (with k 8, every candidate comes back in explain)."""
    rows = conn.execute(
        "SELECT key, pools FROM spark.explain(%s, %s, NULL, 8, %s)",
        (tenant, query, Jsonb({"as_of": as_of.isoformat(), "include_system": False, "seed": seed})),
    ).fetchall()
    return sorted(key for key, pools in rows if "random" in pools)


def samples(conn: Conn, tenant: str, queries: int = 40) -> list[list[str]]:
    return [sample(conn, tenant, f"zebra quartz {n}") for n in range(queries)]


def test_a_tenant_whose_recent_memories_fill_the_range_above_the_old_ones_gets_a_full_pool(
    conn: Conn,
) -> None:
    """100 old memories, then 900 recent ones: the pool held 4, 1, 2, 4 and 4 memories for seeds 0 to 4."""
    old_recent(conn, "rp", [("old", 100, True), ("new", 900, False)])
    for seed in range(5):
        picks = sample(conn, "rp", "anything", seed)
        assert len(picks) == POOL, (seed, picks)
        assert all(key.startswith("old") for key in picks)


def test_a_young_tenant_with_few_old_memories_gets_a_full_pool(conn: Conn) -> None:
    """20 old memories under 1,980 recent ones: every seed samples 10 of the 20."""
    old_recent(conn, "ry", [("old", 20, True), ("new", 1980, False)])
    for seed in range(5):
        picks = sample(conn, "ry", "anything", seed)
        assert len(picks) == POOL, (seed, picks)
        assert all(key.startswith("old") for key in picks)


def test_history_imported_after_recent_memories_is_sampled_evenly(conn: Conn) -> None:
    """900 recent memories, then 100 old ones imported (higher ids): the first old one was in all 40 samples
    and the pool held 4 on average; now every sample is full and no memory is in more than a quarter."""
    old_recent(conn, "rq", [("new", 900, False), ("old", 100, True)])
    runs = samples(conn, "rq")
    assert all(len(picks) == POOL for picks in runs), [len(p) for p in runs]
    counts = Counter(key for picks in runs for key in picks)
    assert max(counts.values()) <= len(runs) // 4, counts.most_common(3)
    assert len(counts) >= 90  # 400 picks over 100 memories reach nearly all of them


def test_old_memories_between_runs_of_recent_ones_are_sampled_in_proportion(conn: Conn) -> None:
    """500 old memories, 300 recent, 200 older ones imported, then 1,300 recent: the imported block holds 2/7
    of the old memories and gets about 2/7 of the picks. Probes that fell in the middle run all took the
    first imported memory (in nearly every sample); those that fell in the top run found nothing."""
    old_recent(conn, "ri", [("a", 500, True), ("r", 300, False), ("b", 200, True), ("s", 1300, False)])
    runs = samples(conn, "ri")
    assert all(len(picks) == POOL for picks in runs), [len(p) for p in runs]
    counts = Counter(key for picks in runs for key in picks)
    assert max(counts.values()) <= len(runs) // 4, counts.most_common(3)
    share = sum(n for key, n in counts.items() if key.startswith("b")) / sum(counts.values())
    assert 0.18 < share < 0.4, share
    assert not any(key.startswith(("r", "s")) for key in counts)


def test_the_pool_samples_the_memories_old_at_as_of(conn: Conn) -> None:
    """Evaluated as of a past time, the old memories are those created 7 days before it; the ones created
    since (the recent window then, and the future) hold most of the id range here."""
    add(conn, "ra", "m", 1000, NOW - timedelta(days=60), timedelta(minutes=72))  # 60 to 10 days ago
    as_of = NOW - timedelta(days=40)
    cutoff = as_of - timedelta(days=7)
    created = dict(conn.execute("SELECT key, created_at FROM spark.memories WHERE tenant = 'ra'").fetchall())
    assert sum(at <= cutoff for at in created.values()) == 261
    for seed in range(5):
        picks = sample(conn, "ra", "anything", seed, as_of)
        assert len(picks) == POOL, (seed, picks)
        assert all(created[key] <= cutoff for key in picks)


def test_the_sample_is_reproducible_for_a_query_and_seed(conn: Conn) -> None:
    """The same query and seed give the same sample; another seed or query another one."""
    old_recent(conn, "rs", [("old", 300, True), ("new", 200, False)])
    first = sample(conn, "rs", "zebra quartz", 3)
    assert sample(conn, "rs", "zebra quartz", 3) == first
    assert sample(conn, "rs", "zebra quartz", 4) != first
    assert sample(conn, "rs", "zebra quartzes", 3) != first


def test_a_tenant_without_old_memories_has_an_empty_pool(conn: Conn) -> None:
    old_recent(conn, "rn", [("new", 50, False)])
    assert sample(conn, "rn", "anything") == []
    assert sample(conn, "rn", "anything", as_of=NOW - timedelta(days=3)) == []
