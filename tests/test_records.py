"""Unit tests of spark_pg.records: row validation and ingest-file reading. No database, no model."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from spark_pg.errors import IngestError, InputError
from spark_pg.records import (
    FIELDS,
    KEEPABLE,
    MAX_DEPTH,
    MAX_TEXT,
    MemoryIn,
    default_key,
    read_file,
    validate_row,
)

SRC = "rows.jsonl"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(*rows: dict[str, Any] | str) -> str:
    """One line per row; a str row is written verbatim (blank lines, broken JSON)."""
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n"


def ingest_error(path: Path, default_tenant: str | None = "t") -> IngestError:
    with pytest.raises(IngestError) as info:
        read_file(path, default_tenant)
    return info.value


# --- validate_row ---------------------------------------------------------------------------------------


def test_validate_row_all_fields() -> None:
    row = {
        "tenant": "acme",
        "key": "k-1",
        "text": "Prefer tabs.",
        "kind": "preference",
        "category": "style",
        "source": "agent",
        "context": "code review",
        "created_at": "2024-05-01T13:56:00Z",
        "importance": 1,
        "tier": "pinned",
        "priority": "high",
        "metadata": {"a": [1, 2], "b": {"c": "d"}},
    }
    assert set(row) == set(FIELDS)
    record = validate_row(row, SRC, 3)
    assert record == MemoryIn(
        tenant="acme",
        key="k-1",
        text="Prefer tabs.",
        kind="preference",
        category="style",
        source="agent",
        context="code review",
        created_at=datetime(2024, 5, 1, 13, 56, tzinfo=UTC),
        importance=1.0,
        tier="pinned",
        priority="high",
        metadata={"a": [1, 2], "b": {"c": "d"}},
    )
    assert isinstance(record.importance, float)
    assert isinstance(record.metadata, dict)
    assert record.descriptor == "[style] [domain:code] Prefer tabs."
    assert record.content_hash == hashlib.sha256(b"[style] [domain:code] Prefer tabs.").digest()


def test_descriptor_tags_category_and_domain() -> None:
    """Contextual enrichment: the embedded text carries the category and the action domain, except tags
    that say nothing (general) and dialog episodes."""
    tagged = MemoryIn(tenant="t", key="a", text="Squash wip commits before tagging.", category="git")
    assert tagged.descriptor == f"[git] [domain:{tagged.domain}] Squash wip commits before tagging."
    assert tagged.domain == "code"
    given = MemoryIn(tenant="t", key="b", text="Post at 9am.", category="social", action_domain="social")
    assert given.descriptor == "[social] [domain:social] Post at 9am."
    bare = MemoryIn(tenant="t", key="c", text="hello there")
    assert (bare.domain, bare.descriptor) == ("general", "hello there")
    episode = MemoryIn(tenant="t", key="d", text="I deployed the app today", kind="episode", category="chat")
    assert episode.descriptor == "I deployed the app today"
    # a different category is different content: it is embedded again
    assert tagged.content_hash != MemoryIn(tenant="t", key="a", text=tagged.text, category="vcs").content_hash


def test_validate_row_defaults() -> None:
    record = validate_row({"text": "hello"}, SRC, 1, default_tenant="t")
    # the fields left out are kept from the stored row on update (importance, tier, priority, metadata)
    # (written on insert as the values ingest gives a MemoryIn that leaves them None)
    assert record == MemoryIn(
        tenant="t",
        key=default_key("hello"),
        text="hello",
        importance=0.5,
        tier="active",
        priority="normal",
        metadata={},
        keep=frozenset(KEEPABLE),
    )
    assert (record.kind, record.category, record.source) == ("insight", "general", "user")
    assert (record.tier, record.priority, record.importance) == ("active", "normal", 0.5)
    assert record.context is None
    assert record.created_at is None
    assert record.metadata == {}


@pytest.mark.parametrize("name", ["kind", "tier", "priority", "importance", "metadata", "created_at", "key"])
def test_validate_row_null_means_default(name: str) -> None:
    record = validate_row({"text": "x", name: None}, SRC, 1, default_tenant="t")
    assert record == validate_row({"text": "x"}, SRC, 1, default_tenant="t")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2024-05-01T13:56:00", datetime(2024, 5, 1, 13, 56, tzinfo=UTC)),  # naive -> UTC
        ("2024-05-01T13:56:00Z", datetime(2024, 5, 1, 13, 56, tzinfo=UTC)),
        (" 2024-05-01T13:56:00Z ", datetime(2024, 5, 1, 13, 56, tzinfo=UTC)),
        ("2024-05-01 13:56:00.250000Z", datetime(2024, 5, 1, 13, 56, 0, 250000, tzinfo=UTC)),
        ("2024-05-01", datetime(2024, 5, 1, tzinfo=UTC)),
        (
            "2024-05-01T13:56:00+02:00",
            datetime(2024, 5, 1, 13, 56, tzinfo=timezone(timedelta(hours=2))),
        ),
        (datetime(2024, 5, 1, 13, 56), datetime(2024, 5, 1, 13, 56, tzinfo=UTC)),
        (datetime(2024, 5, 1).date(), datetime(2024, 5, 1, tzinfo=UTC)),
    ],
)
def test_created_at_parsing(raw: Any, expected: datetime) -> None:
    created = validate_row({"text": "x", "created_at": raw}, SRC, 1, "t").created_at
    assert created == expected
    assert created is not None and created.tzinfo is not None
    assert created.utcoffset() == expected.utcoffset()


@pytest.mark.parametrize("raw", [0, 0.0, 0.25, 1, 1.0])
def test_importance_accepted(raw: float) -> None:
    importance = validate_row({"text": "x", "importance": raw}, SRC, 1, "t").importance
    assert importance == float(raw)
    assert type(importance) is float


def test_metadata_is_a_json_copy() -> None:
    meta: dict[str, Any] = {"when": datetime(2024, 1, 2, 3, 4, 5), "n": 1, "nested": {"xs": (1, 2)}}
    record = validate_row({"text": "x", "metadata": meta}, SRC, 1, "t")
    assert record.metadata == {"when": "2024-01-02T03:04:05", "n": 1, "nested": {"xs": [1, 2]}}  # ISO 8601
    record.metadata["n"] = 2
    assert meta["n"] == 1  # the caller's dict is not shared
    # anything else that is not JSON is refused, not stored as its repr ("<object object at 0x...>")
    with pytest.raises(IngestError, match=r"'metadata': is not JSON-serialisable: a object is not JSON"):
        validate_row({"text": "x", "metadata": {"a": object()}}, SRC, 1, "t")
    with pytest.raises(IngestError, match="a set is not JSON"):
        validate_row({"text": "x", "metadata": {"tags": {"a", "b"}}}, SRC, 1, "t")


def test_tenant_default_used_only_when_row_has_none() -> None:
    assert validate_row({"text": "x"}, SRC, 1, default_tenant="dflt").tenant == "dflt"
    assert validate_row({"text": "x", "tenant": None}, SRC, 1, default_tenant="dflt").tenant == "dflt"
    assert validate_row({"text": "x", "tenant": "own"}, SRC, 1, default_tenant="dflt").tenant == "own"
    assert validate_row({"text": "x", "tenant": "own"}, SRC, 1).tenant == "own"


BAD_DEFAULT_TENANTS = [
    pytest.param("   ", "must not be empty", id="blank"),
    pytest.param("", "must not be empty", id="empty"),
    pytest.param("t" * 129, "is 129 characters; the limit is 128", id="129-characters"),
    pytest.param("a\x00b", "must not contain NUL characters", id="nul"),
]


@pytest.mark.parametrize(("tenant", "message"), BAD_DEFAULT_TENANTS)
def test_the_default_tenant_is_checked_like_a_rows_tenant(tmp_path: Path, tenant: str, message: str) -> None:
    """``ingest --tenant`` was used unchecked: "   " stored memories under a blank tenant, "" and 129
    characters failed a database CHECK after the whole file was embedded. Now the first row that needs the
    default is refused, naming its line, before anything is embedded; rows with their own tenant don't."""
    expected = rf"line 2, field 'tenant': is not in the row, and the default \(--tenant\) {message}"
    for row in ({"text": "x"}, {"text": "x", "tenant": None}):
        with pytest.raises(IngestError, match=expected):
            validate_row(row, SRC, 2, default_tenant=tenant)
    path = write(tmp_path, "m.jsonl", jsonl({"tenant": "own", "text": "x"}, {"text": "y"}))
    err = ingest_error(path, tenant)
    assert (err.line, err.field) == (2, "tenant") and message in str(err)
    assert [r.tenant for r in read_file(path, "t")] == ["own", "t"]
    path = write(tmp_path, "own.jsonl", jsonl({"tenant": "own", "text": "x"}))
    assert [r.tenant for r in read_file(path, tenant)] == ["own"]  # the default is not used


