"""`spark-pg revalue` when things go wrong around it: a failed export, a decisions file that is no regular
file or not plain UTF-8, a standard input that is lost or undecodable, a connection lost before applying,
numbers Python cannot convert, a file applied twice, a key of the wrong type, terminal escapes in memories,
and a caller's transaction at REPEATABLE READ (audit of `spark-pg revalue`, findings 1 to 8)."""

from __future__ import annotations

import io
import json
import os
import resource
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors

from spark_pg.display import printable
from spark_pg.errors import InputError
from spark_pg.revalue import (
    SKIPPED,
    SKIPPED_DECIDED,
    Decision,
    apply,
    decide_interactive,
    read_decisions,
    sample,
    show,
    write_sample,
)
from spark_pg.revalue.interactive import asker
from tests.conftest import point_cli
from tests.test_revalue import OLD, add, importances, logged, memory, revalue, run

Conn = psycopg.Connection[Any]
ESC_TEXT = "clears \x1b[2J retitles \x1b]0;owned\x07 flips \u202eevil"


@pytest.fixture
def cli(db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """Point the CLI at the session's database, with no user config file; the current directory is
    ``tmp_path`` (where a lost connection's decisions are saved)."""
    monkeypatch.chdir(tmp_path)
    return point_cli(db_url, monkeypatch, tmp_path)


@pytest.fixture
def committed(db_url: str, tenant: str) -> Iterator[dict[str, int]]:
    """Committed memories of ``tenant`` for the CLI: two plain ones, and one whose key and text hold
    terminal escapes; deleted afterwards."""
    memories = {
        "quiet": "Nothing happening today; chose not to force it.",
        "plain": "The user ran the tests and they passed.",
        "key\x1b[31m": ESC_TEXT,
    }
    with psycopg.connect(db_url) as conn:
        ids = {key: add(conn, tenant, key, 0.2, OLD, text) for key, text in memories.items()}
    yield ids
    with psycopg.connect(db_url) as conn:
        conn.execute("DELETE FROM spark.memories WHERE tenant = %s", (tenant,))


def answers(monkeypatch: pytest.MonkeyPatch, *replies: str | BaseException) -> None:
    """input() gives ``replies`` in turn (an exception is raised), then the end of input."""
    pending = iter(replies)

    def fake_input(prompt: str = "") -> str:
        reply = next(pending, EOFError())
        if isinstance(reply, BaseException):
            raise reply
        return reply

    monkeypatch.setattr("builtins.input", fake_input)


# --------------------------------------------------------------------------- finding 1: a failed export


def test_a_failed_export_leaves_the_old_file_and_no_partial_one(tmp_path: Path) -> None:
    """Was: write_text truncated the old export in place, so a write that failed (`ulimit -f 2`: "File too
    large") left 2,048 bytes of it, which --from-file then applied."""
    memories = [replace(memory(f"memory {i}: " + "words " * 60), id=i, key=f"k{i}") for i in range(50)]
    for name in ("p.yaml", "p.jsonl"):
        path = tmp_path / name
        write_sample(path, "acme", memories[:2])
        before = path.read_bytes()
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 512, hard))
        try:
            with pytest.raises(InputError, match=rf"{name}: cannot be written: File too large"):
                write_sample(path, "acme", memories)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        assert path.read_bytes() == before
        assert len(read_decisions(path)) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.jsonl", "p.yaml"]  # no temporary file left


def test_an_export_replaces_the_file_a_link_names_and_keeps_its_permissions(tmp_path: Path) -> None:
    real = tmp_path / "real.jsonl"
    real.write_text("old\n")
    real.chmod(0o640)
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    write_sample(link, "acme", [memory("a")])
    assert link.is_symlink() and len(read_decisions(real)) == 1
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    with pytest.raises(InputError, match=r"folder\.jsonl: cannot be written: not a regular file"):
        write_sample(folder, "acme", [memory("a")])


# ------------------------------------------------------------------- finding 2: reading a decisions file


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    """Was: the reader opened a FIFO and blocked until a writer came (forever)."""
    fifo = tmp_path / "d.jsonl"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            read_decisions(fifo)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # the old reader: let it go (a writer that closes at once), then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
        pytest.fail("reading a FIFO blocked")
    [error] = outcome
    assert isinstance(error, InputError) and str(error) == f"{fifo}: is not a regular file"


