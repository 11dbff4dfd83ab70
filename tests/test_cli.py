"""The spark-pg command line, run in-process against the test database."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psycopg
import pytest

from spark_pg.cli import _db_error, main
from spark_pg.schema import head_revision
from tests.conftest import usage_error


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_init_twice_is_harmless(cli_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    for _ in range(2):
        code, out, _ = run(capsys, "init")
        assert code == 0 and f"revision {head_revision()}" in out


def test_add_then_search(cli_env: str, tenant: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "add",
        "--tenant",
        tenant,
        "--key",
        "physics",
        "--kind",
        "failure",
        "Game physics jitter came from a variable timestep; use a fixed 1/60 s step",
    )
    assert (code, out.strip()) == (0, "added")
    edit = ("add", "--tenant", tenant, "--key", "physics", "Game physics jitter: always use a fixed timestep")
    assert run(capsys, *edit)[:2] == (0, "updated\n")
    assert run(capsys, *edit)[:2] == (0, "unchanged (stored already)\n")
    code, out, _ = run(capsys, "search", "--tenant", tenant, "--k", "2", "--json", "fixing game physics")
    assert code == 0
    hits = json.loads(out)
    assert hits[0]["key"] == "physics" and hits[0]["text"].endswith("fixed timestep")
    assert "similarity" in hits[0]["reason"]


def test_search_shows_control_characters_as_escapes_and_every_key_whole(
    cli_env: str, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was (audit V): search printed a memory's ESC sequences and bidi overrides raw (a stored text could
    clear the screen), and --explain cut every key to 24 characters without a mark (a text's 26 too)."""
    key = "esc\x1b[31m-" + "k" * 30
    text = "Terminal escape test \x1b[2J\x1b]0;title\x07 red text \u202e reversed"
    assert run(capsys, "add", "--tenant", tenant, "--key", key, text)[0] == 0
    assert run(capsys, "add", "--tenant", tenant, "Rotate the signing keys every quarter")[0] == 0
    for explain in ([], ["--explain"]):
        code, out, _ = run(capsys, "search", "--tenant", tenant, *explain, "terminal escape test red text")
        assert code == 0
        assert not any(c in out for c in "\x1b\x07\u202e"), out
        assert "Terminal escape test \\x1b[2J\\x1b]0;title\\x07 red text \\u202e reversed" in out
    assert f"key: {key}".replace("\x1b", "\\x1b") in out  # past the column: given whole under the row
    (short,) = {k for k in out.split() if k.startswith("h:")}
    assert len(short) == 26  # a text's key fits the column
    code, out, _ = run(capsys, "search", "--tenant", tenant, "--json", "terminal escape test red text")
    assert json.loads(out)[0]["text"] == text  # JSON carries the text as stored


