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
    """``CONFIG FILE CHUNK``: load the model, connect, print ``ready`` and wait for a line on stdin; then
    ingest FILE chunk by chunk, one transaction each (with embedding), printing ``committed INDEX INSERTED
    UPDATED UNCHANGED`` after each commit. Run as a child process by scenario b."""
    from spark_pg.client import SparkClient

    config, path, chunk = Path(argv[0]), Path(argv[1]), int(argv[2])
    try:
        settings = load_settings(config_file=config, environ={})
        records = read_file(path)
        with SparkClient(settings) as client:
            client.embedder  # noqa: B018 - load the model first
            client.conn  # noqa: B018
            print("ready", flush=True)
            sys.stdin.readline()
            for index, start in enumerate(range(0, len(records), chunk)):
                result = client.ingest_records(records[start : start + chunk])
                print(f"committed {index} {result.inserted} {result.updated} {result.unchanged}", flush=True)
    except (SparkPgError, psycopg.Error) as exc:
        print(f"ingest stopped: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
        return 1
    print("done", flush=True)
    return 0


def spawn_ingest(lab: Lab, name: str, path: Path, chunk: int) -> subprocess.Popen[bytes]:
    """Start :func:`ingest_child` on ``path`` (it waits for a line on its stdin before it ingests)."""
    return lab.spawn(
        name, ["-c", INGEST_CHILD, str(lab.config), str(path), str(chunk)], python=True, stdin=True
    )


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