def test_a_device_and_an_oversized_file_are_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: /dev/zero was read until memory ran out (MemoryError)."""
    zero = tmp_path / "zero.yaml"
    zero.symlink_to("/dev/zero")
    with pytest.raises(InputError, match=r"zero\.yaml: is not a regular file$"):
        read_decisions(zero)
    big = tmp_path / "big.jsonl"
    big.write_text('{"id": 1, "importance": 0.5}\n' * 10)
    monkeypatch.setattr("spark_pg.rowfiles.MAX_FILE_BYTES", 100)
    with pytest.raises(InputError, match=r"big\.jsonl: is 290 bytes; the limit is 100: split it$"):
        read_decisions(big)
    with pytest.raises(InputError, match=r"absent\.jsonl: cannot be read: No such file or directory$"):
        read_decisions(tmp_path / "absent.jsonl")


def test_a_decisions_file_reads_as_ingest_reads_a_file(tmp_path: Path) -> None:
    """Was: a byte order mark was "Unexpected UTF-8 BOM" (ingest drops it), a lone CR between JSON tokens
    became a line break (read_text's universal newlines), and bytes that are not UTF-8 "cannot be read" on
    no line."""
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": 1,\r"importance": 0.5}\n{"id": 2, "importance": 0.25}\n')
    assert read_decisions(path) == [Decision(1, 0.5), Decision(2, 0.25)]
    yaml_path = tmp_path / "d.yaml"
    yaml_path.write_bytes(b"\xef\xbb\xbf- {id: 1, importance: 0.5}\n")
    assert read_decisions(yaml_path) == [Decision(1, 0.5)]
    path.write_bytes(b'{"id": 1, "importance": 0.5}\n{"id": 2, "importance": 0.5, "reason": "caf\xe9"}\n')
    with pytest.raises(InputError, match=r"d\.jsonl line 2: is not UTF-8 text: invalid continuation byte$"):
        read_decisions(path)


# ------------------------------------------------------------------------ finding 3: interactive input


class _Terminal(io.RawIOBase):
    """Standard input as a terminal gives it: one line a read."""

    def __init__(self, *lines: bytes) -> None:
        self.lines = list(lines)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self.lines:
            return 0
        line = self.lines.pop(0)
        buffer[: len(line)] = line
        return len(line)


def test_an_undecodable_answer_is_asked_again(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: UnicodeDecodeError ended the review with a traceback, every answer lost."""
    stdin = io.TextIOWrapper(io.BufferedReader(_Terminal(b"0.5 caf\xe9\n", b"0.7 fine\n")), "utf-8", "strict")
    monkeypatch.setattr("sys.stdin", stdin)
    decisions = decide_interactive([memory("Looked at the logs.")], asker(sys.stderr), sys.stderr)
    assert [(d.importance, d.reason) for d in decisions] == [(0.7, "fine")]
    assert (
        "the answer is not utf-8 text (invalid continuation byte): type it again" in capsys.readouterr().err
    )


def test_a_lost_standard_input_ends_the_review_and_applies_what_was_decided(
    cli: str, tenant: str, committed: dict[str, int], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Was: a read failing (EIO after a hang-up) or stdin closed at start (RuntimeError "lost sys.stdin")
    was a traceback and the decisions made were lost; now it ends the review as the end of input does."""
    answers(monkeypatch, "0.75 worth seeing again", OSError(5, "Input/output error"))
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--interactive", "--sample", "3")
    assert code == 0 and "applied 1 decisions" in out
    with psycopg.connect(cli) as conn:
        assert logged(conn, tenant) == 1
    monkeypatch.setattr("sys.stdin", None)
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--interactive", "--dry-run", "--sample", "1")
    assert code == 0 and "would apply 0 decisions" in out


def spark_pg(*argv: str, stdin: bytes | None, **env: str) -> tuple[int, str, str]:
    """The command in a process of its own, with ``stdin`` as its standard input (None: closed, ``<&-``)."""
    done = subprocess.run(
        [sys.executable, "-m", "spark_pg.cli", *argv],
        input=stdin,
        preexec_fn=None if stdin is not None else (lambda: os.close(0)),
        capture_output=True,
        env=os.environ | env,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def test_the_command_with_stdin_closed_or_undecodable(
    cli: str, tenant: str, committed: dict[str, int]
) -> None:
    """The audit's two commands as they were run: a Latin-1 answer with PYTHONIOENCODING=utf-8:strict
    (UnicodeDecodeError traceback) and stdin closed, `<&-` (RuntimeError "lost sys.stdin" traceback)."""
    argv = ("revalue", "--tenant", tenant, "--interactive", "--dry-run", "--sample", "1")
    code, out, err = spark_pg(*argv, stdin=b"0.5 caf\xe9\n", PYTHONIOENCODING="utf-8:strict")
    assert (code, err) == (0, ""), err
    assert "type it again" in out and "would apply 0 decisions" in out
    code, out, err = spark_pg(*argv, stdin=None)
    assert (code, err) == (0, ""), err
    assert "would apply 0 decisions" in out


# --------------------------------------------------------------- finding 4: a connection lost at apply


def dropping(url: str, monkeypatch: pytest.MonkeyPatch, times: int, *, after: bool = False) -> list[int]:
    """Make the command's apply lose its connection the first ``times`` calls: the server ends the session
    before the apply (``after``: the apply commits, then the session ends and the call fails). Returns the
    backend pid of each call."""
    from spark_pg.revalue import cli as revalue_cli

    real = revalue_cli.apply
    pids: list[int] = []

    def apply_dropping(conn: Conn, *args: Any, **kwargs: Any) -> Any:
        pids.append(conn.info.backend_pid)
        if len(pids) <= times:
            if after:
                real(conn, *args, **kwargs)
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s, 10000)", (conn.info.backend_pid,))
        return real(conn, *args, **kwargs)

    monkeypatch.setattr(revalue_cli, "apply", apply_dropping)
    return pids


def test_a_lost_connection_is_reopened_and_the_review_applied(
    cli: str, tenant: str, committed: dict[str, int], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Was: the connection sampled before the review was reused to apply; a server restart meanwhile lost
    every decision ("database error: ... terminating connection", exit 1)."""
    pids = dropping(cli, monkeypatch, 1)
    answers(monkeypatch, "0.75 worth seeing again", "q")
    code, out, err = run(capsys, "revalue", "--tenant", tenant, "--interactive", "--sample", "3")
    assert (code, err) == (0, "") and "applied 1 decisions" in out
    assert len(pids) == 2 and pids[0] != pids[1]
    with psycopg.connect(cli) as conn:
        assert logged(conn, tenant) == 1


def test_a_batch_committed_before_the_connection_went_is_not_applied_twice(
    cli: str, tenant: str, committed: dict[str, int], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    dropping(cli, monkeypatch, 1, after=True)
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--quiet", "--sample", "3")
    assert code == 0 and "applied 0 decisions" in out and "3 skipped: decided since sampled" in out
    with psycopg.connect(cli) as conn:
        assert logged(conn, tenant) == 3


def test_decisions_a_lost_connection_kept_from_the_database_are_saved_for_from_file(
    cli: str,
    tenant: str,
    committed: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
    tmp_path: Path,
) -> None:
    dropping(cli, monkeypatch, 2)
    answers(monkeypatch, "0.75 worth seeing again", "k", "q")
    code, out, err = run(capsys, "revalue", "--tenant", tenant, "--interactive", "--sample", "3")
    assert code == 1 and "applied" not in out
    [saved] = tmp_path.glob("spark-pg-revalue-*.jsonl")
    assert err.startswith("spark-pg: database error: terminating connection due to administrator command; ")
    assert err.endswith(
        f"the connection was lost while applying 2 decisions, saved in {saved}: apply them with "
        f"`spark-pg revalue --tenant {tenant} --from-file {saved}`\n"
    )
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    decisions = read_decisions(saved, tenant)
    assert [d.reason for d in decisions] == ["worth seeing again", "kept on review"]
    assert all(d.check_revalued and d.expected == 0.2 for d in decisions)
    with psycopg.connect(cli) as conn:
        assert logged(conn, tenant) == 0
    monkeypatch.setattr("spark_pg.revalue.cli.apply", apply)  # the server is back
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--from-file", str(saved))
    assert code == 0 and "1 raised, 0 lowered, 1 kept" in out
    with psycopg.connect(cli) as conn:
        assert logged(conn, tenant) == 2


# ------------------------------------------------------------------- finding 5: numbers Python refuses


def test_numbers_past_a_float_are_input_errors(conn: Conn, tenant: str) -> None:
    """Was: OverflowError (math.isfinite on an int past a float's range), outside spark_pg.errors; and an
    int over 4,300 digits made the message itself fail (ValueError from repr)."""
    mid = add(conn, tenant, "m")
    for decision, message in (
        (Decision(mid, 10**400), r"decisions\[0\]\.importance must be a number from 0 to 1, got 1000"),
        (Decision(mid, 0.5, expected=10**400), r"decisions\[0\]\.expected must be a number from 0 to 1"),
        (
            Decision(mid, 10**5000),
            r"importance must be a number from 0 to 1, got an integer over 4,300 digits",
        ),
        (Decision(10**5000, 0.5), r"decisions\[0\]\.id .* got an integer over 4,300 digits"),
    ):
        with pytest.raises(InputError, match=message):
            apply(conn, tenant, [decision])
    with pytest.raises(InputError, match="max_importance must be a number from 0 to 1, got an integer over"):
        sample(conn, tenant, max_importance=10**5000)
    assert logged(conn, tenant) == 0


# -------------------------------------------------------------- finding 6: a decisions file applied twice


def test_a_memory_revalued_since_the_sample_is_decided_not_changed(conn: Conn, tenant: str) -> None:
    """Was: importance was compared first, so a decision on a memory another sweep had raised (or this file
    applied before) said "changed since sampled (left for the next sweep)", though the memory is in its
    cooldown; docs/advisor.md promised "decided since sampled"."""
    ids = {key: add(conn, tenant, key, 0.2) for key in ("raised", "kept", "edited")}
    first = [
        {"id": ids["raised"], "importance": 0.6, "expected": 0.2, "last_revalued_at": None},
        {"id": ids["kept"], "importance": 0.2, "expected": 0.2, "last_revalued_at": None},
    ]
    assert [r[6] for r in revalue(conn, tenant, first)] == ["raised", "kept"]
    assert [r[6] for r in revalue(conn, tenant, first)] == [SKIPPED_DECIDED, SKIPPED_DECIDED]
    # changed by anything but a revaluation: still changed, and left for the next sweep
    conn.execute("UPDATE spark.memories SET importance = 0.25 WHERE id = %s", (ids["edited"],))
    [row] = revalue(
        conn, tenant, [{"id": ids["edited"], "importance": 0.6, "expected": 0.2, "last_revalued_at": None}]
    )
    assert row[6] == SKIPPED
    assert logged(conn, tenant) == 2


def test_the_summary_leaves_only_changed_memories_for_the_next_sweep(
    cli: str, tenant: str, committed: dict[str, int], tmp_path: Path, capsys: Any
) -> None:
    path = tmp_path / "d.jsonl"
    code, _, _ = run(capsys, "revalue", "--tenant", tenant, "--export", str(path), "--auto", "--quiet")
    assert code == 0
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--from-file", str(path))
    assert code == 0 and "applied 3 decisions" in out
    with psycopg.connect(cli) as conn:  # one edited since, besides
        conn.execute("UPDATE spark.memories SET text = 'edited' WHERE id = %s", (committed["plain"],))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--from-file", str(path))
    assert code == 0
    assert out.splitlines()[-1] == (
        f"applied 0 decisions for tenant {tenant}: 0 raised, 0 lowered, 0 kept; 3 skipped: decided since "
        "sampled"
    )
    with psycopg.connect(cli) as conn:
        conn.execute("DELETE FROM spark.revaluations WHERE tenant = %s", (tenant,))
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--from-file", str(path))
    assert out.splitlines()[-1].endswith("; 2 skipped: changed since sampled (left for the next sweep)")


# --------------------------------------------------------------------------- finding 7: a key not a string


def test_a_key_that_is_not_a_string_is_refused_with_expected_too(conn: Conn, tenant: str) -> None:
    """Was: with expected given, a key of 5 was silently ignored (no key check) and the decision applied."""
    mid = add(conn, tenant, "m")
    for key in (5, ["m"], {"k": "m"}, True):
        entry = {"id": mid, "importance": 0.3, "key": key, "expected": 0.2}
        with (
            pytest.raises(errors.InvalidParameterValue, match=r"^decisions\[0\]: key must be a string, got "),
            conn.transaction(),
        ):
            revalue(conn, tenant, [entry])
    [row] = revalue(conn, tenant, [{"id": mid, "importance": 0.3, "key": None, "expected": 0.2}])
    assert row[6] == "raised"  # null: no key check, as an absent key


# ------------------------------------------------------------------------ finding 8: terminal escapes


def test_what_a_reviewer_sees_shows_escapes_and_obeys_none(capsys: pytest.CaptureFixture[str]) -> None:
    """Was: the key and text went to the terminal raw: ESC[2J cleared the screen, an OSC retitled it."""
    hostile = replace(memory(ESC_TEXT), key="k\x1b[31m\u202e", category="c\x9b1m")
    show(hostile, "[1/1]", sys.stdout)
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\x9b\u202e")
    assert "#1 k\\x1b[31m\\u202e  (insight, c\\x9b1m, active)" in out
    assert r"clears \x1b[2J retitles \x1b]0;owned\x07 flips \u202eevil" in out
    assert printable("line\none\ttab") == r"line\x0aone\x09tab"
    assert printable("line\none\ttab\r", lines=True) == "line\none\ttab\\x0d"


def test_the_result_table_and_the_review_show_escapes_and_the_export_keeps_the_text(
    cli: str,
    tenant: str,
    committed: dict[str, int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    path = tmp_path / "d.jsonl"
    run(capsys, "revalue", "--tenant", tenant, "--export", str(path))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert ESC_TEXT in [r["text"] for r in rows] and "key\x1b[31m" in [r["key"] for r in rows]  # as stored
    for r in rows:
        r["reason"] = "reason \x1b]0;owned\x07"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--from-file", str(path), "--dry-run")
    assert code == 0 and "\x1b" not in out and "\x07" not in out
    assert "key\\x1b[31m" in out and "reason \\x1b]0;owned\\x07" in out
    answers(monkeypatch, "k", "k", "k")
    code, out, _ = run(capsys, "revalue", "--tenant", tenant, "--interactive", "--dry-run", "--sample", "3")
    assert code == 0 and "would apply 3 decisions" in out
    assert (
        "\x1b" not in out
        and "\u202e" not in out
        and "#" + str(committed["key\x1b[31m"]) + " key\\x1b[31m" in out
    )


# ---------------------------------------------------------------- the isolation level apply needs


def test_apply_refuses_a_callers_repeatable_read_transaction(db_url: str, tenant: str) -> None:
    """docs/advisor.md said apply reads "as last committed": not in a caller's REPEATABLE READ transaction."""
    with psycopg.connect(db_url) as conn:
        mid = add(conn, tenant, "m")
        conn.commit()
        try:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.execute("SELECT 1")
            with pytest.raises(InputError, match=r"apply must run at READ COMMITTED .* REPEATABLE READ"):
                apply(conn, tenant, [Decision(mid, 0.5)])
            conn.rollback()
            conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
            conn.execute("SELECT 1")
            assert [r.status for r in apply(conn, tenant, [Decision(mid, 0.5)], dry_run=True)] == ["raised"]
            conn.rollback()
        finally:
            conn.execute("DELETE FROM spark.memories WHERE tenant = %s", (tenant,))


def test_two_concurrent_kept_batches_log_once_whatever_the_servers_default(db_url: str, tenant: str) -> None:
    """Under REPEATABLE READ (here the session's default) a batch that waited for another to keep the same
    memory read the log as of its snapshot and logged it a second time; apply's own transaction now runs
    at READ COMMITTED."""
    with psycopg.connect(db_url) as setup:
        mid = add(setup, tenant, "m", 0.2)
    decision = Decision(mid, 0.2, "kept", expected=0.2, check_revalued=True)
    try:
        with (
            psycopg.connect(db_url) as sweep,
            ThreadPoolExecutor(1) as pool,
            psycopg.connect(db_url) as first,
            psycopg.connect(db_url, autocommit=True) as watch,
        ):
            sweep.execute("SET default_transaction_isolation = 'repeatable read'")
            sweep.commit()
            first.execute("SELECT 1")  # a transaction open: apply's is part of it, committed below
            assert [r.status for r in apply(first, tenant, [decision])] == ["kept"]
            running = pool.submit(apply, sweep, tenant, [decision])
            blocked = "SELECT cardinality(pg_blocking_pids(%s)) > 0"
            deadline = time.monotonic() + 20
            while watch.execute(blocked, (sweep.info.backend_pid,)).fetchone() != (True,):
                assert time.monotonic() < deadline and not running.done(), "the second batch did not wait"
                time.sleep(0.02)
            first.commit()
            assert [r.status for r in running.result(timeout=20)] == [SKIPPED_DECIDED]
        with psycopg.connect(db_url) as check:
            assert logged(check, tenant) == 1 and importances(check, tenant) == {"m": 0.2}
    finally:
        with psycopg.connect(db_url) as cleanup:
            cleanup.execute("DELETE FROM spark.memories WHERE tenant = %s", (tenant,))
