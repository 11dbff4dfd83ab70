"""The intent and advisor audit (R): what a call runs when a commit message holds a heredoc, a tool input is a
JSON string, SQL starts with a comment, a wrapper runs a quoted command; which commands are read-only; the
pack's destructive-commands rule; verbs of commands with arguments named build or deploy and of compound
commands; a reworded description on a retried call; session_id checks. The commands here are test strings,
never run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from spark_pg.advisor import Advisor, AdvisorOptions, action_text, blocking, trigger_text
from spark_pg.config import Settings
from spark_pg.embedding import Embedder
from spark_pg.errors import InputError
from spark_pg.intent import extract_intent
from spark_pg.intent.shell import _command_summary, _is_read_only_command
from spark_pg.triggers import load_rules
from tests.conftest import rolled_back, seeded_database

Conn = psycopg.Connection[Any]
T = "dev"
LOUD = AdvisorOptions(interrupts=True)
COMMIT = "git commit -m \"$(cat <<'EOF'\nStop using DELETE FROM in the cleanup job\nEOF\n)\""
PR = "gh pr create --title fix --body \"$(cat <<'EOF'\n## Summary\n- DROP TABLE users was wrong\nEOF\n)\""
PACK_RULES = Path(__file__).resolve().parents[1] / "spark_pg" / "data" / "trigger_rules.yaml"


# --- 1. a heredoc inside "$(...)" -------------------------------------------------------------------------


def test_a_heredoc_in_a_quoted_substitution_is_not_what_the_call_runs() -> None:
    """Claude Code's commit and PR messages come as "$(cat <<'EOF' ... EOF)": the body was kept in what the
    call runs (a `<<` in double quotes was no heredoc) and a message naming DELETE FROM was denied."""
    for command in (COMMIT, PR, COMMIT.replace("'EOF'", "EOF")):
        action = action_text("Bash", {"command": command})
        assert action.startswith(("git commit -m", "gh pr create")), action
        assert "DELETE" not in action and "DROP" not in action and "EOF" not in action, action
        trigger = trigger_text("Bash", {"command": command})
        assert "DELETE FROM" in trigger or "DROP TABLE" in trigger  # the advice still sees the message
        # reading resumes after the substitution: what follows it runs
        assert action_text("Bash", {"command": command + " && rm -rf /srv"}).endswith("rm -rf /srv")
    # a heredoc fed to a shell in a substitution is what runs: read whole
    assert "rm -rf /srv/app" in action_text(
        "Bash", {"command": "bash -c \"$(cat <<'EOF'\nrm -rf /srv/app\nEOF\n)\""}
    )
    # a "<<" inside double quotes but outside $( ) stays text, and $((...)) still shifts
    assert action_text("Bash", {"command": 'git commit -m "a << b" && echo "$((1<<3))"'}).startswith(
        "git commit -m ; echo"
    )


# --- 2. a tool input given as a JSON string ---------------------------------------------------------------


def test_a_json_string_input_is_read_as_its_object_for_what_runs_and_the_trigger_text() -> None:
    """OpenAI-style arguments come as a JSON string: the intent read the object, but the interrupt check
    read '{command:' and the trigger text held a Write's whole body."""
    as_dict = {"command": "rm -rf /", "description": "clean"}
    assert action_text("Bash", json.dumps(as_dict)) == action_text("Bash", as_dict) == "rm -rf /"
    assert trigger_text("Bash", json.dumps(as_dict)) == trigger_text("Bash", as_dict)
    write = {"file_path": "/repo/cleanup.sql", "content": "DELETE FROM sessions WHERE expired"}
    text = trigger_text("Write", json.dumps(write))
    assert text == trigger_text("Write", write) == "Write /repo/cleanup.sql", text
    query = json.dumps({"query": "-- purge\nDROP TABLE users"})
    assert action_text("mcp__postgres__query", query) == "-- purge\nDROP TABLE users"
    # a string that is no JSON object is still the command line itself
    assert action_text("Bash", "rm -rf /srv") == "rm -rf /srv"
    assert trigger_text("Bash", '["rm", "-rf"]') == 'Bash ["rm", "-rf"]'


