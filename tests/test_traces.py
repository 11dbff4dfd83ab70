"""Traces and learnings (spark_pg/traces): the deterministic descriptor, scrubbing before storage and before
embedding, dedupe by descriptor hash without re-embedding, links between learnings and traces, the CLI.
Real database, real model."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest

from spark_pg import traces
from spark_pg.cli import main
from spark_pg.db import connect
from spark_pg.embedding import Embedder
from spark_pg.errors import InputError
from spark_pg.traces import add_learning, add_trace, make_learning, make_trace
from spark_pg.traces.descriptor import (
    MAX_FILE,
    MAX_FILES,
    MAX_INTENT,
    MAX_ISSUE,
    stated_outcome,
    trace_outcome,
)
from spark_pg.traces.reflect import reflect as reflect_py
from tests.conftest import Blocked

Conn = psycopg.Connection[Any]

AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
GH = "ghp_" + "aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xY1z2C"
PG_PW = "s3cr3t-Pw"


@pytest.fixture
def embedded(embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every text the model is asked to embed as a document, in order."""
    seen: list[str] = []
    original = embedder.embed_documents

    def counting(texts: Sequence[str], batch_size: int = 16) -> list[Any]:
        seen.extend(texts)
        return original(texts, batch_size)

    monkeypatch.setattr(embedder, "embed_documents", counting)
    yield seen


def stored(conn: Conn, tenant: str) -> dict[str, dict[str, Any]]:
    rows = conn.execute(
        """SELECT m.key, m.kind, m.category, m.text, m.descriptor, m.action_domain, m.actionability,
                  m.metadata, m.content_hash, m.source, (SELECT count(*) FROM spark.embeddings e
                                   WHERE e.tenant = m.tenant AND e.memory_id = m.id) AS vectors
           FROM spark.memories m WHERE m.tenant = %s""",
        (tenant,),
    ).fetchall()
    names = (
        "kind",
        "category",
        "text",
        "descriptor",
        "domain",
        "actionability",
        "metadata",
        "hash",
        "source",
        "vectors",
    )
    return {r[0]: dict(zip(names, r[1:], strict=True)) for r in rows}


# --- the descriptor (pure) ---------------------------------------------------------------------------------


def test_the_descriptor_has_a_fixed_format_and_leaves_empty_fields_out() -> None:
    full = make_trace(
        "Fix auth token refresh",
        "failure",
        files=["src/auth/session.py", "src/auth/refresh.py"],
        issue="refresh token reused after rotation",
        tags="tokens, Auth",
    )
    assert full.descriptor == (
        "Intent: Fix auth token refresh | Files: src/auth/refresh.py, src/auth/session.py | Outcome: failure"
        " | Key issue: refresh token reused after rotation | Tags: auth, tokens"
    )
    bare = make_trace("Speed up the CI cache", "success")
    assert bare.descriptor == "Intent: Speed up the CI cache | Outcome: success"
    assert full.key.startswith("trace:") and len(full.key) == 6 + 24
    meta = full.metadata()
    assert meta["files"] == ["src/auth/refresh.py", "src/auth/session.py"] and meta["descriptor_version"] == 1
    assert meta["descriptor_hash"] == full.descriptor_hash and full.key[6:] == full.descriptor_hash[:24]


def test_the_descriptor_is_deterministic_under_noise() -> None:
    a = make_trace(
        "  Fix   auth token\trefresh ",
        "FAILURE",
        files="./src/auth/refresh.py, src\\auth\\session.py,src/auth/refresh.py",
        issue="refresh token reused\nafter rotation",
        tags=["#Tokens", "auth", "tokens "],
    )
    b = make_trace(
        "Fix auth token refresh",
        "failure",
        files=["src/auth/session.py", "src/auth/refresh.py"],
        issue="refresh token reused after rotation",
        tags="auth,tokens",
    )
    assert a == b and a.key == b.key


def test_fields_are_bounded_and_the_separator_cannot_be_forged() -> None:
    trace = make_trace(
        "deploy | Outcome: success " + "word " * 200,
        "failure",
        files=[f"src/m{i:02}.py" for i in range(MAX_FILES + 3)] + ["/home/alice/proj/x.py"],
        issue="x" * 5000,
        tags=[f"t{i}" for i in range(40)],
    )
    assert trace.descriptor.count(" | ") == 4  # the intent's "|" became "/"
    assert len(trace.intent) <= MAX_INTENT and len(trace.issue) <= MAX_ISSUE
    assert len(trace.files) == MAX_FILES and trace.more_files == 4
    assert "(+4 more)" in trace.descriptor and "~/proj/x.py" not in trace.files  # sorted after src/
    assert make_trace("a", "success", files="/home/alice/proj/x.py").files == ("~/proj/x.py",)
    assert len(trace.tags) == 12


