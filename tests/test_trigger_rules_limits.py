"""Trigger rules: the limits on what a pattern may cost to compile (both checks agree), concurrent loads of
one tenant's rules, and what the rule checks let through (NUL characters, PostgreSQL-only syntax, rules
built in code)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors

from spark_pg.cli import main
from spark_pg.trigger_patterns import EMPTY_REPEATED, pattern_problem, skips, written_out_size
from spark_pg.triggers import TriggerRule, TriggerRuleError, load_rules, parse_rules, sync_rules
from tests.conftest import rolled_back, temp_database

Conn = psycopg.Connection[Any]

# 200 different characters: the regex compiler tells each apart (a colour of its own)
MANY_KINDS = "(" + "|".join(chr(c) for c in range(0x100, 0x100 + 200)) + ")"
# compile times on a fresh connection, measured with the previous checks (which accepted all of these)
SLOW = (
    "(a?){0,255}(b?){0,255}(c?){0,255}(d?){0,200}x",  # 4.6 to 7.3 s
    "(a?b?c?d?){0,240}x",  # 8 to 16 s
    "(((a?){0,9}){0,9}){0,9}x",  # 3 to 12 s
    "(a?(b?(c?(d?(e)?)?)?)?){0,200}",  # 11.6 s
    "(a?|b){0,255}",  # 215 ms
    "a?" * 240 + "x{0,255}x{0,255}",  # 167 ms: 240 skippable starts, each reaching 510 copies
    "(x" + "a?" * 200 + ")" + "x{0,255}" * 3,  # 175 ms: the same, the run starting inside a group
    "(" + "".join(chr(97 + i % 26) + "?" for i in range(245)) + "x){0,4}",  # 180 ms
    MANY_KINDS + "[^x]{0,255}" * 3,  # 175 ms: each copy has a transition for each of 200 colours
    # a constraint (\m \M \y \Y \A \Z ^ $) matches no character: (\m|x) can be empty, as (|x) can
    r"((\m|x)(\M|y)){0,166}(\m|z){0,160}w",  # 2.3 s
    r"(\m|x){0,255}y",  # 224 ms
    r"(\m|x){0,255}(\m|z){0,100}w",  # 404 ms, then "regular expression is too complex"
    r"([[:<:]]|x){0,255}y",  # 244 ms: the older spelling of \m
)
# the largest of their kinds the checks accept (each compiled in 45 ms or less on the same machine)
ACCEPTED = (
    "".join(chr(97 + i % 26) + "?" for i in range(249)) + "x",  # 30,876 skips; 25 to 31 ms
    "a{0,16}" * 62 + "x",  # 33,139 skips; 20 ms
    "(a|b){0,12}" * 41 + "x",  # 31,816 skips
    "(a?b){0,255}(c?d){0,244}x",  # optional parts inside copies; 2.5 ms
    "(x.?){0,255}(y.?){0,240}z",
    "(ab){0,9}" * 55 + "x",
    MANY_KINDS + "[^x]{0,190}",  # 189 copies x 202 kinds of character
    r"\w{0,255}\w{0,255}\w{0,255}\w{0,230}x",
)


@pytest.fixture(scope="module")
def limits_db(server_url: str) -> Iterator[str]:
    with temp_database(server_url, install=True) as url:
        yield url


@pytest.fixture
def conn(limits_db: str) -> Iterator[Conn]:
    with rolled_back(limits_db) as connection:
        yield connection


def database_problem(conn: Conn, pattern: str) -> str | None:
    row = conn.execute("SELECT spark._trigger_pattern_problem(%s)", (pattern,)).fetchone()
    assert row is not None
    return row[0]


def rules_file(tmp_path: Path, pattern: str, name: str = "costly") -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(
        f"rules:\n  - name: {name}\n    pattern: '{pattern}'\n    surface: [k1]\n", encoding="utf-8"
    )
    return path


@pytest.mark.parametrize("pattern", SLOW, ids=range(len(SLOW)))
def test_patterns_that_compile_slowly_are_refused_by_both_checks_and_the_cli(
    conn: Conn, tmp_path: Path, capsys: pytest.CaptureFixture[str], pattern: str
) -> None:
    ours = pattern_problem(pattern)
    assert ours is not None and (ours == EMPTY_REPEATED or ours.startswith("repeats too much")), ours
    assert database_problem(conn, pattern) == ours  # the same rule, in the same words
    with pytest.raises(errors.InvalidRegularExpression, match="rule costly: pattern"):
        conn.execute("SELECT spark.put_trigger_rule('acme', 'costly', %s, ARRAY['k1'])", (pattern,))
    path = rules_file(tmp_path, pattern)
    with pytest.raises(TriggerRuleError, match="rule 'costly': pattern"):
        load_rules(path)
    assert main(["triggers", "load", str(path), "--tenant", "acme", "--check"]) != 0
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "rule 'costly': pattern" in err


@pytest.mark.parametrize(
    "pattern",
    [
        *("(a?)+", "(a|)*", "(|a){2}", "(a?b?){2,9}", "(?:a?b?){0,3}", "()+", "((ab)?){1,}"),
        # constraints match no character: a group made only of them, or with such an alternative, can be empty
        *(r"(?:\m)*", r"(\m|x)+", r"(x|\M){2}", r"(\y\Y)*", r"(\A|a){0,9}", r"(a|\Z)+", "(^|a){2}", "(a|$)*"),
        *("([[:<:]]|a)+", "(a|[[:>:]]){3}", r"((\m|x)y?){2}"),
    ],
)
def test_a_repetition_of_what_can_be_empty_is_refused(conn: Conn, pattern: str) -> None:
    assert pattern_problem(pattern) == EMPTY_REPEATED
    assert database_problem(conn, pattern) == EMPTY_REPEATED


@pytest.mark.parametrize(
    "pattern",
    [
        *("(a?)?", "(a?){0,1}", "(a|)", "(ab?)+", "(a?b)*", "(a+)?"),
        *(r"(?:\m)?", r"(\m|x)?", r"(\mx)+", r"(\mx\M|y){0,9}z", "(^a|b$){2}", "([[:<:]]x)*"),
    ],
)
def test_one_copy_of_what_can_be_empty_or_a_repetition_of_what_cannot_passes(
    conn: Conn, pattern: str
) -> None:
    assert pattern_problem(pattern) is None
    assert database_problem(conn, pattern) is None


@pytest.mark.parametrize("pattern", ACCEPTED, ids=range(len(ACCEPTED)))
def test_the_worst_accepted_patterns_pass_both_checks_and_load(conn: Conn, pattern: str) -> None:
    assert pattern_problem(pattern) is None
    assert database_problem(conn, pattern) is None
    conn.execute("SELECT spark.put_trigger_rule('acme', 'costly', %s, ARRAY['k1'])", (pattern,))


# pieces to build patterns of: every token the walk reads differently
TOKENS = ["a", "b", "A", "(", ")", "(?:", "|", "?", "*", "+", "{", "{2}", "{0,1}", "{1,3}", "{0,9}"]
TOKENS += ["{0,255}", "{3,}", "^", r"\w", r"\m", ".", "[a-z]", "[^]x]", "[[:punct:]]", "(a|)"]
TOKENS += ["$", r"\M", r"\y", r"\Y", r"\A", r"\Z", "[[:<:]]", "[[:>:]]", r"(\m|x)"]  # constraints: zero-width
TOKENS += ["\u0101", "\u0102"]  # characters of kinds of their own


def test_both_checks_count_alike_on_random_patterns(conn: Conn) -> None:
    """The walk is written twice (Python and PL/pgSQL): on any pattern, their verdicts on repetition and
    compile cost are the same, numbers included."""
    rnd = random.Random(20240501)
    compared = 0
    for _ in range(400):
        pattern = "".join(rnd.choice(TOKENS) for _ in range(rnd.randint(1, 90)))
        ours, theirs = pattern_problem(pattern), database_problem(conn, pattern)
        if any(p is not None and p.startswith(("repeats", "nests")) for p in (ours, theirs)):
            assert ours == theirs, pattern
            compared += 1
    assert compared > 100


def test_skips_count_what_skippable_parts_reach() -> None:
    assert skips("a?b?c?") == 3  # a's start reaches b's and c's, b's c's
    assert skips("a?" * 249 + "x") == 249 * 248 // 2
    assert skips("x{0,255}") == 255  # its start reaches the start of each copy
    assert skips("(a?b){0,3}") == 3 * 2  # the start reaches each copy's start and the a? that begins it
    assert skips("deploy|release") == 0
    assert written_out_size("(?:ab){3}") == 6  # ?: is no atom


@pytest.mark.parametrize(
    ("pattern", "verdict"),
    [
        ("\\mdeploy|", "matches an empty text"),  # Python's re cannot read \m: this used to pass
        ("(?:\\mx)?", "matches an empty text"),
        ("***=", "matches an empty text"),  # the rest, nothing, is text
        ("\\mdeploy", None),
        ("***=deploy|", None),  # text, not a pattern
        ("(?q)|", None),
    ],
)
def test_the_empty_text_check_reads_postgresql_syntax(conn: Conn, pattern: str, verdict: str | None) -> None:
    if verdict is None:
        assert parse_rules({"rules": [{"name": "r", "pattern": pattern, "surface": ["k1"]}]})
        conn.execute("SELECT spark.put_trigger_rule('acme', 'r', %s, ARRAY['k1'])", (pattern,))
        return
    with pytest.raises(TriggerRuleError, match=f"rule 'r': pattern .* {verdict}"):
        parse_rules({"rules": [{"name": "r", "pattern": pattern, "surface": ["k1"]}]})
    with pytest.raises(errors.InvalidRegularExpression, match="matches an empty text"):  # the database agrees
        conn.execute("SELECT spark.put_trigger_rule('acme', 'r', %s, ARRAY['k1'])", (pattern,))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"pattern": "deploy\x00now"}, "rule 'r': pattern must not contain NUL characters"),
        ({"context_pattern": "bash\x00"}, "rule 'r': context_pattern must not contain NUL characters"),
        ({"surface": ["k\x001"]}, r"rule 'r': surface key 'k\\x001' must not contain NUL characters"),
    ],
)
def test_a_nul_is_refused_with_the_rule_and_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(TriggerRuleError, match=message):
        parse_rules(
            {"rules": [{"name": "r", "pattern": "deploy", "surface": ["k1"], **fields}]}, "rules.yaml"
        )


def test_a_nul_in_a_rule_file_is_refused_by_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nul.yaml"
    path.write_text('rules:\n  - {name: nul, pattern: "deploy\\0x", surface: [k1]}\n', encoding="utf-8")
    assert main(["triggers", "load", str(path), "--tenant", "acme", "--check"]) != 0
    assert "rule 'nul': pattern must not contain NUL characters" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (TriggerRule("r", "deploy\x00", ("k1",)), "rule 'r': pattern must not contain NUL"),
        (TriggerRule("r", "deploy", ("k\x00",)), "rule 'r': surface key .* must not contain NUL"),
        (TriggerRule("r", "deploy", ("k1",), confidence=1e40), "rule 'r': confidence must be a number"),
        (TriggerRule("r", "deploy", ("k1",), metadata={"a": {1, 2}}), "rule 'r': metadata is not JSON"),
        (TriggerRule("r", "deploy", ("k1",), origin="manual"), "rule 'r': origin must be static or learned"),
        (
            TriggerRule("r", "(a?){0,255}", ("k1",)),
            "rule 'r': pattern .* repeats something that can be empty",
        ),
        # the database said "value out of range: underflow"; refused before it now, as --check refuses it
        (TriggerRule("r", "deploy", ("k1",), confidence=1e-50), "rule 'r': confidence 1e-50 is too small"),
    ],
)
def test_sync_rules_raises_only_trigger_rule_errors_naming_the_rule(
    conn: Conn, rule: TriggerRule, message: str
) -> None:
    with pytest.raises(TriggerRuleError, match=message):
        sync_rules(conn, "acme", [rule])


def test_sync_rules_stores_a_date_in_metadata_as_text(conn: Conn) -> None:
    sync_rules(conn, "acme", [TriggerRule("r", "deploy", ("k1",), metadata={"reviewed": date(2024, 5, 1)})])
    row = conn.execute(
        "SELECT metadata FROM spark.trigger_rules WHERE tenant = 'acme' AND name = 'r'"
    ).fetchone()
    assert row == ({"reviewed": "2024-05-01"},)


def test_two_loads_of_one_tenant_at_once_leave_one_files_rules(limits_db: str) -> None:
    """The second load waits for the first to commit, then replaces its rules: the delete of the static
    rules not in a file could not see the other load's uncommitted ones, and both files' rules were kept."""
    tenant = "race"
    names = "SELECT name FROM spark.trigger_rules WHERE tenant = %s ORDER BY name"
    with psycopg.connect(limits_db, autocommit=True) as setup:
        sync_rules(setup, tenant, [TriggerRule("old", "oldword", ("k1",))])
        first, second = psycopg.connect(limits_db), psycopg.connect(limits_db)
        try:
            failures: list[BaseException] = []

            def load_second() -> None:
                try:
                    sync_rules(second, tenant, [TriggerRule("b", "bword", ("k1",))])
                    second.commit()
                except BaseException as exc:  # reported by the test's thread
                    failures.append(exc)

            first.execute("SELECT 1")  # a transaction the load's own is a part of: not committed yet
            sync_rules(first, tenant, [TriggerRule("a", "aword", ("k1",))])
            thread = threading.Thread(target=load_second)
            thread.start()
            waiting = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s"
            deadline = time.monotonic() + 30
            while thread.is_alive() and time.monotonic() < deadline:  # until the second load waits
                row = setup.execute(waiting, (second.info.backend_pid,)).fetchone()
                if row is not None and row[0]:
                    break
                time.sleep(0.05)
            first.commit()
            thread.join(30)
            assert not thread.is_alive() and not failures, failures
            assert setup.execute(names, (tenant,)).fetchall() == [("b",)]
        finally:
            first.close()
            second.close()
            setup.execute("DELETE FROM spark.trigger_rules WHERE tenant = %s", (tenant,))
