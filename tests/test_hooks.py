"""Claude Code hooks end to end on a real database with the real model: the protocol JSON, interrupts,
failure behaviour, outcome inference, the server's lifecycle and the client's light imports."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from spark_pg import bench_hooks
from spark_pg.config import Settings
from spark_pg.embedding import Embedder
from spark_pg.errors import InputError
from spark_pg.hooks import client, wire
from spark_pg.hooks.advice_tokens import advice_tokens
from spark_pg.hooks.outcomes import Pending, judge
from spark_pg.hooks.protocol import POST, PRE, call_failed, parse_event, pre_output
from spark_pg.hooks.server import HookServer, HookServerError, SocketClaim, client_closed, open_pool
from spark_pg.hooks.service import HookService
from tests.conftest import first_ping, hook_server, seeded_database, temp_database

T = "hooks"
SPARK_PG = Path(sys.executable).parent / "spark-pg"
MEMORIES = [
    (
        "alembic-sql",
        "database",
        "Run `alembic upgrade head --sql` first and review the generated SQL before migrating a shared "
        "database.",
    ),
    ("pytest-x", "testing", "Run pytest with -x when a suite is slow, so the first failure stops the run."),
]


@pytest.fixture(scope="module")
def hdb(server_url: str, model_settings: Settings, embedder: Embedder) -> Iterator[str]:
    with seeded_database(server_url, model_settings, embedder, T, MEMORIES) as url:
        yield url


@pytest.fixture(scope="module")
def sock(hdb: str, embedder: Embedder, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A hook server in a thread, on a socket in a temporary folder."""
    with hook_server(hdb, embedder, tmp_path_factory.mktemp("hooks") / "s.sock") as path:
        yield path