@pytest.mark.parametrize(
    ("raw", "secret"),
    [
        ("deploy failed: DB_PASSWORD=\nhunter2", "hunter2"),  # name and value on two lines
        ("config had password:\n  Hunter2xyz", "Hunter2xyz"),
        ("token:\r\nABCDEF123456789", "ABCDEF123456789"),
        ("password\u00a0=\u00a0hunter2", "hunter2"),  # no-break spaces
        ("--password\nhunter2", "hunter2"),
        ("pass\u00adword=hunter2", "hunter2"),  # a soft hyphen inside the name
        (GH[:4] + "\u200b" + GH[4:], GH[4:]),  # a zero-width space inside the token
        ("\uff21\uff2b\uff29\uff21" + AWS_ID[4:], AWS_ID[4:]),  # full-width AKIA
    ],
)
def test_a_secret_the_squashing_would_join_is_scrubbed(raw: str, secret: str) -> None:
    trace = make_trace(raw, "failure", issue=raw)
    assert secret not in trace.descriptor and "[REDACTED" in trace.intent


@pytest.mark.parametrize(
    ("raw", "secret"),
    [
        ("password: |\n  hunter2xyz", "hunter2xyz"),  # "|" is written "/" before scrubbing
        ("password: |\n  correcthorse", "correcthorse"),
        ("db:\n  password: >-\n    Tr0ub4dor-3x", "Tr0ub4dor-3x"),
        ("token: |+\n  Zx9Yw8Vu7Ts6", "Zx9Yw8Vu7Ts6"),
    ],
)
def test_a_yaml_block_scalar_secret_is_scrubbed(raw: str, secret: str) -> None:
    trace = make_trace(raw, "failure", issue=raw, tags=raw)
    assert secret not in trace.descriptor and secret.lower() not in trace.descriptor
    assert "[REDACTED" in trace.intent and "[REDACTED" in trace.issue


def test_pathological_files_and_tags_are_scrubbed_in_bounded_time() -> None:
    # a bound on hostile input, not a benchmark: 1,000 paths and 1,000 tags of 20,000 characters each were
    # 40 million characters to scrub (about a minute of CPU); each is now cut to 4 times its limit first
    started = time.perf_counter()
    trace = make_trace(
        "x",
        "failure",
        files=[f"src/{i}/" + "a" * 20_000 for i in range(1000)],
        tags=[f"t{i} " + "word " * 4_000 for i in range(1000)],
    )
    assert time.perf_counter() - started < 5
    assert len(trace.files) == MAX_FILES and trace.more_files == 990 and len(trace.tags) == 12


def test_a_secret_running_across_a_files_or_tags_limit_is_still_recognised() -> None:
    # a path or tag is scrubbed 4 times its limit deep, then cut: a secret that starts before the limit
    # and runs past it is seen whole (or, for a JWT cut before its signature, still by its shape)
    pw = "Tr0ub4dor" * 40
    url = "x" * 150 + " postgres://shop:" + pw + "@db.internal/shop"
    payload = "eyJ" + "c3ViIjoiMTIzNDU2Nzg5MCIsIm5hbWUiOiJKYW5lIERvZSJ9" * 8
    jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + payload + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
    trace = make_trace("x", "failure", files=[url], tags=["x" * 10 + " " + jwt])
    assert pw[:9] not in trace.files[0] and trace.files[0].endswith(" postgres:/[REDACTED]@db.internal/shop")
    assert trace.tags == ("x" * 10 + "-[REDACTED:jwt]",)


def test_invisible_and_control_characters_are_dropped_not_refused() -> None:
    assert make_trace("a\x00b\x07c\u200bd\u202ee", "failure").intent == "a b cde"
    with pytest.raises(InputError, match="intent"):
        make_trace("lone \ud800 surrogate", "failure")


