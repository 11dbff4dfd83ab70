"""A progress bar for long index builds: PostgreSQL reports each CREATE INDEX in
``pg_stat_progress_create_index`` (pgvector's HNSW builds fill in the heap blocks scanned), which a second
connection polls while the building one is busy."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tqdm import tqdm

from spark_pg.db import connect

POLL_S = 0.5
PROGRESS = "SELECT blocks_total, blocks_done, phase FROM pg_stat_progress_create_index WHERE pid = %s"


@contextmanager
def index_build_progress(url: str, pid: int, desc: str, *, enabled: bool = True) -> Iterator[None]:
    """While the block runs, show the index builds of backend ``pid``: the heap blocks the current build has
    scanned and how many builds have been seen (a new one when the scan starts over: the report names no
    index for a plain CREATE INDEX; a build shorter than a poll goes unseen). A failure to poll only ends
    the bar, never the build."""
    if not enabled:
        yield
        return
    stop = threading.Event()

    def poll() -> None:
        builds, last = 0, -1
        try:
            with connect(url, autocommit=True) as conn, tqdm(total=0, desc=desc, unit="block") as bar:
                while not stop.wait(POLL_S):
                    row = conn.execute(PROGRESS, (pid,)).fetchone()
                    if row is None:
                        last = -1  # between two builds
                        continue
                    total, done, phase = int(row[0] or 0), int(row[1] or 0), row[2]
                    if last < 0 or done < last:
                        builds += 1
                    last = done
                    bar.total, bar.n = total, done
                    bar.set_postfix_str(f"build {builds}: {phase}", refresh=False)
                    bar.refresh()
        except Exception:  # the server went away, or too many connections: the build goes on without a bar
            return

    thread = threading.Thread(target=poll, name="index-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