def test_a_default_tenant_of_128_characters_is_fine(tmp_path: Path) -> None:
    path = write(tmp_path, "m.jsonl", jsonl({"text": "x"}))
    assert [r.tenant for r in read_file(path, "t" * 128)] == ["t" * 128]


def test_default_key_is_stable_and_text_derived() -> None:
    key = default_key("The sky is blue.")
    assert key == "h:" + hashlib.sha256(b"The sky is blue.").hexdigest()[:24]
    assert len(key) == 2 + 24
    assert default_key("The sky is blue.") == key
    assert default_key("  The sky is blue.\n") == key  # surrounding whitespace ignored
    assert default_key("The sky is green.") != key
    assert default_key("the sky is blue.") != key


def test_validate_row_default_key_same_text_same_key() -> None:
    a = validate_row({"text": "same"}, SRC, 1, "t")
    b = validate_row({"text": "same", "kind": "rule"}, "other.yaml", 9, "u")
    c = validate_row({"text": "different"}, SRC, 1, "t")
    assert a.key == b.key == default_key("same")
    assert c.key != a.key
    assert validate_row({"text": "same", "key": "explicit"}, SRC, 1, "t").key == "explicit"


BAD_ROWS: list[Any] = [
    pytest.param({"tenant": "t"}, "text", "is required", id="missing-text"),
    pytest.param({"tenant": "t", "text": ""}, "text", "must not be empty", id="empty-text"),
    pytest.param({"tenant": "t", "text": "  \n"}, "text", "must not be empty", id="blank-text"),
    pytest.param({"tenant": "t", "text": 5}, "text", "must be a string, not int", id="int-text"),
    pytest.param({"tenant": "t", "text": ["a"]}, "text", "must be a string, not list", id="list-text"),
    pytest.param({"tenant": "t", "text": "a\x00b"}, "text", "NUL", id="nul-text"),
    pytest.param(
        {"tenant": "t", "text": "x" * (MAX_TEXT + 1)}, "text", f"the limit is {MAX_TEXT}", id="long-text"
    ),
    pytest.param({"tenant": "t", "text": "x", "colour": "red"}, "colour", "unknown field", id="unknown"),
    pytest.param(
        {"tenant": "t", "text": "x", "kind": "thought"}, "kind", "'thought' is not one of", id="kind"
    ),
    pytest.param({"tenant": "t", "text": "x", "kind": "Rule"}, "kind", "is not one of", id="kind-case"),
    pytest.param({"tenant": "t", "text": "x", "tier": "hot"}, "tier", "'hot' is not one of", id="tier"),
    pytest.param(
        {"tenant": "t", "text": "x", "priority": "urgent"},
        "priority",
        "'urgent' is not one of",
        id="priority",
    ),
    pytest.param({"tenant": "t", "text": "x", "importance": 1.5}, "importance", "from 0 to 1", id="imp-high"),
    pytest.param({"tenant": "t", "text": "x", "importance": -0.1}, "importance", "from 0 to 1", id="imp-low"),
    pytest.param({"tenant": "t", "text": "x", "importance": True}, "importance", "True", id="imp-bool"),
    pytest.param({"tenant": "t", "text": "x", "importance": False}, "importance", "False", id="imp-false"),
    pytest.param({"tenant": "t", "text": "x", "importance": "0.5"}, "importance", "'0.5'", id="imp-str"),
    pytest.param({"tenant": "t", "text": "x", "importance": math.nan}, "importance", "nan", id="imp-nan"),
    pytest.param({"tenant": "t", "text": "x", "metadata": [1]}, "metadata", "not list", id="meta-list"),
    pytest.param({"tenant": "t", "text": "x", "metadata": "a=b"}, "metadata", "not str", id="meta-str"),
    pytest.param({"tenant": "t", "text": "x", "metadata": 3}, "metadata", "not int", id="meta-int"),
    pytest.param({"tenant": "t", "text": "x\ud800"}, "text", "lone surrogate", id="surrogate-text"),
    pytest.param({"tenant": "t", "text": "x", "key": "\udcff"}, "key", "lone surrogate", id="surrogate-key"),
    pytest.param(
        {"tenant": "t", "text": "x", "metadata": {"a": math.inf}}, "metadata", "must be finite", id="meta-inf"
    ),
    pytest.param(
        {"tenant": "t", "text": "x", "metadata": {"a": [1, math.nan]}}, "metadata", "nan", id="meta-nan"
    ),
    pytest.param(
        {"tenant": "t", "text": "x", "metadata": {"a\x00": 1}}, "metadata", "NUL", id="meta-nul-key"
    ),
    pytest.param(
        {"tenant": "t", "text": "x", "metadata": {"a": {"b": "\udc00"}}},
        "metadata",
        "surrogate",
        id="meta-sur",
    ),
    pytest.param(
        {"tenant": "t", "text": "x", "created_at": "yesterday"}, "created_at", "'yesterday'", id="time-str"
    ),
    pytest.param(
        {"tenant": "t", "text": "x", "created_at": "2024-13-01"}, "created_at", "ISO 8601", id="time-month"
    ),
    pytest.param(
        {"tenant": "t", "text": "x", "created_at": 1714571760}, "created_at", "not int", id="time-int"
    ),
    pytest.param(
        {"tenant": "t", "text": "x", "importance": 1e-50}, "importance", "0 or at least 1e-37", id="imp-tiny"
    ),
    pytest.param(  # 1 BC in UTC: stored, then no client could read the tenant's rows back
        {"tenant": "t", "text": "x", "created_at": "0001-01-01T00:30:00+01:00"},
        "created_at",
        "not between 0001-01-02 and 9999-12-30 (UTC)",
        id="time-bc",
    ),
    pytest.param(
        {"tenant": "t", "text": "x", "created_at": "9999-12-31T23:59:59-14:00"},
        "created_at",
        "not between 0001-01-02 and 9999-12-30 (UTC)",
        id="time-10000",
    ),
    pytest.param({"text": "x"}, "tenant", "is required", id="no-tenant"),
    pytest.param({"text": "x", "tenant": ""}, "tenant", "must not be empty", id="empty-tenant"),
    pytest.param({"text": "x", "tenant": 7}, "tenant", "must be a string", id="int-tenant"),
    pytest.param({"text": "x", "tenant": "t" * 129}, "tenant", "the limit is 128", id="long-tenant"),
    pytest.param({"tenant": "t", "text": "x", "key": 12}, "key", "must be a string", id="int-key"),
    pytest.param({"tenant": "t", "text": "x", "key": ""}, "key", "must not be empty", id="empty-key"),
    pytest.param(
        {"tenant": "t", "text": "x", "category": "c" * 65}, "category", "limit is 64", id="category"
    ),
    pytest.param({"tenant": "t", "text": "x", "source": 1}, "source", "must be a string", id="source"),
    pytest.param({"tenant": "t", "text": "x", "context": ""}, "context", "must not be empty", id="context"),
]


