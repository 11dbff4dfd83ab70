"""Ingest files: every row validated first; errors name the file, the line and the field."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from spark_pg.errors import IngestError
from spark_pg.records import default_key, read_file, validate_row


def test_a_full_row_is_parsed() -> None:
    record = validate_row(
        {
            "tenant": "t",
            "key": "k",
            "text": "Run tests first",
            "kind": "rule",
            "category": "git",
            "source": "review",
            "context": "ci",
            "created_at": "2024-05-01T10:00:00",
            "importance": 1,
            "tier": "pinned",
            "priority": "high",
            "metadata": {"n": 1},
        },
        "f",
        1,
    )
    assert (record.tenant, record.key, record.kind, record.tier, record.priority) == (
        "t",
        "k",
        "rule",
        "pinned",
        "high",
    )
    assert record.created_at == datetime(2024, 5, 1, 10, tzinfo=UTC)  # naive means UTC
    assert record.importance == 1.0 and isinstance(record.importance, float)
    assert record.metadata == {"n": 1}
    assert validate_row(
        {"text": "x", "created_at": "2024-05-01T10:00:00Z"}, "f", 1, "t"
    ).created_at == datetime(2024, 5, 1, 10, tzinfo=UTC)


def test_default_key_is_stable_per_text() -> None:
    assert default_key("same text") == default_key("same text") == default_key("  same text ")
    assert default_key("same text") != default_key("other text")
    assert validate_row({"text": "same text"}, "f", 1, "t").key == default_key("same text")


@pytest.mark.parametrize(
    ("row", "field", "fragment"),
    [
        ({}, "text", "is required"),
        ({"text": "  "}, "text", "must not be empty"),
        ({"text": 5}, "text", "must be a string"),
        ({"text": "x", "colour": "red"}, "colour", "unknown field"),
        ({"text": "x", "kind": "gossip"}, "kind", "not one of insight"),
        ({"text": "x", "tier": "frozen"}, "tier", "pinned, active, archive"),
        ({"text": "x", "priority": "urgent"}, "priority", "critical, high, normal, background"),
        ({"text": "x", "importance": 1.5}, "importance", "from 0 to 1"),
        ({"text": "x", "importance": True}, "importance", "from 0 to 1"),
        ({"text": "x", "importance": "high"}, "importance", "from 0 to 1"),
        ({"text": "x", "metadata": [1]}, "metadata", "must be an object"),
        ({"text": "x", "created_at": "yesterday"}, "created_at", "ISO 8601"),
        ({"text": "x", "key": "k" * 513}, "key", "limit is 512"),
        ({"text": "a\x00b"}, "text", "NUL"),
    ],
)
def test_bad_rows_name_their_field(row: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(IngestError) as info:
        validate_row(row, "file.jsonl", 7, "t")
    assert (info.value.line, info.value.field) == (7, field)
    assert fragment in str(info.value) and "file.jsonl line 7" in str(info.value)


def test_tenant_comes_from_the_row_or_the_default() -> None:
    assert validate_row({"text": "x", "tenant": "row"}, "f", 1, "default").tenant == "row"
    assert validate_row({"text": "x"}, "f", 1, "default").tenant == "default"
    with pytest.raises(IngestError, match="tenant"):
        validate_row({"text": "x"}, "f", 1, None)


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def test_jsonl_skips_blank_lines_and_keeps_order(tmp_path: Path) -> None:
    path = write(tmp_path, "m.jsonl", '{"text": "one"}\n\n{"text": "two", "key": "b"}\n')
    assert [r.text for r in read_file(path, "t")] == ["one", "two"]


@pytest.mark.parametrize(
    ("name", "content", "line", "field", "fragment"),
    [
        ("m.jsonl", '{"text": "ok"}\n{"text": "bad"\n', 2, None, "not valid JSON"),
        ("m.jsonl", '{"text": "ok"}\n\n["not", "an", "object"]\n', 3, None, "must be an object"),
        (
            "m.yaml",
            "- text: ok\n- text: also ok\n  kind: rule\n- text: bad\n  tier: cold\n",
            4,
            "tier",
            "archive",
        ),
        ("m.yaml", "memories:\n  - text: ok\n  - text: [unclosed\n", 3, None, "not valid YAML"),
        ("m.yaml", "text: not a list\n", 1, None, "must be a list"),
        (
            "m.jsonl",
            '{"key": "a", "text": "x"}\n{"key": "a", "text": "y"}\n',
            2,
            "key",
            "already appears on line 1",
        ),
        ("m.csv", "text\nx\n", 0, None, "unknown file type"),
        ("m.jsonl", b'{"text": "\xff\xfe"}\n', 1, None, "not UTF-8"),
    ],
)
def test_bad_files_name_line_and_field(
    tmp_path: Path, name: str, content: str | bytes, line: int, field: str | None, fragment: str
) -> None:
    path = write(tmp_path, name, content)
    with pytest.raises(IngestError) as info:
        read_file(path, "t")
    assert (info.value.line, info.value.field) == (line, field)
    assert fragment in str(info.value)


def test_yaml_memories_mapping_and_empty_file(tmp_path: Path) -> None:
    path = write(tmp_path, "m.yml", "memories:\n  - text: one\n    metadata: {a: 1}\n  - text: two\n")
    records = read_file(path, "t")
    assert [r.text for r in records] == ["one", "two"]
    assert records[0].metadata == {"a": 1}  # line bookkeeping does not leak into nested mappings
    assert read_file(write(tmp_path, "e.yaml", ""), "t") == []
    assert read_file(write(tmp_path, "e.jsonl", ""), "t") == []
