"""Integrity of the advisor evaluation data set (spark_pg/data/scenarios). No database, no model.

insights.yaml holds one agent user's memories, real (key ins:...) and labelled noise (key noise:...,
metadata.noise = kind); scenarios.yaml holds tool calls with the real memories that should be surfaced.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from spark_pg.records import KINDS, PRIORITIES, TIERS, MemoryIn, read_file

DATA = Path(__file__).resolve().parents[1] / "spark_pg" / "data" / "scenarios"
INSIGHTS = DATA / "insights.yaml"
SCENARIOS = DATA / "scenarios.yaml"

NOISE_KINDS = (
    "tweet",
    "retweet",
    "training_log",
    "user_quote",
    "code_dump",
    "url",
    "placeholder",
    "log_line",
    "observation",
)
CATEGORIES = ("code_editing", "debugging", "deploy", "database", "research", "social", "reads")
SPLITS = ("tune", "holdout")
TOOLS = {
    "Edit": {"file_path", "old_string", "new_string"},
    "Write": {"file_path", "content"},
    "Bash": {"command", "description"},
    "Read": {"file_path"},
    "Glob": {"pattern"},
    "Grep": {"pattern"},
    "WebSearch": {"query"},
    "WebFetch": {"url", "prompt"},
    "Task": {"description", "prompt"},
}
READ_ONLY = {"Read", "Glob", "Grep"}
FIRST, LAST = datetime(2026, 5, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)


@cache
def raw_memories() -> list[dict[str, Any]]:
    data = yaml.safe_load(INSIGHTS.read_text(encoding="utf-8"))
    assert isinstance(data, dict) and set(data) == {"memories"}
    rows = data["memories"]
    assert isinstance(rows, list)
    return rows


@cache
def records() -> dict[str, MemoryIn]:
    """The file as spark_pg ingests it: validated row by row, keys unique (read_file raises otherwise)."""
    return {r.key: r for r in read_file(INSIGHTS, default_tenant="eval")}


@cache
def scenarios() -> list[dict[str, Any]]:
    data = yaml.safe_load(SCENARIOS.read_text(encoding="utf-8"))
    assert isinstance(data, dict) and set(data) == {"scenarios"}
    rows = data["scenarios"]
    assert isinstance(rows, list)
    return rows


def noise_kind(record: MemoryIn) -> str | None:
    value = record.metadata.get("noise")
    return None if value in (None, "none") else str(value)


def real_keys() -> set[str]:
    return {key for key, r in records().items() if noise_kind(r) is None}


# --- insights.yaml ------------------------------------------------------------------------------------


def test_insights_parse_with_the_public_reader() -> None:
    assert len(records()) == len(raw_memories()) >= 200


def test_insights_have_valid_explicit_fields() -> None:
    for row in raw_memories():
        for field in ("key", "text", "kind", "category", "source", "created_at"):
            assert row.get(field), f"{row.get('key')}: {field} missing"
        assert "tenant" not in row, f"{row['key']}: the loader chooses the tenant"
    for r in records().values():
        assert r.kind in KINDS and r.tier in TIERS and r.priority in PRIORITIES, r.key
        assert 0 <= r.importance <= 1, r.key
        assert r.created_at is not None and FIRST <= r.created_at < LAST, r.key


def test_key_prefix_matches_noise_label() -> None:
    for key, r in records().items():
        kind = noise_kind(r)
        if key.startswith("noise:"):
            assert kind in NOISE_KINDS, f"{key}: metadata.noise {kind!r}"
        else:
            assert key.startswith("ins:"), key
            assert kind is None, f"{key}: a real item must not carry a noise label"


def test_noise_share_and_kinds() -> None:
    kinds = Counter(noise_kind(r) for r in records().values())
    noise = sum(n for kind, n in kinds.items() if kind is not None)
    assert 0.30 <= noise / len(records()) <= 0.50
    for kind in NOISE_KINDS:
        assert kinds[kind] >= 2, f"noise kind {kind} appears {kinds[kind]} times"


def test_real_items_cover_many_topics_and_include_critical_ones() -> None:
    real = [records()[k] for k in real_keys()]
    assert len({r.category for r in real}) >= 12
    assert len({r.kind for r in real}) >= 5
    assert sum(r.priority == "critical" for r in real) >= 3
    assert not any(r.priority == "critical" for r in records().values() if noise_kind(r))


def test_near_duplicate_groups() -> None:
    groups = Counter(str(r.metadata["dup_group"]) for r in records().values() if "dup_group" in r.metadata)
    assert len(groups) >= 2
    assert all(n >= 2 for n in groups.values()), groups
    assert all(k in real_keys() for k, r in records().items() if "dup_group" in r.metadata)


# --- scenarios.yaml -----------------------------------------------------------------------------------


def test_scenario_count_and_ids() -> None:
    ids = [s.get("id") for s in scenarios()]
    assert len(ids) >= 25
    assert all(isinstance(i, str) and i for i in ids)
    assert len(set(ids)) == len(ids), [i for i, n in Counter(ids).items() if n > 1]


def test_categories_and_splits() -> None:
    assert {s["category"] for s in scenarios()} == set(CATEGORIES)
    assert {s["split"] for s in scenarios()} == set(SPLITS)
    splits = Counter(s["split"] for s in scenarios())
    assert splits["holdout"] >= 10 and splits["tune"] > splits["holdout"]
    for category in CATEGORIES:  # the holdout is spread over the categories, not one corner of them
        assert {s["split"] for s in scenarios() if s["category"] == category} == set(SPLITS), category


@pytest.mark.parametrize("scenario", scenarios(), ids=lambda s: str(s.get("id")))
def test_scenario_shape(scenario: dict[str, Any]) -> None:
    tool = scenario["tool_name"]
    assert tool in TOOLS
    tool_input = scenario["tool_input"]
    assert isinstance(tool_input, dict)
    assert TOOLS[tool] <= set(tool_input), f"{tool} input lacks {TOOLS[tool] - set(tool_input)}"
    assert all(isinstance(tool_input[k], str) and tool_input[k].strip() for k in TOOLS[tool])
    assert isinstance(scenario["task_context"], str)
    assert isinstance(scenario.get("note"), str) and scenario["note"].strip()
    relevant = scenario["relevant"]
    assert isinstance(relevant, list) and len(relevant) <= 6
    assert len(set(relevant)) == len(relevant)


def test_relevant_keys_exist_and_are_real() -> None:
    known, real = set(records()), real_keys()
    for s in scenarios():
        for key in s["relevant"]:
            assert key in known, f"{s['id']}: unknown key {key}"
            assert key in real, f"{s['id']}: {key} is a noise item"


def test_no_advice_scenarios_are_plain_reads() -> None:
    empty = [s for s in scenarios() if not s["relevant"]]
    assert len(empty) >= 3
    for s in empty:
        assert s["tool_name"] in READ_ONLY and not s["task_context"].strip(), s["id"]


def test_social_scenarios_point_at_social_insights() -> None:
    for s in scenarios():
        if s["category"] == "social":
            assert any(records()[k].category == "social" for k in s["relevant"]), s["id"]