@pytest.mark.parametrize(("row", "field", "fragment"), BAD_ROWS)
def test_validate_row_rejects(row: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(IngestError) as info:
        validate_row(row, SRC, 42)
    err = info.value
    assert (err.source, err.line, err.field) == (SRC, 42, field)
    assert fragment in str(err)
    assert str(err).startswith(f"{SRC} line 42, field {field!r}: ")


@pytest.mark.parametrize("row", [["text", "x"], "text", 3, None])
def test_validate_row_rejects_non_objects(row: Any) -> None:
    with pytest.raises(IngestError) as info:
        validate_row(row, SRC, 5, "t")
    assert (info.value.line, info.value.field) == (5, None)
    assert f"each row must be an object, not {type(row).__name__}" in str(info.value)


def test_ingest_error_is_an_input_error() -> None:
    err = IngestError("f.jsonl", 3, None, "boom")
    assert isinstance(err, InputError)
    assert isinstance(err, ValueError)
    assert str(err) == "f.jsonl line 3: boom"


# --- read_file: JSONL -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["m.jsonl", "m.ndjson", "M.JSONL"])
def test_read_jsonl(tmp_path: Path, name: str) -> None:
    path = write(
        tmp_path,
        name,
        jsonl(
            {"text": "first", "tenant": "a"}, "", "   ", {"text": "second", "kind": "rule"}, {"text": "third"}
        ),
    )
    records = read_file(path, default_tenant="dflt")
    assert [r.text for r in records] == ["first", "second", "third"]
    assert [r.tenant for r in records] == ["a", "dflt", "dflt"]
    assert records[1].kind == "rule"
    assert [r.key for r in records] == [default_key(t) for t in ("first", "second", "third")]


def test_read_jsonl_crlf_and_no_trailing_newline(tmp_path: Path) -> None:
    path = write(tmp_path, "m.jsonl", '{"text": "a"}\r\n\r\n{"text": "b"}')
    assert [r.text for r in read_file(path, "t")] == ["a", "b"]


@pytest.mark.parametrize(
    ("lines", "line"),
    [
        (['{"text": "a"}', "", '{"text": "b",}'], 3),
        (["{not json"], 1),
        (['{"text": "a"}', '{"text": "b"}', "", "", '["unterminated'], 5),
    ],
)
def test_read_jsonl_bad_json_line(tmp_path: Path, lines: list[str], line: int) -> None:
    path = write(tmp_path, "m.jsonl", jsonl(*lines))
    err = ingest_error(path)
    assert (err.source, err.line, err.field) == (str(path), line, None)
    assert "is not valid JSON" in str(err)
    assert re.search(r"\(column \d+\)$", str(err)) and " at at " not in str(err)


def test_read_jsonl_bad_row_reports_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "m.jsonl", jsonl({"text": "a"}, "", {"text": "b"}, {"text": "c", "tier": "hot"}))
    err = ingest_error(path)
    assert (err.source, err.line, err.field) == (str(path), 4, "tier")


