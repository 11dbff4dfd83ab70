"""Trigger rules: what `spark-pg triggers load --check` calls valid, the database stores (names, confidence,
surface keys: the Python checks and spark.put_trigger_rule agree), and what the database refuses keeps its
errcode on the way to the command line."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors

from spark_pg import triggers
from spark_pg.cli import main
from spark_pg.triggers import REAL_MIN, TriggerRule, TriggerRuleError, parse_rules, sync_rules
from tests.conftest import rolled_back, temp_database

Conn = psycopg.Connection[Any]
# every character Python's str.strip() removes (str.isspace): the surface-key check of both sides
WHITESPACE = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
NOT_WHITESPACE = ["\u200b", "\ufeff", "\u180e", "\u00ad", "\x7f", "_"]  # zero-width or invisible: keys


@pytest.fixture(scope="module")
def checks_db(server_url: str) -> Iterator[str]:
    with temp_database(server_url, install=True) as url:
        yield url


@pytest.fixture
def conn(checks_db: str) -> Iterator[Conn]:
    with rolled_back(checks_db) as connection:
        yield connection


@pytest.fixture
def cli_db(checks_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The CLI pointed at the module's database (and no user config file)."""
    monkeypatch.setenv("SPARK_PG_DATABASE_URL", checks_db)
    config = tmp_path / "config.yaml"
    config.write_text("")
    monkeypatch.setenv("SPARK_PG_CONFIG", str(config))
    return checks_db


def put(conn: Conn, name: str = "r", surface: list[str] | None = None, confidence: float = 1.0) -> None:
    """spark.put_trigger_rule in a savepoint, so that a refusal leaves the test's transaction usable."""
    with conn.transaction():
        conn.execute(
            "SELECT spark.put_trigger_rule('acme', %s, 'deploy', %s::text[], confidence => %s::float8::real)",
            (name, surface or ["k1"], confidence),
        )


def one_rule(**fields: Any) -> dict[str, Any]:
    return {"rules": [{"name": "r", "pattern": "deploy", "surface": ["k1"], **fields}]}


def check(tmp_path: Path, capsys: pytest.CaptureFixture[str], rule: str) -> tuple[int, str, str]:
    """`spark-pg triggers load FILE --tenant acme --check` on a file of one rule (a YAML flow mapping)."""
    path = tmp_path / "rules.yaml"
    path.write_text(f"rules:\n  - {rule}\n", encoding="utf-8")
    code = main(["triggers", "load", str(path), "--tenant", "acme", "--check"])
    out, err = capsys.readouterr()
    return code, out, err


# --- names: the whole name, as PostgreSQL's ^...$ reads it ------------------------------------------------


@pytest.mark.parametrize("name", ["a\n", "a\n\n", "\na"])
def test_a_name_with_a_newline_is_refused_by_check_as_by_the_database(
    conn: Conn, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """Python's $ matches before a final newline: "a\\n" passed --check and then failed the load."""
    with pytest.raises(TriggerRuleError, match="name must be 1 to 64 letters"):
        parse_rules(one_rule(name=name))
    with pytest.raises(errors.InvalidParameterValue, match="name must be 1 to 64 letters"):
        put(conn, name)
    escaped = name.replace("\n", "\\n")
    code, out, err = check(tmp_path, capsys, f'{{name: "{escaped}", pattern: deploy, surface: [k1]}}')
    assert code == 2 and out == "" and err.count("\n") == 1 and "name must be 1 to 64 letters" in err


# --- confidence: what a real holds ---------------------------------------------------------------------


@pytest.mark.parametrize("confidence", [1e-50, 1e-39, REAL_MIN / 2, 5e-324])
def test_a_confidence_too_small_for_a_real_is_refused_naming_the_rule_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], confidence: float
) -> None:
    """1e-50 passed --check and then failed the load ("value out of range: underflow")."""
    with pytest.raises(TriggerRuleError, match=rf"rule 'r': confidence {confidence!r} is too small") as info:
        parse_rules(one_rule(confidence=confidence), "rules.yaml")
    assert "use 0, or a number from 1.18e-38 to 1" in str(info.value)
    written = f"{confidence:.6e}"  # 1.000000e-50: YAML reads 1e-50, with no dot, as a string
    code, out, err = check(
        tmp_path, capsys, f"{{name: r, pattern: deploy, surface: [k1], confidence: {written}}}"
    )
    assert code == 2 and out == "" and "rule 'r': confidence" in err and "too small" in err


