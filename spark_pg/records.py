"""Memory records: validation of one row, and reading JSONL / YAML files with line numbers.

A file is validated completely before anything is written; the first bad row raises
:class:`~spark_pg.errors.IngestError` naming the file, the line and the field.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from spark_pg.errors import IngestError, InputError
from spark_pg.intent.domains import classify_domain
from spark_pg.rowfiles import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    file_rows,
    flattened,
    string_problem,
    text_problem,
)

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
# dialog turns: their category says nothing of their content; a trace's text is its descriptor, embedded as
# it is (docs/traces.md), whatever category a file gives it
UNTAGGED_KINDS = frozenset({"episode", "trace"})
# written as `spark-pg trace add` / `learning add` write them, whoever writes them (a file, SparkClient.add):
# every text field scrubbed of secrets and personal data (docs/traces.md, "Traces and learnings from a file")
SCRUBBED_KINDS = frozenset({"trace", "learning"})
MAX_TEXT = 100_000  # characters; longer texts belong in a document store, not in a memory
MAX_QUERY_TEXT = 10_000  # a question's characters (spark._check_query_text): a question, not a document
MAX_TENANT = 128  # characters, as the database CHECKs
MAX_SOURCE = 128  # characters of spark.memories.source, as the database CHECKs
MAX_KEY = 512  # characters of a memory key, as the database CHECKs (spark.memories.key)
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)  # created_at bounds (UTC)
LATEST = datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=UTC)
# spark.system_tenant(): the cold-start pack every tenant sees; only `spark-pg seed` writes it
SYSTEM_TENANT = "_system"


def _path(parent: str, step: str | int) -> str:
    """Where a value sits in a JSON object, as ``owner.flags[2]`` (a key that is no identifier quoted)."""
    if isinstance(step, str) and step.isidentifier():
        return f"{parent}.{step}" if parent else step
    return f"{parent}[{step!a}]"


def json_problem(value: Any) -> str | None:
    """Why PostgreSQL's jsonb cannot store ``value`` (NaN or an infinity, NUL or a lone surrogate in a key or
    a string, nesting deeper than :data:`MAX_DEPTH`), or why it would not come back as given (a key that is
    not a string, at any depth: JSON writes ``1`` and ``"1"`` as the same key, so one value was lost, and
    YAML's ``on:`` as ``"true"``), or None. A nested problem names its path. Iterative: any depth is safe
    to check."""
    stack: list[tuple[Any, int, str]] = [(value, 0, "")]
    while stack:
        item, depth, path = stack.pop()
        if depth > MAX_DEPTH:
            return f"nests deeper than {MAX_DEPTH} levels"
        where = f" at {path}" if path else ""
        if isinstance(item, Mapping):
            for key, inner in item.items():
                if not isinstance(key, str):
                    return f"keys must be strings, got {key!r}{where}: quote it"
                problem = string_problem(key)
                if problem:
                    return f"key {key!a}{where} {problem}"
                stack.append((inner, depth + 1, _path(path, key)))
        elif isinstance(item, list | tuple):
            stack.extend((inner, depth + 1, _path(path, i)) for i, inner in enumerate(item))
        elif isinstance(item, float) and not math.isfinite(item):
            return f"holds {item}, which PostgreSQL's jsonb cannot store (numbers must be finite)"
        elif isinstance(item, str):
            problem = string_problem(item)
            if problem:
                return f"value {item[:40]!a} {problem}"
    return None


def _scrub_field(
    value: str,
    where: tuple[str, int],
    name: str,
    max_len: int,
    *,
    required: bool = True,
    normalise: bool = True,
) -> str:
    """One stored text of a trace or learning row, normalised (unless not ``normalise``: a key, an identity
    as given) and scrubbed; IngestError naming ``name`` when that leaves it over ``max_len`` (NFKC and
    placeholders can lengthen a text), or empty while ``required``."""
    from spark_pg.traces.scrub import scrub  # its patterns take ~20 ms to compile: only when a row needs it

    text = flattened(value) if normalise else value
    if not text and required:
        raise IngestError(*where, name, "must not be empty (it holds only invisible characters)")
    if len(text) <= max_len:
        text = scrub(text)
    if len(text) > max_len:
        raise IngestError(*where, name, f"is over {max_len:,} characters once normalised and scrubbed")
    return text


def _scrub_json(value: Any, where: tuple[str, int], path: str) -> Any:
    """Metadata with every string scrubbed as :func:`_scrub_field` does; a key that scrubbing would change is
    refused (a key is a name: two could become one), without repeating it (the error may be logged)."""
    from spark_pg.traces.scrub import scrub

    if isinstance(value, str):
        return _scrub_field(value, where, "metadata", MAX_TEXT, required=False)
    if isinstance(value, list):
        return [_scrub_json(v, where, _path(path, i)) for i, v in enumerate(value)]
    if isinstance(value, dict):
        for key in value:
            if scrub(flattened(key)) != flattened(key):
                inside = f" in {path}" if path else ""
                message = f"a key{inside} looks like a secret or personal data: rename it"
                raise IngestError(*where, "metadata", message)
        return {k: _scrub_json(v, where, _path(path, k)) for k, v in value.items()}
    return value


def _json_time(value: Any) -> str:
    """json.dumps ``default``: a date or time (YAML reads `2024-05-01` as one) as ISO 8601; nothing else."""
    if isinstance(value, date):  # datetime too
        return value.isoformat()
    raise TypeError(f"a {type(value).__name__} is not JSON")


# what the lifecycle changes after a memory is written (revaluation, tiers, pins): a row that leaves one out
# keeps the stored value on update
KEEPABLE = ("importance", "tier", "priority", "metadata")


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
    # None (the default): left out, like a file row without it; ingest then writes 0.5, active, normal and
    # {} on insert and keeps the stored value on update (a revaluation, a pin, an archive)
    importance: float | None = None
    tier: str | None = None
    priority: str | None = None
    metadata: dict[str, Any] | None = None
    action_domain: str | None = None  # None: classified at ingestion (spark_pg.intent.classify_domain)
    actionability: float | None = None  # None: scored at ingestion (spark_pg.intent.actionability)
    # fields a file row left out (of KEEPABLE): an update keeps their stored values, so a nightly
    # re-ingest does not undo a revaluation, a tier or a pin. A MemoryIn made in code names them here or
    # gives them as None, which ingest reads as left out (the default on insert); no other name is taken
    keep: frozenset[str] = frozenset()

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
    visible: bool = False,
) -> str | None:
    value = row.get(name)
    if value is None:
        if required:
            raise IngestError(where[0], where[1], name, "is required")
        return default
    problem = text_problem(value, max_len, visible=visible)
    if problem:
        raise IngestError(where[0], where[1], name, problem)
    return str(value)


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
    if not parsed.tzinfo:
        parsed = parsed.replace(tzinfo=UTC)  # naive times are taken as UTC
    # in UTC, as the database stores it (0001-01-01T00:30+01:00 is in 1 BC there), with a day to spare: a
    # client in any time zone reads it back as a Python datetime (years 1 to 9999), or could not read it
    try:
        inside = EARLIEST <= parsed.astimezone(UTC) <= LATEST
    except OverflowError:
        inside = False
    if not inside:
        raise IngestError(
            where[0],
            where[1],
            "created_at",
            f"{value!r} is not between 0001-01-02 and 9999-12-30 (UTC)",
        )
    return parsed


def validate_row(
    row: Any, source: str, line: int, default_tenant: str | None = None, *, pack: bool = False
) -> MemoryIn:
    """Check one raw row (a mapping from JSON or YAML) and build a MemoryIn, or raise IngestError. The pack's
    tenant is refused unless ``pack`` (the pack loader)."""
    where = (source, line)
    if not isinstance(row, Mapping):
        raise IngestError(source, line, None, f"each row must be an object, not {type(row).__name__}")
    unknown = sorted(str(k) for k in row if k not in FIELDS)
    if unknown:
        raise IngestError(source, line, unknown[0], f"unknown field; allowed fields: {', '.join(FIELDS)}")
    tenant = _text(row, "tenant", where, max_len=MAX_TENANT)
    if tenant is None:
        if default_tenant is None:
            raise IngestError(source, line, "tenant", "is required (in the row or with --tenant)")
        problem = text_problem(default_tenant, MAX_TENANT)  # checked as the row's own would be
        if problem:
            raise IngestError(
                source, line, "tenant", f"is not in the row, and the default (--tenant) {problem}"
            )
        tenant = default_tenant
    if tenant == SYSTEM_TENANT and not pack:
        raise IngestError(
            source,
            line,
            "tenant",
            f"{SYSTEM_TENANT} holds the cold-start pack: only `spark-pg seed` writes it",
        )
    text = _text(row, "text", where, max_len=MAX_TEXT, required=True, visible=True)
    assert text is not None
    kind = _choice(row, "kind", where, KINDS, "insight")
    key = _text(row, "key", where, max_len=MAX_KEY)
    importance = row.get("importance", 0.5)
    if importance is None:
        importance = 0.5
    if isinstance(importance, numbers.Real) and not isinstance(importance, int | float):
        importance = float(importance)  # numpy's (a MemoryIn made in code); its bool is no numbers.Real
    if isinstance(importance, bool) or not isinstance(importance, int | float) or not 0 <= importance <= 1:
        raise IngestError(source, line, "importance", f"must be a number from 0 to 1, got {importance!r}")
    if 0 < importance < 1e-37:  # the database's real has no room for it (22003)
        raise IngestError(source, line, "importance", f"must be 0 or at least 1e-37, got {importance!r}")
    metadata = row.get("metadata")
    if metadata is None:  # absent or null; 0, "", false and [] were taken as {} too, while [1] was refused
        metadata = {}
    if not isinstance(metadata, Mapping):
        raise IngestError(source, line, "metadata", f"must be an object, not {type(metadata).__name__}")
    # what the database would refuse (22P02 / 22P05), here with the line; and a key that is not a string, at
    # any depth (YAML's 1: or on: (True): {1: a, "1": b} was stored as {"1": "b"})
    problem = json_problem(metadata)
    if problem:
        raise IngestError(source, line, "metadata", problem)
    try:
        metadata = json.loads(json.dumps(metadata, default=_json_time))
    except (TypeError, ValueError) as exc:
        raise IngestError(source, line, "metadata", f"is not JSON-serialisable: {exc}") from None
    record = MemoryIn(
        tenant=tenant,
        key=key or default_key(text),
        text=text,
        kind=kind,
        category=_text(row, "category", where, max_len=64, default="general") or "general",
        source=_text(row, "source", where, max_len=MAX_SOURCE, default="user") or "user",
        context=_text(row, "context", where, max_len=MAX_TEXT),
        created_at=_timestamp(row.get("created_at"), where),
        importance=float(importance),
        tier=_choice(row, "tier", where, TIERS, "active"),
        priority=_choice(row, "priority", where, PRIORITIES, "normal"),
        metadata=dict(metadata),
        keep=frozenset(name for name in KEEPABLE if row.get(name) is None),
    )
    return _as_trace_or_learning(record, key, where) if kind in SCRUBBED_KINDS else record


def _as_trace_or_learning(record: MemoryIn, key: str | None, where: tuple[str, int]) -> MemoryIn:
    """A valid row of kind trace or learning, written as `spark-pg trace add` / `learning add` write one:
    text, context, category, source, key and every metadata string normalised and scrubbed
    (spark_pg.traces.scrub); without a key, ``trace:`` / ``learning:`` and 24 hex digits of the text's
    SHA-256 (the key `trace add` / `learning add` give the same text). A trace also gets action domain
    ``general`` and actionability 0 (it is a record of an attempt, not advice: reflection finds it), and its
    metadata.outcome, when given, must be success or failure (any case, stored in lower case) and agree with
    the text's ``Outcome:`` field; without it, the text's is stored."""
    text = _scrub_field(record.text, where, "text", MAX_TEXT)
    if key:
        key = _scrub_field(key, where, "key", MAX_KEY, normalise=False)
    else:
        key = f"{record.kind}:{hashlib.sha256(text.encode('utf-8')).hexdigest()[:24]}"
    context = record.context
    metadata = _scrub_json(record.metadata, where, "")
    fields: dict[str, Any] = {
        "text": text,
        "key": key,
        "category": _scrub_field(record.category, where, "category", 64),
        "source": _scrub_field(record.source, where, "source", MAX_SOURCE),
        "context": None if context is None else _scrub_field(context, where, "context", MAX_TEXT),
        "metadata": metadata,
    }
    if record.kind == "trace":
        from spark_pg.traces.descriptor import trace_outcome

        try:  # metadata.outcome checked, and against the text's Outcome: field; or taken from it
            outcome = trace_outcome(text, metadata.get("outcome"))
        except InputError as exc:
            raise IngestError(*where, "metadata", str(exc)) from None
        if outcome is not None:
            metadata["outcome"] = outcome
        fields |= {"action_domain": "general", "actionability": 0.0}
    return replace(record, **fields)


def read_file(path: Path, default_tenant: str | None = None, *, pack: bool = False) -> list[MemoryIn]:
    """Parse and validate a whole .jsonl / .ndjson / .yaml / .yml file (read by
    :func:`spark_pg.rowfiles.file_rows`: a regular file of at most :data:`MAX_FILE_BYTES`, UTF-8). Raises on
    the first bad row (a row without a tenant when ``default_tenant`` is not a valid one, too). ``pack``: as
    in validate_row."""

    def fail(line: int, message: str) -> IngestError:
        return IngestError(str(path), line, None, message)

    rows = file_rows(
        path,
        fail,
        "a YAML file must be a list of memories (or {memories: [...]})",
        "memories",
        max_bytes=MAX_FILE_BYTES,
    )
    records: list[MemoryIn] = []
    seen: dict[tuple[str, str], int] = {}
    for line, row in rows:
        record = validate_row(row, str(path), line, default_tenant, pack=pack)
        first = seen.get((record.tenant, record.key))
        if first is not None:
            raise IngestError(str(path), line, "key", f"{record.key!r} already appears on line {first}")
        seen[(record.tenant, record.key)] = line
        records.append(record)
    return records
