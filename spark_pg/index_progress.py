"""Progress bars for long maintenance commands, read from PostgreSQL's own progress reports by a second
connection while the busy one works: index builds (``pg_stat_progress_create_index``; pgvector's HNSW
builds fill in the heap blocks scanned) and VACUUM ANALYZE (``pg_stat_progress_vacuum``, then
``pg_stat_progress_analyze``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from tqdm import tqdm

from spark_pg.db import connect

POLL_S = 0.5
PROGRESS = "SELECT blocks_total, blocks_done, phase FROM pg_stat_progress_create_index WHERE pid = %(pid)s"
VACUUM_PROGRESS = """
SELECT heap_blks_total, heap_blks_scanned, 'vacuum: ' || phase FROM pg_stat_progress_vacuum
WHERE pid = %(pid)s
UNION ALL
SELECT sample_blks_total, sample_blks_scanned, 'analyze: ' || phase FROM pg_stat_progress_analyze
WHERE pid = %(pid)s
"""

# a bar's postfix from the polled phase and the number of commands seen so far
Label = Callable[[str, int], str]


@contextmanager
def _polled(url: str, pid: int, desc: str, query: str, label: Label, enabled: bool) -> Iterator[None]:
    """While the block runs, poll ``query`` (total, done, phase of backend ``pid``) into a bar. A new command
    is counted when a report appears or its count goes back (not every report names its relation). A failure
    to poll only ends the bar, never the work."""
    if not enabled:
        yield
        return
    stop = threading.Event()

    def poll() -> None:
        runs, last = 0, -1
        try:
            with connect(url, autocommit=True) as conn, tqdm(total=0, desc=desc, unit="block") as bar:
                while not stop.wait(POLL_S):
                    row = conn.execute(query, {"pid": pid}).fetchone()
                    if row is None:
                        last = -1  # between two commands
                        continue
                    total, done, phase = int(row[0] or 0), int(row[1] or 0), row[2]
                    if last < 0 or done < last:
                        runs += 1
                    last = done
                    bar.total, bar.n = total, done
                    bar.set_postfix_str(label(phase, runs), refresh=False)
                    bar.refresh()
        except Exception:  # the server went away, or too many connections: the work goes on without a bar
            return

    thread = threading.Thread(target=poll, name="maintenance-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def index_build_progress(
    url: str, pid: int, desc: str, *, enabled: bool = True
) -> AbstractContextManager[None]:
    """While the block runs, show the index builds of backend ``pid``: the heap blocks the current build has
    scanned and how many builds have been seen (a build shorter than a poll goes unseen)."""
    return _polled(url, pid, desc, PROGRESS, lambda phase, runs: f"build {runs}: {phase}", enabled)


def vacuum_progress(url: str, pid: int, desc: str, *, enabled: bool = True) -> AbstractContextManager[None]:
    """While the block runs, show the VACUUM ANALYZE of backend ``pid``: the heap blocks vacuum has scanned,
    then the blocks analyze has sampled, with the phase of each."""
    return _polled(url, pid, desc, VACUUM_PROGRESS, lambda phase, runs: phase, enabled)