def test_read_jsonl_missing_tenant_without_default(tmp_path: Path) -> None:
    path = write(tmp_path, "m.jsonl", jsonl({"text": "a", "tenant": "x"}, {"text": "b"}))
    err = ingest_error(path, default_tenant=None)
    assert (err.line, err.field) == (2, "tenant")


# --- read_file: YAML ------------------------------------------------------------------------------------

YAML_LIST = """\
- text: first
  tenant: a
  metadata:
    nested: {x: 1}
- text: second
  created_at: 2024-05-01 13:56:00
  importance: 0.75
- text: third
  created_at: 2024-05-01
"""

YAML_MEMORIES = """\
memories:
  - text: first
    tenant: a
    metadata:
      nested: {x: 1}
  - text: second
    created_at: 2024-05-01 13:56:00
    importance: 0.75
  - text: third
    created_at: 2024-05-01
"""


@pytest.mark.parametrize(
    ("name", "text"),
    [("m.yaml", YAML_LIST), ("m.yml", YAML_LIST), ("m.YAML", YAML_LIST), ("m.yaml", YAML_MEMORIES)],
)
def test_read_yaml(tmp_path: Path, name: str, text: str) -> None:
    records = read_file(write(tmp_path, name, text), default_tenant="dflt")
    assert [r.text for r in records] == ["first", "second", "third"]
    assert [r.tenant for r in records] == ["a", "dflt", "dflt"]
    assert records[0].metadata == {"nested": {"x": 1}}  # no line-number bookkeeping leaks out
    assert records[1].created_at == datetime(2024, 5, 1, 13, 56, tzinfo=UTC)
    assert records[1].importance == 0.75
    assert records[2].created_at == datetime(2024, 5, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        (YAML_LIST.replace("  importance: 0.75", "  importance: 2"), 5, "importance"),
        (YAML_LIST.replace("  importance: 0.75", "  kind: nope"), 5, "kind"),
        (YAML_LIST.replace("- text: third", "- text: ''"), 8, "text"),
        (YAML_MEMORIES.replace("    importance: 0.75", "    tier: hot"), 6, "tier"),
        (YAML_MEMORIES.replace("    importance: 0.75", "    bogus: 1"), 6, "bogus"),
        ("# comment\n\n- text: a\n-\n  text: b\n  kind: nope\n", 5, "kind"),
        ("[{text: a}, {text: b, tier: hot}]\n", 1, "tier"),
    ],
)
def test_read_yaml_bad_row_line(tmp_path: Path, text: str, line: int, field: str) -> None:
    path = write(tmp_path, "m.yaml", text)
    err = ingest_error(path)
    assert (err.source, err.line, err.field) == (str(path), line, field)