# --- 3. read-only commands that write or run ---------------------------------------------------------------

WRITES_OR_RUNS = [
    "echo $'it\\'s done'; git push --force origin main",  # shlex read the rest as quoted
    "fd -e pyc -Hx rm -f",  # -x in a cluster runs rm
    "fd -HX rm",
    "date -us '2024-01-01'",  # -s in a cluster sets the clock
    'ls >&2"x"',  # writes the file 2x
    "ls >/dev/null'x'",  # writes /dev/nullx
]
READ_ONLY = ["date -Iseconds", "date -u", "fd -tx build", "fd -e py -H", "ls 2>&1", "ls 2>/dev/null | head",
             "ls >/dev/null&&pwd", "for f in *.log; do tail -n 5 \"$f\"; done"]  # fmt: skip


def test_commands_that_write_or_run_are_not_read_only_and_others_still_are() -> None:
    assert [c for c in WRITES_OR_RUNS if _is_read_only_command(c)] == []
    assert [c for c in WRITES_OR_RUNS if extract_intent("Bash", {"command": c}).trivial] == []
    assert [c for c in READ_ONLY if not _is_read_only_command(c)] == []
    # the command after a $'...' string is read, and runs
    action = action_text("Bash", {"command": WRITES_OR_RUNS[0]})
    assert action == "echo ; git push --force origin main"


# --- 4. SQL that starts with a comment, "(", EXPLAIN, DO, CALL, EXECUTE ----------------------------------

SQL = [
    "-- note\nDROP TABLE users",
    "/* cleanup */ DROP TABLE users",
    "  /* a */ -- b\n (DELETE FROM users RETURNING *)",
    "EXPLAIN ANALYZE DELETE FROM users",
    "explain (analyze, buffers) delete from users",
    "DO $$ BEGIN EXECUTE 'DROP TABLE users'; END $$",
    "DO LANGUAGE plpgsql $body$ BEGIN TRUNCATE TABLE orders; END $body$",
    "CALL purge_all('users')",
    "EXECUTE purge(1)",
]
NO_SQL = ["explain how DROP TABLE cascades", "do you know why DELETE FROM is slow", "call me on DROP TABLE",
          "execute the plan: DELETE FROM carts", "/* unterminated DROP TABLE users"]  # fmt: skip


def test_sql_after_comments_parentheses_or_explain_is_what_the_call_runs() -> None:
    assert [q for q in SQL if action_text("mcp__postgres__query", {"query": q}) != q] == []
    assert [q for q in SQL if action_text("mcp__postgres__query", q) != q.strip()] == []  # read stripped
    assert [q for q in NO_SQL if action_text("mcp__exa__search", {"query": q})] == []


# --- 5. wrappers that run a quoted command -----------------------------------------------------------------

WRAPPED = [
    ("watch -n 5 'git push --force origin main'", "git push --force origin main"),
    ("flock /tmp/l -c 'rm -rf /srv/app'", "rm -rf /srv/app"),
    ("script -qc 'rm -rf x' /dev/null", "rm -rf x"),
    ("nix-shell --run 'git push --force'", "git push --force"),
    ("tmux new-session -d 'rm -rf x'", "rm -rf x"),
    ("screen -dm sh -c 'rm -rf x'", "rm -rf x"),
    ("parallel 'rm -rf {}' ::: a b", "rm -rf {}"),
    ("sudo watch 'rm -rf /srv'", "rm -rf /srv"),
    ("git -c alias.p='push --force' p", "push --force"),
]


def test_a_wrapper_s_quoted_command_is_what_the_call_runs() -> None:
    assert [c for c, runs in WRAPPED if runs not in action_text("Bash", {"command": c})] == []
    # as an argument, a wrapper's name runs nothing
    assert action_text("Bash", {"command": "grep -rn 'rm -rf' script"}) == "grep -rn script"
    assert action_text("Bash", {"command": "git commit -m 'drop table docs' watch"}) == "git commit -m watch"