def test_search_notes_a_tenant_without_memories(
    cli_env: str, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was (audit V): a misspelt tenant got the pack's answers as if they were its own, with no word."""
    code, out, err = run(capsys, "search", "--tenant", tenant + "-misspelt", "--json", "database migrations")
    assert code == 0 and isinstance(json.loads(out), list)  # stdout stays JSON
    assert f"note: tenant '{tenant}-misspelt' holds no memories" in err
    assert run(capsys, "add", "--tenant", tenant, "Run migrations on staging first")[0] == 0
    for explain in ([], ["--explain"]):
        code, _, err = run(capsys, "search", "--tenant", tenant, *explain, "database migrations")
        assert code == 0 and "note" not in err


def test_search_takes_the_tenant_from_the_environment_as_the_hook_does(
    cli_env: str, tenant: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(capsys, "add", "--tenant", tenant, "--key", "fx", "Fixed timestep for game physics")[0] == 0
    monkeypatch.setenv("SPARK_PG_TENANT", tenant)
    code, out, _ = run(capsys, "search", "--json", "game physics timestep")
    assert code == 0 and [h["key"] for h in json.loads(out) if not h["system_default"]] == ["fx"]
    code, out, _ = run(capsys, "search", "--tenant", tenant + "-other", "--json", "game physics timestep")
    assert code == 0 and all(h["system_default"] for h in json.loads(out))  # --tenant still wins


def test_ingest_reports_counts_and_rate(
    cli_env: str, tenant: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("- text: one memory\n- text: another memory\n  category: misc\n")
    code, out, _ = run(capsys, "ingest", str(path), "--tenant", tenant, "--quiet")
    assert code == 0 and out.startswith("2 inserted, 0 updated, 0 unchanged, 2 embedded in ")
    assert "memories/s" in out


def test_a_deferred_file_ingested_again_synchronously_says_its_rows_were_embedded(
    cli_env: str, tenant: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the rows are unchanged, but the second call stores their vectors: it said only "2 unchanged"
    path = tmp_path / "m.yaml"
    path.write_text("- text: one memory\n  key: a\n- text: another memory\n  key: b\n")
    code, out, _ = run(capsys, "ingest", str(path), "--tenant", tenant, "--quiet", "--defer-embedding")
    assert code == 0 and out.startswith("2 inserted, 0 updated, 0 unchanged, embedding deferred in ")
    code, out, _ = run(capsys, "ingest", str(path), "--tenant", tenant, "--quiet")
    assert code == 0 and out.startswith("0 inserted, 0 updated, 2 unchanged, 2 embedded in ")
    code, out, _ = run(capsys, "ingest", str(path), "--tenant", tenant, "--quiet")
    assert code == 0 and out.startswith("0 inserted, 0 updated, 2 unchanged, 0 embedded in ")
    assert (
        run(capsys, "add", "--tenant", tenant, "--key", "c", "--defer-embedding", "a third")[1] == "added\n"
    )
    assert run(capsys, "add", "--tenant", tenant, "--key", "c", "a third")[1] == (
        "unchanged (stored already); embedded now\n"
    )
    assert (
        run(capsys, "add", "--tenant", tenant, "--key", "c", "a third")[1] == "unchanged (stored already)\n"
    )


def test_bad_file_names_line_and_field(
    cli_env: str, tenant: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("- text: fine\n- text: not fine\n  tier: frozen\n")
    code, _, err = run(capsys, "ingest", str(path), "--tenant", tenant)
    assert code == 2
    assert "bad.yaml line 2, field 'tier'" in err and "pinned, active, archive" in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("search", "--tenant", "", "x"), "[22023]"),
        (("search", "--k", "0", "x"), "k must be between 1 and 1000"),
        (("add", "--tenant", "t", "--importance", "3", "x"), "field 'importance'"),
        (("add", "--tenant", "t", "--kind", "gossip", "x"), "field 'kind'"),
        # options that would be ignored are refused
        (("model", "info", "--force"), "--wheel and --force apply to `spark-pg model setup`"),
        (("reembed", "--model", "all-MiniLM-L6-v2-int8", "--no-switch", "--drop-old-vectors"), "--no-switch"),
        (("worker", "--once", "--poll", "5"), "--poll sets how a serving worker waits: not with --once"),
    ],
)
def test_bad_arguments_get_clear_errors(
    cli_env: str, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], expected: str
) -> None:
    code, _, err = run(capsys, *argv)
    assert code in (1, 2)
    assert expected in err


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (("search", "--tenant", "t", "--bogus", "x"), "usage: spark-pg search "),
        (("triggers", "load", "f.yaml", "--tenant", "t", "--zzz"), "usage: spark-pg triggers load "),
        (("stats", "extra"), "usage: spark-pg stats "),
    ],
)
def test_an_unknown_argument_is_named_with_its_commands_usage(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], usage: str
) -> None:
    """Was (audit V): the top-level usage (`spark-pg [-h] [--version] COMMAND ...`) for any command's."""
    err = usage_error(capsys, argv)
    unknown = argv[-2] if argv[-1] == "x" else argv[-1]
    assert err.startswith(usage) and f"error: unrecognized arguments: {unknown}" in err