def hook(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stdin: str | bytes, *args: str
) -> tuple[int, str, str]:
    """Run `spark-pg hook ...` in this process with ``stdin``; returns (exit code, stdout, stderr)."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    code = client.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def event(kind: str, session: str, tool: str, tool_input: dict[str, Any], **extra: Any) -> str:
    name = {PRE: "PreToolUse", POST: "PostToolUse"}[kind]
    return json.dumps(
        {
            "session_id": session,
            "transcript_path": "/home/dev/.claude/projects/api/s.jsonl",
            "cwd": "/home/dev/api",
            "permission_mode": "default",
            "hook_event_name": name,
            "tool_name": tool,
            "tool_input": tool_input,
            "tool_use_id": "toolu_01",
        }
        | ({"tool_response": {"stdout": "", "stderr": "", "interrupted": False}} if kind == POST else {})
        | extra
    )


def outcome_rows(url: str, session: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT o.retrieval_id, m.key, o.outcome, o.source FROM spark.outcomes o "
            "JOIN spark.memories m ON m.tenant = o.memory_tenant AND m.id = o.memory_id "
            "WHERE o.tenant = %s AND o.session_id = %s ORDER BY o.id",
            (T, session),
        ).fetchall()


def retrievals(url: str, session: str) -> list[tuple[int, list[str]]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT r.id, array_agg(m.key ORDER BY i.rank) FILTER (WHERE m.key IS NOT NULL) "
            "FROM spark.retrievals r LEFT JOIN spark.retrieval_items i ON i.tenant = r.tenant "
            "AND i.retrieval_id = r.id LEFT JOIN spark.memories m ON m.tenant = i.memory_tenant "
            "AND m.id = i.memory_id WHERE r.tenant = %s AND r.session_id = %s GROUP BY r.id ORDER BY r.id",
            (T, session),
        ).fetchall()
    return [(int(r[0]), list(r[1] or [])) for r in rows]


def test_pre_hook_prints_advice_as_hook_protocol_json(
    sock: str, hdb: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ev = event(PRE, "sess-pre", "Bash", {"command": "alembic upgrade head"})
    code, out, err = hook(monkeypatch, capsys, ev, "pre-tool-use", "--socket", sock, "--tenant", T)
    assert (code, err) == (0, "")
    answer = json.loads(out)
    assert set(answer) == {"hookSpecificOutput"}
    specific = answer["hookSpecificOutput"]
    assert specific["hookEventName"] == "PreToolUse" and "permissionDecision" not in specific
    lines = specific["additionalContext"].splitlines()
    prefixes = tuple(f"spark_pg [{p}]: " for p in ("critical", "high", "normal", "background"))
    assert lines and all(line.startswith(prefixes) for line in lines)
    assert any("alembic upgrade head --sql" in line for line in lines)
    # the event's session id became the advisor's: spark.advise logged the call and its items under it
    [(_, keys)] = retrievals(hdb, "sess-pre")
    assert "alembic-sql" in keys and len(keys) == len(lines)


def test_tenant_comes_from_the_option_then_the_environment_then_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ev = event(PRE, "s", "Bash", {"command": "ls"}).encode()
    args = client.build_parser().parse_args(["pre-tool-use"])
    monkeypatch.delenv(client.TENANT_ENV, raising=False)
    assert client.request_for(args, ev)["tenant"] == client.DEFAULT_TENANT == "default"
    monkeypatch.setenv(client.TENANT_ENV, "alice")
    assert client.request_for(args, ev)["tenant"] == "alice"
    args = client.build_parser().parse_args(["pre-tool-use", "--tenant", "bob"])
    assert client.request_for(args, ev)["tenant"] == "bob"
    # an empty option (an unset variable in settings.json) is an error, never the environment's tenant
    args = client.build_parser().parse_args(["pre-tool-use", "--tenant", ""])
    with pytest.raises(ValueError, match="--tenant is empty"):
        client.request_for(args, ev)
    monkeypatch.setenv(client.TENANT_ENV, "")  # an empty variable is an unset one
    args = client.build_parser().parse_args(["pre-tool-use"])
    assert client.request_for(args, ev)["tenant"] == "default"


def test_a_critical_interrupt_denies_the_call_only_when_enabled(
    sock: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ev = event(PRE, "sess-int", "Bash", {"command": "psql -c 'DROP TABLE orders'"})
    base = ("pre-tool-use", "--socket", sock, "--tenant", T)
    _, out, _ = hook(monkeypatch, capsys, ev, *base, "--interrupts")
    specific = json.loads(out)["hookSpecificOutput"]
    assert specific["permissionDecision"] == "deny" and specific["hookEventName"] == "PreToolUse"
    assert specific["permissionDecisionReason"].startswith("spark_pg [critical]: ")
    assert "backup" in specific["permissionDecisionReason"]
    _, out, _ = hook(monkeypatch, capsys, ev, *base)
    specific = json.loads(out)["hookSpecificOutput"]
    assert "permissionDecision" not in specific and "backup" in specific["additionalContext"]


def test_a_trivial_read_gets_no_answer(
    sock: str, hdb: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ev = event(PRE, "sess-read", "Read", {"file_path": "/home/dev/api/README.md"})
    assert hook(monkeypatch, capsys, ev, "pre-tool-use", "--socket", sock, "--tenant", T) == (0, "", "")
    assert retrievals(hdb, "sess-read") == []


@pytest.mark.parametrize(
    ("stdin", "args"),
    [
        ("this is not JSON", ("pre-tool-use",)),
        ("[1, 2]", ("pre-tool-use",)),
        ('{"tool_name": 5, "tool_input": {}}', ("pre-tool-use",)),
        (event(POST, "s", "Bash", {"command": "ls"}), ("pre-tool-use",)),  # the wrong hook for the event
        (event(PRE, "s", "Bash", {"command": "ls"}), ("pre-tool-use", "--no-such-option")),
        (event(PRE, "s", "Bash", {"command": "ls"}), ("on-stop",)),
    ],
)
def test_bad_input_prints_nothing_and_exits_0(
    sock: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stdin: str,
    args: tuple[str, ...],
) -> None:
    code, out, err = hook(monkeypatch, capsys, stdin, *args, "--socket", sock)
    assert (code, out) == (0, "")
    assert err.startswith("spark-pg hook: ") and err.count("\n") == 1


def test_an_unreachable_database_gives_no_advice_fast(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_PG_")}
    env |= {
        "SPARK_PG_DATABASE_URL": "postgresql://spark@127.0.0.1:9/nowhere",  # the discard port: refused
        "SPARK_PG_HOOK_SOCKET": str(tmp_path / "none.sock"),  # no server: the in-process fallback runs
        "SPARK_PG_HOME": str(tmp_path),
    }
    started = time.monotonic()
    proc = subprocess.run(
        [str(SPARK_PG), "hook", "pre-tool-use"],
        input=event(PRE, "s", "Bash", {"command": "alembic upgrade head"}).encode(),
        capture_output=True,
        env=env,
        timeout=30,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert (proc.returncode, proc.stdout) == (0, b"")
    err = proc.stderr.decode()
    assert err.startswith("spark-pg hook: ") and err.count("\n") == 1 and "connect" in err
    assert elapsed < 5, elapsed


@pytest.mark.parametrize("kind", [PRE, POST])
def test_the_fallback_on_a_database_without_the_schema_says_to_run_init(
    server_url: str, tmp_path: Path, kind: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_PG_")}
    with temp_database(server_url, install=False) as url:
        env |= {"SPARK_PG_DATABASE_URL": url, "SPARK_PG_HOOK_SOCKET": str(tmp_path / "none.sock")}
        env |= {"SPARK_PG_HOME": str(tmp_path)}
        proc = subprocess.run(
            [str(SPARK_PG), "hook", kind],
            input=event(kind, "s", "Bash", {"command": "alembic upgrade head"}).encode(),
            capture_output=True,
            env=env,
            timeout=60,
            check=False,
        )
    assert (proc.returncode, proc.stdout) == (0, b"")
    err = proc.stderr.decode()
    assert err.count("\n") == 1 and "has no spark_pg schema yet" in err and "run `spark-pg init`" in err


def test_post_hook_records_followed_once_against_the_call_that_surfaced_the_advice(
    sock: str, hdb: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    s = "sess-follow"
    opts = ("--socket", sock, "--tenant", T)
    first = {"command": "alembic upgrade head"}
    second = {"command": "alembic upgrade head --sql > review.sql"}
    hook(monkeypatch, capsys, event(PRE, s, "Bash", first), "pre-tool-use", *opts)
    assert hook(monkeypatch, capsys, event(POST, s, "Bash", first), "post-tool-use", *opts) == (0, "", "")
    assert outcome_rows(hdb, s) == []  # advice cannot have shaped the call it came with
    hook(monkeypatch, capsys, event(PRE, s, "Bash", second), "pre-tool-use", *opts)
    for _ in range(2):  # a repeated event records nothing more
        assert hook(monkeypatch, capsys, event(POST, s, "Bash", second), "post-tool-use", *opts) == (
            0,
            "",
            "",
        )
    (r1, keys1), _ = retrievals(hdb, s)
    assert "alembic-sql" in keys1
    assert outcome_rows(hdb, s) == [(r1, "alembic-sql", "followed", "hook")]
    assert outcome_rows(hdb, "sess-pre") == []  # other sessions are left alone


def test_a_failed_retry_marks_the_advice_it_was_shown_ignored(
    sock: str, hdb: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    s = "sess-ignored"
    opts = ("--socket", sock, "--tenant", T)
    call = {"command": "pytest tests/"}
    hook(monkeypatch, capsys, event(PRE, s, "Bash", call), "pre-tool-use", *opts)
    hook(monkeypatch, capsys, event(POST, s, "Bash", call), "post-tool-use", *opts)
    hook(monkeypatch, capsys, event(PRE, s, "Bash", call), "pre-tool-use", *opts)  # the same call again
    failure = json.loads(event(POST, s, "Bash", call))
    failure = {k: v for k, v in failure.items() if k != "tool_response"}
    failure |= {"hook_event_name": "PostToolUseFailure", "error": "exit status 1", "is_interrupt": False}
    hook(monkeypatch, capsys, json.dumps(failure), "post-tool-use", *opts)
    (r1, keys1), (_, keys2) = retrievals(hdb, s)
    assert "pytest-x" in keys1 and "pytest-x" in keys2
    assert outcome_rows(hdb, s) == [(r1, "pytest-x", "ignored", "hook")]


def test_outcome_rules_on_tokens_negation_and_attribution() -> None:
    tokens = {
        t.text for t in advice_tokens("Use `git push --force-with-lease` instead of `git push --force`.")
    }
    assert tokens == {"git push --force-with-lease", "--force-with-lease"}
    assert advice_tokens("Never run `rm -rf` on a variable path; DROP TABLE is dangerous.") == []
    assert {t.text for t in advice_tokens("Back up with pg_dump first, and do not touch prod.")} == {
        "pg_dump"
    }
    short = advice_tokens("Run pytest with -x when a suite is slow.")
    assert [(t.text, "pytest" in t.companions) for t in short] == [("-x", True)]
    item = Pending(10, 1, "Run pytest with -x when a suite is slow.", "Bash pytest tests/")
    assert judge([item], "tar -x archive.tar", failed=False, current=None, resurfaced=()) == []
    [followed] = judge([item], "pytest -x tests/", failed=False, current=None, resurfaced=())
    assert (followed.retrieval_id, followed.outcome, followed.evidence) == (10, "followed", "-x")
    # the call's own advice is never judged; only the latest surfacing of a memory is
    assert judge([item], "pytest -x", failed=False, current=10, resurfaced=()) == []
    older = item._replace(retrieval_id=7)
    assert [
        v.retrieval_id for v in judge([item, older], "pytest -x", failed=False, current=11, resurfaced=())
    ] == [10]
    [ignored] = judge([item], "pytest tests/", failed=True, current=11, resurfaced=[1])
    assert ignored.outcome == "ignored"
    assert judge([item], "pytest tests/", failed=True, current=11, resurfaced=[]) == []
    assert judge([item], "pytest tests/", failed=False, current=11, resurfaced=[1]) == []


@pytest.mark.parametrize(
    ("advice", "tokens"),
    [
        # a typographic apostrophe negates too: "--force" was a token, so forcing was credited "followed"
        ("Before git push to a shared branch, don\u2019t use --force: it rewrites history.", []),
        ("Don't use --force on main.", []),
        # a flag named like a negation or a warning word is the recommendation, not its negation
        ("Merge release branches with --no-ff.", ["--no-ff"]),
        ("Use pg_dump --no-owner for portable dumps.", ["pg_dump", "--no-owner"]),
        ("Run mypy with --warn-unused-ignores.", ["--warn-unused-ignores"]),
        ("Run valgrind with --leak-check=full.", ["--leak-check"]),
        ("Leaking secrets is bad: use --no-log.", ["--no-log"]),  # the warning is its own clause
    ],
)
def test_negations_and_warnings_are_words_not_parts_of_flags(advice: str, tokens: list[str]) -> None:
    assert [t.text for t in advice_tokens(advice)] == tokens


def test_protocol_failure_detection_and_answers() -> None:
    assert call_failed({"hook_event_name": "PostToolUseFailure", "error": "boom"})
    assert not call_failed({"hook_event_name": "PostToolUseFailure", "error": "stop", "is_interrupt": True})
    assert call_failed({"tool_response": {"exit_code": 2}}) and call_failed(
        {"tool_response": {"success": False}}
    )
    assert not call_failed({"tool_response": {"stdout": "", "stderr": "warning: x", "interrupted": False}})
    assert parse_event(POST, json.loads(event(POST, "s", "Bash", {"command": "ls"}))).failed is False
    cut = parse_event(PRE, json.loads('{"tool_name": "Bash", "tool_input": {"command": "echo \\ud83d"}}'))
    assert cut.tool_input == {"command": "echo ?"}  # half an emoji: replaced, the call still gets advice
    assert pre_output([]) is None
    long = pre_output([{"text": "x " * 5000, "priority": "normal"}] * 20)
    assert long is not None and len(long["hookSpecificOutput"]["additionalContext"]) <= 4000


def test_default_socket_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(wire.SOCKET_ENV, str(tmp_path / "x.sock"))
    assert wire.default_socket_path() == str(tmp_path / "x.sock")
    monkeypatch.delenv(wire.SOCKET_ENV)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert wire.default_socket_path() == str(tmp_path / "spark_pg" / "hooks.sock")


def test_default_socket_path_in_a_runtime_folder_platformdirs_refuses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cli_env: str
) -> None:
    """Was: a PermissionError traceback from `spark-pg serve` (exit 1) when XDG_RUNTIME_DIR is unset and
    $TMPDIR/runtime-<uid> is a symlink."""
    import platformdirs

    def refuse(appname: str) -> str:
        raise PermissionError(
            f"runtime directory {tmp_path}/runtime-0 is a symlink; set XDG_RUNTIME_DIR instead"
        )

    monkeypatch.delenv(wire.SOCKET_ENV, raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(platformdirs, "user_runtime_dir", refuse)
    with pytest.raises(wire.SocketPathError, match=rf"{tmp_path}/runtime-0 is a symlink.*pass --socket"):
        wire.default_socket_path()
    if os.path.isdir(f"/run/user/{os.getuid()}"):
        return  # platformdirs would use that folder: the real case below cannot happen here
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / f"runtime-{os.getuid()}").symlink_to(tmp_path / "elsewhere")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    proc = subprocess.run([str(SPARK_PG), "serve"], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and f"runtime-{os.getuid()}" in proc.stderr
    assert "XDG_RUNTIME_DIR" in proc.stderr and "--socket" in proc.stderr
    assert not any((tmp_path / "elsewhere").iterdir())


def test_server_lifecycle_stale_socket_refusal_round_trip_and_sigterm(cli_env: str, tmp_path: Path) -> None:
    path = tmp_path / "h.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # a socket file nothing listens on, as a killed server leaves it
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen([str(SPARK_PG), "serve", "--socket", str(path)], stderr=out)
    try:
        answer = first_ping(path, server, log)
        assert answer["pid"] == server.pid and answer["rss"] > 0
        assert path.stat().st_mode & 0o777 == 0o600
        second = subprocess.run(
            [str(SPARK_PG), "serve", "--socket", str(path)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert second.returncode == 2 and f"pid {server.pid}" in second.stderr
        hook_run = subprocess.run(
            [str(SPARK_PG), "hook", "pre-tool-use", "--socket", str(path), "--tenant", "t-lifecycle"],
            input=event(PRE, "sess-lifecycle", "Bash", {"command": "psql -c 'DROP TABLE orders'"}),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert (hook_run.returncode, hook_run.stderr) == (0, "")
        with psycopg.connect(cli_env) as conn:  # the server logged the call (this database has no pack)
            logged = conn.execute(
                "SELECT tool_name FROM spark.retrievals WHERE tenant = 't-lifecycle' AND session_id = %s",
                ("sess-lifecycle",),
            ).fetchall()
        assert logged == [("Bash",)]
        server.send_signal(signal.SIGTERM)
        assert server.wait(20) == 0
        assert not path.exists()
        assert "stopped after 3 requests" in log.read_text()  # two pings and the hook
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


LIGHT_CHECK = """
import sys
from spark_pg.cli import main
main(["hook", "pre-tool-use", "--no-fallback", "--socket", sys.argv[1]])  # explicit argv: no os._exit
heavy = {"psycopg", "psycopg_pool", "fastembed", "numpy", "onnxruntime", "yaml", "platformdirs", "typing"}
mine = {"spark_pg.client", "spark_pg.config", "spark_pg.advisor", "spark_pg.db", "spark_pg.hooks.service"}
print(sorted(m for m in sys.modules if m.split(".")[0] in heavy or m in mine))
"""


def test_the_hook_client_imports_nothing_heavy(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", LIGHT_CHECK, str(tmp_path / "no.sock")],
        input=event(PRE, "s", "Bash", {"command": "make deploy"}),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert proc.stdout.strip() == "[]", proc.stdout


def test_a_server_answers_several_agents_at_once(sock: str) -> None:
    def request(agent: int) -> dict[str, Any]:  # each its own session (a session's repeats are left out)
        sent = event(PRE, f"sess-many-{agent}", "Bash", {"command": "pytest tests/"})
        return {
            "v": wire.VERSION,
            "op": "hook",
            "tenant": T,
            "interrupts": False,
            "event": parse_event(PRE, json.loads(sent)).to_wire(),
        }

    results: list[dict[str, Any]] = []
    threads = [
        threading.Thread(target=lambda r: results.append(wire.ask(sock, r, 10)), args=(request(a),))
        for a in range(6)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(results) == 6 and all(r["ok"] and r["output"] for r in results)
    assert wire.ask(sock, {"v": 99, "op": "ping"}, 5)["ok"] is False


def test_a_large_non_latin_event_and_a_deeply_nested_request(sock: str, tmp_path: Path) -> None:
    """Was: ASCII escapes made 1.5 million emoji (6 MB) a 18 MB request, over the server's limit: a broken
    pipe; and nesting past Python's recursion limit put a traceback in the server's log and no answer."""
    content = "\U0001f600" * 1_500_000
    sent = json.loads(event(PRE, "sess-big", "Write", {"file_path": "/srv/app/notes.md", "content": ""}))
    sent["tool_input"]["content"] = content
    raw = json.dumps(sent, ensure_ascii=False)  # what an agent sends: UTF-8
    assert len(raw.encode()) < wire.MAX_MESSAGE < len(json.dumps(content))
    request = {"v": wire.VERSION, "op": "hook", "tenant": T, "interrupts": False}
    request["event"] = parse_event(PRE, json.loads(raw)).to_wire()
    assert wire.ask(sock, request, 30)["ok"] is True
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw_sock:
        raw_sock.settimeout(10)
        raw_sock.connect(sock)
        raw_sock.sendall(b"[" * 100_000 + b"\n")
        answer = wire.decode(wire.read_line(raw_sock))
    assert answer == {"ok": False, "error": "not JSON this server reads: nested too deeply"}
    # a request over the server's limit is refused before connecting, with its size
    with pytest.raises(wire.WireError, match=r"the request is \d+ bytes; the hook server reads at most"):
        wire.ask(tmp_path / "none.sock", {"pad": "x" * wire.MAX_LINE}, 1)


def failed_event(session: str, tool_input: dict[str, Any]) -> str:
    """A PostToolUseFailure event, as Claude Code sends it for a call that failed."""
    failure = {
        k: v for k, v in json.loads(event(POST, session, "Bash", tool_input)).items() if k != "tool_response"
    }
    failure |= {"hook_event_name": "PostToolUseFailure", "error": "exit status 1", "is_interrupt": False}
    return json.dumps(failure)


def test_a_failing_retry_loop_marks_a_memory_ignored_once_per_session(
    sock: str, hdb: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    s = "sess-retry-loop"
    opts = ("--socket", sock, "--tenant", T)
    call = {"command": "pytest tests/"}
    for _ in range(4):  # the same failing call, retried: each retry resurfaces the advice and ignores it
        hook(monkeypatch, capsys, event(PRE, s, "Bash", call), "pre-tool-use", *opts)
        hook(monkeypatch, capsys, failed_event(s, call), "post-tool-use", *opts)
    calls = retrievals(hdb, s)
    assert len(calls) == 4 and all("pytest-x" in keys for _, keys in calls)
    assert outcome_rows(hdb, s) == [(calls[0][0], "pytest-x", "ignored", "hook")]  # one, not three
    # following it later still counts, on its latest surfacing
    applied = {"command": "pytest -x tests/"}
    hook(monkeypatch, capsys, event(PRE, s, "Bash", applied), "pre-tool-use", *opts)
    hook(monkeypatch, capsys, event(POST, s, "Bash", applied), "post-tool-use", *opts)
    assert outcome_rows(hdb, s) == [
        (calls[0][0], "pytest-x", "ignored", "hook"),
        (calls[-1][0], "pytest-x", "followed", "hook"),
    ]


def test_advice_without_a_distinctive_token_is_never_judged() -> None:
    prose = Pending(10, 1, "Keep functions small and give them clear names.", "Bash pytest tests/")
    assert advice_tokens(prose.text) == []
    # it could never be judged followed, so a failed call that resurfaced it does not judge it ignored
    assert judge([prose], "pytest tests/", failed=True, current=11, resurfaced=[1]) == []
    tokened = Pending(9, 2, "Run pytest with -x when a suite is slow.", "Bash pytest tests/")
    [ignored] = judge([prose, tokened], "pytest tests/", failed=True, current=11, resurfaced=[1, 2])
    assert (ignored.memory_id, ignored.outcome) == (2, "ignored")
    # a memory the session already judged ignored is not judged ignored again, but can still be followed
    assert judge([tokened], "pytest tests/", failed=True, current=11, resurfaced=[2], ignored=[2]) == []
    [followed] = judge([tokened], "pytest -x tests/", failed=True, current=11, resurfaced=[2], ignored=[2])
    assert followed.outcome == "followed"


def test_fail_and_break_describe_the_situation_and_do_not_drop_the_advice() -> None:
    tokens = {t.text for t in advice_tokens("When pytest fails, re-run only the failed tests with --lf.")}
    assert tokens == {"--lf"}
    assert {t.text for t in advice_tokens("If the build breaks, run `make clean` first.")} == {"make clean"}
    # real warning words still drop their clause
    assert advice_tokens("`git push --force` is dangerous on a shared branch.") == []
    assert advice_tokens("DROP TABLE is destructive; CREATE INDEX without CONCURRENTLY is risky.") == []


def test_the_client_sends_its_remaining_budget_as_deadline_ms(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[dict[str, Any], float]] = []

    def ask(path: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        sent.append((request, timeout))
        return {"ok": True, "output": None}

    monkeypatch.setattr(client.wire, "ask", ask)
    args = client.build_parser().parse_args(["pre-tool-use", "--socket", "/nonexistent/s.sock"])
    request = client.request_for(args, event(PRE, "s", "Bash", {"command": "make"}).encode())
    assert "deadline_ms" not in request
    client.answer(args, request, time.monotonic() + 10)
    client.answer(args, request, time.monotonic() + 0.3)
    (first, wait1), (second, wait2) = sent
    assert (first["deadline_ms"], wait1) == (1000, client.SOCKET_TIMEOUT)  # the round trip's own limit
    assert 200 < second["deadline_ms"] <= 300 and wait2 <= 0.3


def test_a_client_that_closed_its_end_is_told_from_one_that_only_finished_sending() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        theirs.sendall(b"{}\n")
        theirs.shutdown(socket.SHUT_WR)  # what wire.ask does after sending: it still waits for the answer
        assert client_closed(ours) is False
        theirs.close()  # its budget ran out, or it was killed
        assert client_closed(ours) is True


def test_advice_the_client_no_longer_waits_for_is_rolled_back_not_logged(
    hdb: str, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_pg.advisor import Advisor

    original = Advisor.advise

    def slow_advise(self: Advisor, *args: Any, **kwargs: Any) -> Any:
        advice = original(self, *args, **kwargs)  # spark.advise has logged the call, not yet committed
        time.sleep(0.3)
        return advice

    monkeypatch.setattr(Advisor, "advise", slow_advise)
    pool = open_pool(hdb, 1)
    waits: list[float | None] = []

    def connection(timeout: float | None = None) -> Any:
        waits.append(timeout)
        return pool.connection(timeout=timeout)

    service = HookService(connection, lambda: embedder)

    def request(session: str, **extra: Any) -> dict[str, Any]:
        ev = parse_event(PRE, json.loads(event(PRE, session, "Bash", {"command": "alembic upgrade head"})))
        return {"v": wire.VERSION, "op": "hook", "tenant": T, "event": ev.to_wire(), **extra}

    try:
        late = service.respond(request("sess-late", deadline_ms=200))
        assert (late["ok"], late["output"], late["expired"]) == (True, None, True)
        assert waits and waits[0] is not None and 0 < waits[0] <= 0.2  # the pool wait is bounded too
        assert retrievals(hdb, "sess-late") == []  # rolled back: never logged, never judged
        on_time = service.respond(request("sess-on-time", deadline_ms=10_000))
        assert on_time["ok"] and on_time["output"] and "expired" not in on_time
        assert len(retrievals(hdb, "sess-on-time")) == 1
        # a server held up (stopped, swapped out) reads the request after the client gave up and closed:
        # within deadline_ms as counted from the read, yet nobody waits for the answer
        gone = service.respond(request("sess-gone", deadline_ms=10_000), client_left=lambda: True)
        assert (gone["output"], gone["expired"]) == (None, True)
        assert retrievals(hdb, "sess-gone") == []
        waits.clear()
        spent = service.respond(request("sess-spent", deadline_ms=0))  # nothing left: no connection at all
        assert (spent["output"], spent["expired"], waits) == (None, True, [])
        assert service.respond(request("sess-bad", deadline_ms="soon"))["ok"] is False
        pack = service.respond(request("sess-pack") | {"tenant": "_system"})  # the pack is nobody's agent
        assert pack["ok"] is False and "_system holds the cold-start pack" in pack["error"]
        assert len(retrievals(hdb, "sess-no-deadline")) == 0
        assert service.respond(request("sess-no-deadline"))["output"]  # old clients: no deadline
        assert len(retrievals(hdb, "sess-no-deadline")) == 1
    finally:
        pool.close()


def test_the_server_never_removes_what_is_not_a_socket(cli_env: str, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    with pytest.raises(HookServerError, match="not a socket"):
        SocketClaim(notes)
    assert notes.read_text() == "my notes\n" and not (tmp_path / ".notes.txt.lock").exists()
    link = tmp_path / "link.sock"
    link.symlink_to(notes)
    with pytest.raises(HookServerError, match="not a socket"):
        SocketClaim(link)
    assert link.is_symlink() and notes.read_text() == "my notes\n"
    proc = subprocess.run(
        [str(SPARK_PG), "serve", "--socket", str(notes)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2 and "not a socket" in proc.stderr, proc.stderr
    assert notes.read_text() == "my notes\n"


def test_the_lock_file_is_neither_truncated_nor_followed(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    (tmp_path / ".a.sock.lock").symlink_to(target)
    with pytest.raises(HookServerError, match="lock file"):
        SocketClaim(tmp_path / "a.sock")
    assert target.read_text() == "keep me\n"
    lock = tmp_path / ".b.sock.lock"
    lock.write_text("left by someone\n")
    claim = SocketClaim(tmp_path / "b.sock")
    try:
        assert lock.read_text() == "left by someone\n"
        with pytest.raises(HookServerError, match="holds"):
            SocketClaim(tmp_path / "b.sock")  # the lock still excludes a second server
    finally:
        claim.release()
    SocketClaim(tmp_path / "b.sock").release()


def test_a_server_whose_socket_was_removed_is_named_with_its_pid(tmp_path: Path) -> None:
    """Was: "another spark-pg serve holds ..." with no pid, and nothing said that no hook reached it; and a
    server still loading its model (the lock held, no socket yet) was reported the same way, with the advice
    to kill it."""
    path = tmp_path / "a.sock"
    claim = SocketClaim(path)  # a server that holds the lock and loads its model: no socket yet
    try:
        me = os.getpid()
        with pytest.raises(HookServerError, match=rf"\(pid {me}\) holds .* is still starting") as starting:
            SocketClaim(path)
        assert "kill" not in str(starting.value) and "gone" not in str(starting.value)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(str(path))  # it listened ...
            listener.listen(1)
            path.unlink()  # ... and then its socket file was deleted
            with pytest.raises(HookServerError, match=rf"\(pid {me}\) holds .*socket is gone.*\(kill {me}\)"):
                SocketClaim(path)
    finally:
        claim.release()


def test_a_socket_folder_that_cannot_be_made_is_a_one_line_refusal(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("a file, not a folder\n")
    with pytest.raises(HookServerError, match=r"cannot create the socket's folder .*notes\.txt"):
        SocketClaim(tmp_path / "notes.txt" / "x.sock")  # was a FileExistsError traceback, exit 1


def test_the_hook_bench_starts_its_own_server_unless_given_a_socket(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    other = tmp_path / "default.sock"  # a server of another database answers on the default socket
    monkeypatch.setenv(wire.SOCKET_ENV, str(other))
    started: list[str] = []

    class FakeServe:
        def __init__(self, args: list[str], **_: Any) -> None:
            started.append(args[args.index("--socket") + 1])

        def poll(self) -> None:
            return None

        def send_signal(self, signum: int) -> None:
            pass

        def wait(self, timeout: float | None = None) -> int:
            return 0

    def ping(path: str | os.PathLike[str], timeout: float = 1.0) -> dict[str, Any] | None:
        return {"ok": True, "pid": 1} if Path(path) == other or str(path) in started else None

    monkeypatch.setattr(bench_hooks.subprocess, "Popen", FakeServe)
    monkeypatch.setattr(bench_hooks.wire, "ping", ping)
    work = tmp_path / "work"  # the bench's temporary directory
    work.mkdir()
    private = bench_hooks._Server(None, work)
    assert private.path == work / "hooks.sock" and private.proc is not None
    assert started == [str(private.path)]
    chosen = bench_hooks._Server(other, work)  # --socket: the user's choice, used as it is
    assert chosen.path == other and chosen.proc is None and len(started) == 1
    # a path that is a file or a folder is refused before anything is loaded (it was a late traceback)
    for wrong in (work, tmp_path / "notes.txt"):
        wrong.touch()
        with pytest.raises(InputError, match="exists and is not a socket"):
            bench_hooks.run(Settings({}), 1, socket=wrong)
    # what serve would refuse is refused up front too (was a RuntimeError traceback after loading the tenant)
    too_long = tmp_path / ("x" * 120) / "s.sock"
    with pytest.raises(HookServerError, match="longer than 107 bytes"):
        bench_hooks.run(Settings({}), 1, socket=too_long)
    with pytest.raises(HookServerError, match="cannot create the socket's folder"):
        bench_hooks.run(Settings({}), 1, socket=tmp_path / "notes.txt" / "s.sock")


def test_a_client_that_leaves_early_costs_the_server_one_log_line(
    hdb: str, embedder: Embedder, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.sock"
    lines: list[str] = []
    pool = open_pool(hdb, 1)
    server = HookServer(path, HookService(pool.connection, lambda: embedder), lines.append)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        for _ in range(3):  # a request cut short, then gone before the answer is written
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(str(path))
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                s.sendall(b'{"v": 1, "op": "pi')
        deadline = time.monotonic() + 5
        while len(lines) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert wire.ping(str(path)) is not None  # still serving
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        pool.close()
    assert len(lines) >= 3 and all("\n" not in line for line in lines), lines
    assert "Traceback" not in capsys.readouterr().err


def test_a_socket_path_the_socket_api_refuses_means_no_server(tmp_path: Path) -> None:
    too_long = tmp_path / ("x" * 120) / "s.sock"
    with pytest.raises(wire.ServerUnavailable, match="no hook server"):
        wire.ask(too_long, {"v": 1, "op": "ping"}, 0.5)


def test_a_server_too_busy_to_accept_is_a_timeout_within_the_budget(tmp_path: Path) -> None:
    path = str(tmp_path / "busy.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(0)  # never accepts: the backlog fills at once
        waiting = []
        try:
            for _ in range(8):
                extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                extra.setblocking(False)
                try:
                    extra.connect(path)
                except BlockingIOError:
                    extra.close()
                    break
                waiting.append(extra)
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                wire.ask(path, {"v": 1, "op": "ping"}, 0.3)
            assert time.monotonic() - started < 1.0  # one deadline for connect, send and answer
        finally:
            for extra in waiting:
                extra.close()


def test_the_round_trip_budget_covers_a_server_that_accepts_and_never_answers(tmp_path: Path) -> None:
    path = str(tmp_path / "mute.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(8)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            wire.ask(path, {"v": 1, "op": "ping", "pad": "x" * 2_000_000}, 0.3)  # more than a socket buffer
        assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("seconds", ["nan", "inf", "-1", "0", "soon", "1e10", "3600.5"])
def test_the_time_budget_must_be_a_positive_finite_number(seconds: str) -> None:
    # NaN or inf broke the watchdog's timer (a traceback in its thread, then no time limit at all); checked
    # at parse time, so a bad value is the usual one-line "bad arguments" and exit 0 (test_bad_input...)
    with pytest.raises(client._ArgumentError, match="--timeout"):
        client.build_parser().parse_args(["pre-tool-use", "--timeout", seconds])
    assert client.build_parser().parse_args(["pre-tool-use", "--timeout", "2.5"]).timeout == 2.5
    assert client.build_parser().parse_args(["pre-tool-use", "--timeout", "3600"]).timeout == 3600


def test_a_stopping_server_recognises_only_its_own_socket(tmp_path: Path) -> None:
    from spark_pg.hooks.server import _same_file

    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as first:
        first.bind(str(path))
        ours = os.lstat(path)
        assert _same_file(path, ours)
        path.unlink()  # removed by someone else; a newer server binds the same path
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as second:
            second.bind(str(path))
            assert not _same_file(path, ours) and _same_file(path, os.lstat(path))
    path.unlink()
    assert not _same_file(path, ours)


def test_recording_an_outcome_waits_a_bounded_time_for_a_connection() -> None:
    from contextlib import contextmanager

    from spark_pg.hooks.service import POST_WAIT_S

    waits: list[float | None] = []

    @contextmanager
    def no_connection(timeout: float | None = None) -> Iterator[Any]:
        waits.append(timeout)
        raise TimeoutError("the pool has no connection to give")
        yield

    service = HookService(no_connection, lambda: None)  # type: ignore[arg-type, return-value]
    post = parse_event(POST, json.loads(event(POST, "s-wait", "Bash", {"command": "make"})))
    answer = service.respond({"v": wire.VERSION, "op": "hook", "tenant": "t", "event": post.to_wire()})
    assert not answer["ok"] and "TimeoutError" in answer["error"]
    assert waits == [POST_WAIT_S]


def _raw_request(path: Path, request: dict[str, Any]) -> str:
    """Send one request on a socket of our own and sort what comes back: "answer" (one whole JSON object
    and its newline), "closed" (the connection closed or refused without a byte), else what was cut."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(str(path))
            s.sendall(wire.encode(request))
            s.shutdown(socket.SHUT_WR)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    except (ConnectionError, FileNotFoundError):  # refused, reset before a byte came, or no socket any more
        return "closed"
    if not data:
        return "closed"
    try:
        answer = json.loads(data)
    except ValueError:
        return f"cut: {data[:80]!r}"
    return (
        "answer" if data.endswith(b"\n") and isinstance(answer, dict) and "ok" in answer else f"odd: {data!r}"
    )


