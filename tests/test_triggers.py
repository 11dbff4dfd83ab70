"""Trigger rules (YAML, validation, the database write path), the trigger pool, and the advisor's gates
inside spark.retrieve (actionability, action domains)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from spark_pg.trigger_patterns import pattern_problem, written_out_size
from spark_pg.triggers import (
    TriggerRule,
    TriggerRuleError,
    jsonb_text_bytes,
    load_rules,
    parse_rules,
    sync_rules,
)
from tests.conftest import rolled_back, temp_database

Conn = psycopg.Connection[Any]
PACK_RULES = Path(__file__).resolve().parents[1] / "spark_pg" / "data" / "trigger_rules.yaml"


@pytest.fixture(scope="module")
def trig_db(server_url: str) -> Iterator[str]:
    with temp_database(server_url, install=True) as url:
        yield url


@pytest.fixture
def conn(trig_db: str) -> Iterator[Conn]:
    with rolled_back(trig_db) as connection:
        yield connection


def rule(**fields: Any) -> dict[str, Any]:
    return {"name": "r1", "pattern": "deploy", "surface": ["k1"], **fields}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (rule(pattern="(a+)+$"), "nests quantifiers"),
        (rule(pattern=r"(ab)\1"), "backreference"),
        (rule(pattern="foo(?=bar)"), "lookaround"),
        (rule(pattern="x" * 501), "limit is 500"),
        (rule(pattern="deploy("), "not a valid regular expression"),
        (rule(context_pattern="[z-a]"), "context_pattern"),
        (rule(surface=[]), "surface"),
        (rule(surface=["k" * 513]), "surface must list 1 to 50 memory keys of 1 to 512 characters"),
        (rule(priority="urgent"), "priority 'urgent'"),
        (rule(interrupt="yes"), "interrupt must be true or false"),
        (rule(confidence=1.5), "confidence"),
        (rule(colour="red"), "unknown key 'colour'"),
        (rule(name="has space"), "name must be"),
        (rule(pattern="(a|b){0,255}" * 2), "repeats too much"),
        (rule(context_pattern="((ab){0,40}c){0,40}"), "context_pattern .* repeats too much"),
        (rule(metadata={"note": float("nan")}), "metadata holds nan"),
        (rule(metadata={"note\x00": 1}), "metadata key"),
        (rule(metadata={"note": "x" * 70_000}), "metadata must be at most 65,536 bytes .*, got 70,012"),
        ({**rule(), 1: "a", None: "b"}, "unknown key 1"),
    ],
)
def test_a_bad_rule_is_refused_with_its_name(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(TriggerRuleError, match=message) as info:
        parse_rules({"version": 1, "rules": [raw]}, "rules.yaml")
    assert "rules.yaml" in str(info.value)


@pytest.mark.parametrize(
    ("pattern", "size"),
    [
        ("deploy", 6),
        ("deploy|release", 13),
        ("(a|b){0,255}", 510),
        ("((a|b){2}c){3}", 15),
        ("a{3}", 3),
        ("a{2,}", 3),
        ("a{2,5}b{0}", 6),
        ("a{,5}", 5),  # PostgreSQL reads {,5} as text: 5 atoms
        ("\\w{40}", 40),
        ("[[:alpha:]]{10}", 10),
        ("[]a]{10}", 10),
        ("[^]a\\]]{10}", 10),
        ("[[.-.]x]{4}", 4),
        ("^(a){4}|b*c+d?", 7),
        ("a{000004}", 4),
        ("a{0000004}", 100_000),  # over 6 digits: counted as 100000, past any limit (PostgreSQL's is 255)
    ],
)
def test_written_out_size(pattern: str, size: int) -> None:
    assert written_out_size(pattern) == size


@pytest.mark.parametrize(
    "pattern",
    [
        "[[:alpha:]]+ deploy",
        "[[:digit:]]{4}-[[:digit:]]{2}",
        "[0-9a-f]{40}",
        "(release|deploy) (to|on) [a-z]{2,12}",
    ],
)
def test_reasonable_patterns_pass_both_checks(conn: Conn, pattern: str) -> None:
    assert pattern_problem(pattern) is None
    assert conn.execute("SELECT spark._trigger_pattern_problem(%s)", (pattern,)).fetchone() == (None,)


# PostgreSQL's ARE syntax where Python's re differs; accepted: by both checks, refused: by both
ARE_ACCEPTED = (
    r"\mdeploy\M",  # \m start of a word, \M end of one (Python's re: "bad escape \m")
    r"\ystaging\y",  # \y a word boundary
    r"\Yx",  # \Y not one
    r"\mmigrat",  # what spark.propose_triggers writes: \m<stem>
    r"\\m",  # a backslash, then m
    r"x\\\mdeploy",  # a backslash, then \m
    r"(\mrm\M|\mdrop\M)\s+(-rf|table)",
    r"(?:\m)?",  # a group of a constraint may take a quantifier (repeated, it can be empty: refused)
    r"(?:\mx)*",  # and a group of a constraint and a character may repeat
    r"[[:<:]]deploy[[:>:]]",  # PostgreSQL's older spellings of \m and \M
    r"\Adeploy\Z",
    r"[\b]\b\B\e\cA",  # backspace, backspace, backslash, escape, control-A
    r"\x41\x4142\u0041\U00000041\x0000000041",  # \x takes any number of hex digits
    r"\<\>",  # any other escaped non-alphanumeric is that character
    r"[\w\d\s]\W\D\S",
    r"deploy{,5}",  # {,5} is text in PostgreSQL (a bound in Python)
    r"\m{,5}",
    r"a{x}",
    r"a{255}",
    r"(?i)\mdeploy",
    r"***:\mdeploy",
    r"***=\q(?P<n>",  # ***= : the rest is text
    r"(?#comment)\mdeploy",
    r"a+?b*?c??",  # non-greedy quantifiers
)
ARE_REFUSED = (
    r"[\m]",  # constraint escapes are refused inside a bracket expression
    r"[\M]",
    r"[\y]",
    r"[\Y]",
    r"[\A]",
    r"\m*",  # and cannot be repeated
    r"\M+",
    r"\y?",
    r"\Y{2}",
    r"[[:<:]]*",
    r"\q",  # an escaped letter PostgreSQL does not know (Python reads \N{...} and, in 3.14, \z)
    r"\z",
    r"\N{LATIN SMALL LETTER A}",
    r"\x",
    r"\u41",
    r"\x7fffffff",  # past PostgreSQL's largest character
    "x\\",  # a trailing backslash
    r"a{256}",  # past PostgreSQL's largest count (Python allows it)
    r"a{2,1}",
    r"a{1,2,3}",
    r"a{1",
    r"a*+",  # possessive quantifiers and atomic groups: Python only
    r"a{2}+",
    r"(?>a)",
    r"(?P<n>a)",  # other groups of Python's
    r"(?i:a)",
    r"a(?i)",
    r"[[:nope:]]",
    r"[^[:alpha:]",  # unbalanced, though Python reads [^[:alpha:] as a set
    r"[[=ab=]]",
)


@pytest.mark.parametrize("pattern", ARE_ACCEPTED)
def test_postgresql_only_syntax_passes_both_checks(conn: Conn, pattern: str) -> None:
    assert pattern_problem(pattern) is None
    assert conn.execute("SELECT spark._trigger_pattern_problem(%s)", (pattern,)).fetchone() == (None,)


@pytest.mark.parametrize("pattern", ARE_REFUSED)
def test_what_postgresql_refuses_python_refuses_too(conn: Conn, pattern: str) -> None:
    problem = pattern_problem(pattern)
    assert problem is not None and problem.startswith("is not a valid regular expression"), problem
    theirs = conn.execute("SELECT spark._trigger_pattern_problem(%s)", (pattern,)).fetchone()
    assert theirs is not None and theirs[0] is not None
    assert theirs[0].startswith("is not a valid regular expression")


def test_word_boundary_rules_load_and_match_as_in_postgresql(conn: Conn, tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(
        "rules:\n"
        "  - {name: deploy, pattern: '\\mdeploy\\M', context_pattern: '\\mbash\\M', surface: [k1]}\n"
        "  - {name: staging, pattern: '\\ystaging\\y', surface: [k1]}\n"
        "  - {name: inner, pattern: 'ta\\Yx', surface: [k1]}\n"
        "  - {name: slash, pattern: 'C:\\\\mnt', surface: [k1]}\n"
        "learned:\n"
        "  - {name: 'learned:migrat', pattern: '\\mmigrat', surface: [k1]}\n"
    )
    rules = {r.name: r for r in load_rules(path)}
    assert rules["deploy"].pattern == r"\mdeploy\M" and rules["slash"].pattern == r"C:\\mnt"
    sync_rules(conn, "acme", list(rules.values()))
    stored = dict(
        conn.execute("SELECT name, pattern FROM spark.trigger_rules WHERE tenant = 'acme'").fetchall()
    )
    assert stored == {name: r.pattern for name, r in rules.items()}

    def matches(text: str, pattern: str) -> bool:
        row = conn.execute("SELECT %s ~* %s", (text, pattern)).fetchone()
        return row is not None and bool(row[0])

    assert matches("Bash: Deploy now", r"\mdeploy\M") and not matches("redeploy", r"\mdeploy\M")
    assert not matches("deployment", r"\mdeploy\M")
    assert matches("to staging.", r"\ystaging\y") and not matches("prestaging", r"\ystaging\y")
    assert matches("taxes", r"ta\Yx") and not matches("ta x", r"ta\Yx")
    assert matches(r"C:\mnt", r"C:\\mnt") and not matches("C:mnt", r"C:\\mnt")
    assert matches("run the migrations", r"\mmigrat") and not matches("remigrate", r"\mmigrat")


def test_python_errors_point_into_the_pattern_as_written() -> None:
    # \m is rewritten longer for Python; the position is still the one in the rule file
    assert pattern_problem(r"\mdeploy(") == (
        "is not a valid regular expression: missing ), unterminated subpattern at position 8"
    )
    assert (
        pattern_problem(r"\mdeploy\M*")
        == "is not a valid regular expression: nothing to repeat at position 10"
    )
    problem = pattern_problem(r"[a\m]")
    assert problem is not None and "\\m inside a bracket expression (at position 2)" in problem
    with pytest.raises(TriggerRuleError, match=r"'r1': pattern .* constraint escape \\m inside a bracket"):
        parse_rules({"rules": [rule(pattern=r"[\m]")]})


@pytest.mark.parametrize(("pattern", "verdict"), [(r"(\mabc){250}", None), (r"(\mabcd){250}", "repeats")])
def test_a_constraint_escape_counts_alike_in_both_checks(
    conn: Conn, pattern: str, verdict: str | None
) -> None:
    r"""\m is counted as one atom (as every escape is) by both: the regex compiler gives it an arc too."""
    assert written_out_size(pattern) == 250 * (len(pattern) - len("(){250}") - 1)
    ours = pattern_problem(pattern)
    theirs = conn.execute("SELECT spark._trigger_pattern_problem(%s)", (pattern,)).fetchone()
    assert theirs is not None and ours == theirs[0]
    assert ours is None if verdict is None else ours is not None and ours.startswith(verdict)


def test_file_level_errors() -> None:
    with pytest.raises(TriggerRuleError, match="defined twice"):
        parse_rules({"rules": [rule(), rule()]})
    with pytest.raises(TriggerRuleError, match="version 2"):
        parse_rules({"version": 2, "rules": []})
    with pytest.raises(TriggerRuleError, match="unknown key 'rule'"):
        parse_rules({"rule": []})
    assert parse_rules({"version": 1, "rules": None}) == []  # `rules:` left empty
    assert parse_rules({"rules": []}) == []
    # read as no rules, an empty or truncated file removed every static rule of the tenant (audit V)
    with pytest.raises(TriggerRuleError, match="file: is empty; write 'rules: \\[\\]' to remove every"):
        parse_rules(None)
    with pytest.raises(TriggerRuleError, match="file: has no 'rules' list; write 'rules: \\[\\]'"):
        parse_rules({"version": 1})
    with pytest.raises(TriggerRuleError, match="has no 'rules' list"):
        parse_rules({"learned": []})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"rules": {}}, "rules: must be a list"),  # read as no rules: loading then removed all of them
        ({"rules": ""}, "rules: must be a list"),
        ({"rules": [], "learned": {}}, "learned: must be a list"),
        ({"version": True, "rules": []}, "version True is not supported"),  # True == 1
        ({"rules": [rule(pattern=".*")]}, "matches an empty text, so every call"),
        ({"rules": [rule(pattern="deploy|")]}, "matches an empty text"),
        ({"rules": [rule(pattern="(rm -rf)?")]}, "matches an empty text"),
        ({"rules": [rule(surface=[" k "])]}, "surface key ' k ' starts or ends with whitespace"),
    ],
)
def test_a_file_that_would_silently_do_the_wrong_thing_is_refused(data: dict[str, Any], message: str) -> None:
    with pytest.raises(TriggerRuleError, match=re.escape(message)):
        parse_rules(data)


def test_learned_rules_default_to_shadow_and_lower_confidence() -> None:
    rules = parse_rules({"rules": [rule()], "learned": [rule(name="l1")]})
    assert [(r.origin, r.shadow, r.confidence) for r in rules] == [
        ("static", False, 1.0),
        ("learned", True, 0.5),
    ]


def test_the_pack_rules_file_is_valid_and_safe(tmp_path: Path) -> None:
    rules = load_rules(PACK_RULES)
    assert {r.name for r in rules} >= {"destructive_commands", "auth_security", "deployment"}
    assert all(pattern_problem(r.pattern) is None for r in rules)
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: [ {name: x, pattern: 'a', surface: [k]\n")
    with pytest.raises(TriggerRuleError, match="not valid YAML"):
        load_rules(bad)
    with pytest.raises(TriggerRuleError, match="cannot be read"):
        load_rules(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("t", "r", "(a*)*b", ["k"]), errors.InvalidRegularExpression),
        (("t", "r", r"(x)\1", ["k"]), errors.InvalidRegularExpression),
        (("t", "r", "deploy(", ["k"]), errors.InvalidRegularExpression),
        (("t", "r", "(a|b){0,255}" * 30, ["k"]), errors.InvalidRegularExpression),
        (("t", "bad name", "deploy", ["k"]), errors.InvalidParameterValue),
        (("t", "r", "deploy", []), errors.InvalidParameterValue),
        ((None, "r", "deploy", ["k"]), errors.NullValueNotAllowed),
        (("t", "r", ".*", ["k"]), errors.InvalidRegularExpression),  # matches every call
        (("t", "r", "deploy|", ["k"]), errors.InvalidRegularExpression),
        (("t", "r", "x?", ["k"]), errors.InvalidRegularExpression),
        (("t", "r", "deploy", [" k "]), errors.InvalidParameterValue),  # names no memory
    ],
)
def test_put_trigger_rule_refuses_bad_input_with_an_errcode(
    conn: Conn, args: tuple[Any, ...], error: type[Exception]
) -> None:
    with pytest.raises(error):
        conn.execute("SELECT spark.put_trigger_rule(%s, %s, %s, %s)", args)


def add_memories(conn: Conn, tenant: str, rows: list[tuple[str, str, str | None, float | None]]) -> None:
    """(key, text, action_domain, actionability), all created a day ago."""
    conn.execute(
        """INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash, action_domain,
                                       actionability, created_at)
           SELECT %s, k, x, x, sha256(convert_to(x, 'UTF8')), d, a, now() - interval '1 day'
           FROM unnest(%s::text[], %s::text[], %s::text[], %s::real[]) u(k, x, d, a)""",
        (tenant, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows]),
    )


def explain(conn: Conn, tenant: str, query: str, **params: Any) -> list[dict[str, Any]]:
    params.setdefault("include_system", False)
    cur = conn.cursor(row_factory=dict_row)
    return cur.execute(
        "SELECT * FROM spark.explain(tenant => %s, query_text => %s, k => 5, params => %s)",
        (tenant, query, Jsonb(params)),
    ).fetchall()


def surfaced(rows: list[dict[str, Any]]) -> list[str]:
    return [r["key"] for r in rows if r["status"] == "surfaced"]


def test_a_matching_rule_surfaces_its_memories_without_any_shared_word(conn: Conn) -> None:
    add_memories(
        conn,
        "acme",
        [
            ("backup", "Take a snapshot of the cluster state first.", "system", 0.8),
            ("other", "Prefer small pull requests.", "code", 0.8),
        ],
    )
    sync_rules(
        conn,
        "acme",
        [
            TriggerRule(
                name="wipe",
                pattern="rm -rf|drop table",
                surface=("backup",),
                priority="critical",
                interrupt=True,
            )
        ],
    )
    rows = explain(conn, "acme", "clean build folder", trigger_text="Bash rm -rf ./build")
    top = rows[0]
    assert top["key"] == "backup" and top["status"] == "surfaced"
    assert top["trigger_conf"] == pytest.approx(1.0) and "trigger" in top["pools"]
    assert top["why"]["trigger"] == {
        "rules": ["wipe"],
        "confidence": 1.0,
        "priority": "critical",
        "interrupt": True,
        "interrupt_confidence": 1.0,
    }
    assert top["why"]["gates"]["min_similarity"]["by"] == "trigger"
    assert top["priority"] == pytest.approx(0.3)  # the rule's priority raised the memory's
    # the rule does not fire on other text, and context_pattern must match too
    assert "backup" not in surfaced(
        explain(conn, "acme", "clean build folder", trigger_text="Bash make clean")
    )
    sync_rules(
        conn,
        "acme",
        [TriggerRule(name="wipe", pattern="rm -rf", context_pattern="^bash", surface=("backup",))],
    )
    assert "backup" not in surfaced(explain(conn, "acme", "x", trigger_text="Edit notes: rm -rf is scary"))
    assert "backup" in surfaced(explain(conn, "acme", "x", trigger_text="Bash rm -rf ./build"))


def test_shadow_and_other_tenants_rules_never_surface(conn: Conn) -> None:
    add_memories(conn, "acme", [("backup", "Take a snapshot of the cluster state first.", "system", 0.8)])
    add_memories(conn, "beta", [("backup", "Beta's own note.", "system", 0.8)])
    sync_rules(conn, "acme", [TriggerRule(name="w", pattern="rm -rf", surface=("backup",), shadow=True)])
    sync_rules(conn, "beta", [TriggerRule(name="w", pattern="rm -rf", surface=("backup",))])
    assert surfaced(explain(conn, "acme", "x", trigger_text="rm -rf /tmp/x")) == []


def test_sync_replaces_static_rules_and_keeps_learned_ones(conn: Conn) -> None:
    learned = TriggerRule(name="l", pattern="y", surface=("k",), origin="learned", shadow=True)
    sync_rules(conn, "acme", [TriggerRule(name="a", pattern="x", surface=("k",)), learned])
    result = sync_rules(conn, "acme", [TriggerRule(name="b", pattern="z", surface=("k",))])
    names = conn.execute(
        "SELECT name FROM spark.trigger_rules WHERE tenant = 'acme' ORDER BY name"
    ).fetchall()
    assert names == [("b",), ("l",)] and result.removed == 1
    with pytest.raises(TriggerRuleError, match="rule 'c'"):
        sync_rules(conn, "acme", [TriggerRule(name="c", pattern="[[:nope:]]", surface=("k",))])


def test_a_pack_rule_surfaces_the_tenants_own_memory_with_no_pack_memories(conn: Conn) -> None:
    """The cold-start pack can hold rules without memories: its rules still name the tenant's own memories
    (the pools leave an empty pack out, but not a pack with rules)."""
    conn.execute("DELETE FROM spark.memories WHERE tenant = '_system'")
    add_memories(conn, "acme", [("snap", "Take a snapshot of the cluster state first.", "system", 0.8)])
    rules = [TriggerRule(name="destructive", pattern=r"rm -rf", surface=("snap",))]
    with pytest.raises(TriggerRuleError, match="only the pack loader"):  # not any caller's to write
        sync_rules(conn, "_system", rules)
    conn.execute(
        "INSERT INTO spark.trigger_rules (tenant, name, pattern, surface) "
        "VALUES ('_system', 'kept', 'x', '{k}')"
    )
    for tenant in ("_system", "", "x" * 129):  # no rules: was a plain delete, which emptied the pack's rules
        with pytest.raises(
            TriggerRuleError, match=f"tenant {tenant!r}: .*(pack loader|tenant must be)"
        ) as info:
            sync_rules(conn, tenant, [])
        assert "\n" not in str(info.value) and "PL/pgSQL" not in str(info.value)  # one line, no CONTEXT
    pack_rules = "SELECT count(*) FROM spark.trigger_rules WHERE tenant = '_system'"
    assert conn.execute(pack_rules).fetchone() == (1,)
    conn.execute("DELETE FROM spark.trigger_rules WHERE tenant = '_system'")
    with conn.transaction():
        conn.execute("SET LOCAL spark.pack_writes = on")  # what the pack loader (spark-pg seed) does
        sync_rules(conn, "_system", rules)
    rows = explain(conn, "acme", "Bash rm -rf build", include_system=True)
    assert surfaced(rows) == ["snap"]
    assert rows[0]["why"]["trigger"]["rules"] == ["destructive"]
    # the tenant's own rule of the same name matches too: the name is reported once, the other rule after it
    sync_rules(conn, "acme", [*rules, TriggerRule(name="wipe", pattern=r"rm ", surface=("snap",))])
    rows = explain(conn, "acme", "Bash rm -rf build", include_system=True)
    assert rows[0]["why"]["trigger"]["rules"] == ["destructive", "wipe"]
    sync_rules(conn, "acme", [])
    conn.execute("DELETE FROM spark.trigger_rules WHERE tenant = '_system'")
    assert surfaced(explain(conn, "acme", "Bash rm -rf build", include_system=True)) == []


def test_actionability_gate_drops_observations_unless_a_trigger_or_pin_vouches(conn: Conn) -> None:
    add_memories(
        conn,
        "acme",
        [
            ("advice", "Run the migration on a staging copy before production.", "data", 0.9),
            ("tweet", "RT @dev: migration day on production, wish us luck", "social", 0.05),
            ("unscored", "Migration notes for production from the wiki.", None, None),
        ],
    )
    rows = {r["key"]: r for r in explain(conn, "acme", "production migration", min_actionability=0.3)}
    assert rows["advice"]["status"] == "surfaced" and rows["unscored"]["status"] == "surfaced"
    assert rows["tweet"]["status"] == "dropped: not actionable (actionability 0.050 < 0.3)"
    # the default (0) keeps it: conversational memory is not advice and must not be gated
    assert "tweet" in surfaced(explain(conn, "acme", "production migration"))
    sync_rules(conn, "acme", [TriggerRule(name="t", pattern="migration", surface=("tweet",))])
    assert "tweet" in surfaced(explain(conn, "acme", "production migration", min_actionability=0.3))


def test_domain_filter_applies_only_when_enough_candidates_remain(conn: Conn) -> None:
    add_memories(
        conn,
        "acme",
        [
            ("code1", "Deploy scripts live in ops/deploy.sh; keep them idempotent.", "code", 0.8),
            ("gen1", "Deploy on Tuesdays, never on Fridays.", "general", 0.8),
            ("x1", "Deploy day! Our launch thread is live, retweet it.", "social", 0.8),
        ],
    )
    strict = {r["key"]: r["status"] for r in explain(conn, "acme", "deploy", domains=["code"], domain_min=2)}
    assert strict["x1"] == 'dropped: action domain social is not one of ["code"]'
    assert strict["code1"] == strict["gen1"] == "surfaced"
    relaxed = {r["key"]: r["status"] for r in explain(conn, "acme", "deploy", domains=["code"], domain_min=3)}
    assert relaxed["x1"] == "surfaced"


def test_the_adaptive_cutoff_is_relative_to_the_best_item_still_in_the_running(conn: Conn) -> None:
    """An item the domain filter drops cannot set the bar that cuts the others."""
    add_memories(
        conn,
        "acme",
        [
            ("x1", "Release deploy! Deploy the release, release deploy day.", "social", 0.8),
            ("code1", "Deploy scripts stay idempotent; the release job may run them twice.", "code", 0.8),
            ("code2", "Keep one deploy script per service.", "code", 0.8),
        ],
    )
    conn.execute("UPDATE spark.memories SET priority = 'critical' WHERE tenant = 'acme' AND key = 'x1'")
    params = {"domains": ["code"], "domain_min": 1, "adaptive_ratio": 0.9}
    rows = {r["key"]: r for r in explain(conn, "acme", "deploy the release", **params)}
    assert rows["x1"]["score"] > rows["code1"]["score"] / 0.9  # x1 would have cut code1
    assert rows["x1"]["status"].startswith("dropped: action domain social")
    assert rows["code1"]["status"] == "surfaced"
    assert rows["code2"]["status"].startswith("dropped: adaptive cutoff")
    assert f"x best {round(rows['code1']['score'], 4)}" in rows["code2"]["status"]


@pytest.mark.parametrize(
    ("params", "names"),
    [
        ({"domains": "code"}, "params.domains"),
        ({"domains": [1]}, "params.domains"),
        ({"trigger_text": 5}, "params.trigger_text"),
        ({"min_actionability": 2}, "params.min_actionability"),
        ({"pool_trigger": -1}, "params.pool_trigger"),
    ],
)
def test_new_params_are_validated(conn: Conn, params: dict[str, Any], names: str) -> None:
    with pytest.raises(errors.InvalidParameterValue, match=names):
        explain(conn, "acme", "deploy", **params)


def log_call(conn: Conn, tenant: str, session: str, text: str, memory_key: str, pools: list[str]) -> int:
    """A logged advise call that surfaced memory_key through pools."""
    row = conn.execute(
        """WITH r AS (INSERT INTO spark.retrievals (tenant, session_id, query_text, trigger_text)
                      VALUES (%(t)s, %(s)s, %(x)s, %(x)s) RETURNING id)
           INSERT INTO spark.retrieval_items (tenant, retrieval_id, memory_id, memory_tenant, rank, score,
                                              signals, pools)
           SELECT %(t)s, r.id, m.id, m.tenant, 1, 0.5, '{}', %(p)s
           FROM r, spark.memories m WHERE m.tenant = %(t)s AND m.key = %(k)s
           RETURNING retrieval_id""",
        {"t": tenant, "s": session, "x": text, "k": memory_key, "p": pools},
    ).fetchone()
    assert row is not None
    return int(row[0])


def helpful(conn: Conn, tenant: str, key: str, retrieval_id: int | None, session: str | None = None) -> None:
    conn.execute(
        "SELECT spark.record_outcome(%s, (SELECT id FROM spark.memories WHERE tenant = %s AND key = %s), "
        "'helpful', %s, %s)",
        (tenant, tenant, key, retrieval_id, session),
    )


def test_learned_triggers_are_proposed_in_shadow_and_promoted_on_precision(conn: Conn) -> None:
    add_memories(
        conn, "acme", [("expand", "Add columns in one release and drop them in a later one.", "data", 0.8)]
    )
    for n, text in enumerate(
        ["Bash alembic migration add column", "Edit migration file", "migrations review"]
    ):
        rid = log_call(conn, "acme", f"s{n}", text, "expand", ["semantic"])
        helpful(conn, "acme", "expand", rid)
    # three helps: not enough when four are asked for
    assert conn.execute("SELECT spark.propose_triggers('acme', 4)").fetchone() == (0,)
    assert conn.execute("SELECT spark.propose_triggers('acme', 3)").fetchone() == (1,)
    rule = conn.execute(
        "SELECT name, pattern, context_pattern, shadow, origin FROM spark.trigger_rules WHERE tenant = 'acme'"
    ).fetchone()
    assert rule is not None and rule[1] == r"\mmigrat" and rule[3:] == (True, "learned")
    assert pattern_problem(rule[1]) is None  # what the database writes, the rule file check accepts
    assert conn.execute("SELECT spark.propose_triggers('acme', 3)").fetchone() == (0,)

    # in shadow: matched and logged by spark.advise, never surfaced
    cur = conn.cursor(row_factory=dict_row)
    for n in range(3):
        rows = cur.execute(
            "SELECT * FROM spark.advise('acme', 'release checklist', NULL, 5, %s, %s)",
            (Jsonb({"trigger_text": "Bash run the migration", "include_system": False}), f"live{n}"),
        ).fetchall()
        assert all("trigger" not in r["pools"] for r in rows)
        if n < 2:  # the memory helped in two of the three sessions
            helpful(conn, "acme", "expand", None, f"live{n}")
    figures = conn.execute("SELECT * FROM spark.promote_triggers('acme', 4, 0.6)").fetchone()
    assert figures is not None and figures[1:] == (3, 2, pytest.approx(2 / 3), False)  # too few hits
    figures = conn.execute("SELECT * FROM spark.promote_triggers('acme', 3, 0.6)").fetchone()
    assert figures is not None and figures[-1] is True
    state = conn.execute(
        "SELECT shadow, confidence FROM spark.trigger_rules WHERE tenant = 'acme'"
    ).fetchone()
    assert state == (False, pytest.approx(2 / 3))
    surfaced_now = cur.execute(
        "SELECT pools FROM spark.advise('acme', 'release checklist', NULL, 5, %s)",
        (Jsonb({"trigger_text": "Bash run the migration", "include_system": False}),),
    ).fetchall()
    assert any("trigger" in r["pools"] for r in surfaced_now)
    with pytest.raises(errors.InvalidParameterValue, match="min_precision"):
        conn.execute("SELECT * FROM spark.promote_triggers('acme', 3, 1.5)")


def test_a_learned_rule_matches_the_calls_it_was_learned_from(conn: Conn) -> None:
    """A stem is not always a prefix of its words (retry -> retri, policy -> polici): the rule is written as
    the prefix they share, and a dead rule learned the old way is rewritten while it has no shadow hit."""
    add_memories(conn, "acme", [("backoff", "Retry with exponential backoff and jitter.", "system", 0.8)])
    texts = ["apply retry policy to http client", "retry policy for queue", "check the retry policy"]
    for n, text in enumerate(texts):
        helpful(conn, "acme", "backoff", log_call(conn, "acme", f"s{n}", text, "backoff", ["semantic"]))
    assert conn.execute("SELECT spark.propose_triggers('acme')").fetchone() == (1,)
    rule = conn.execute(
        "SELECT name, pattern, context_pattern FROM spark.trigger_rules WHERE tenant = 'acme'"
    ).fetchone()
    assert rule is not None and rule[1:] == (r"\mpolic", r"\mretr")
    for text in texts:
        assert re.search(rule[1][2:], text) and re.search(rule[2][2:], text)
    assert conn.execute("SELECT spark.propose_triggers('acme')").fetchone() == (0,)  # nothing new
    # a rule learned before the fix, never hit: replaced on the next run
    conn.execute("UPDATE spark.trigger_rules SET pattern = '\\mpolici' WHERE tenant = 'acme'")
    assert conn.execute("SELECT spark.propose_triggers('acme')").fetchone() == (1,)
    assert conn.execute("SELECT pattern FROM spark.trigger_rules WHERE tenant = 'acme'").fetchone() == (
        r"\mpolic",
    )
    # once hit in shadow, it is measured as it is, not rewritten under its hits
    conn.execute("UPDATE spark.trigger_rules SET pattern = '\\mpolici' WHERE tenant = 'acme'")
    conn.execute(
        """INSERT INTO spark.trigger_shadow_hits (tenant, retrieval_id, rule_name, memory_id)
           SELECT 'acme', max(r.id), %s, max(m.id)
           FROM spark.retrievals r, spark.memories m
           WHERE r.tenant = 'acme' AND m.tenant = 'acme' AND m.key = 'backoff'""",
        (rule[0],),
    )
    assert conn.execute("SELECT spark.propose_triggers('acme')").fetchone() == (0,)


def test_unused_insights_decay_only_when_asked(conn: Conn) -> None:
    add_memories(conn, "acme", [("old", "Rotate the deploy keys every quarter.", "security", 0.8)])
    conn.execute(
        "UPDATE spark.memories SET reliability = 0.8, last_seen_at = now() - interval '60 days' "
        "WHERE tenant = 'acme' AND key = 'old'"
    )
    plain = explain(conn, "acme", "rotate deploy keys")[0]
    decayed = explain(conn, "acme", "rotate deploy keys", decay_half_life_days=30)[0]
    assert plain["outcome"] == pytest.approx(0.8)
    assert decayed["outcome"] == pytest.approx(0.8 * 0.25, rel=0.01)
    assert decayed["why"]["terms"]["outcome"] < plain["why"]["terms"]["outcome"]


def test_tiers_follow_outcomes_and_the_archive_waits_its_turn(conn: Conn) -> None:
    add_memories(
        conn,
        "acme",
        [
            ("good", "Tag every release image with the git SHA.", "system", 0.8),
            ("bad", "Tag release images with latest.", "system", 0.8),
            ("pin", "Never deploy on Friday afternoons.", "system", 0.8),
        ],
    )
    conn.execute(
        """UPDATE spark.memories SET
               helpful_count = CASE key WHEN 'good' THEN 16 ELSE 0 END,
               unhelpful_count = CASE key WHEN 'bad' THEN 5 ELSE 0 END,
               reliability = CASE key WHEN 'good' THEN 0.95 WHEN 'bad' THEN 0.14 ELSE 0.5 END,
               tier = CASE key WHEN 'pin' THEN 'pinned' ELSE 'active' END
           WHERE tenant = 'acme'"""
    )
    moved = conn.execute("SELECT key, old_tier, new_tier FROM spark.assign_tiers('acme')").fetchall()
    assert moved == [("bad", "active", "archive"), ("good", "active", "pinned")]  # the user's pin stays
    assert conn.execute("SELECT count(*) FROM spark.assign_tiers('acme')").fetchone() == (0,)
    # k = 1 is met by the other tiers: the archived memory waits; with k = 5 it is searched
    rows = {r["key"]: r["status"] for r in explain(conn, "acme", "tag release images")}
    assert rows["bad"] == "surfaced"
    cur = conn.cursor(row_factory=dict_row)
    few = cur.execute(
        "SELECT key, status FROM spark.explain('acme', 'tag release images', NULL, 1, %s)",
        (Jsonb({"include_system": False}),),
    ).fetchall()
    assert {"key": "bad", "status": "dropped: archive tier (the active tiers yielded enough)"} in few
    conn.execute("UPDATE spark.memories SET helpful_count = 0 WHERE key = 'good' AND tenant = 'acme'")
    assert ("good", "pinned", "active") in conn.execute(
        "SELECT key, old_tier, new_tier FROM spark.assign_tiers('acme')"
    ).fetchall()


@pytest.mark.parametrize(
    "metadata",
    [
        {"big": [1.0e300] * 3, "text": 'tab\\t quote" é \u0001'},
        {"none": None, "yes": True, "no": False, "zero": 0.0, "tiny": -1.5e-7, "huge": 12345678901234567890},
        {"empty": {}, "list": [], "nested": {"x": [1.5, 2.0, 100.0, 1e16, 5e-324, 1.7976931348623157e308]}},
    ],
)
def test_metadata_is_measured_as_the_database_prints_it(conn: Conn, metadata: dict[str, Any]) -> None:
    """Was (review): json.dumps writes 1e+300 where jsonb prints 301 digits, so `--check` passed metadata
    that spark.put_trigger_rule then refused as over 64 KiB."""
    row = conn.execute("SELECT octet_length(%s::jsonb::text)", (json.dumps(metadata),)).fetchone()
    assert row is not None and jsonb_text_bytes(metadata) == row[0]


def test_metadata_of_many_huge_numbers_is_refused_at_check() -> None:
    raw = rule(metadata={"n": [1.0e300] * 220})  # 8 bytes a number to json.dumps, 301 to the database
    with pytest.raises(TriggerRuleError, match="metadata must be at most 65,536 bytes"):
        parse_rules({"version": 1, "rules": [raw]}, "rules.yaml")