# --- 7. verbs of commands with arguments named build/deploy/release, and of compound commands -------------

VERBS = [
    ("rm -rf build", "delete"),
    ("rm -rf release", "delete"),
    ("mkdir -p deploy/k8s", "create"),
    ("flock /tmp/deploy.lock make", "run"),
    ("if true; then rm -rf /; fi", "delete"),
    ("{ rm -rf /; }", "delete"),
    ("while true; do rm -rf /tmp/x; done", "delete"),
    ("for f in a b; do rm -rf $f; done", "delete"),
    # as before
    ("docker build .", "build"),
    ("cargo build --release", "build"),
    ("make deploy", "deploy"),
    ("bash scripts/deploy.sh", "deploy"),
    ("gh workflow run release.yml", "deploy"),
]


def test_the_verb_comes_from_programs_that_take_a_subcommand_and_from_inside_compound_commands() -> None:
    assert [(c, _command_summary(c)[0]) for c, verb in VERBS if _command_summary(c)[0] != verb] == []
    assert extract_intent("Bash", {"command": "rm -rf release"}).text.startswith("delete rm")
    intent = extract_intent("Bash", {"command": "if true; then rm -rf /; fi"})
    assert intent.text.startswith("delete rm -rf"), intent


# --- 6. the pack's destructive-commands rule (PostgreSQL's regular expressions) ---------------------------


@pytest.fixture(scope="module")
def adb(server_url: str, model_settings: Settings, embedder: Embedder) -> Iterator[str]:
    memories = [
        ("backup", "ops", "Before any destructive command, take a backup and check you are not on prod.")
    ]
    with seeded_database(server_url, model_settings, embedder, T, memories) as url:
        yield url


@pytest.fixture
def conn(adb: str) -> Iterator[Conn]:
    with rolled_back(adb) as connection:
        yield connection


def test_the_packs_destructive_rule_knows_force_pushes_refspecs_and_powershell(conn: Conn) -> None:
    """Both texts an interrupt needs match: the trigger text and what the call runs."""
    (rule,) = [r for r in load_rules(PACK_RULES) if r.name == "destructive_commands"]
    hits = [
        "git push origin +main",
        "git push origin +HEAD:main",
        "git push origin :main",
        "git push origin --delete main",
        "Remove-Item -Recurse -Force C:\\repo",
        "Remove-Item -Force -Recurse ./build",
        "rm -r -fo C:\\repo",
        "rm -Recurse -Force ./build",
        "ri -rec -fo x",
        "git push --force origin main",
        "git push -f",
        "git push origin --force",
    ]
    misses = [
        # the safe forms a force-push advice recommends (audit Y: \M ended --force at their hyphen: denied)
        "git push --force-with-lease origin feature/x",
        "git push --force-if-includes --force-with-lease",
        "git push origin main",
        "git push -u origin feature-f",
        "git push origin HEAD:main",
        "git push origin main:main",
        "rm -r build",
        'git commit -m "force push later"',
        "Remove-Item -Recurse ./build",
        "git rm -r --cached x",
    ]
    texts = {c: [trigger_text("Bash", {"command": c}), action_text("Bash", {"command": c})] for c in hits}
    texts.update({c: [trigger_text("Bash", {"command": c})] for c in misses})
    flat = [t for ts in texts.values() for t in ts]
    matched = dict(
        conn.execute("SELECT t, t ~* %s FROM unnest(%s::text[]) t", (rule.pattern, flat)).fetchall()
    )
    assert [c for c in hits if not all(matched[t] for t in texts[c])] == []
    assert [c for c in misses if matched[texts[c][0]]] == []