def test_a_cut_backs_up_only_out_of_a_placeholder() -> None:
    words = "and more words " * 20
    trace = make_trace("Fix crash when the user types [ in the search box " + words, "failure")
    assert trace.intent.startswith("Fix crash when the user types [ in the search box and more")
    assert len(trace.intent) > 150
    assert make_trace("[" + "word " * 60, "failure").intent.startswith("[word word")
    # no space to cut at: the limit falls inside [EMAIL], and the cut backs up out of it
    assert make_trace("x" * 195 + "/jane.doe@example.com", "failure").intent == "x" * 195


@pytest.mark.parametrize(
    ("given", "same"),
    [
        # cut to 200 characters before the home folder was written ~/: the folder's length moved the cut
        ("/home/al/", "/home/alexandra/"),
        ("/Users/al/", "C:\\Users\\Alexandra\\"),
        # and before ./ and // were dropped
        ("", "./"),
        ("", "././"),
    ],
)
@pytest.mark.parametrize("length", [150, 180, 190, 196, 250, 900])
def test_a_long_path_is_one_path_whatever_its_home_folder_or_prefix(
    given: str, same: str, length: int
) -> None:
    path = "src/" + "a" * length + "/mod.py"
    one = make_trace("x", "success", files=[given + path])
    other = make_trace("x", "success", files=[same + path.replace("/", "//", 1)])
    assert one.key == other.key and one.files == other.files and len(one.files[0]) <= MAX_FILE
    assert one.files[0].startswith("~/src/aaa" if given else "src/aaa")


def test_the_path_rewrites_come_after_the_scrubber() -> None:
    # `//` as `/` before scrubbing would make the URL one the scrubber does not read as a URL
    pw = "s3cr3t-Pw-x9"
    trace = make_trace("x", "failure", files=[f"./logs/postgres://shop:{pw}@db.internal:5432/shop.log"])
    assert trace.files == ("logs/postgres:/[REDACTED]@db.internal:5432/shop.log",)


