"""Memory records: validation of one row, and reading JSONL / YAML files with line numbers.

A file is validated completely before anything is written; the first bad row raises
:class:`~spark_pg.errors.IngestError` naming the file, the line and the field.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from spark_pg.errors import IngestError
from spark_pg.intent.domains import classify_domain

KINDS = (
    "insight",
    "preference",
    "decision",
    "rule",
    "episode",
    "trace",
    "learning",
    "seed",
    "failure",
    "fact",
    "note",
)
TIERS = ("pinned", "active", "archive")
PRIORITIES = ("critical", "high", "normal", "background")
FIELDS = (
    "tenant",
    "key",
    "text",
    "kind",
    "category",
    "source",
    "context",
    "created_at",
    "importance",
    "tier",
    "priority",
    "metadata",
)
UNTAGGED_KINDS = frozenset({"episode"})  # dialog turns: their category says nothing of their content
MAX_TEXT = 100_000  # characters; longer texts belong in a document store, not in a memory
MAX_DEPTH = 100  # nesting levels of a YAML document or of metadata; deeper would run out of stack


class StrictYamlLoader(yaml.SafeLoader):
    """yaml.SafeLoader for files people write (memories, trigger rules), failing only with yaml.YAMLError.

    - An alias (``*name``) is refused: aliases expand without limit ("billion laughs": 7 lines can stand
      for millions of items) and hand-written data has no need of them.
    - Nesting deeper than :data:`MAX_DEPTH` is refused (composing recurses: deeper runs out of stack).
    - A scalar its tag cannot build (``!!int abc``, ``!!timestamp abc``, ``2024-13-45``) is a
      ``ConstructorError`` at its line, not the ValueError / KeyError / AttributeError PyYAML raises.

    NUL and other non-printable characters raise ``yaml.reader.ReaderError`` as soon as the loader is built:
    build it inside the ``try`` (see :func:`yaml_error_line`).
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self.check_event()  # makes the next event current_event
        event: Any = self.current_event
        mark: Any = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None, None, f"uses an alias (*{event.anchor}): aliases are not allowed", mark
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nests deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError, IndexError) as exc:
            kind = str(node.tag).rsplit(":", 1)[-1]
            value = node.value if isinstance(node, yaml.ScalarNode) else type(node).__name__
            raise yaml.constructor.ConstructorError(
                None, None, f"{value!r} is not a valid {kind} ({exc})", node.start_mark
            ) from None


def yaml_error_line(exc: yaml.YAMLError, text: str) -> int:
    """The 1-based line a YAML error points at: where the unclosed construct began if the parser says, else
    where it gave up; for a reader error (a non-printable character), that character's line."""
    mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
    if mark is not None:
        return int(mark.line) + 1
    if isinstance(exc, yaml.reader.ReaderError):
        return text.count("\n", 0, max(exc.position, 0)) + 1
    return 1


