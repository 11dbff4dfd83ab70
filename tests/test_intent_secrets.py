"""A tool call's input as the advisor reads it (audit E): scrubbed before it is parsed, so that no secret
reaches any column of the spark schema; a NUL or a lone surrogate in it costs the call no advice; and
apply_patch and str_replace_based_edit_tool calls read like Edit and Write."""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from spark_pg.advisor import Advisor, trigger_text
from spark_pg.config import Settings
from spark_pg.embedding import Embedder
from spark_pg.errors import InputError
from spark_pg.hooks import client, wire
from spark_pg.hooks.protocol import PRE, parse_event
from spark_pg.hooks.server import open_pool
from spark_pg.hooks.service import HookService
from spark_pg.intent import extract_intent
from spark_pg.intent.text import _words
from tests.conftest import hook_server, rolled_back, seeded_database

Conn = psycopg.Connection[Any]
T = "secrets"
MEMORIES = [
    ("psql-tx", "database", "Never run psql against prod without a transaction; use BEGIN and review first."),
    (
        "docker-login",
        "security",
        "Before docker login, use --password-stdin instead of -p so the password stays out of shell history.",
    ),
]
PASSWORD = "Hunter2Secret9"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SLACK = "T0AAZQ8XY/B0BBKW7RT/Zq8xZr3kLmN0pQw7Rt5yUv1s"
DISCORD = "112233445566778899/Xy7Kq2Lm9Np4Rs6Tu8Vw1Za3Bc5De7Fg9Hj2Km4"

# (tool, input, secret): each shape leaked through the intent into spark.retrievals.query_text and
# spark.query_embeddings.query_text, while the trigger text of the same row was scrubbed
SHAPES = {
    "psql-key-value": ("Bash", {"command": f"psql host=db password={PASSWORD}"}, PASSWORD),
    "curl-user": ("Bash", {"command": f"curl -u admin:{PASSWORD} https://api.example.com/v1"}, PASSWORD),
    "write-env": ("Write", {"file_path": ".env", "content": f"DATABASE_PASSWORD={PASSWORD}\n"}, PASSWORD),
    "vault": ("Bash", {"command": f"vault kv put secret/db password={PASSWORD}"}, PASSWORD),
    "edit-aws": (
        "Edit",
        {
            "file_path": "config.py",
            "old_string": "x = 1",
            "new_string": f"AWS_SECRET_ACCESS_KEY = '{AWS_SECRET}'",
        },
        AWS_SECRET,
    ),
    "slack-webhook": (
        "Bash",
        {"command": f"curl -X POST -d @msg.json https://hooks.slack.com/services/{SLACK}"},
        SLACK,
    ),
    "discord-webhook": (
        "WebFetch",
        {"url": f"https://discord.com/api/webhooks/{DISCORD}", "prompt": "post the release note"},
        DISCORD,
    ),
}


def needles(secret: str) -> list[str]:
    """The secret, lower case, and the pieces the intent's word splitting makes of it (runs of letters
    and digits, camelCase parts: ``zr3k``, ``n0p``, ``cyexamplekey``) that could be nothing else."""
    runs = [r for r in re.split(r"[^A-Za-z0-9]+", secret) if r]
    pieces = [w for r in runs for w in _words(r)]
    found = [secret, *(r for r in runs if len(r) >= 6)]
    found += [w for w in pieces if len(w) >= 5 or (len(w) >= 3 and re.search(r"\d", w))]
    # a short run of hex digits ("bc5") is in any hash the database keeps
    return sorted({n.lower() for n in found if len(n) >= 12 or not re.fullmatch(r"[0-9a-fA-F]+", n)})


def columns_holding(conn: Conn, secret: str) -> list[str]:
    """Every text, varchar, json and array column of every table in the spark schema holding the secret
    or a piece of it (case-insensitively), as ``table.column``."""
    cols = conn.execute(
        """SELECT c.table_name, c.column_name FROM information_schema.columns c
           JOIN information_schema.tables t USING (table_schema, table_name)
           WHERE c.table_schema = 'spark' AND t.table_type = 'BASE TABLE'
             AND c.data_type IN ('text', 'character varying', 'jsonb', 'json', 'ARRAY')"""
    ).fetchall()
    assert len(cols) > 20  # retrievals, query_embeddings, memories, ... were searched
    held = []
    for table, column in cols:
        query = (
            f'SELECT count(*) FROM spark."{table}" WHERE EXISTS '
            f'(SELECT 1 FROM unnest(%s::text[]) n WHERE position(n IN lower("{column}"::text)) > 0)'
        )
        row = conn.execute(query, (needles(secret),)).fetchone()
        if row and row[0]:
            held.append(f"{table}.{column}")
    return held