def test_search_and_reflect_take_k_both_ways(cli_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Was (audit V): search took only --k and reflect only -k."""
    for command in ("search", "reflect"):
        for flag in ("-k", "--k"):
            code, out, _ = run(capsys, command, "--tenant", "k-both-ways", flag, "2", "--json", "alembic")
            assert code == 0 and isinstance(json.loads(out), list), (command, flag)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("stats", "--since", "last week"), "not an ISO 8601 time: 'last week'"),
        (
            ("reflect", "--tenant", "t", "-k", "3000000000", "x"),
            "-k: must be at most 2147483647 in magnitude",
        ),
        (("search", "--k", "3000000000", "x"), "k must be between 1 and 1000"),
        (("serve", "--pool-size", "0"), "--pool-size: must be at least 1"),  # was clamped, logged as given
    ],
)
def test_values_the_database_would_refuse_are_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], expected: str
) -> None:
    # before, a mistyped time was "database error [22007]" and a k past 2**31 - 1 "function does not exist"
    assert expected in usage_error(capsys, argv)


# the last two are ISO 8601 forms Python reads and PostgreSQL does not: passed on in PostgreSQL's form
@pytest.mark.parametrize(
    "since", ["2026-11-01", "2026-11-01T09:00:00+00:00", "yesterday", "2026-W44-1", "2026-11-01T09"]
)
def test_stats_takes_iso_times_and_postgresql_words(
    cli_env: str, capsys: pytest.CaptureFixture[str], since: str
) -> None:
    code, out, _ = run(capsys, "stats", "--since", since, "--json")
    assert code == 0 and json.loads(out)["since"] is not None


def test_config_errors_name_the_key(
    cli_env: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPARK_PG_RETRIEVAL_K", "0")
    code, _, err = run(capsys, "config")
    assert code == 2
    assert "retrieval.k" in err and ">= 1" in err


def test_ingest_notes_memories_dated_ahead_of_now(
    cli_env: str, tenant: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ahead.jsonl"
    rows = [
        {"key": "soon", "text": "Replayed from a later log", "created_at": "2100-01-01T00:00:00Z"},
        {"key": "past", "text": "An ordinary memory", "created_at": "2024-01-01T00:00:00Z"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    code, out, err = run(capsys, "ingest", str(path), "--tenant", tenant, "--quiet")
    assert code == 0 and out.startswith("2 inserted")
    assert "1 memory dated ahead of now (the latest 2100-01-01T00:00:00+00:00)" in err  # not "1 memories"
    path.write_text(json.dumps(rows[1]) + "\n")
    assert run(capsys, "ingest", str(path), "--tenant", tenant, "--quiet")[2] == ""


def test_config_says_where_each_value_came_from(
    cli_env: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPARK_PG_RETRIEVAL_K", "7")
    code, out, _ = run(capsys, "config")
    lines = {line.split(" = ")[0]: line for line in out.splitlines() if " = " in line}
    assert code == 0
    assert lines["retrieval.k"] == "retrieval.k = 7    # from $SPARK_PG_RETRIEVAL_K"
    assert lines["embedding.model_dir"].endswith("# from the file")  # cli_env writes it in a config file
    assert (
        lines["ingest.chunk_rows"]
        == "ingest.chunk_rows = 500    # default; set with $SPARK_PG_INGEST_CHUNK_ROWS"
    )


def test_db_url_with_external_server_prints_it(cli_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "db", "url")
    assert (code, out.strip()) == (0, cli_env)


def test_seed_and_model_info(cli_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "seed", "--quiet")
    assert code == 0 and out.startswith("cold-start pack:")
    code, out, _ = run(capsys, "model", "info")
    assert code == 0 and "all-MiniLM-L6-v2-int8 (384 dims" in out and "installed" in out


def test_stats_reports_health_and_the_north_star(
    cli_env: str, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "stats", "--tenant", tenant)
    assert code == 0 and "north star    no advise calls logged yet" in out and "memories      0" in out
    rule = "Pin base images by digest."
    run(capsys, "add", "--tenant", tenant, "--defer-embedding", "--kind", "rule", rule)
    run(capsys, "add", "--tenant", tenant, "--kind", "failure", "The deploy failed: a missing env variable.")
    code, out, _ = run(capsys, "stats", "--tenant", tenant, "--json")
    report = json.loads(out)
    assert code == 0 and report["tenant"] == tenant
    assert report["memories"] == {"total": 2, "by_kind": {"rule": 1, "failure": 1}, "by_tier": {"active": 2}}
    assert report["backlog"]["queued"] == 1 and report["backlog"]["given_up"] == 0
    assert report["drift"]["active_model"] == report["drift"]["configured_model"] == "all-MiniLM-L6-v2-int8"
    assert report["drift"]["mismatch"] is False
    assert report["advise"] == {"calls": 0, "latency_ms": {"p50": None, "p95": None}, "hit_rate": None}
    assert report["north_star"] == []
    code, out, _ = run(capsys, "stats", "--tenant", tenant)
    assert "backlog       1 awaiting a vector" in out
    with psycopg.connect(cli_env) as conn:  # one advise call that finds the rule by keyword
        advise = "SELECT * FROM spark.advise(%s, 'pin base images', NULL, 5, '{}', 's1')"
        conn.execute(advise, (tenant,)).fetchall()
        rid, mid = conn.execute(
            "SELECT retrieval_id, memory_id FROM spark.retrievals r JOIN spark.retrieval_items i"
            " ON i.tenant = r.tenant AND i.retrieval_id = r.id WHERE r.tenant = %s",
            (tenant,),
        ).fetchone() or (None, None)
        conn.execute("SELECT spark.record_outcome(%s, %s, 'helpful', %s)", (tenant, mid, rid))
    run(capsys, "add", "--tenant", f"other-{tenant}", "Someone else's memory.")  # not counted below
    report = json.loads(run(capsys, "stats", "--tenant", tenant, "--json")[1])
    assert report["advise"]["calls"] == 1 and report["advise"]["hit_rate"] == 1.0
    assert report["advise"]["latency_ms"]["p50"] > 0
    assert report["drift"]["vectors_by_model"]["all-MiniLM-L6-v2-int8"] == 1  # the rule waits in the queue
    assert [(r["tenant_name"], r["sessions"], r["sessions_helped"]) for r in report["north_star"]] == [
        (tenant, 1, 1)
    ]
    code, out, _ = run(capsys, "stats", "--tenant", tenant)
    assert code == 0 and f"  {tenant:<24} 1/1 sessions  1.00" in out
    with psycopg.connect(cli_env) as conn:  # the queued rule failed 5 times, a day ago
        conn.execute(
            "UPDATE spark.embed_queue SET attempts = 5, enqueued_at = now() - interval '1 day'"
            " WHERE tenant = %s",
            (tenant,),
        )
    given_up = json.loads(run(capsys, "stats", "--tenant", tenant, "--json")[1])["backlog"]
    # given up: no longer "the oldest wait", which grew for ever with one poison row
    assert (given_up["queued"], given_up["given_up"], given_up["oldest_s"]) == (1, 1, None)
    retrying = json.loads(run(capsys, "stats", "--tenant", tenant, "--max-attempts", "10", "--json")[1])
    assert retrying["backlog"]["given_up"] == 0 and retrying["backlog"]["oldest_s"] > 86000  # a worker at 10


def test_a_database_refusal_is_one_line_with_its_sqlstate_and_hint(
    cli_env: str, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The server's message, not the CONTEXT lines naming the PL/pgSQL functions it passed through; an
    argument a SQL function refuses (SQLSTATE class 22) exits 2, as one refused in Python does."""
    code, out, err = run(capsys, "search", "--tenant", tenant, "--k", "0", "deploy")
    assert (code, out, err) == (2, "", "spark-pg: error [22023]: k must be between 1 and 1000, got 0\n")
    code, out, err = run(capsys, "stats", "--tenant", "")
    assert (code, out) == (2, "") and err.startswith("spark-pg: error [22023]: "), err
    with psycopg.connect(cli_env) as conn, pytest.raises(psycopg.Error) as refused:
        conn.execute("SELECT spark.put_trigger_rule('_system', 'r', 'x', ARRAY['k'])")
    assert _db_error(refused.value) == (
        " [22023]: tenant _system holds the cold-start pack that every tenant sees: only the pack loader"
        " (spark-pg seed) writes it (hint: To change the pack by hand, SET LOCAL spark.pack_writes = on in"
        " that transaction.)"
    )


def test_init_against_a_server_that_is_down_is_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the migrations run through SQLAlchemy, which wraps the driver's errors in its own classes
    monkeypatch.setenv("SPARK_PG_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none?connect_timeout=3")
    code, out, err = run(capsys, "init")
    assert code == 2 and out == "" and err.startswith("spark-pg: error: cannot connect to the database: ")
    assert "Traceback" not in err and "sqlalchemy" not in err and "\n" not in err[:-1]


@pytest.mark.parametrize(
    ("raised", "code", "message"),
    [(KeyboardInterrupt(), 130, "spark-pg: interrupted\n"), (BrokenPipeError(), 1, "")],
)
def test_an_interrupt_or_a_closed_pipe_ends_the_command_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    raised: BaseException,
    code: int,
    message: str,
) -> None:
    def stopped(args: object) -> int:
        raise raised

    monkeypatch.setattr("spark_pg.cli.cmd_config", stopped)
    assert run(capsys, "config") == (code, "", message)