def yaml_error_message(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        return f"unacceptable character U+{exc.character:04X}: {exc.reason}"
    return str(getattr(exc, "problem", None) or exc)


def _string_problem(value: str) -> str | None:
    """Why PostgreSQL cannot store ``value`` as text, or None."""
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"contains a lone surrogate ({value[exc.start]!a}), which is not valid Unicode text"
    return None


def json_problem(value: Any) -> str | None:
    """Why PostgreSQL's jsonb cannot store ``value`` (NaN or an infinity, NUL or a lone surrogate in a key or
    a string, nesting deeper than :data:`MAX_DEPTH`), or None. Iterative: any depth is safe to check."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"nests deeper than {MAX_DEPTH} levels"
        if isinstance(item, Mapping):
            for key, inner in item.items():
                problem = _string_problem(key) if isinstance(key, str) else None
                if problem:
                    return f"key {key!a} {problem}"
                stack.append((inner, depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((inner, depth + 1) for inner in item)
        elif isinstance(item, float) and not math.isfinite(item):
            return f"holds {item}, which PostgreSQL's jsonb cannot store (numbers must be finite)"
        elif isinstance(item, str):
            problem = _string_problem(item)
            if problem:
                return f"value {item[:40]!a} {problem}"
    return None


@dataclass(frozen=True)
class MemoryIn:
    """One validated memory, ready to embed and write."""

    tenant: str
    key: str
    text: str
    kind: str = "insight"
    category: str = "general"
    source: str = "user"
    context: str | None = None
    created_at: datetime | None = None  # None: now on insert, unchanged on update
    importance: float = 0.5
    tier: str = "active"
    priority: str = "normal"
    metadata: dict[str, Any] = field(default_factory=dict)
    action_domain: str | None = None  # None: classified at ingestion (spark_pg.intent.classify_domain)
    actionability: float | None = None  # None: scored at ingestion (spark_pg.intent.actionability)

    @cached_property
    def domain(self) -> str:
        """The action domain: as given, else classified from the text (spark_pg.intent.classify_domain)."""
        return self.action_domain or classify_domain(
            self.text, category=self.category, source=self.source, kind=self.kind
        )

    @cached_property
    def descriptor(self) -> str:
        """What gets embedded and keyword-indexed: the text behind its category and action domain as tags,
        ``[migrations] [domain:data] Run ...`` (contextual enrichment). A tag that says nothing (``general``)
        is left out, and so are both tags for dialog episodes, whose category is not about their content."""
        if self.kind in UNTAGGED_KINDS:
            return self.text
        tags = [f"[{self.category}]"] if self.category != "general" else []
        if self.domain != "general":
            tags.append(f"[domain:{self.domain}]")
        return " ".join([*tags, self.text])

    @property
    def content_hash(self) -> bytes:
        return hashlib.sha256(self.descriptor.encode("utf-8")).digest()


def default_key(text: str) -> str:
    """Key for a row that has none: re-ingesting the same text then updates instead of duplicating."""
    return "h:" + hashlib.sha256(text.strip().encode("utf-8")).hexdigest()[:24]


def _text(
    row: Mapping[str, Any],
    name: str,
    where: tuple[str, int],
    *,
    max_len: int,
    required: bool = False,
    default: str | None = None,
) -> str | None:
    value = row.get(name)
    if value is None:
        if required:
            raise IngestError(where[0], where[1], name, "is required")
        return default
    if not isinstance(value, str):
        raise IngestError(where[0], where[1], name, f"must be a string, not {type(value).__name__}")
    if not value.strip():
        raise IngestError(where[0], where[1], name, "must not be empty")
    if len(value) > max_len:
        raise IngestError(where[0], where[1], name, f"is {len(value)} characters; the limit is {max_len}")
    problem = _string_problem(value)
    if problem:
        raise IngestError(where[0], where[1], name, problem)
    return value


def _choice(
    row: Mapping[str, Any], name: str, where: tuple[str, int], allowed: tuple[str, ...], default: str
) -> str:
    value = row.get(name, default)
    if value is None:
        return default
    if value not in allowed:
        raise IngestError(where[0], where[1], name, f"{value!r} is not one of {', '.join(allowed)}")
    return str(value)


def _timestamp(value: Any, where: tuple[str, int]) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, date):
        parsed = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise IngestError(
                where[0],
                where[1],
                "created_at",
                f"{value!r} is not an ISO 8601 time such as 2024-05-01T13:56:00Z",
            ) from None
    else:
        raise IngestError(
            where[0], where[1], "created_at", f"must be an ISO 8601 string, not {type(value).__name__}"
        )
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)  # naive times are taken as UTC


def validate_row(row: Any, source: str, line: int, default_tenant: str | None = None) -> MemoryIn:
    """Check one raw row (a mapping from JSON or YAML) and build a MemoryIn, or raise IngestError."""
    where = (source, line)
    if not isinstance(row, Mapping):
        raise IngestError(source, line, None, f"each row must be an object, not {type(row).__name__}")
    unknown = sorted(str(k) for k in row if k not in FIELDS)
    if unknown:
        raise IngestError(source, line, unknown[0], f"unknown field; allowed fields: {', '.join(FIELDS)}")
    tenant = _text(row, "tenant", where, max_len=128, default=default_tenant)
    if tenant is None:
        raise IngestError(source, line, "tenant", "is required (in the row or with --tenant)")
    text = _text(row, "text", where, max_len=MAX_TEXT, required=True)
    assert text is not None
    key = _text(row, "key", where, max_len=512) or default_key(text)
    importance = row.get("importance", 0.5)
    if importance is None:
        importance = 0.5
    if isinstance(importance, bool) or not isinstance(importance, int | float) or not 0 <= importance <= 1:
        raise IngestError(source, line, "importance", f"must be a number from 0 to 1, got {importance!r}")
    metadata = row.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise IngestError(source, line, "metadata", f"must be an object, not {type(metadata).__name__}")
    problem = json_problem(metadata)  # what the database would refuse (22P02 / 22P05), here with the line
    if problem:
        raise IngestError(source, line, "metadata", problem)
    try:
        metadata = json.loads(json.dumps(metadata, default=str))
    except (TypeError, ValueError) as exc:
        raise IngestError(source, line, "metadata", f"is not JSON-serialisable: {exc}") from None
    return MemoryIn(
        tenant=tenant,
        key=key,
        text=text,
        kind=_choice(row, "kind", where, KINDS, "insight"),
        category=_text(row, "category", where, max_len=64, default="general") or "general",
        source=_text(row, "source", where, max_len=128, default="user") or "user",
        context=_text(row, "context", where, max_len=MAX_TEXT),
        created_at=_timestamp(row.get("created_at"), where),
        importance=float(importance),
        tier=_choice(row, "tier", where, TIERS, "active"),
        priority=_choice(row, "priority", where, PRIORITIES, "normal"),
        metadata=dict(metadata),
    )


def _yaml_rows(path: Path, text: str) -> list[tuple[int, Any]]:
    """The rows of a YAML list (or ``{memories: [...]}``), each with the line its item starts on."""
    loader: StrictYamlLoader | None = None
    try:
        loader = StrictYamlLoader(text)  # a non-printable character is refused here already
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        line = yaml_error_line(exc, text)
        raise IngestError(str(path), line, None, f"is not valid YAML: {yaml_error_message(exc)}") from None
    finally:
        if loader is not None:
            loader.dispose()
    if isinstance(data, dict) and set(data) == {"memories"} and isinstance(root, yaml.MappingNode):
        data = data["memories"]
        root = root.value[0][1]
    if data is None:
        return []
    if not isinstance(data, list) or not isinstance(root, yaml.SequenceNode):
        raise IngestError(str(path), 1, None, "a YAML file must be a list of memories (or {memories: [...]})")
    return [(node.start_mark.line + 1, item) for node, item in zip(root.value, data, strict=True)]


def _jsonl_rows(path: Path, text: str) -> list[tuple[int, Any]]:
    rows = []
    # lines end at \n (or \r\n) only: JSON strings may hold U+2028, U+0085, \f ... raw, which
    # str.splitlines() would also break on
    for number, raw in enumerate(text.split("\n"), start=1):
        raw = raw.removesuffix("\r")
        if not raw.strip(" \t\r"):  # JSON's whitespace
            continue
        try:
            rows.append((number, json.loads(raw)))
        except json.JSONDecodeError as exc:
            raise IngestError(
                str(path), number, None, f"is not valid JSON: {exc.msg} at column {exc.colno}"
            ) from None
        except ValueError:  # an integer longer than Python converts (sys.set_int_max_str_digits)
            raise IngestError(
                str(path), number, None, f"has an integer over {sys.get_int_max_str_digits()} digits"
            ) from None
        except RecursionError:
            raise IngestError(str(path), number, None, "nests too deeply to read") from None
    return rows


def read_file(path: Path, default_tenant: str | None = None) -> list[MemoryIn]:
    """Parse and validate a whole .jsonl / .ndjson / .yaml / .yml file. Raises on the first bad row."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise IngestError(str(path), 1, None, f"is not UTF-8 text: {exc.reason}") from None
    except OSError as exc:
        raise IngestError(str(path), 0, None, f"cannot be read: {exc.strerror}") from None
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        rows = _jsonl_rows(path, text)
    elif suffix in (".yaml", ".yml"):
        rows = _yaml_rows(path, text)
    else:
        raise IngestError(str(path), 0, None, "unknown file type: use .jsonl, .yaml or .yml")
    records: list[MemoryIn] = []
    seen: dict[tuple[str, str], int] = {}
    for line, row in rows:
        record = validate_row(row, str(path), line, default_tenant)
        first = seen.get((record.tenant, record.key))
        if first is not None:
            raise IngestError(str(path), line, "key", f"{record.key!r} already appears on line {first}")
        seen[(record.tenant, record.key)] = line
        records.append(record)
    return records