@pytest.mark.parametrize(
    "text",
    ["- text: [unclosed\n- text: b\n", "- text: a\n  kind: 'x\n", "- text: a\n tenant: b\n", "a: b: c\n"],
)
def test_read_yaml_syntax_error(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, "m.yaml", text)
    err = ingest_error(path)
    assert err.source == str(path)
    assert err.field is None
    assert err.line >= 1
    assert "is not valid YAML" in str(err)


def test_read_yaml_syntax_error_line(tmp_path: Path) -> None:
    path = write(tmp_path, "m.yaml", "- text: a\n\n- text: b\n- text: c\n  kind: x: y\n- text: d\n")
    err = ingest_error(path)
    assert err.line == 5
    assert "mapping values are not allowed here" in str(err)


@pytest.mark.parametrize("text", ["just a string\n", "42\n", "text: hello\ntenant: t\n", "memories: 3\n"])
def test_read_yaml_wrong_shape(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, "m.yaml", text)
    err = ingest_error(path)
    assert (err.line, err.field) == (1, None)
    assert "must be a list of memories" in str(err)


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "memories:\n", "[]\n", "memories: []\n"])
def test_read_yaml_empty(tmp_path: Path, text: str) -> None:
    assert read_file(write(tmp_path, "m.yaml", text), "t") == []


# --- read_file: duplicates, file types, encoding ---------------------------------------------------------


def test_duplicate_default_key_in_jsonl(tmp_path: Path) -> None:
    path = write(tmp_path, "m.jsonl", jsonl({"text": "same"}, {"text": "other"}, "", {"text": "same"}))
    err = ingest_error(path)
    assert (err.line, err.field) == (4, "key")
    assert f"{default_key('same')!r} already appears on line 1" in str(err)


def test_duplicate_explicit_key_in_yaml(tmp_path: Path) -> None:
    text = "- {key: k, text: a}\n- {key: j, text: b}\n- {key: k, text: c}\n"
    err = ingest_error(write(tmp_path, "m.yaml", text))
    assert (err.line, err.field) == (3, "key")
    assert "'k' already appears on line 1" in str(err)


def test_same_key_in_different_tenants_is_fine(tmp_path: Path) -> None:
    path = write(tmp_path, "m.jsonl", jsonl({"tenant": "a", "text": "x"}, {"tenant": "b", "text": "x"}))
    records = read_file(path)
    assert [(r.tenant, r.key) for r in records] == [("a", default_key("x")), ("b", default_key("x"))]


def test_duplicate_on_one_yaml_line(tmp_path: Path) -> None:
    path = write(tmp_path, "m.yaml", "[{tenant: t, text: a}, {tenant: t, text: a}]\n")
    err = ingest_error(path)
    assert (err.line, err.field) == (1, "key")


def test_read_yaml_non_mapping_row_line(tmp_path: Path) -> None:
    path = write(tmp_path, "m.yaml", "- text: a\n  tenant: t\n- just a string\n")
    err = ingest_error(path)
    assert (err.line, err.field) == (3, None)


@pytest.mark.parametrize("name", ["m.txt", "m.csv", "m"])
def test_unknown_suffix(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, name, jsonl({"text": "a"}))
    err = ingest_error(path)
    assert (err.source, err.field) == (str(path), None)
    assert "unknown file type" in str(err)


@pytest.mark.parametrize("name", ["m.jsonl", "m.yaml"])
def test_non_utf8_bytes(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b'{"text": "caf\xe9"}\n')
    err = ingest_error(path)
    assert (err.source, err.line, err.field) == (str(path), 1, None)
    assert "is not UTF-8 text" in str(err)


