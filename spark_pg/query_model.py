"""The model for query vectors, or none: retrieval degrades to lexical while the model cannot load.

Storing a memory needs its vector (or ``--defer-embedding``), so ingest refuses without the model. A read
does not: ``spark.retrieve``, ``spark.advise`` and ``spark.reflect`` take a NULL query vector and run
lexically, saying so in ``why``. :class:`QueryModel` is what the read paths (the hooks, the hook server,
``SparkClient`` searches, advice and reflection) ask for a model. It never makes up a vector: it returns
the real model or None, warns once when it turns lexical, and tries again at most every ``retry_s``
seconds, so a long-running process (``spark-pg serve``) turns hybrid again by itself once the files are
back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from spark_pg.config import Settings
from spark_pg.embedding import Embedder, load_embedder
from spark_pg.errors import ModelNotAvailable

RETRY_S = 30.0  # a missing file is a stat, but a network model's failed load can take seconds


class QueryModel:
    """Callable: the configured model (loaded once per process, see load_embedder) or None while it cannot
    load. ``offline``: never download. ``warn``: told once when retrieval turns lexical (with the cause)
    and once when the model loads again. ``reason``: why the last try failed (None while the model is
    loaded). Thread-safe."""

    def __init__(
        self,
        settings: Settings,
        *,
        offline: bool = False,
        retry_s: float = RETRY_S,
        warn: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.offline = offline
        self.retry_s = retry_s
        self.warn = warn or (lambda _message: None)
        self.clock = clock
        self.reason: str | None = None
        self._failed_at: float | None = None
        self._lock = threading.Lock()

    def __call__(self) -> Embedder | None:
        with self._lock:
            if self._failed_at is not None and self.clock() - self._failed_at < self.retry_s:
                return None
            try:
                embedder = load_embedder(self.settings, offline=self.offline)
            except ModelNotAvailable as exc:
                if self.reason is None:
                    self.warn(f"no embedding model, retrieval runs lexically: {exc}")
                self.reason = str(exc)
                self._failed_at = self.clock()
                return None
            if self.reason is not None:
                self.warn(f"the embedding model {embedder.spec.name} loaded: retrieval is hybrid again")
            self.reason = None
            self._failed_at = None
            return embedder
