"""The ingest scenario b interrupts: a child process that ingests a file chunk by chunk, one transaction
each, printing each commit; reading what it printed, and which chunks it left in the table."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from spark_pg.config import load_settings
from spark_pg.errors import SparkPgError
from spark_pg.faults.harness import FaultError, Lab
from spark_pg.records import MemoryIn, read_file

Commit = tuple[int, int, int, int]  # chunk, inserted, updated, unchanged
INGEST_CHILD = "import sys; from spark_pg.faults import ingest_child; sys.exit(ingest_child(sys.argv[1:]))"


def ingest_child(argv: list[str]) -> int:
    """``CONFIG FILE CHUNK [HOLD]``: load the model, connect, print ``ready`` and wait for a line on stdin;
    then ingest FILE chunk by chunk, one transaction each (with embedding). In each chunk's transaction,
    once the rows are written, it prints ``written INDEX ROWS`` (the chunk's rows it sees, uncommitted);
    after the commit, ``committed INDEX INSERTED UPDATED UNCHANGED``. Chunk HOLD waits, written and not
    committed, for another line on stdin before it commits: scenario b kills the server right then. Run
    as a child process by scenario b."""
    from spark_pg.client import SparkClient

    config, path, chunk = Path(argv[0]), Path(argv[1]), int(argv[2])
    hold = int(argv[3]) if len(argv) > 3 else -1
    try:
        settings = load_settings(config_file=config, environ={})
        records = read_file(path)
        with SparkClient(settings) as client:
            client.embedder  # noqa: B018 - load the model first
            conn = client.conn
            print("ready", flush=True)
            sys.stdin.readline()
            for index, start in enumerate(range(0, len(records), chunk)):
                part = records[start : start + chunk]
                with conn.transaction():  # ingest's own blocks are savepoints in it
                    result = client.ingest_records(part)
                    row = conn.execute(
                        "SELECT count(*) FROM spark.memories WHERE tenant = %s AND key = ANY(%s)",
                        (part[0].tenant, [r.key for r in part]),
                    ).fetchone()
                    print(f"written {index} {row[0] if row else 0}", flush=True)
                    if index == hold:
                        sys.stdin.readline()
                print(f"committed {index} {result.inserted} {result.updated} {result.unchanged}", flush=True)
    except (SparkPgError, psycopg.Error) as exc:
        print(f"ingest stopped: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
        return 1
    print("done", flush=True)
    return 0


def spawn_ingest(
    lab: Lab, name: str, path: Path, chunk: int, hold: int | None = None
) -> subprocess.Popen[bytes]:
    """Start :func:`ingest_child` on ``path`` (it waits for a line on its stdin before it ingests, and
    chunk ``hold``, written, for another before it commits)."""
    args = ["-c", INGEST_CHILD, str(lab.config), str(path), str(chunk)]
    return lab.spawn(name, [*args, str(hold)] if hold is not None else args, python=True, stdin=True)


def written(lines: list[str]) -> dict[int, int]:
    """Chunk -> rows it had written in its transaction, from the ``written`` lines."""
    out: dict[int, int] = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "written":
            out[int(parts[1])] = int(parts[2])
    return out


class ChildLines:
    """A child's stdout lines, read by a thread, each with the time it arrived."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.lines: queue.Queue[tuple[float, str] | None] = queue.Queue()
        self._proc = proc
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            self.lines.put((time.perf_counter(), raw.decode(errors="replace").strip()))
        self.lines.put(None)

    def get(self, timeout: float) -> tuple[float, str] | None:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise FaultError(f"no output from the ingest within {timeout:.0f} s") from None

    def rest(self, timeout: float) -> list[str]:
        self._thread.join(timeout)
        out: list[str] = []
        while True:
            try:
                item = self.lines.get_nowait()
            except queue.Empty:
                return out
            if item is not None:
                out.append(item[1])


def committed(lines: list[str]) -> list[Commit]:
    """(chunk, inserted, updated, unchanged) of each ``committed`` line."""
    out: list[Commit] = []
    for line in lines:
        parts = line.split()
        if len(parts) == 5 and parts[0] == "committed":
            out.append((int(parts[1]), int(parts[2]), int(parts[3]), int(parts[4])))
    return out


def present_by_chunk(lab: Lab, tenant: str, source: list[MemoryIn], chunk: int) -> dict[str, Any]:
    """Which chunks of ``source`` are in the table, whole or in part, whether texts match, vectors."""
    with lab.connect() as conn:
        rows = conn.execute(
            """SELECT m.key, m.text, count(e.memory_id) FROM spark.memories m
               LEFT JOIN spark.embeddings e ON e.tenant = m.tenant AND e.memory_id = m.id
               WHERE m.tenant = %s GROUP BY m.key, m.text""",
            (tenant,),
        ).fetchall()
    position = {r.key: i for i, r in enumerate(source)}
    per_chunk: dict[int, int] = {}
    mismatched = unknown = with_vector = 0
    for key, text, vectors in rows:
        i = position.get(key)
        if i is None:
            unknown += 1
            continue
        per_chunk[i // chunk] = per_chunk.get(i // chunk, 0) + 1
        mismatched += text != source[i].text
        with_vector += int(vectors) == 1
    sizes = {c: len(source[c * chunk : (c + 1) * chunk]) for c in range(-(-len(source) // chunk))}
    return {
        "rows": len(rows),
        "whole": sorted(c for c, k in per_chunk.items() if k == sizes[c]),
        "partial": sorted(c for c, k in per_chunk.items() if k != sizes[c]),
        "mismatched": mismatched,
        "unknown": unknown,
        "with_vector": with_vector,
    }
