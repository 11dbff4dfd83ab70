"""The soak command's reconciliation, briefly: writers (with rewrites racing the workers), readers and two
workers together, then every count must agree (the full run is `spark-pg soak`, docs/performance.md)."""

from __future__ import annotations

import re

import pytest

from spark_pg import schema, scratch
from spark_pg.embedding import Embedder
from spark_pg.errors import InputError
from spark_pg.soak import run_soak


def test_a_short_soak_reconciles(server_url: str, embedder: Embedder) -> None:
    report = run_soak(server_url, embedder, seconds=6, writers=2, readers=1, workers=2, batch=10)
    out = report.as_json()
    assert out["ok"], out
    assert out["writes"] > 0 and out["reads"] > 0 and out["rewrites"] > 0 and out["shared_key_writes"] > 0
    assert out["reconcile"]["memories"] == out["keys"] and out["reconcile"]["vectors_checked"] > 0


def test_soak_arguments_are_checked(server_url: str, embedder: Embedder) -> None:
    with pytest.raises(InputError):
        run_soak(server_url, embedder, seconds=0)
    with pytest.raises(InputError):
        run_soak(server_url, embedder, seconds=1, batch=0)
    for seconds in (float("nan"), float("inf")):  # refused before a scratch database is made
        with pytest.raises(InputError, match="finite"):
            run_soak(server_url, embedder, seconds=seconds)


def test_a_kept_database_is_named_even_when_the_run_fails(
    server_url: str, embedder: Embedder, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken_install(url: str) -> None:
        raise RuntimeError("install failed")

    monkeypatch.setattr(schema, "install", broken_install)
    with pytest.raises(RuntimeError, match="install failed"):
        run_soak(server_url, embedder, seconds=1, keep=True)
    named = re.search(r"scratch database (spark_soak_\w+) \(kept", capsys.readouterr().err)
    assert named, "the kept database is not named"
    try:
        assert scratch.exists(server_url, named[1])  # and it is there
    finally:
        scratch.drop(server_url, named[1])
