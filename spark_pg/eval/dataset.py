"""Evaluation datasets: a folder with ``memories.jsonl`` and ``queries.jsonl``, read and validated.

memories.jsonl, one object per line:
    id (str, unique), conversation_id (str: the tenant), text (str); optional speaker (str),
    timestamp (ISO 8601; naive times are UTC), image_caption (str). Other fields are ignored.
queries.jsonl, one object per line:
    id (str, unique), conversation_id (str), text (str), category (int or str), relevant_ids (non-empty
    list of memory ids of the same conversation), answer (required key; null = the question has no
    answer in the conversation), as_of (ISO 8601 or null = now). Other fields are ignored.

The first bad row raises :class:`DatasetError` (an :class:`~spark_pg.errors.InputError`) naming the
file, the line and the field. Each memory is also checked as ingest checks a row of an ingest file
(:func:`spark_pg.records.validate_row`, on the row it is stored as), so whatever ingest would refuse is
refused here, before a scratch database is made.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from psycopg.types.json import Jsonb

from spark_pg.errors import IngestError, InputError
from spark_pg.ingest import stored_row
from spark_pg.records import MAX_QUERY_TEXT, MAX_SOURCE, MAX_TENANT, MAX_TEXT, MemoryIn, validate_row
from spark_pg.rowfiles import jsonl_rows, read_text_file, string_problem, text_problem

MEMORIES_FILE = "memories.jsonl"
QUERIES_FILE = "queries.jsonl"
RESERVED_TENANTS = ("_system",)  # the cold-start pack's tenant, visible to every tenant
SOURCE_PREFIX = "eval:"  # each memory's source is eval:<folder name>
MAX_NAME = MAX_SOURCE - len(SOURCE_PREFIX)
# bump when what gets stored for a memory changes in a way the rows hashed do not show, so scratch
# databases of older loads are not reused (2: ids follow the upsert's (tenant, key) order, not the file's;
# 3: the hash covers each row as ingest writes it, derived values included)
LOADER_VERSION = 3
# the dataset field a field of the stored row comes from, for ingest's refusals (the others are named as
# ingest names them)
DATASET_FIELDS = {"tenant": "conversation_id", "key": "id", "created_at": "timestamp"}


class DatasetError(InputError):
    """A dataset file or one of its rows is invalid."""

    def __init__(self, source: Path | str, line: int | None, field: str | None, message: str) -> None:
        self.source = str(source)
        self.line = line
        self.field = field
        where = self.source + (f" line {line}" if line is not None else "")
        what = f", field {field!r}" if field else ""
        super().__init__(f"{where}{what}: {message}")


@dataclass(frozen=True)
class Memory:
    id: str
    conversation_id: str
    text: str
    speaker: str | None = None
    timestamp: datetime | None = None
    image_caption: str | None = None

    @property
    def stored_text(self) -> str:
        """What an agent would store: who said it, what was said, and the image they shared."""
        text = f"{self.speaker}: {self.text}" if self.speaker else self.text
        if self.image_caption:
            text += f" [shared image: {self.image_caption}]"
        return text

    def ingest_row(self, source: str) -> dict[str, Any]:
        """The memory as a row of an ingest file (the time in ISO 8601): tenant = conversation, key = id."""
        metadata: dict[str, Any] = {"dataset_id": self.id}
        if self.speaker:
            metadata["speaker"] = self.speaker
        return {
            "tenant": self.conversation_id,
            "key": self.id,
            "text": self.stored_text,
            "kind": "episode",
            "source": source,
            "created_at": None if self.timestamp is None else self.timestamp.isoformat(),
            "metadata": metadata,
        }

    def record(self, source: str) -> MemoryIn:
        """The memory as spark_pg stores it: :meth:`ingest_row`, which the loader checked as ingest checks a
        file's row."""
        return MemoryIn(**(self.ingest_row(source) | {"created_at": self.timestamp}))


@dataclass(frozen=True)
class Query:
    id: str
    conversation_id: str
    text: str
    category: str
    relevant_ids: frozenset[str]
    answered: bool  # False: the answer is null (not in the conversation); scored apart from "overall"
    as_of: datetime | None = None


