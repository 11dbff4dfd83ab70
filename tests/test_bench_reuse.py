"""A cached corpus database is reused only when it holds the vectors this version computes for its texts:
the check compared the texts alone, so a database with other vectors (a change to the derivation, damaged
rows) was measured while quality() scored against vectors the server never searched."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from spark_pg import bench_retrieve, scratch
from spark_pg.bench_retrieve import BenchSpec
from spark_pg.config import Settings
from spark_pg.db import connect
from spark_pg.embedding import Embedder
from spark_pg.errors import InputError
from tests.conftest import bench_corpus

OTHER_VECTORS = "holds other vectors than this version computes for its texts: run again with --fresh"


@pytest.fixture
def corpus(server_url: str, model_settings: Settings, embedder: Embedder) -> Iterator[BenchSpec]:
    with bench_corpus(
        server_url, model_settings, embedder, BenchSpec(60, 3, queries=4, warmup=1, real=60, seed=11)
    ) as spec:
        yield spec


def test_a_corpus_with_a_changed_stored_vector_is_not_reused(
    corpus: BenchSpec, server_url: str, model_settings: Settings, embedder: Embedder
) -> None:
    again = bench_retrieve.run(model_settings, server_url, embedder, corpus, progress=False)
    assert again["corpus_reused"]  # its own vectors, read back from the database, pass
    with connect(scratch.with_dbname(server_url, corpus.db_name)) as conn:
        # m0 (a sampled row: the first text) gets the vector of m1, its text left alone
        conn.execute(
            """UPDATE spark.embeddings e SET embedding = o.embedding
               FROM spark.memories m, spark.memories n JOIN spark.embeddings o ON o.memory_id = n.id
               WHERE m.key = 'm0' AND e.memory_id = m.id AND n.key = 'm1'"""
        )
        conn.commit()
    with pytest.raises(InputError, match=f"{corpus.db_name} {OTHER_VECTORS}"):
        bench_retrieve.run(model_settings, server_url, embedder, corpus, progress=False)


def test_a_corpus_built_from_other_vectors_than_this_version_makes_is_not_reused(
    corpus: BenchSpec,
    server_url: str,
    model_settings: Settings,
    embedder: Embedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As after a change to the derivation of vectors past --real: the same texts, other vectors."""
    real_corpus_vectors = bench_retrieve.corpus_vectors

    def changed(*args: Any, **kwargs: Any) -> Any:
        texts, vectors, how = real_corpus_vectors(*args, **kwargs)
        rng = np.random.default_rng(0)
        moved = vectors + 0.01 * rng.normal(size=vectors.shape).astype(np.float32)
        return texts, moved / np.linalg.norm(moved, axis=1, keepdims=True), how

    monkeypatch.setattr(bench_retrieve, "corpus_vectors", changed)
    with pytest.raises(InputError, match=f"{corpus.db_name} {OTHER_VECTORS}"):
        bench_retrieve.run(model_settings, server_url, embedder, corpus, progress=False)
    rebuilt = bench_retrieve.run(model_settings, server_url, embedder, corpus, progress=False, fresh=True)
    assert not rebuilt["corpus_reused"]
    assert bench_retrieve.run(model_settings, server_url, embedder, corpus, progress=False)["corpus_reused"]