_CTRL_C_AT_IMPORT = """
import sys

MODULE = sys.argv[1]

class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == MODULE:
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, CtrlC())
sys.argv[1:] = ["config"]
from importlib.metadata import entry_points

(script,) = [e for e in entry_points(group="console_scripts") if e.name == "spark-pg"]
script.load()()
"""


@pytest.mark.parametrize("module", ["spark_pg.cli", "psycopg", "argparse"])
def test_ctrl_c_while_the_cli_is_still_loading_is_one_line_not_a_traceback(module: str) -> None:
    """The installed ``spark-pg`` script, interrupted while it imports ``module``: exit 130, one line."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _CTRL_C_AT_IMPORT, module], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "spark-pg: interrupted\n")


@pytest.mark.parametrize("command", [("eval", "--scenarios"), ("bench", "retrieve")])
def test_a_report_folder_that_cannot_be_written_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as stopped:
        main([*command, "--report", str(blocker / "reports")])
    assert stopped.value.code == 2
    assert f"cannot write reports to {blocker / 'reports'}: Not a directory" in capsys.readouterr().err


def test_writable_dir_checks_the_folder_without_leaving_anything_or_names_it(tmp_path: Path) -> None:
    from spark_pg.cli_args import writable_dir
    from spark_pg.errors import InputError

    assert writable_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert list(tmp_path.iterdir()) == []  # not made (its writer makes it), and the probe is gone
    (tmp_path / "c").mkdir()
    assert writable_dir(tmp_path / "c") == tmp_path / "c" and list((tmp_path / "c").iterdir()) == []
    (tmp_path / "f").write_text("")
    for blocked in (tmp_path / "f", tmp_path / "f" / "x"):
        with pytest.raises(InputError, match=r"cannot write reports to .*/f.*: Not a directory"):
            writable_dir(blocked)
    (tmp_path / "ro").mkdir(mode=0o555)
    if os.geteuid() != 0:  # root writes anywhere
        with pytest.raises(InputError, match=r"cannot write reports to .*ro/x: Permission denied"):
            writable_dir(tmp_path / "ro" / "x")


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "ingest", "--hooks"],
        ["eval", "--dataset", "no-such-folder"],
        ["eval", "--scenarios", "--params", '{"no_such_key": 1}'],
    ],
)
def test_a_refused_command_leaves_no_empty_report_folder(
    argv: list[str], cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main([*argv, "--report", str(out / "reports")])
    assert code == 2, capsys.readouterr().err
    assert not out.exists()


def test_bench_commands_that_write_no_report_do_not_touch_the_report_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_pg.cli import build_parser

    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports").write_text("")  # a file where the default folder would go
    for argv in (["bench", "--hooks"], ["bench", "ingest"], ["bench", "retrieve"]):
        assert (
            build_parser().parse_args(argv).report is None
        )  # the default is checked by the commands that write
    assert (tmp_path / "reports").is_file()


# a database URL or conninfo and how commands show it: the password masked, everything else as given
MASKED_URLS = [
    ("postgresql://app:s3cret@db/x", "postgresql://app:***@db/x"),
    (
        "postgresql://app@db/x?sslmode=require&password=s3cret",
        "postgresql://app@db/x?sslmode=require&password=***",
    ),
    ("host=/run dbname=x password=s3cret", "password=***"),
    ("postgresql://db/x", "postgresql://db/x"),
    # urlsplit cannot read it (an unclosed [ of an IPv6 host): a traceback before, nothing of it shown now
    ("postgresql://app:s3cret@[db/x", "(not shown: it may hold a password)"),
]


@pytest.mark.parametrize(
    ("url", "shown"),
    MASKED_URLS,
)
def test_db_commands_never_print_a_password(
    url: str, shown: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """db up/down/status with database.url set say so, with the URL; key=value and ?password= forms
    printed the password in clear."""
    monkeypatch.setenv("SPARK_PG_DATABASE_URL", url)
    main(["db", "status"])
    err = capsys.readouterr().err
    assert "s3cret" not in err and shown in err


def test_triggers_load_checks_the_file_then_makes_the_tenants_rules_exactly_its(
    cli_env: str, tenant: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pack's rules file told users to run `spark-pg triggers load FILE --tenant T`, which did not
    exist: the CLI had no way to load a tenant's rules."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "version: 1\nrules:\n"
        "  - {name: prod-guard, pattern: 'rm -rf /srv/prod', surface: [backup], priority: critical}\n"
        "  - {name: deploys, pattern: 'kubectl apply', surface: [checklist]}\n"
    )
    code, out, _ = run(capsys, "triggers", "load", str(rules), "--tenant", tenant, "--check")
    assert code == 0 and "2 rules, all valid (nothing written: --check)" in out
    with psycopg.connect(cli_env) as conn:
        names = "SELECT name FROM spark.trigger_rules WHERE tenant = %s ORDER BY name"
        assert conn.execute(names, (tenant,)).fetchall() == []
        code, out, _ = run(capsys, "triggers", "load", str(rules), "--tenant", tenant)
        assert code == 0 and f"tenant {tenant}: 2 trigger rules written, 0 static" in out
        assert conn.execute(names, (tenant,)).fetchall() == [("deploys",), ("prod-guard",)]
        rules.write_text("version: 1\nrules:\n  - {name: deploys, pattern: 'kubectl apply', surface: [c]}\n")
        code, out, _ = run(capsys, "triggers", "load", str(rules), "--tenant", tenant, "--check")
        assert code == 0 and "1 rule, all valid" in out  # not "1 rules"
        code, out, _ = run(capsys, "triggers", "load", str(rules), "--tenant", tenant)
        assert code == 0 and f"tenant {tenant}: 1 trigger rule written, 1 static rule no longer" in out
        code, out, _ = run(capsys, "triggers", "load", str(rules), "--tenant", tenant, "--json")
        assert code == 0 and (json.loads(out)["written"], json.loads(out)["removed"]) == (1, 0)
        assert conn.execute(names, (tenant,)).fetchall() == [("deploys",)]
        rules.write_text("version: 1\nrules: {}\n")  # a slip that used to remove every rule
        code, _, err = run(capsys, "triggers", "load", str(rules), "--tenant", tenant)
        assert code == 2 and "rules: must be a list" in err
        assert conn.execute(names, (tenant,)).fetchall() == [("deploys",)]
        # an empty or truncated file, which removed every static rule (audit V); `rules: []` says so
        for text in ("", "version: 1\n", "learned: []\n"):
            rules.write_text(text)
            for check in ([], ["--check"]):
                code, _, err = run(capsys, "triggers", "load", str(rules), "--tenant", tenant, *check)
                assert code == 2 and "write 'rules: []' to remove every static rule" in err
        assert conn.execute(names, (tenant,)).fetchall() == [("deploys",)]
        rules.write_text("rules: []\n")
        assert run(capsys, "triggers", "load", str(rules), "--tenant", tenant)[0] == 0
        assert conn.execute(names, (tenant,)).fetchall() == []


@pytest.mark.parametrize(("tenant", "message"), [("_system", "only `spark-pg seed` writes"), (" ", "empty")])
def test_triggers_load_check_refuses_a_tenant_the_load_would(
    cli_env: str, tenant: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was (audit V): --check said "all valid" for the pack's tenant, which the load then refused."""
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - {name: a, pattern: '\\malembic\\M', surface: [k]}\n")
    for check in (["--check"], []):
        code, out, err = run(capsys, "triggers", "load", str(rules), "--tenant", tenant, *check)
        assert (code, out) == (2, "") and "tenant" in err and (message in err or not check)