@dataclass(frozen=True)
class Dataset:
    name: str
    path: Path
    memories: tuple[Memory, ...]
    queries: tuple[Query, ...]

    @property
    def conversations(self) -> list[str]:
        return sorted({m.conversation_id for m in self.memories})

    @property
    def source(self) -> str:
        """Each memory's ``source``: ``eval:<folder name>``."""
        return SOURCE_PREFIX + self.name

    def records(self) -> list[MemoryIn]:
        return [m.record(self.source) for m in self.memories]

    def content_hash(self) -> str:
        """sha256 of everything that ends up in the database (not of the queries): each row as ingest
        writes it, the values ingest derives from the text included (action domain, actionability,
        descriptor, content hash), so a changed scorer or classifier gives another hash. Computed once
        per Dataset (about 1 ms a memory)."""
        return self._content_hash

    @cached_property
    def _content_hash(self) -> str:
        digest = hashlib.sha256(f"spark_pg eval loader v{LOADER_VERSION}\n".encode())
        for r in self.records():
            # the row ingest writes (spark_pg.ingest), less the vector and the model id: the model's name
            # is hashed into the scratch database's name
            digest.update(json.dumps(stored_row(r), default=_plain).encode())
            digest.update(b"\n")
        return digest.hexdigest()


def _plain(value: Any) -> Any:
    """A value of a stored row that json cannot write, as one it can."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Jsonb):
        return value.obj
    raise TypeError(f"cannot hash a {type(value).__name__} of a stored row")


class _Row:
    """One parsed JSON object with its file and line, for field checks that name both."""

    def __init__(self, path: Path, line: int, data: Any) -> None:
        if not isinstance(data, Mapping):
            raise DatasetError(path, line, None, f"each row must be a JSON object, not {type(data).__name__}")
        self.path = path
        self.line = line
        self.data = data

    def error(self, field: str | None, message: str) -> DatasetError:
        return DatasetError(self.path, self.line, field, message)

    def text(
        self, name: str, *, required: bool, max_len: int = MAX_TEXT, visible: bool = False
    ) -> str | None:
        """The field's string, refused when it is not a string, blank, too long or unstorable; with
        ``visible``, also when it holds only white space and invisible characters (as ingest refuses a
        memory's text of them)."""
        if name not in self.data or self.data[name] is None:
            if required:
                raise self.error(name, "is required")
            return None
        value = self.data[name]
        # as an ingest file's fields: these are stored the same way
        problem = text_problem(value, max_len, visible=visible)
        if problem:
            raise self.error(name, problem)
        return str(value)

    def required_text(self, name: str, max_len: int = MAX_TEXT, *, visible: bool = False) -> str:
        value = self.text(name, required=True, max_len=max_len, visible=visible)
        assert value is not None
        return value

    def time(self, name: str) -> datetime | None:
        value = self.data.get(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(name, f"must be an ISO 8601 string, not {type(value).__name__}")
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise self.error(name, f"{value!r} is not an ISO 8601 time such as 2023-05-08T13:56:00") from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)  # naive times are taken as UTC


def _rows(path: Path) -> list[_Row]:
    def fail(line: int, message: str) -> DatasetError:
        return DatasetError(path, line or None, None, message)

    if not path.exists():
        raise DatasetError(path, None, None, "does not exist")
    content = read_text_file(path, fail)  # guarded: a FIFO or device is refused, not read forever
    rows = [_Row(path, number, data) for number, data in jsonl_rows(content, fail)]
    if not rows:
        raise DatasetError(path, None, None, "has no rows")
    return rows


def _memory(row: _Row, source: str) -> Memory:
    """The row's memory, refused (naming the row's field) when it is bad or when ingest would refuse the row
    it is stored as (memories of ``source``)."""
    memory = Memory(
        id=row.required_text("id", max_len=512),
        conversation_id=row.required_text("conversation_id", max_len=MAX_TENANT),
        # each shown as part of the stored text: one that shows nothing is as empty as a blank one
        text=row.required_text("text", visible=True),
        speaker=row.text("speaker", required=False, max_len=200, visible=True),
        timestamp=row.time("timestamp"),
        image_caption=row.text("image_caption", required=False, visible=True),
    )
    if memory.conversation_id in RESERVED_TENANTS:
        raise row.error("conversation_id", f"{memory.conversation_id!r} is reserved (the cold-start pack)")
    if len(memory.stored_text) > MAX_TEXT:
        raise row.error("text", f"with speaker and caption it is over the {MAX_TEXT}-character limit")
    try:  # every rule of ingest, present and future, before the scratch database is made
        validate_row(memory.ingest_row(source), str(row.path), row.line)
    except IngestError as exc:
        raise row.error(
            DATASET_FIELDS.get(exc.field or "", exc.field), f"as stored, {_reason(exc)}"
        ) from None
    return memory


def _reason(exc: IngestError) -> str:
    """What an IngestError says is wrong, without the file, line and field it names first."""
    where = f"{exc.source}" + (f" line {exc.line}" if exc.line else "")
    where += (f", field {exc.field!r}" if exc.field else "") + ": "
    return str(exc).removeprefix(where)


def _query(row: _Row, memories: Mapping[str, Memory], memories_file: Path) -> Query:
    query_id = row.required_text("id", max_len=512)
    conversation = row.required_text("conversation_id", max_len=MAX_TENANT)
    text = row.required_text("text", max_len=MAX_QUERY_TEXT)  # what spark.retrieve takes
    category = row.data.get("category")
    if category is None:
        raise row.error("category", "is required")
    if isinstance(category, bool) or not isinstance(category, int | str) or str(category).strip() == "":
        raise row.error("category", f"must be an integer or a non-empty string, got {category!r}")
    problem = string_problem(category) if isinstance(category, str) else None  # it is written in the report
    if problem:
        raise row.error("category", problem)
    relevant = row.data.get("relevant_ids")
    if not isinstance(relevant, list) or not relevant:
        raise row.error("relevant_ids", f"must be a non-empty list of memory ids, got {relevant!r}")
    for item in relevant:
        if not isinstance(item, str):
            raise row.error("relevant_ids", f"must hold strings, got {item!r}")
        memory = memories.get(item)
        if memory is None:
            raise row.error("relevant_ids", f"{item!r} is not an id in {memories_file.name}")
        if memory.conversation_id != conversation:
            raise row.error(
                "relevant_ids",
                f"{item!r} belongs to conversation {memory.conversation_id!r}, not {conversation!r}",
            )
    if "answer" not in row.data:
        raise row.error("answer", "is required (null marks a question with no answer)")
    return Query(
        id=query_id,
        conversation_id=conversation,
        text=text,
        category=str(category),
        relevant_ids=frozenset(relevant),
        answered=row.data["answer"] is not None,
        as_of=row.time("as_of"),
    )


def check_folder(folder: Path) -> str:
    """The dataset's name (its folder's), refused unless ``folder`` is a folder whose name fits in each
    memory's source (``eval:<name>``); a name too long was refused by ingest once the scratch database had
    been created and its schema installed."""
    if not folder.is_dir():
        raise InputError(f"dataset {folder} is not a folder holding {MEMORIES_FILE} and {QUERIES_FILE}")
    name = folder.resolve().name
    if len(name) > MAX_NAME:
        raise DatasetError(
            folder,
            None,
            None,
            f"the folder name is {len(name)} characters; the limit is {MAX_NAME} (it is stored as each "
            f"memory's source, {SOURCE_PREFIX}<name>, at most {MAX_SOURCE} characters): rename or link it",
        )
    problem = string_problem(name)
    if problem:
        raise DatasetError(folder, None, None, f"the folder name {problem}")
    return name


def load_dataset(folder: Path) -> Dataset:
    """Read and validate ``folder``/memories.jsonl and ``folder``/queries.jsonl completely (and the
    folder's name: :func:`check_folder`)."""
    name = check_folder(folder)
    memories_file, queries_file = folder / MEMORIES_FILE, folder / QUERIES_FILE
    memories: dict[str, Memory] = {}
    first_line: dict[str, int] = {}
    source = SOURCE_PREFIX + name  # Dataset.source
    for row in _rows(memories_file):
        memory = _memory(row, source)
        if memory.id in memories:
            raise row.error("id", f"{memory.id!r} already appears on line {first_line[memory.id]}")
        memories[memory.id] = memory
        first_line[memory.id] = row.line
    queries: list[Query] = []
    seen: dict[str, int] = {}
    for row in _rows(queries_file):
        query = _query(row, memories, memories_file)
        if query.id in seen:
            raise row.error("id", f"{query.id!r} already appears on line {seen[query.id]}")
        seen[query.id] = row.line
        queries.append(query)
    return Dataset(name, folder, tuple(memories.values()), tuple(queries))