@pytest.fixture(scope="module")
def sdb(server_url: str, model_settings: Settings, embedder: Embedder) -> Iterator[str]:
    with seeded_database(server_url, model_settings, embedder, T, MEMORIES) as url:
        yield url


@pytest.fixture
def conn(sdb: str) -> Iterator[Conn]:
    with rolled_back(sdb) as connection:
        yield connection


@pytest.mark.parametrize("shape", list(SHAPES))
def test_no_secret_of_the_tool_input_reaches_any_column_of_the_spark_schema(
    conn: Conn, embedder: Embedder, shape: str
) -> None:
    """The advisor scrubbed only the finished intent text, by when parsing had made ``password=x``
    "password x", kept ``admin:x`` from ``curl -u``, copied a body's values in as added identifiers and
    split a webhook's secret into camelCase pieces: the scrubber saw none of them as a secret."""
    tool, tool_input, secret = SHAPES[shape]
    assert not columns_holding(conn, secret)  # nothing before the call
    advisor = Advisor(conn, embedder, T, session_id=f"s-{shape}")
    advisor.advise(tool, tool_input)
    logged = conn.execute(
        """SELECT r.query_text, r.trigger_text, q.query_text FROM spark.retrievals r
           LEFT JOIN spark.query_embeddings q ON q.query_text = r.query_text
           WHERE r.tenant = %s AND r.session_id = %s""",
        (T, f"s-{shape}"),
    ).fetchall()
    assert len(logged) == 1 and logged[0][2] is not None  # the call was logged, and its query cached
    assert columns_holding(conn, secret) == []
    query, trigger, _ = logged[0]
    assert "REDACTED" not in query and "[" not in query  # a placeholder is no word of the query
    assert "[REDACTED" in trigger or "Write" in trigger or "Edit" in trigger  # the trigger keeps its marker


@pytest.mark.parametrize(
    ("tool", "tool_input", "kept"),
    [
        *((tool, tool_input, None) for tool, tool_input, _ in SHAPES.values()),
        ("mcp__db__query", {"sql": f"ALTER USER app WITH PASSWORD '{PASSWORD}'"}, "ALTER USER app"),
        (
            "Bash",
            {"command": f"aws configure set aws_secret_access_key {AWS_SECRET}"},
            "aws_secret_access_key",
        ),
        (
            "Task",
            {"description": "rotate creds", "prompt": f"use password {PASSWORD} for the db"},
            "password",
        ),
        ("Edit", {"file_path": "a.py", "new_string": f"c = Client(key='{PASSWORD}x', retries=3)"}, "edit"),
        ("Write", {"file_path": ".env", "content": f"DATABASE_PASSWORD={PASSWORD}"}, "DATABASE_PASSWORD"),
    ],
)
def test_the_intent_holds_neither_a_secret_nor_a_placeholder(
    tool: str, tool_input: dict[str, Any], kept: str | None
) -> None:
    """Past the scrubber too: a value the scrubber does not take for a secret after a secret's name
    (``PASSWORD 'x'``, ``set aws_secret_access_key x``, prose) and a random-looking literal in a body are
    left out of the intent; the name stays, so the intent still says what the call does."""
    intent = extract_intent(tool, tool_input)
    secret = next(s for s in (PASSWORD, AWS_SECRET, SLACK, DISCORD) if s in json.dumps(tool_input))
    lower = intent.text.lower()
    assert not [n for n in needles(secret) if n in lower], intent.text
    assert "redacted" not in lower and "[" not in intent.text
    if kept:
        assert kept in intent.text


def test_the_name_of_a_redacted_secret_stays_in_the_intent() -> None:
    assert extract_intent(*SHAPES["psql-key-value"][:2]).text == "query psql host db password ..."
    assert extract_intent(*SHAPES["write-env"][:2]).text == "write env: DATABASE_PASSWORD"
    assert extract_intent(*SHAPES["edit-aws"][:2]).text == "edit config: AWS_SECRET_ACCESS_KEY"
    assert "hooks.slack.com services" in extract_intent(*SHAPES["slack-webhook"][:2]).text