# --- the advisor end to end ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command", ["git push --force-with-lease origin feature/x", "git push --force-if-includes origin feat"]
)
def test_the_safe_force_push_is_not_denied(conn: Conn, embedder: Embedder, command: str) -> None:
    """Was (audit Y): with interrupts on, the form the pack's own advice recommends was denied."""
    advisor = Advisor(conn, embedder, T, options=LOUD)
    advice = advisor.advise("Bash", {"command": command, "description": "x"})
    assert blocking(advice) is None, [(a.key, a.why.get("trigger")) for a in advice]
    assert blocking(advisor.advise("Bash", {"command": "git push --force origin main"})) is not None


@pytest.mark.parametrize("command", [COMMIT, PR])
def test_a_commit_message_naming_a_destructive_command_is_advice_not_a_deny(
    conn: Conn, embedder: Embedder, command: str
) -> None:
    advice = Advisor(conn, embedder, T, options=LOUD).advise("Bash", {"command": command, "description": "x"})
    assert blocking(advice) is None, [(a.key, a.why.get("trigger")) for a in advice]


@pytest.mark.parametrize(
    "tool_input",
    [
        json.dumps({"command": "rm -rf /var/data"}),
        {"command": "watch -n 5 'git push --force origin main'"},
        {"command": "git push origin +main"},
    ],
)
def test_the_advisor_stops_what_it_used_to_let_through(
    conn: Conn, embedder: Embedder, tool_input: Any
) -> None:
    advice = Advisor(conn, embedder, T, options=LOUD).advise("Bash", tool_input)
    assert blocking(advice) is not None, [(a.key, a.why.get("trigger")) for a in advice]


def test_the_advisor_stops_sql_after_a_comment(conn: Conn, embedder: Embedder) -> None:
    advice = Advisor(conn, embedder, T, options=LOUD).advise(
        "mcp__postgres__query", {"query": "/* cleanup */ DROP TABLE users"}
    )
    assert blocking(advice) is not None, [(a.key, a.why.get("trigger")) for a in advice]


# --- 8. a retry with a reworded description -----------------------------------------------------------------


def test_a_retry_with_a_reworded_description_is_advice_but_another_command_is_stopped(
    conn: Conn, embedder: Embedder
) -> None:
    """The earlier deny was looked up by the whole trigger text and query, both holding Bash's description:
    the agent that took the backup and retried with other words was denied again."""

    def advise(session: str, command: str, description: str | None) -> Any:
        tool_input = {"command": command, **({"description": description} if description else {})}
        return blocking(
            Advisor(conn, embedder, T, session_id=session, options=LOUD).advise("Bash", tool_input)
        )

    assert advise("reword", "rm -rf /var/data", "Remove the old data") is not None
    assert advise("reword", "rm -rf /var/data", "Delete the old data now that it is backed up") is None
    assert advise("reword", "rm -rf /var/data", None) is None
    assert advise("reword", "rm -rf /var/data; rm -rf /", "Remove the old data") is not None
    assert advise("reword", "rm -rf /var/data /srv", None) is not None
    assert advise("reword-other", "rm -rf /var/data", "Remove the old data") is not None
    # with a task context, the context must be the same too
    ctx = Advisor(conn, embedder, T, session_id="reword-ctx", options=LOUD)
    assert blocking(ctx.advise("Bash", {"command": "rm -rf /var/data", "description": "a"}, "clean up"))
    assert not blocking(ctx.advise("Bash", {"command": "rm -rf /var/data", "description": "b"}, "clean up"))
    assert blocking(ctx.advise("Bash", {"command": "rm -rf /var/data", "description": "b"}, "free disk"))


# --- 9. session_id ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("session_id", [5, b"s", "a\ud800", "a\x00b"])
def test_a_session_id_postgresql_cannot_take_is_an_input_error(conn: Conn, session_id: Any) -> None:
    with pytest.raises(InputError, match="session_id"):
        Advisor(conn, None, T, session_id=session_id)
    advisor = Advisor(conn, None, T, session_id="ok")
    advisor.session_id = session_id  # set after the advisor was made
    with pytest.raises(InputError, match="session_id"):
        advisor.advise("Bash", {"command": "make"})
    with pytest.raises(InputError, match="session_id"):
        advisor.record_outcome(1, "helpful")
