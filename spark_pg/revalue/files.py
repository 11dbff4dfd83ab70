"""The file workflow: export a sample (.jsonl / .yaml), read decisions back from such a file, and save
decisions a lost connection kept from being applied."""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from spark_pg.errors import InputError
from spark_pg.file_writes import replace_file
from spark_pg.revalue.records import MAX_REASON, Decision, Sampled, revalued_text
from spark_pg.rowfiles import ROW_FILE_SUFFIXES, file_rows, string_problem

MAX_OFFSET = timedelta(hours=16)  # a time zone offset PostgreSQL refuses (22009): Python takes up to 24 hours


def _rows(path: Path) -> list[tuple[int, Any]]:
    """(line, row) of a .jsonl / .yaml file, read as ingest reads its files (spark_pg.rowfiles.file_rows:
    the suffix first, then only a regular file of at most 1 GiB, UTF-8 with or without a byte order mark)."""

    def fail(line: int, message: str) -> InputError:
        return InputError(f"{path} line {line}: {message}" if line else f"{path}: {message}")

    return file_rows(path, fail, "a YAML decisions file must be a list")


def read_decisions(path: Path, tenant: str | None = None) -> list[Decision]:
    """The decisions of :func:`read_numbered_decisions`, without their line numbers."""
    return [decision for _, decision in read_numbered_decisions(path, tenant)]


def read_numbered_decisions(path: Path, tenant: str | None = None) -> list[tuple[int, Decision]]:
    """(line, decision) of each decision in a .jsonl or .yaml file: one object per line / item with ``id``
    (integer) and ``importance`` (0..1), optionally ``reason``, ``key``, ``expected`` (the importance the
    decision was made on, 0..1: :func:`write_sample` writes the sampled one, and spark.revalue_apply skips
    the row if the memory's importance or key has changed since, or the memory is gone; absent or null, no
    check), ``text_md5`` (the text as sampled: skipped if it has been edited) and ``last_revalued_at`` (the
    memory's last revaluation as sampled, null for none, its offset under 16 hours: skipped if it has been
    revalued since, so a file applied twice logs nothing the second time; absent, no check); other fields
    (the ones :func:`write_sample` adds for the reader) are ignored, except a ``tenant`` that is not
    ``tenant``. The whole file is checked before anything is applied; the first bad row raises
    :class:`InputError` naming the line (a refusal only the database can make, such as an id that is not
    the tenant's memory, :func:`name_lines` words the same way)."""
    decisions: list[tuple[int, Decision]] = []
    seen: dict[int, int] = {}
    for line, row in _rows(path):
        where = f"{path} line {line}"
        if not isinstance(row, dict):
            raise InputError(f"{where}: each decision must be an object, not {type(row).__name__}")
        ident, value, reason, key = row.get("id"), row.get("importance"), row.get("reason"), row.get("key")
        expected, text_md5 = row.get("expected"), row.get("text_md5")
        if isinstance(ident, bool) or not isinstance(ident, int):
            raise InputError(f"{where}: id must be an integer memory id, got {ident!r}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise InputError(f"{where}: importance must be a number from 0 to 1, got {value!r}")
        if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON):
            raise InputError(f"{where}: reason must be a string of at most {MAX_REASON} characters")
        if key is not None and not isinstance(key, str):
            raise InputError(f"{where}: key must be a string, got {key!r}")
        for name, text in (("reason", reason), ("key", key)):
            problem = string_problem(text) if isinstance(text, str) else None  # the reason is logged
            if problem:
                raise InputError(f"{where}: {name} {problem}")
        if expected is not None and (
            isinstance(expected, bool) or not isinstance(expected, int | float) or not 0 <= expected <= 1
        ):
            raise InputError(f"{where}: expected must be a number from 0 to 1 or null, got {expected!r}")
        if text_md5 is not None and not (
            isinstance(text_md5, str) and re.fullmatch(r"[0-9a-f]{32}", text_md5)
        ):
            raise InputError(f"{where}: text_md5 must be 32 lower-case hex digits or null, got {text_md5!r}")
        check_revalued = "last_revalued_at" in row
        revalued = _revalued_at(row.get("last_revalued_at"), where)
        if tenant is not None and row.get("tenant") not in (None, tenant):
            raise InputError(f"{where}: tenant {row['tenant']!r} is not {tenant!r}")
        if ident in seen:
            raise InputError(f"{where}: id {ident} was already decided on line {seen[ident]}")
        seen[ident] = line
        decisions.append(
            (
                line,
                Decision(
                    ident,
                    float(value),
                    reason,
                    key,
                    None if expected is None else float(expected),
                    text_md5,
                    revalued,
                    check_revalued,
                ),
            )
        )
    return decisions