@pytest.fixture(scope="module")
def sock(sdb: str, embedder: Embedder, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A hook server in a thread, as tests/test_hooks.py runs one."""
    with hook_server(sdb, embedder, tmp_path_factory.mktemp("hooks") / "s.sock") as path:
        yield path


def pre_hook(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sock: str,
    session: str,
    tool_input: dict[str, Any],
) -> tuple[str, str]:
    """`spark-pg hook pre-tool-use --interrupts` on a Bash event; (stdout, stderr). Each call needs a
    session of its own: an interrupt stops the same call of a session once."""
    event = {
        "hook_event_name": "PreToolUse",
        "session_id": session,
        "tool_name": "Bash",
        "tool_input": tool_input,
    }
    stdin = json.dumps(
        event
    ).encode()  # a NUL is written \u0000, a lone surrogate \udXXX, as Claude Code does
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = client.main(["pre-tool-use", "--socket", sock, "--tenant", T, "--interrupts"])
    out, err = capsys.readouterr()
    assert code == 0
    return out, err


@pytest.mark.parametrize(
    ("session", "tool_input"),
    [
        ("plain", {"command": "rm -rf build"}),
        ("nul-in-command", {"command": "rm -rf build\x00"}),
        ("nul-in-description", {"command": "rm -rf build", "description": "clean\x00"}),
        ("lone-surrogate", {"command": "rm -rf build \ud83d"}),  # a command cut inside an emoji
        ("nul-in-a-key", {"command": "rm -rf build", "path\x00": "a\x00b"}),
    ],
)
def test_a_nul_in_the_tool_input_does_not_cost_the_call_its_advice(
    sock: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    session: str,
    tool_input: dict[str, Any],
) -> None:
    """A NUL anywhere in the event was carried into the query and the trigger text; the advisor raised
    InputError ("query text must not contain NUL characters") and the hook failed open: no advice, and
    no interrupt for ``rm -rf``."""
    out, err = pre_hook(monkeypatch, capsys, sock, session, tool_input)
    assert err == ""
    specific = json.loads(out)["hookSpecificOutput"]
    assert specific["permissionDecision"] == "deny", specific


def test_advise_cleans_the_agents_input_and_refuses_the_callers_own_text(
    conn: Conn, embedder: Embedder
) -> None:
    """Through Advisor.advise, a NUL in a path was ArgumentRefused ("unsupported Unicode escape sequence")
    and one in the command an InputError about "query text", which the caller never passed."""
    advisor = Advisor(conn, embedder, T, session_id="s-nul")
    for tool_input in (
        {"file_path": "src/auth/log\x00in.py", "old_string": "a", "new_string": "verify_token(tok)"},
        {"file_path": "src/auth/login\udcff.py", "old_string": "a", "new_string": "verify_token(tok)"},
        {"command": "psql -c 'DROP TABLE orders'\x00"},
    ):
        tool = "Bash" if "command" in tool_input else "Edit"
        assert advisor.advise(tool, tool_input, "rotate the tokens") is not None
    logged = conn.execute(
        "SELECT query_text || trigger_text FROM spark.retrievals WHERE tenant = %s AND session_id = 's-nul'",
        (T,),
    ).fetchall()
    assert len(logged) == 3 and not [r for r in logged if "\x00" in r[0] or "\udcff" in r[0]]
    with pytest.raises(InputError, match=r"^tool_name must not contain NUL"):
        advisor.advise("Ba\x00sh", {"command": "ls -la"})
    with pytest.raises(InputError, match=r"^task_context contains a lone surrogate"):
        advisor.advise("Bash", {"command": "rm -rf build"}, "clean \udcff")


def test_the_hook_event_is_cleaned_of_nul_in_keys_and_values() -> None:
    raw = {
        "hook_event_name": "PreToolUse",
        "session_id": "s\x009",
        "tool_name": "Ba\x00sh",
        "tool_input": {"command": "ls\x00", "path\x00": ["x\x00"], "literal": "\\u0000 stays text"},
    }
    event = parse_event(PRE, json.loads(json.dumps(raw)))
    assert (event.tool_name, event.session_id) == ("Ba sh", "s 9")
    assert event.tool_input == {"command": "ls ", "path ": ["x "], "literal": "\\u0000 stays text"}
    assert trigger_text("Bash", {"command": "ls\x00 -la", "path": "a\x00"}) == "Bash ls -la a"


PATCH = "\n".join(
    [
        "*** Begin Patch",
        "*** Update File: src/auth/login.py",
        "@@",
        "-x = 1",
        "+def verify_token(tok):",
        "+    return jwt.decode(tok)",
        "*** End Patch",
    ]
)
ADD = "*** Begin Patch\n*** Add File: db/migrations/0003_users.sql\n+CREATE TABLE users (id int);\n"
DIFF = (
    "--- a/src/auth/login.py\n+++ b/src/auth/login.py\n@@ -1 +1 @@\n-old_helper_name(x)\n+verify_token(x)\n"
)
BODY = "def verify_token(tok):\n    return jwt.decode(tok)"
LOGIN = "/repo/src/auth/login.py"
EDITED = "edit auth login: verify_token jwt.decode"


@pytest.mark.parametrize(
    ("tool", "tool_input", "text"),
    [
        ("Edit", {"file_path": LOGIN, "old_string": "x = 1", "new_string": BODY}, EDITED),
        ("apply_patch", {"input": PATCH}, EDITED),
        ("apply_patch", PATCH, EDITED),
        ("apply_patch", {"input": ADD}, "edit migrations users: CREATE TABLE"),
        # a unified diff: the lines it removes are no identifiers it adds
        ("apply_patch", {"patch": DIFF}, "edit auth login: verify_token"),
        ("str_replace_based_edit_tool", {"command": "str_replace", "path": LOGIN, "new_str": BODY}, EDITED),
        ("str_replace_based_edit_tool", {"command": "insert", "path": LOGIN, "new_str": BODY}, EDITED),
        (
            "str_replace_based_edit_tool",
            {"command": "create", "path": LOGIN, "file_text": BODY},
            "write" + EDITED[4:],
        ),
    ],
)
def test_apply_patch_and_the_str_replace_editor_read_like_edit_and_write(
    tool: str, tool_input: dict[str, Any] | str, text: str
) -> None:
    """apply_patch was always skipped (trivial, text "edit": its patch is its ``input``); the editor's
    new_str and file_text were ignored ("edit auth login")."""
    intent = extract_intent(tool, tool_input)
    assert (intent.text, intent.trivial) == (text, False)


@pytest.mark.parametrize("tool", ["str_replace_based_edit_tool", "str_replace_editor"])
def test_the_editors_view_is_a_read(tool: str) -> None:
    intent = extract_intent(tool, {"command": "view", "path": "/repo/src/auth/login.py"})
    assert (intent.action, intent.trivial) == ("read", True)
    assert not extract_intent(
        tool, {"command": "view", "path": "/repo/src/auth/login.py"}, "fix login"
    ).trivial


def test_the_hook_service_extracts_a_call_once(
    sdb: str, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service extracted the intent to skip a trivial call, then the advisor extracted it again: twice
    the cost on a big Task prompt, and now the input's scrubbing too."""
    import spark_pg.advisor
    import spark_pg.hooks.service

    calls: list[str] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        return extract_intent(*args, **kwargs)

    monkeypatch.setattr(spark_pg.advisor, "extract_intent", counted)
    monkeypatch.setattr(spark_pg.hooks.service, "extract_intent", counted)
    pool = open_pool(sdb, 1)
    try:
        service = HookService(pool.connection, lambda: embedder)
        task = {"description": "review", "prompt": "review the billing module " * 100}
        event = parse_event(PRE, {"session_id": "s-once", "tool_name": "Task", "tool_input": task})
        answer = service.respond({"v": wire.VERSION, "op": "hook", "tenant": T, "event": event.to_wire()})
    finally:
        pool.close()
    assert answer["ok"], answer
    assert calls == ["Task"]


def test_a_long_command_is_still_long_once_a_secret_in_it_is_scrubbed() -> None:
    """Scrubbing reads a string up to 4,608 characters; a private key in it shrinks to a placeholder, and a
    10 KB command would have looked like a short read-only one, its `rm` cut away unseen."""
    key = "-----BEGIN PRIVATE KEY-----\n" + "A" * 3000 + "\n-----END PRIVATE KEY-----"
    command = f"cat notes.txt '{key}' {'b' * 1600} ; rm -rf /srv/data {'c' * 5000}"
    intent = extract_intent("Bash", {"command": command})
    assert not intent.trivial and "AAAA" not in intent.text