def test_sigterm_while_requests_run_answers_or_closes_them_and_exits_0(cli_env: str, tmp_path: Path) -> None:
    """Was: SIGTERM during a burst closed the pool under the running handlers (PoolClosed answers) and let
    the interpreter exit under threads in the model: "terminate called without an active exception",
    exit 134 (-6 from Popen)."""
    path = tmp_path / "h.sock"
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen([str(SPARK_PG), "serve", "--socket", str(path)], stderr=out)
    try:
        first_ping(path, server, log)
        results: list[str] = []
        first = threading.Event()

        def one(i: int) -> None:
            call = parse_event(
                PRE, json.loads(event(PRE, "sess-stop", "Bash", {"command": f"make deploy-{i}"}))
            )
            request = {"v": wire.VERSION, "op": "hook", "tenant": "t-stop", "deadline_ms": 10_000}
            results.append(_raw_request(path, request | {"event": call.to_wire()}))
            first.set()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
        for th in threads:
            th.start()
        first.wait(10)  # the first answer is out: the others are being read, embedded, looked up
        server.send_signal(signal.SIGTERM)
        for th in threads:
            th.join(30)
        code = server.wait(30)
        text = log.read_text()
        assert code == 0 and "terminate called" not in text, text
        assert len(results) == 20 and set(results) <= {"answer", "closed"}, results
        assert not path.exists()
        lines = text.splitlines()
        assert all(line.startswith("spark-pg serve: ") for line in lines), text  # one line per event
        assert "PoolClosed" not in text and lines[-1].startswith("spark-pg serve: stopped after"), text
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