@pytest.mark.parametrize("confidence", [0, 0.0, REAL_MIN, 1e-37, 0.5, 1])
def test_a_confidence_a_real_holds_is_stored(conn: Conn, confidence: float) -> None:
    sync_rules(conn, "acme", [TriggerRule("r", "deploy", ("k1",), confidence=confidence)])
    row = conn.execute(
        "SELECT confidence FROM spark.trigger_rules WHERE tenant = 'acme' AND name = 'r'"
    ).fetchone()
    assert row is not None and row[0] == pytest.approx(confidence, rel=1e-6)


def test_the_database_refuses_the_confidence_python_refuses(conn: Conn) -> None:
    """The bound is where the database's real ends, not one of Python's own: 1e-50 underflows there."""
    with pytest.raises(errors.NumericValueOutOfRange, match="underflow"):
        put(conn, confidence=1e-50)


# --- surface keys: leading or trailing whitespace, the same characters on both sides ----------------------


def test_python_and_the_database_agree_on_what_whitespace_pads_a_surface_key(conn: Conn) -> None:
    """A tab or newline after a key passed spark.put_trigger_rule (btrim trims spaces only)."""
    assert len(WHITESPACE) == 29 and "\t" in WHITESPACE and "\u00a0" in WHITESPACE and "\u3000" in WHITESPACE
    for c in WHITESPACE:
        for key in (f"k{c}", f"{c}k"):
            with pytest.raises(TriggerRuleError, match=r"surface key .* starts or ends with whitespace"):
                parse_rules(one_rule(surface=[key]))
            with pytest.raises(
                errors.InvalidParameterValue, match="a surface key starts or ends with whitespace"
            ):
                put(conn, surface=["k1", key])
    for c in NOT_WHITESPACE:
        for key in (f"k{c}", f"{c}k", f"k{c}k"):
            assert parse_rules(one_rule(surface=[key]))[0].surface == (key,)
            put(conn, surface=[key])
    for c in WHITESPACE:  # inside a key is no padding
        put(conn, surface=[f"k{c}k"])


# --- what the database refuses keeps its errcode ----------------------------------------------------------


def test_a_rule_the_database_refuses_carries_its_errcode(conn: Conn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triggers, "pattern_problem", lambda pattern: None)  # as if the checks differed
    with pytest.raises(TriggerRuleError, match="rule 'slow': rule slow: pattern") as info:
        sync_rules(conn, "acme", [TriggerRule("slow", "(a?){0,255}x", ("k1",))])
    assert info.value.sqlstate == "2201B" and info.value.source == "database"


def test_the_cli_prints_the_errcode_of_a_rule_or_tenant_the_database_refuses(
    cli_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n  - {name: slow, pattern: '(a?){0,255}x', surface: [k1]}\n", encoding="utf-8")
    monkeypatch.setattr(triggers, "pattern_problem", lambda pattern: None)  # as if the checks differed
    assert main(["triggers", "load", str(path), "--tenant", "acme"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("spark-pg: error [2201B]: database: rule 'slow': rule slow: pattern")
    monkeypatch.undo()
    path.write_text("rules:\n  - {name: fine, pattern: deploy, surface: [k1]}\n", encoding="utf-8")
    assert (
        main(["triggers", "load", str(path), "--tenant", "_system"]) == 2
    )  # the pack's: not without its loader
    err = capsys.readouterr().err
    assert err.startswith("spark-pg: error [22023]: database: tenant '_system': ")
    with psycopg.connect(cli_db) as check_conn:
        names = "SELECT name FROM spark.trigger_rules WHERE tenant IN ('acme', '_system')"
        assert check_conn.execute(names).fetchall() == []