@pytest.mark.parametrize("name", ["m.jsonl", "m.yaml"])
def test_a_byte_order_mark_is_dropped_in_both_formats(tmp_path: Path, name: str) -> None:
    """JSONL refused it ("Unexpected UTF-8 BOM") while YAML took it."""
    path = tmp_path / name
    row = '{"tenant": "t", "text": "a"}' if name.endswith("jsonl") else "- {tenant: t, text: a}"
    path.write_bytes(b"\xef\xbb\xbf" + row.encode() + b"\n")
    assert [r.text for r in read_file(path)] == ["a"]


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.jsonl"
    err = ingest_error(path)
    assert (err.source, err.line, err.field) == (str(path), 0, None)
    assert str(err) == f"{path}: cannot be read: No such file or directory"  # the file as a whole: no line


def test_only_a_regular_file_of_a_known_type_and_size_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checks come before reading: a FIFO blocked ingest, /dev/zero filled the memory."""
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    (tmp_path / "zero.jsonl").symlink_to("/dev/zero")
    for path in (fifo, tmp_path / "zero.jsonl", tmp_path):
        assert "is not a regular file" in str(ingest_error(path)) or "unknown file type" in str(
            ingest_error(path)
        )
    assert str(ingest_error(fifo)) == f"{fifo}: is not a regular file"
    big = write(tmp_path, "big.jsonl", '{"tenant": "t", "text": "a"}\n' * 10)
    monkeypatch.setattr("spark_pg.records.MAX_FILE_BYTES", 100)
    assert str(ingest_error(big)) == f"{big}: is 290 bytes; the limit is 100: split it"


@pytest.mark.parametrize(("name", "text"), [("m.jsonl", ""), ("m.jsonl", "\n \n\t\n"), ("m.ndjson", "")])
def test_empty_jsonl(tmp_path: Path, name: str, text: str) -> None:
    assert read_file(write(tmp_path, name, text), "t") == []


def test_metadata_nesting_is_capped_at_max_depth() -> None:
    deep: Any = 1
    for _ in range(MAX_DEPTH - 1):  # in the metadata object: MAX_DEPTH levels
        deep = [deep]
    assert validate_row({"tenant": "t", "text": "x", "metadata": {"a": deep}}, SRC, 1).metadata == {"a": deep}
    with pytest.raises(IngestError, match=f"nests deeper than {MAX_DEPTH} levels"):
        validate_row({"tenant": "t", "text": "x", "metadata": {"a": [deep]}}, SRC, 1)


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("- text: a\n- text: !!int abc\n", 2, "'abc' is not a valid int"),
        ("- text: a\n  created_at: 2024-02-30\n", 2, "'2024-02-30' is not a valid timestamp"),
        ("- text: a\n- text: b\n  context: c\x07\n", 3, "unacceptable character U+0007"),
        ("- text: &x a\n- text: *x\n", 2, "uses an alias (*x)"),
        ("- text: a\n  metadata:\n    a: " + "[" * 120 + "]" * 120 + "\n", 3, "nests deeper than 100 levels"),
        # a repeated key: PyYAML keeps the last and drops the rest without a word
        ("memories:\n  - text: a\nmemories:\n  - text: b\n  - text: c\n", 3, "repeats the key 'memories'"),
        ("- text: a\n- text: b\n  kind: rule\n  text: c\n", 4, "repeats the key 'text' (first on line 2)"),
        ("- text: a\n  metadata: {yes: 1, on: 2}\n", 2, "repeats the key True"),
        ("- text: a\n  importance: 0x" + "f" * 5000 + "\n", 2, "has an integer over 4300 digits"),
        ("- text: a\n  importance: " + "9" * 5000 + "\n", 2, "has an integer over 4300 digits"),
    ],
)
def test_read_yaml_refuses_what_the_strict_loader_refuses(
    tmp_path: Path, text: str, line: int, fragment: str
) -> None:
    err = ingest_error(write(tmp_path, "m.yaml", text))
    assert (err.line, err.field) == (line, None)
    assert "is not valid YAML" in str(err) and fragment in str(err)


def test_a_key_written_beside_a_merge_key_overrides_it(tmp_path: Path) -> None:
    """YAML's rule: the mapping's own keys win over merged ones; only a key written twice is refused."""
    path = write(tmp_path, "m.yaml", "- {<<: {text: merged, kind: rule}, text: own}\n")
    [record] = read_file(path, "t")
    assert (record.text, record.kind) == ("own", "rule")


def test_read_yaml_keeps_anchors_merge_free_tags_and_timestamps(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "m.yaml",
        "- text: &t !!str 42\n  created_at: 2024-05-01 13:56:00\n"
        "  metadata: {n: !!int '7', when: 2024-05-01}\n",
    )
    [record] = read_file(path, "t")
    assert record.text == "42" and record.created_at == datetime(2024, 5, 1, 13, 56, tzinfo=UTC)
    assert record.metadata == {"n": 7, "when": "2024-05-01"}


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("1" * 5000, "an integer over"),
        ("[" * 5000 + "]" * 5000, "nests too deeply"),
        ("[" * 10_000 + "]" * 10_000, "nests too deeply"),
        ('{"b": 1, "b": 2}', "repeats the key 'b' in one object"),  # json keeps the last one silently
    ],
)
def test_read_jsonl_refuses_what_python_cannot_read(tmp_path: Path, line: str, fragment: str) -> None:
    path = write(
        tmp_path, "m.jsonl", '{"tenant": "t", "text": "a"}\n{"text": "b", "metadata": {"a": ' + line + "}}\n"
    )
    err = ingest_error(path)
    assert (err.line, err.field) == (2, None) and fragment in str(err)


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_read_jsonl_keeps_line_separators_inside_strings(tmp_path: Path, separator: str) -> None:
    """str.splitlines() also breaks on U+2028, U+2029 and U+0085, which JSON allows raw in a string; the
    reader (spark_pg.rowfiles, shared with eval datasets and revalue files) splits at \\n only."""
    rows = [{"tenant": "t", "text": f"one{separator}two"}, {"tenant": "t", "text": "three", "kind": "nope"}]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows[:1]), encoding="utf-8")
    assert [r.text for r in read_file(path)] == [f"one{separator}two"]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    err = ingest_error(path)
    assert (err.line, err.field) == (2, "kind")


@pytest.mark.parametrize("value", [0, "", False, []])
def test_metadata_that_is_not_an_object_is_refused_even_when_falsy(value: object) -> None:
    """0, "", false and [] were stored as {}; [1] was refused."""
    with pytest.raises(IngestError, match="'metadata': must be an object"):
        validate_row({"text": "x", "metadata": value}, SRC, 1, "t")


def test_metadata_keys_must_be_strings(tmp_path: Path) -> None:
    """YAML {1: a, "1": b} was stored as {"1": "b"}: a value lost; `on:` became "true"."""
    path = tmp_path / "m.yaml"
    path.write_text("- {text: x, metadata: {1: a, '1': b}}\n")
    with pytest.raises(IngestError, match=r"line 1.*'metadata': keys must be strings, got 1: quote it"):
        read_file(path, "t")


def test_a_byte_that_is_not_utf8_is_reported_on_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"text": "one"}\n' * 5 + b'{"text": "caf\\xe9"}\n'.replace(b"\\xe9", b"\xe9"))
    with pytest.raises(IngestError, match="line 6: is not UTF-8 text"):
        read_file(path, "t")


def test_a_lone_carriage_return_between_json_tokens_is_whitespace(tmp_path: Path) -> None:
    """Read as text with universal newlines, the CR became a line break: 'is not valid JSON'."""
    path = tmp_path / "cr.jsonl"
    path.write_bytes(b'{"key": "a",\r"text": "x"}\n{"key": "b", "text": "y"}\r\n')
    assert [r.key for r in read_file(path, "t")] == ["a", "b"]


def test_nested_metadata_keys_must_be_strings_and_the_error_names_the_path(tmp_path: Path) -> None:
    """Only the top level was checked: deeper, json.dumps wrote 1 as "1" and one of two values was lost
    ({owner: {1: first, "1": second}} came back as {'owner': {'1': 'second'}}), and on: as "true"."""
    path = tmp_path / "m.yaml"
    for metadata, message in (
        ("{owner: {1: first, '1': second}}", "keys must be strings, got 1 at owner: quote it"),
        ("{flags: {on: enabled, 'True': other}}", "keys must be strings, got True at flags: quote it"),
        (
            "{a: [x, {b: {2024-05-01: x}}]}",
            "keys must be strings, got datetime.date(2024, 5, 1) at a[1].b: quote it",
        ),
        ("{'odd key': {null: x}}", "keys must be strings, got None at ['odd key']: quote it"),
    ):
        path.write_text(f"- text: x\n  metadata: {metadata}\n")
        with pytest.raises(IngestError, match=r"line 1.*'metadata': " + re.escape(message)):
            read_file(path, "t")
    path.write_text("- text: x\n  metadata: {owner: {'1': first}, flags: {'on': enabled}}\n")
    assert read_file(path, "t")[0].metadata == {"owner": {"1": "first"}, "flags": {"on": "enabled"}}


# --- traces and learnings from a file: written as `trace add` / `learning add` write them -------------------

LEAKY_TRACE = {
    "tenant": "carol",
    "kind": "trace",
    "text": "Intent: deploy to prod | Outcome: failure | Key issue: DB_PASSWORD=hunter2secret and "
    "postgres://app:S3cretPw@db.prod:5432/app",
    "metadata": {
        "outcome": "Failure",
        "issue": "mail jane.doe@example.com",
        "steps": ["PGPASSWORD=abc123xyz9"],
    },
    "category": "deploys",
    "source": "export of jane.doe@example.com",
    "context": "token: ghp_aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xY1z2C",
}
SECRETS = ("hunter2secret", "S3cretPw", "jane.doe@example.com", "abc123xyz9", "ghp_aB3d")


def test_a_trace_from_a_file_is_scrubbed_untagged_and_never_ordinary_advice(tmp_path: Path) -> None:
    """A file's trace skipped the scrubbing of `spark-pg trace add`: the password came back in a
    reflection warning."""
    from spark_pg.traces import make_trace

    record = read_file(write(tmp_path, "t.jsonl", jsonl(LEAKY_TRACE)))[0]
    everything = json.dumps([record.key, record.text, record.category, record.source, record.context])
    everything += json.dumps(record.metadata) + record.descriptor
    for secret in SECRETS:
        assert secret not in everything, secret
    assert record.text == (
        "Intent: deploy to prod | Outcome: failure | Key issue: DB_PASSWORD=[REDACTED:password] and "
        "postgres://[REDACTED]@db.prod:5432/app"
    )
    assert record.metadata == {
        "outcome": "failure",  # lower case, as trace add writes it (reflection matches it exactly)
        "issue": "mail [EMAIL]",
        "steps": ["PGPASSWORD=[REDACTED:password]"],
    }
    assert (record.source, record.context) == ("export of [EMAIL]", "token: [REDACTED:github_token]")
    # the rules of trace add: the text embedded as it is (no tags), actionability 0, domain general
    assert record.descriptor == record.text and record.category == "deploys"
    assert (record.action_domain, record.actionability) == ("general", 0.0)
    # no key: the one `trace add` gives the same attempt, so adding it again counts an occurrence
    same = make_trace(
        "deploy to prod",
        "failure",
        issue="DB_PASSWORD=hunter2secret and postgres://app:S3cretPw@db.prod:5432/app",
    )
    assert (record.key, record.text) == (same.key, same.descriptor)


def test_a_learning_from_a_file_is_normalised_and_scrubbed_and_scored_as_advice(tmp_path: Path) -> None:
    from spark_pg.traces import make_learning

    handle = "Never export\nPGPASS\u200bWORD=abc123xyz9 in a shell; use ~/.pgpass"
    row = {"kind": "learning", "text": handle, "category": "db", "key": "tip for jane.doe@example.com"}
    record = validate_row(row, SRC, 1, "t")
    assert record.text == "Never export PGPASSWORD=[REDACTED:password] in a shell; use ~/.pgpass"
    assert record.text == make_learning(handle).handle  # what `learning add` stores
    assert record.key == "tip for [EMAIL]"  # a given key is kept, scrubbed
    assert (record.action_domain, record.actionability) == (None, None)  # scored at ingestion, as advice
    assert validate_row({"kind": "learning", "text": handle}, SRC, 1, "t").key == make_learning(handle).key


def test_a_trace_or_learning_written_by_trace_add_reads_back_unchanged(tmp_path: Path) -> None:
    """An export of stored traces and learnings imports as the same rows (scrubbing is idempotent)."""
    from spark_pg.traces import make_learning, make_trace

    trace = make_trace(
        "Rotate AKIAIOSFODNN7EXAMPLE for jane.doe@example.com", "failure", files="src/a.py", tags="aws"
    )
    learning = make_learning("Keep |pipes| and [REDACTED:password] placeholders as they are")
    rows = [
        {"key": trace.key, "kind": "trace", "text": trace.descriptor, "metadata": trace.metadata()},
        {
            "key": learning.key,
            "kind": "learning",
            "text": learning.handle,
            "metadata": {"trace_keys": [trace.key]},
        },
    ]
    records = read_file(write(tmp_path, "export.jsonl", jsonl(*rows)), "t")
    for row, record in zip(rows, records, strict=True):
        assert (record.key, record.text, record.metadata) == (row["key"], row["text"], row["metadata"])


@pytest.mark.parametrize(
    ("row", "field", "fragment"),
    [
        ({"metadata": {"outcome": "partial"}}, "metadata", "outcome of a trace must be success or failure"),
        ({"metadata": {"outcome": 1}}, "metadata", "outcome of a trace must be success or failure, got 1"),
        ({"text": "\u200b\u200b"}, "text", "must not be empty"),
        ({"key": "k" * 505 + " a@b.co"}, "key", "is over 512 characters once normalised and scrubbed"),
    ],
)
def test_a_trace_row_the_rules_of_trace_add_cannot_take_is_refused(
    row: dict[str, Any], field: str, fragment: str
) -> None:
    with pytest.raises(IngestError, match=re.escape(fragment)) as info:
        validate_row({"text": "Intent: x | Outcome: failure", "kind": "trace"} | row, SRC, 4, "t")
    assert (info.value.line, info.value.field) == (4, field)


def test_a_metadata_key_that_looks_like_a_secret_is_refused_without_repeating_it() -> None:
    row = {"text": "x", "kind": "learning", "metadata": {"env": {"DB_PASSWORD=hunter2secret": 1}}}
    with pytest.raises(IngestError, match="a key in env looks like a secret or personal data") as info:
        validate_row(row, SRC, 1, "t")
    assert "hunter2secret" not in str(info.value)  # the message may be logged
    # other kinds are stored as given: scrubbing is the traces' and learnings' promise (docs/traces.md)
    assert validate_row(row | {"kind": "note"}, SRC, 1, "t").metadata == row["metadata"]