@pytest.mark.parametrize("source", ["environment", "file"])
@pytest.mark.parametrize(
    ("url", "shown"),
    MASKED_URLS,
)
def test_config_never_prints_a_password(
    url: str,
    shown: str,
    source: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`spark-pg config` printed database.url as given, password included (db status masked it)."""
    config = tmp_path / "config.yaml"
    config.write_text(f"database:\n  url: {json.dumps(url)}\n" if source == "file" else "")
    monkeypatch.setenv("SPARK_PG_CONFIG", str(config))
    if source == "environment":
        monkeypatch.setenv("SPARK_PG_DATABASE_URL", url)
    else:
        monkeypatch.delenv("SPARK_PG_DATABASE_URL", raising=False)
    code, out, _ = run(capsys, "config")
    line = next(line for line in out.splitlines() if line.startswith("database.url = "))
    assert code == 0 and "s3cret" not in out and shown in line


def test_add_help_lists_the_values_records_takes(capsys: pytest.CaptureFixture[str]) -> None:
    """Was (audit V): --kind, --tier and --priority had no help, and --priority takes words."""
    from spark_pg.records import KINDS, PRIORITIES, TIERS

    with pytest.raises(SystemExit):
        main(["add", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for values in (KINDS, TIERS, PRIORITIES):
        listed = ", ".join(values[:-1]) + f" or {values[-1]}"
        assert listed.replace("insight,", "insight (default),") in text, values
