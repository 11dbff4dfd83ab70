"""The soak command's reconciliation, briefly: writers (with rewrites racing the workers), readers and two
workers together, then every count must agree (the full run is `spark-pg soak`, docs/performance.md)."""

from __future__ import annotations

import pytest

from spark_pg.embedding import Embedder
from spark_pg.errors import InputError
from spark_pg.soak import run_soak


def test_a_short_soak_reconciles(server_url: str, embedder: Embedder) -> None:
    report = run_soak(server_url, embedder, seconds=6, writers=2, readers=1, workers=2, batch=10)
    out = report.as_json()
    assert out["ok"], out
    assert out["writes"] > 0 and out["reads"] > 0 and out["rewrites"] > 0
    assert out["reconcile"]["memories"] == out["keys"] and out["reconcile"]["vectors_checked"] > 0


def test_soak_arguments_are_checked(server_url: str, embedder: Embedder) -> None:
    with pytest.raises(InputError):
        run_soak(server_url, embedder, seconds=0)
    with pytest.raises(InputError):
        run_soak(server_url, embedder, seconds=1, batch=0)
    for seconds in (float("nan"), float("inf")):  # refused before a scratch database is made
        with pytest.raises(InputError, match="finite"):
            run_soak(server_url, embedder, seconds=seconds)