def test_home_folders_and_the_count_of_more_files() -> None:
    trace = make_trace(
        "x", "failure", files=["c:/users/bob/proj/a.py", "/root/x/y.py", "C:\\Users\\Bob\\proj\\b.py"]
    )
    assert trace.files == ("~/proj/a.py", "~/proj/b.py", "~/x/y.py")
    many = make_trace("x", "failure", files=["a.py"] * 3 + [f"f{i}.py" for i in range(2000)])
    assert many.more_files == 2001 - MAX_FILES


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"intent": "  ", "outcome": "success"}, "intent must not be empty"),
        ({"intent": "x", "outcome": "partial"}, "outcome must be one of success, failure"),
        ({"intent": 3, "outcome": "success"}, "intent must be a string"),
        ({"intent": "x", "outcome": "success", "files": [1]}, "files must be strings"),
    ],
)
def test_bad_fields_name_themselves(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        make_trace(**kwargs)


def test_a_learning_is_its_handle() -> None:
    learning = make_learning(
        "  When working with Cobra commands, use RunE instead of Run so errors propagate ", "go"
    )
    assert learning.handle == "When working with Cobra commands, use RunE instead of Run so errors propagate"
    assert learning.key.startswith("learning:") and learning.category == "go"
    with pytest.raises(InputError, match="handle must not be empty"):
        make_learning("\n\t")


def test_the_package_imports_light_and_resolves_its_names_on_use() -> None:
    assert traces.add_trace is add_trace and traces.Reflection.__name__ == "Reflection"
    assert sorted(traces.__all__) == sorted(traces._LAZY)
    with pytest.raises(AttributeError):
        _ = traces.nothing_here


EVERY_NAME = """
import importlib, types
import spark_pg.traces as package
for name in package.__all__:
    namespace = {}
    exec(f"from spark_pg.traces import {name} as value", namespace)
    defined = getattr(importlib.import_module("spark_pg.traces." + package._LAZY[name]), name)
    assert namespace["value"] is defined and getattr(package, name) is defined, name
    assert not isinstance(defined, types.ModuleType), name
from spark_pg.traces import reflect, scrub
assert scrub("api_key=abcdef123456") == "api_key=[REDACTED:secret]" and reflect.__module__.endswith("reflect")
"""


@pytest.mark.parametrize(
    "first",
    [
        "",  # the package's names first
        # a submodule imported first, as the advisor and records.py import them
        "import spark_pg.traces.scrub, spark_pg.traces.reflect\n"
        "from spark_pg.traces.reflect import Reflection",
        "from spark_pg.traces.scrub import scrub_report\nimport spark_pg.traces.store",
    ],
)
def test_every_exported_name_is_the_function_class_or_constant_it_names(first: str) -> None:
    """`from spark_pg.traces import scrub` (or reflect) gave the submodule: importing it set the package's
    attribute to the module, and `from ... import` reads that attribute. A fresh interpreter each time: this
    one has imported everything already."""
    done = subprocess.run([sys.executable, "-c", first + "\n" + EVERY_NAME], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_outcome_a_text_states() -> None:
    for outcome in ("success", "failure"):
        trace = make_trace("Migrate the database schema", outcome, issue="lock timeout", tags="db")
        assert stated_outcome(trace.descriptor) == outcome
    assert stated_outcome("Intent: x |  outcome :FAILURE | Key issue: y") == "failure"
    assert stated_outcome("Outcome: success") == "success"
    # no Outcome field, or one that states neither: nothing stated
    for text in ("deploy failed", "Intent: x | Key issue: Outcome: failure", "Outcome: partial",
                 "Outcome: successful", "Intent: Outcome: failure"):  # fmt: skip
        assert stated_outcome(text) is None, text
    assert stated_outcome("Intent: x | Outcome: failure | Outcome: Failure") == "failure"
    with pytest.raises(InputError, match="the text states two outcomes"):
        stated_outcome("Intent: x | Outcome: failure | Key issue: y | Outcome: success")


def test_an_imported_traces_outcome_must_agree_with_its_text() -> None:
    """validate_row took a trace whose text said failure with metadata.outcome success (or none): the same
    key as `trace add` of that failure, and reflection, which reads metadata.outcome, never warned."""
    text = "Intent: Migrate the database schema | Outcome: failure | Key issue: lock timeout"
    assert trace_outcome(text, None) == "failure"  # taken from the text
    assert trace_outcome(text, " Failure ") == "failure"
    assert trace_outcome("deploy failed", "SUCCESS") == "success"  # the text states none
    assert trace_outcome("deploy failed", None) is None
    with pytest.raises(InputError, match="outcome 'success' contradicts the text's Outcome: failure"):
        trace_outcome(text, "success")
    for bad in ("partial", 1, ["failure"]):
        with pytest.raises(InputError, match="outcome of a trace must be success or failure"):
            trace_outcome(text, bad)


# --- storage, scrubbing, dedupe (database + model) -------------------------------------------------------


def test_every_field_is_scrubbed_before_storage_and_before_embedding(
    conn: Conn, embedder: Embedder, tenant: str, embedded: list[str]
) -> None:
    secrets = [AWS_ID, GH, PG_PW, "jane.doe@example.com", "shop_app"]
    trace = add_trace(
        conn,
        embedder,
        tenant,
        f"Rotate {AWS_ID} for jane.doe@example.com",
        "failure",
        files=[f"config/{GH}.env", "src/db.py"],
        issue=f"psql postgres://shop_app:{PG_PW}@db.internal:5432/shop refused",
        tags=["aws", "jane.doe@example.com"],
        source="agent jane.doe@example.com",
    )
    learning = add_learning(
        conn,
        embedder,
        tenant,
        f"Never paste {GH} into a trace; export GITHUB_TOKEN from the keychain",
        from_trace=trace.key,
        category="security jane.doe@example.com",
    )
    rows = stored(conn, tenant)
    assert set(rows) == {trace.key, learning.key}
    everything = json.dumps([{k: str(v) for k, v in r.items()} for r in rows.values()]) + " ".join(embedded)
    for secret in secrets:
        assert secret not in everything, secret
    assert rows[trace.key]["text"] == (
        "Intent: Rotate [REDACTED:aws_access_key] for [EMAIL] | Files: config/[REDACTED:github_token].env, "
        "src/db.py | Outcome: failure | Key issue: psql postgres://[REDACTED]@db.internal:5432/shop refused "
        "| Tags: [EMAIL], aws"
    )
    assert rows[trace.key]["source"] == "agent [EMAIL]"
    assert embedded[0] == rows[trace.key]["descriptor"] == rows[trace.key]["text"]  # exactly the descriptor
    assert embedded[1] == rows[learning.key]["descriptor"] and "[REDACTED:github_token]" in embedded[1]


def test_a_trace_is_stored_untagged_and_out_of_ordinary_advice(
    conn: Conn, embedder: Embedder, tenant: str
) -> None:
    trace = add_trace(conn, embedder, tenant, "Migrate the orders table", "success", tags="db")
    row = stored(conn, tenant)[trace.key]
    assert (row["kind"], row["category"], row["domain"], row["actionability"]) == (
        "trace",
        "general",
        "general",
        0,
    )
    assert row["descriptor"] == row["text"] == trace.text and row["vectors"] == 1
    meta = row["metadata"]
    assert meta["outcome"] == "success" and meta["tags"] == ["db"] and meta["occurrences"] == 1
    assert meta["issue"] is None and meta["intent"] == "Migrate the orders table" and "last_seen" in meta


def test_a_plain_psycopg_connection_takes_traces_learnings_and_reflection(
    db_url: str, embedder: Embedder, tenant: str
) -> None:
    """On a psycopg.connect connection (pgvector's adapters not registered) add_trace, add_learning and
    reflect raised psycopg's ProgrammingError "cannot adapt type 'ndarray'", outside spark_pg.errors."""
    query = "tune the cron schedule"
    try:
        with psycopg.connect(db_url) as plain:  # idle: registered by register_vector_if_present
            trace = add_trace(plain, embedder, tenant, "Tune the nightly cron schedule", "failure")
            learning = add_learning(plain, embedder, tenant, "Stagger cron jobs", from_trace=trace.key)
            found = reflect_py(plain, tenant, query, embedder.embed_query(query))
            assert [r.key for r in found][:2] == [trace.key, learning.key]
        with psycopg.connect(db_url) as plain:  # in the caller's open transaction: it stays open, uncommitted
            plain.execute("SELECT 1")
            found = reflect_py(plain, tenant, query, embedder.embed_query(query))
            assert found[0].key == trace.key and found[0].similarity is not None
            again = add_trace(plain, embedder, tenant, "Speed up the CI cache", "success")
            assert plain.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            plain.rollback()
        with connect(db_url) as conn:
            assert set(stored(conn, tenant)) == {trace.key, learning.key}  # the rolled back add is gone
            assert again.key not in stored(conn, tenant)
    finally:
        with connect(db_url) as conn:
            conn.execute("DELETE FROM spark.memories WHERE tenant = %s", (tenant,))
            conn.commit()


def test_the_same_trace_again_is_deduplicated_without_embedding(
    conn: Conn, embedder: Embedder, tenant: str, embedded: list[str]
) -> None:
    first = add_trace(
        conn, embedder, tenant, "Fix auth token refresh", "failure", files="src/auth/refresh.py"
    )
    before = stored(conn, tenant)[first.key]
    again = add_trace(
        conn, embedder, tenant, "  Fix auth\ttoken refresh ", "Failure", files=["./src/auth/refresh.py"]
    )
    third = add_trace(
        conn, embedder, tenant, "Fix auth token refresh", "failure", files="src/auth/refresh.py"
    )
    assert (first.status, again.status, third.status) == ("added", "seen_again", "seen_again")
    assert (again.key, third.key) == (first.key, first.key) and third.occurrences == 3
    assert len(embedded) == 1  # embedded once, for the first add
    after = stored(conn, tenant)
    assert list(after) == [first.key] and after[first.key]["hash"] == before["hash"]
    assert after[first.key]["vectors"] == 1 and after[first.key]["metadata"]["occurrences"] == 3
    # another outcome is another trace
    other = add_trace(
        conn, embedder, tenant, "Fix auth token refresh", "success", files="src/auth/refresh.py"
    )
    assert other.status == "added" and other.key != first.key and len(embedded) == 2


def test_a_learning_links_both_ways_and_its_repeats_unite_the_links(
    conn: Conn, embedder: Embedder, tenant: str, embedded: list[str]
) -> None:
    t1 = add_trace(conn, embedder, tenant, "Add a Cobra subcommand", "failure", issue="errors were swallowed")
    t2 = add_trace(conn, embedder, tenant, "Wire the Cobra root command", "success")
    handle = "When working with Cobra commands, use RunE instead of Run so errors propagate"
    first = add_learning(conn, embedder, tenant, handle, from_trace=t1.key, category="go")
    again = add_learning(conn, embedder, tenant, handle, from_trace=t2.key, category="go")
    assert (first.status, again.status) == ("added", "seen_again") and len(embedded) == 3
    rows = stored(conn, tenant)
    assert rows[first.key]["metadata"]["trace_keys"] == [t1.key, t2.key]
    assert rows[t1.key]["metadata"]["learning_keys"] == [first.key]
    assert rows[t2.key]["metadata"]["learning_keys"] == [first.key]
    assert rows[t1.key]["metadata"]["occurrences"] == 1  # linking is not a repeat of the trace
    # a learning is advice: tagged and scored like any memory
    assert rows[first.key]["descriptor"].startswith("[go] ") and rows[first.key]["actionability"] >= 0.3
    # a new category is new content: embedded again, links kept
    moved = add_learning(conn, embedder, tenant, handle, category="golang")
    assert moved.status == "updated" and len(embedded) == 4
    assert stored(conn, tenant)[first.key]["metadata"]["trace_keys"] == [t1.key, t2.key]
    # linked later without a category, it keeps the one it has (neither reset to general nor re-embedded)
    t3 = add_trace(conn, embedder, tenant, "Add a Cobra flag", "failure")
    linked = add_learning(conn, embedder, tenant, handle, from_trace=t3.key)
    assert linked.status == "seen_again" and len(embedded) == 5  # only the new trace was embedded
    assert stored(conn, tenant)[first.key]["descriptor"].startswith("[golang] ")
    # the trace itself, added again, keeps its links
    add_trace(conn, embedder, tenant, "Add a Cobra subcommand", "failure", issue="errors were swallowed")
    assert stored(conn, tenant)[t1.key]["metadata"]["learning_keys"] == [first.key]


def test_two_agents_adding_the_same_trace_or_learning_at_once_count_both(
    db_url: str, embedder: Embedder, tenant: str
) -> None:
    """The second add waits for the first (the key is locked before the row exists), then counts a repeat
    and unites the links; without the lock both were 'added' and one occurrence and one link were lost."""
    intent, handle = "Retry the flaky upload", "Retry uploads with exponential backoff and jitter"
    first = connect(db_url)
    try:
        first.autocommit = True
        t1 = add_trace(first, embedder, tenant, "Upload the build artefacts", "failure")
        t2 = add_trace(first, embedder, tenant, "Upload the release notes", "failure")
        with first.transaction():
            a = add_trace(first, embedder, tenant, intent, "failure")
            b = Blocked(db_url, lambda c: add_trace(c, embedder, tenant, intent, "failure")).start()
        assert b.join() is None
        assert (a.status, b.result.status, b.result.occurrences) == ("added", "seen_again", 2)
        with first.transaction():
            add_learning(first, embedder, tenant, handle, from_trace=t1.key)
            c = Blocked(db_url, lambda c: add_learning(c, embedder, tenant, handle, from_trace=t2.key))
            c.start()
        assert c.join() is None and c.result.status == "seen_again"
        rows = stored(first, tenant)
        assert rows[a.key]["metadata"]["occurrences"] == 2
        assert rows[c.result.key]["metadata"]["trace_keys"] == [t1.key, t2.key]
        assert rows[t2.key]["metadata"]["learning_keys"] == [c.result.key]
    finally:
        first.execute("DELETE FROM spark.memories WHERE tenant = %s", (tenant,))
        first.close()


def test_a_learning_from_an_unknown_trace_writes_nothing(conn: Conn, embedder: Embedder, tenant: str) -> None:
    with pytest.raises(InputError, match="is not a trace of tenant"):
        add_learning(conn, embedder, tenant, "Pin the Go toolchain in go.mod", from_trace="trace:nope")
    assert stored(conn, tenant) == {}
    with pytest.raises(InputError, match="tenant"):
        add_trace(conn, embedder, "", "x", "success")


# --- the command line -------------------------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


TRACE_ARGS = (
    "--intent",
    "Fix auth token refresh",
    "--outcome",
    "failure",
    "--issue",
    "refresh token reused after rotation",
    "--files",
    "src/auth/refresh.py",
    "--tags",
    "auth",
)


def test_cli_trace_learning_reflect(cli_env: str, tenant: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "trace", "add", "--tenant", tenant, *TRACE_ARGS, "--json")
    trace = json.loads(out)
    assert code == 0 and trace["status"] == "added"
    assert trace["text"].startswith("Intent: Fix auth token refresh")
    code, out = run(capsys, "trace", "add", "--tenant", tenant, *TRACE_ARGS)
    assert code == 0 and "seen again (2 times)" in out
    upper = tuple("FAILURE" if a == "failure" else a for a in TRACE_ARGS)  # any case in, as in the API
    code, out = run(capsys, "trace", "add", "--tenant", tenant, *upper)
    assert code == 0 and "seen again (3 times)" in out
    handle = "Rotate refresh tokens atomically: revoke the old one in the transaction that issues the new one"
    code, out = run(
        capsys,
        "learning",
        "add",
        "--tenant",
        tenant,
        "--from-trace",
        trace["key"],
        "--category",
        "auth",
        handle,
    )
    assert code == 0 and out.startswith("learning learning:") and "added" in out
    code, out = run(capsys, "reflect", "--tenant", tenant, "Repair login session expiry", "--json")
    found = {r["kind"]: r for r in json.loads(out)}
    assert code == 0 and found["trace"]["key"] == trace["key"] and found["trace"]["outcome"] == "failure"
    assert found["learning"]["linked_to"] == trace["key"] and not found["trace"]["warning"]
    code, out = run(capsys, "reflect", "--tenant", tenant, "edit the auth token refresh code")
    assert code == 0 and "[failure]" in out and "WARNING: a past failure" in out
    assert re.search(r"\[learning\] 0\.\d\d  \(learned from trace:[0-9a-f]{24}\)", out)
    code, out = run(capsys, "reflect", "--tenant", tenant, "purple giraffe orbit sandwich")
    assert code == 0 and "nothing similar" in out
    code, out = run(capsys, "reflect", "--tenant", tenant, "edit the auth token refresh code", "-k", "0")
    assert code == 0 and out.strip() == "(-k 0 asks for nothing)"


def test_cli_reflect_refuses_an_empty_text_as_search_refuses_an_empty_query(
    cli_env: str, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`spark-pg reflect ''` said "nothing similar in the past", as if it had looked."""
    for blank in ("", "  \n"):
        assert main(["search", "--tenant", tenant, blank]) == 2
        assert capsys.readouterr().err.strip() == "spark-pg: error: query must not be empty"
        assert main(["reflect", "--tenant", tenant, blank]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1
        assert captured.err.startswith("spark-pg: error: text must not be empty")


def test_a_trace_from_an_ingest_file_is_scrubbed_and_is_the_trace_add_of_the_same_attempt(
    cli_env: str, tenant: str, capsys: pytest.CaptureFixture[str], tmp_path: Any, embedded: list[str]
) -> None:
    """A file's trace skipped scrubbing: `spark-pg reflect` showed its password in the warning."""
    issue = f"DB_PASSWORD=hunter2secret and postgres://app:{PG_PW}@db.prod:5432/app"
    rows = [
        {
            "tenant": tenant,
            "kind": "trace",
            "text": f"Intent: deploy to prod | Outcome: failure | Key issue: {issue}",
            "metadata": {"outcome": "failure", "by": "jane.doe@example.com"},
        },
        {"tenant": tenant, "kind": "learning", "text": f"Run migrations before deploys, not {GH}"},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["ingest", str(path)]) == 0 and "2 inserted" in capsys.readouterr().out
    code, out = run(capsys, "reflect", "--tenant", tenant, "deploy to prod failed", "--json")
    found = json.loads(out)
    assert code == 0 and [r["kind"] for r in found][:1] == ["trace"] and found[0]["warning"]
    assert found[0]["text"].endswith(
        "DB_PASSWORD=[REDACTED:password] and postgres://[REDACTED]@db.prod:5432/app"
    )
    everything = out + " ".join(embedded)
    for secret in ("hunter2secret", PG_PW, "jane.doe@example.com", GH):
        assert secret not in everything, secret
    with connect(cli_env) as conn:
        row = conn.execute(
            "SELECT actionability, action_domain FROM spark.memories WHERE tenant = %s AND kind = 'trace'",
            (tenant,),
        ).fetchone()
    assert row == (0, "general")  # never ordinary advice, as trace add stores it
    # the same attempt through trace add is the same trace: counted, not stored twice
    code, out = run(
        capsys, "trace", "add", "--tenant", tenant, "--intent", "deploy to prod", "--outcome", "failure",
        "--issue", issue, "--json",
    )  # fmt: skip
    assert (
        code == 0 and json.loads(out)["key"] == found[0]["key"] and json.loads(out)["status"] == "seen_again"
    )
