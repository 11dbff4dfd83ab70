"""`spark-pg bench rls` (spark_pg/bench_rls.py): it applies exactly the row-level security statements of
docs/security.md, measures spark.retrieve as the owner and as each tenant's role on the same queries, checks
that both get the same rows, and leaves neither its scratch database nor its roles behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from spark_pg import bench_rls, scratch
from spark_pg.cli import main
from spark_pg.errors import InputError
from tests.conftest import point_cli
from tests.test_rls import _can_create_roles, doc_block

TAGS = ("rls-grants", "rls-policies", "rls-tenant")


def test_the_bench_applies_exactly_the_documented_statements() -> None:
    """spark_pg/data/rls.sql and docs/security.md's blocks must not drift apart: the bench would measure
    other policies than the ones a deployment applies."""
    blocks = bench_rls.rls_blocks()
    assert sorted(blocks) == sorted(TAGS)
    for tag in TAGS:
        assert blocks[tag] == doc_block(tag), tag
    # the bench's own role names, never the documented ones (roles belong to the whole server)
    grants = bench_rls.renamed(blocks["rls-grants"])
    assert "spark_tenant" not in grants and grants.count(bench_rls.GROUP) == blocks["rls-grants"].count(
        "spark_tenant"
    )
    tenant = bench_rls.renamed(blocks["rls-tenant"], bench_rls.SMALL)
    assert tenant.splitlines()[-1] == f"CREATE ROLE {bench_rls.SMALL} LOGIN IN ROLE {bench_rls.GROUP};"


@pytest.fixture
def bench_env(server_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """The CLI pointed at the test server (no user config); skipped where the bench cannot make roles."""
    reason = _can_create_roles(server_url)
    if reason:
        pytest.skip(reason)
    return point_cli(server_url, monkeypatch, tmp_path)


def _roles(server_url: str) -> list[str]:
    with psycopg.connect(server_url, autocommit=True) as admin:
        return [
            r[0]
            for r in admin.execute(
                "SELECT rolname FROM pg_roles WHERE rolname = ANY(%s) ORDER BY 1",
                ([bench_rls.GROUP, bench_rls.LARGE, bench_rls.SMALL],),
            ).fetchall()
        ]


def test_a_small_run_measures_both_tenants_as_owner_and_role(
    bench_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench", "rls", "--memories", "300", "--queries", "5", "--k", "5", "--json", "--quiet"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert "p95 is taken from 5 calls" in captured.err
    assert report["memories"] == 300 and report["queries"] == 5 and report["k"] == 5
    assert report["identical"] and report["compared_calls"] == 10 and report["mismatches"] == []
    pack = report["pack_memories"]
    assert pack > 0
    sizes = {row["tenant"]: row["memories"] for row in report["tenants"]}
    assert sizes == {bench_rls.LARGE: 300, bench_rls.SMALL: 3}
    for row in report["tenants"]:
        for who in ("owner_ms", "role_ms"):
            assert 0 < row[who]["p50"] <= row[who]["p95"] <= row[who]["max"], (row["tenant"], who)
    # the policies were on: each role saw its own memories and the pack's, the owner every tenant's
    visible = report["visible_memories"]
    assert visible[bench_rls.LARGE] == {bench_rls.LARGE: 300, "_system": pack}
    assert visible[bench_rls.SMALL] == {bench_rls.SMALL: 3, "_system": pack}
    assert visible["owner"] == {bench_rls.LARGE: 300, bench_rls.SMALL: 3, "_system": pack}
    assert report["run"]["at"].endswith("+00:00") and report["machine"]["cores"] >= 1
    text = bench_rls.format_report(report)
    assert f"{bench_rls.LARGE} (300 memories" in text and "same results as the owner" in text
    # nothing left on the server
    assert not scratch.exists(bench_env, bench_rls.DB_NAME)
    assert _roles(bench_env) == []


def test_different_results_for_owner_and_role_fail_the_run(
    bench_env: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(*args: Any, **kwargs: Any) -> dict[str, Any]:
        mismatch = {"tenant": bench_rls.SMALL, "query": "Fix the cache", "owner": [], "role": []}
        return {"identical": False, "mismatches": [mismatch], "mismatched_calls": 1, "compared_calls": 4}

    monkeypatch.setattr(bench_rls, "run", run)
    monkeypatch.setattr(bench_rls, "format_report", lambda report: "report")
    assert main(["bench", "rls", "--queries", "20", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("spark-pg: error: the owner and the tenant role got different results in 1 of 4")
    assert err.count("\n") == 1


def test_defaults_are_the_benchs_own(bench_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """30,000 memories and 100 queries, not the retrieve bench's 100,000 and 300; given ones are kept."""
    seen: list[bench_rls.RlsSpec] = []

    def run(url: str, spec: bench_rls.RlsSpec, **kwargs: Any) -> dict[str, Any]:
        seen.append(spec)
        raise InputError("stop")

    monkeypatch.setattr(bench_rls, "run", run)
    assert main(["bench", "rls", "--quiet"]) == 2
    assert main(["bench", "rls", "--memories", "100000", "--queries", "300", "--k", "3", "--quiet"]) == 2
    assert seen == [
        bench_rls.RlsSpec(memories=30_000, queries=100, k=8),
        bench_rls.RlsSpec(memories=100_000, queries=300, k=3),
    ]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ("bench", "rls", "--tenants", "5"),
            "--tenants is an option of `bench retrieve` or `bench scale`, not",
        ),
        (
            ("bench", "rls", "--fresh"),
            "--fresh is an option of `bench retrieve` or `bench scale`, not of `bench rls`",
        ),
        (("bench", "rls", "--report", "/tmp"), "--report is an option of `bench retrieve` or `bench scale`"),
        (
            ("bench", "rls", "--no-baseline"),
            "--no-baseline is an option of `bench retrieve` or `bench scale`",
        ),
        (("bench", "rls", "--n", "5"), "--n is an option of `bench ingest`, not of `bench rls`"),
        (("bench", "rls", "--sizes", "300"), "--sizes is an option of `bench scale`, not of `bench rls`"),
        (("bench", "rls", "--clients", "2"), "--clients is an option of `bench scale`, not of `bench rls`"),
        (("bench", "rls", "--real", "300"), "--real is an option of `bench retrieve` or `bench scale`"),
        (("bench", "rls", "--hooks"), "--hooks measures the hooks alone"),
        (
            ("bench", "ingest", "--memories", "300"),
            "--memories is an option of `bench retrieve` or `bench rls`, not of `bench ingest`",
        ),
    ],
)
def test_options_of_another_mode_are_refused(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], expected: str
) -> None:
    assert main(list(argv)) == 2
    assert expected in capsys.readouterr().err


def test_a_role_of_the_benchs_name_that_it_did_not_make_is_refused_and_kept(bench_env: str) -> None:
    with psycopg.connect(bench_env, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(bench_rls.SMALL)))
    try:
        with pytest.raises(
            InputError, match=f"has a role {bench_rls.SMALL} that `spark-pg bench rls` did not"
        ):
            bench_rls.run(bench_env, bench_rls.RlsSpec(memories=10, queries=1), progress=False)
        assert _roles(bench_env) == [bench_rls.SMALL]
        assert not scratch.exists(bench_env, bench_rls.DB_NAME)
    finally:
        with psycopg.connect(bench_env, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(bench_rls.SMALL)))


def test_a_second_run_on_the_server_is_refused(bench_env: str) -> None:
    with scratch.claimed(bench_env, bench_rls.DB_NAME) as mine:
        assert mine
        with pytest.raises(InputError, match="another `spark-pg bench rls` is running on this server"):
            bench_rls.run(bench_env, bench_rls.RlsSpec(memories=10, queries=1), progress=False)