class _NoService(HookService):
    def __init__(self) -> None:
        super().__init__(None, lambda: None)  # type: ignore[arg-type]

    def respond(self, request: Any, received: float | None = None, client_left: Any = None) -> dict[str, Any]:
        return {"ok": True, "output": None, "ms": 0.0}


def test_the_whole_request_has_one_read_deadline_and_an_empty_connection_is_named(tmp_path: Path) -> None:
    """Was: the 10 s timeout applied to each read (a client sending a byte every 6 s held a handler for as
    long as it liked), and a client that connected and closed without a byte was logged as "answer not
    delivered ... the client left"."""
    path = tmp_path / "s.sock"
    lines: list[str] = []
    server = HookServer(path, _NoService(), lines.append)
    server.read_timeout = 1.5
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as slow:
            slow.connect(str(path))
            started = time.monotonic()
            closed = None
            while closed is None and time.monotonic() - started < 6:
                try:
                    slow.sendall(b"{")  # one byte every 0.3 s: each read is quick, the request never ends
                    slow.settimeout(0.3)
                    if slow.recv(100) == b"":
                        closed = time.monotonic() - started
                except TimeoutError:
                    continue
                except OSError:
                    closed = time.monotonic() - started
        assert closed is not None and 1.3 < closed < 3.0, closed
        assert any("request not read: TimeoutError" in line for line in lines), lines
        lines.clear()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as empty:
            empty.connect(str(path))
        deadline = time.monotonic() + 5
        while not lines and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lines == ["request not read (the client closed without sending)"]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as blank:  # an empty line is a request
            blank.connect(str(path))
            blank.sendall(b"\n")
            blank.shutdown(socket.SHUT_WR)
            assert b"not JSON" in wire.read_line(blank, time.monotonic() + 5)
        assert wire.ping(str(path)) is not None  # still serving
        # the blank request's handler logs after it answers: let it finish before the log is cleared
        assert server.wait_idle(2) == 0
        lines.clear()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as half:  # stopping drops a request half read
            half.connect(str(path))
            half.sendall(b'{"v": 1, "op": "pi')
            time.sleep(0.2)
            server.stopping.set()
            half.settimeout(2)
            assert half.recv(100) == b""  # closed without an answer, within a poll
        assert server.wait_idle(2) == 0
        assert lines == ["request not read: the server is stopping (the connection is closed)"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_connection_closed_without_an_answer_is_named_so(tmp_path: Path) -> None:
    """What a hook sees when a stopping server drops its request (was: "not JSON: Expecting value")."""
    path = str(tmp_path / "closing.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)

        def drop() -> None:
            conn, _ = listener.accept()
            conn.recv(100)
            conn.close()

        dropper = threading.Thread(target=drop, daemon=True)
        dropper.start()
        with pytest.raises(wire.WireError, match="closed the connection without answering"):
            wire.ask(path, {"v": 1, "op": "ping"}, 5)
        dropper.join(5)


def test_log_lines_of_parallel_handlers_never_mix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Was: print() from several threads wrote message and newline apart: lines glued together and empty
    lines in the server's log after a burst of parallel requests."""
    from spark_pg.hooks import server

    # as sys.stderr is when it is a file or a pipe: unbuffered underneath, every write a system call
    raw = (tmp_path / "serve.log").open("wb", buffering=0)
    with io.TextIOWrapper(raw, encoding="utf-8", line_buffering=True, write_through=True) as out:
        monkeypatch.setattr(sys, "stderr", out)

        def burst(n: int) -> None:
            for i in range(300):
                server._log(f"request failed after {i} ms: thread {n} " + "x" * 80)

        threads = [threading.Thread(target=burst, args=(n,)) for n in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    lines = (tmp_path / "serve.log").read_text().split("\n")
    assert lines[-1] == "" and len(lines) == 8 * 300 + 1
    assert all(line.startswith("spark-pg serve: request failed after ") for line in lines[:-1])


def test_the_pools_log_messages_reach_the_server_log_as_one_line_each() -> None:
    """Was (audit Y): psycopg's pool wrote its connection errors to stderr through logging's last resort,
    two lines each, the second indented, between the server's one-line messages."""
    import logging

    from spark_pg.hooks.server import POOL_LOGGERS, _OneLine, _pool_log_lines

    logger = logging.getLogger("psycopg.pool")
    lines: list[str] = []
    try:
        _pool_log_lines(lines.append)
        _pool_log_lines(lines.append)  # a second server in the process: still one handler
        logger.warning("error connecting in %r: connection failed\n\tIs the server running locally?", "pool")
        logger.info("not a warning")
        # the pool's scheduler thread logs under the package's own name
        logging.getLogger("psycopg_pool.sched").warning("scheduled task run %s failed:\n\tboom", "t")
    finally:
        for name in POOL_LOGGERS:
            named = logging.getLogger(name)
            for handler in [h for h in named.handlers if isinstance(h, _OneLine)]:
                named.removeHandler(handler)
            named.propagate = True
    assert lines == [
        "error connecting in 'pool': connection failed Is the server running locally?",
        "scheduled task run t failed: boom",
    ]