def name_lines(message: str, path: Path, lines: Sequence[int]) -> str:
    """``message`` (spark.revalue_apply's refusal of a file's decisions) with each ``decisions[i]`` it names
    written as the file's line that decision came from: ``lines[i]``, as :func:`read_numbered_decisions`
    gives them."""

    def line(match: re.Match[str]) -> str:
        i = int(match.group(1))
        return f"{path} line {lines[i]}" if i < len(lines) else match.group(0)

    return re.sub(r"decisions\[(\d+)\]", line, message)


def _revalued_at(value: Any, where: str) -> datetime | None:
    """A row's ``last_revalued_at``: None, or an ISO 8601 time with its offset (a string, or the time YAML
    makes of one left unquoted), the offset under 16 hours: PostgreSQL holds no more (Python up to 24)."""
    if value is None:
        return None
    at = value if isinstance(value, datetime) else None
    if isinstance(value, str):
        try:
            at = datetime.fromisoformat(value)
        except ValueError:
            at = None
    offset = None if at is None else at.utcoffset()
    if at is None or offset is None:
        raise InputError(
            f"{where}: last_revalued_at must be an ISO 8601 time with its offset or null, got {value!r}"
        )
    if abs(offset) >= MAX_OFFSET:
        raise InputError(
            f"{where}: last_revalued_at's offset must be under 16 hours (PostgreSQL holds no more), "
            f"got {at.isoformat()!r}"
        )
    return at


def sample_rows(
    tenant: str, memories: Sequence[Sampled], decisions: Sequence[Decision] | None = None
) -> list[dict[str, Any]]:
    """The export rows: a decision each (``importance`` and ``reason``: the current importance, exactly as
    stored, and none, or the given decisions'; ``expected``: the importance as sampled, so that applying the
    file skips a memory changed since) followed by what a reader needs to decide. Read back by
    :func:`read_decisions`."""
    by_id = {d.id: d for d in decisions or ()}
    now = datetime.now(UTC)
    rows = []
    for m in memories:
        decided = by_id.get(m.id)
        rows.append(
            {
                "tenant": tenant,
                "id": m.id,
                "key": m.key,
                "importance": decided.importance if decided else m.importance,
                "reason": decided.reason if decided else None,
                "expected": m.importance,
                "text_md5": m.text_md5,
                "last_revalued_at": revalued_text(m.last_revalued_at),
                "text": m.text,
                "kind": m.kind,
                "category": m.category,
                "tier": m.tier,
                "age_days": round(m.age_days(now), 1),
                "created_at": m.created_at.isoformat(),
                "helpful": m.helpful_count,
                "followed": m.followed_count,
                "unhelpful": m.unhelpful_count,
                "ignored": m.ignored_count,
                "reliability": round(m.reliability, 3),
                "times_surfaced": m.times_surfaced,
                "last_surfaced_at": m.last_surfaced_at.isoformat() if m.last_surfaced_at else None,
            }
        )
    return rows


EXPORT_SUFFIXES = ROW_FILE_SUFFIXES


def write_sample(
    path: Path, tenant: str, memories: Sequence[Sampled], decisions: Sequence[Decision] | None = None
) -> None:
    """Write the sample as .jsonl (one object a line) or .yaml for a decider elsewhere; edit ``importance``
    and ``reason`` (leave ``expected``, ``text_md5`` and ``last_revalued_at`` as written), delete the rows
    left undecided, then ``spark-pg revalue --from-file``. The file is replaced whole or not at all
    (:func:`replace_file`)."""
    rows = sample_rows(tenant, memories, decisions)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        body = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    elif suffix in (".yaml", ".yml"):
        body = yaml.safe_dump(rows, sort_keys=False, allow_unicode=True, width=110) if rows else "[]\n"
    else:
        raise InputError(f"{path}: unknown file type: use .jsonl, .yaml or .yml")
    replace_file(path, body)


def save_decisions(tenant: str, decisions: Sequence[Decision]) -> Path:
    """Save ``decisions`` to a new .jsonl file that ``spark-pg revalue --tenant TENANT --from-file`` applies
    as they are (with what each was made on, so that one applied since is skipped), in the current
    directory, else in the temporary directory; readable by the owner only. Returns its path; OSError if
    neither directory can take it."""
    body = "".join(json.dumps({"tenant": tenant} | d.as_json()) + "\n" for d in decisions)
    error: OSError | None = None
    for directory in (Path.cwd(), Path(tempfile.gettempdir())):
        try:
            fd, name = tempfile.mkstemp(prefix="spark-pg-revalue-", suffix=".jsonl", dir=directory)
        except OSError as exc:
            error = error or exc
            continue
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(body)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(name)
            error = error or exc
            continue
        return Path(name)
    assert error is not None
    raise error
