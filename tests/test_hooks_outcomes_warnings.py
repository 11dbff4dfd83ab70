"""Outcome inference never counts what advice warns against as evidence that it was followed: the items of a
warned-about list ("(rm -rf, DROP TABLE, TRUNCATE)", "avoid X, Y and Z", "instead of X, Y"), the subject of
a warning ("X, Y and Z are dangerous", "`any` is not allowed") and what comes after "before" (docs/hooks.md,
Outcome inference)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from importlib import resources
from typing import Any

import psycopg
import pytest
import yaml

from spark_pg.config import Settings
from spark_pg.embedding import Embedder
from spark_pg.hooks.advice_tokens import advice_tokens
from spark_pg.hooks.outcomes import Pending, judge
from spark_pg.hooks.protocol import POST, PRE, HookEvent
from spark_pg.hooks.server import open_pool
from spark_pg.hooks.service import HookService
from spark_pg.ingest import ingest
from spark_pg.records import MemoryIn
from tests.conftest import seeded_database

DESTRUCTIVE_KEY = "seed:safety-destructive-ops"
DESTRUCTIVE = (
    "Before running a destructive command (rm -rf, DROP TABLE, TRUNCATE, DELETE without WHERE), check the "
    "target twice and make sure a backup exists."
)


def seed_texts() -> dict[str, str]:
    path = resources.files("spark_pg") / "data" / "seed_pack.yaml"
    return {m["key"]: m["text"] for m in yaml.safe_load(path.read_text(encoding="utf-8"))["memories"]}


def texts(advice: str) -> list[str]:
    return [t.text for t in advice_tokens(advice)]


def test_the_seed_packs_destructive_ops_advice_yields_no_token() -> None:
    assert seed_texts()[DESTRUCTIVE_KEY] == DESTRUCTIVE  # the pack still says what this test covers
    assert texts(DESTRUCTIVE) == []  # was ['DROP TABLE', 'TRUNCATE']
    item = Pending(10, 1, DESTRUCTIVE, "Bash rm -rf build/")
    for call in ("psql -c 'DROP TABLE old_users'", "psql -c 'TRUNCATE sessions'", "rm -rf dist/"):
        assert judge([item], call, failed=False, current=11, resurfaced=()) == []
        # no token could show it followed, so a failed call that resurfaced it does not judge it ignored
        assert judge([item], call, failed=True, current=11, resurfaced=[1]) == []


def test_the_seed_packs_tokens() -> None:
    """Every seed memory's tokens, pinned: none of them may be something the seed warns against. A new seed
    memory with tokens goes here once they are checked."""
    tokens = {key: texts(text) for key, text in seed_texts().items()}
    assert {key: found for key, found in tokens.items() if found} == {}


@pytest.mark.parametrize(
    "advice",
    [
        # a parenthesised list belongs to the clause around it
        DESTRUCTIVE,
        "Take care with destructive commands (`rm -rf`, `git clean -fdx`, TRUNCATE).",
        # a list after a negation: avoid X, Y and Z; never X or Y; instead of X, Y
        "Avoid `rm -rf`, `git clean -fdx` and `git reset --hard` in scripts.",
        "Avoid rm -rf, TRUNCATE and DROP TABLE on shared databases.",
        "Never use DROP TABLE or TRUNCATE on shared data.",
        "Never trust a role, user_id or tenant taken from a token the client decoded itself.",
        "Don't run `git push --force`, `git reset --hard` or `git rebase -i` on main.",
        # a list between two dashes, after a colon, after "e.g."
        "Never run a destructive command against production - DROP, TRUNCATE, DELETE or UPDATE without "
        "a tested WHERE, alembic downgrade, kubectl delete on stateful resources - until a fresh backup "
        "exists.",
        "Dangerous commands: `rm -rf`, DROP TABLE, TRUNCATE.",
        "Don't use these: `git push --force`, `git reset --hard`.",
        "Never run raw SQL on production, e.g. DROP TABLE or TRUNCATE.",
        # a list that a later warning names, with or without a verb of its own in between
        "`rm -rf`, DROP TABLE and TRUNCATE are dangerous.",
        "Destructive commands such as `rm -rf`, DROP TABLE and TRUNCATE need a backup first.",
        "Destructive commands such as `rm -rf`, DROP TABLE must be checked twice.",
        # what a warning names before it: "is not allowed", "can't be used"
        "TypeScript strict mode stays on and `any` is not allowed: use unknown and narrow it.",
        "Autogenerate misses enum changes, and a value added with ALTER TYPE ... ADD VALUE can't be used in "
        "the same transaction.",
        "`eval` is forbidden in request handlers.",
        # what comes after "before" is the moment the advice is for, not what it recommends
        "Run git status (and git stash if anything is uncommitted) before git reset --hard, "
        "git checkout -- . or git clean -fd.",
    ],
)
def test_warned_tokens_are_never_recommended(advice: str) -> None:
    assert texts(advice) == []


@pytest.mark.parametrize(
    ("advice", "tokens"),
    [
        ("Use `trash` instead of `rm -rf`, `shred` or `dd`.", ["trash"]),
        (
            "Prefer `pg_restore --list` over `pg_restore`, `psql -f` or `dropdb`.",
            ["pg_restore --list", "--list"],
        ),
        ("Instead of `rm -rf`, `shred` or TRUNCATE, use `trash`.", ["trash"]),
        ("Instead of `git push --force`, use `--force-with-lease`.", ["--force-with-lease"]),
        ("Instead of `rm -rf`, `trash` is safer.", ["trash"]),
        ("Before a destructive command (`rm -rf`, DROP TABLE), use --dry-run first.", ["--dry-run"]),
        ("Run `git status` before `git reset --hard` or `git clean -fd`.", ["git status"]),
        ("Take a backup with pg_dump before any DROP TABLE or TRUNCATE.", ["pg_dump"]),
        ("Use `pg_dump` first, DROP TABLE is destructive.", ["pg_dump"]),
        ("Never swallow exceptions, log them with `logger.exception`.", ["logger.exception"]),
        ("Never force-push main, only `--force-with-lease` on your own branch.", ["--force-with-lease"]),
        (
            "Manage dependencies with uv; don't pip install into the environment - uv.lock is the source of "
            "truth and CI installs with --frozen.",
            ["uv.lock", "--frozen"],
        ),
        # a list with no warning: every item counts
        (
            "Write tests with `pytest.mark.parametrize`, `tmp_path` and `monkeypatch`.",
            ["pytest.mark.parametrize", "tmp_path", "monkeypatch"],
        ),
        ("Check query plans with EXPLAIN (ANALYZE, BUFFERS) on staging.", ["EXPLAIN ANALYZE"]),
    ],
)
def test_recommendations_next_to_a_warning_still_count(advice: str, tokens: list[str]) -> None:
    assert texts(advice) == tokens


def test_a_short_flag_in_a_parenthesised_list_keeps_its_companions() -> None:
    [dry_run, short] = advice_tokens("Prefer a dry run (--dry-run or -n) when a tool changes many files.")
    assert dry_run.text == "--dry-run" and short.text == "-n" and "files" in short.companions


@pytest.mark.parametrize(
    "text",
    [
        " (" * 50_000,  # never closed
        "(" * 50_000 + ")" * 50_000,  # nested deeper than the recursion limit
        "x " + " (" * 25_000 + "DROP TABLE is dangerous" + ")" * 25_000,
        "avoid `x_y`, " + "DROP_X, " * 12_000,
        "never x - " * 10_000,
        "e.g. " * 20_000,
        "don't x, y is z, " * 6_000,
        "Use \x010\x01 and \x0199\x01 (DROP TABLE is dangerous) first.",  # the aside mark, in the text
    ],
)
def test_hostile_advice_text_is_read_in_about_linear_time(text: str) -> None:
    started = time.perf_counter()
    assert [t for t in advice_tokens(text) if "DROP" in t.text] == []
    assert time.perf_counter() - started < 3  # 0.2 s on one core: a quadratic split takes minutes


@pytest.fixture(scope="module")
def seeded(server_url: str, model_settings: Settings) -> Iterator[str]:
    with seeded_database(server_url, model_settings) as url:
        yield url


def session_outcomes(url: str, tenant: str, session: str) -> list[tuple[str, str]]:
    """(outcome, memory key) of every outcome a session recorded."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT o.outcome, m.key FROM spark.outcomes o JOIN spark.memories m "
            "ON m.tenant = o.memory_tenant AND m.id = o.memory_id WHERE o.tenant = %s AND o.session_id = %s",
            (tenant, session),
        ).fetchall()
    return [(str(o), str(k)) for o, k in rows]


def test_running_the_warned_command_after_the_advice_records_no_outcome(
    seeded: str, embedder: Embedder
) -> None:
    """The audit's reproduction: rm -rf surfaces the destructive-ops advice, then DROP TABLE and TRUNCATE
    run in the same session; neither may be recorded as following it."""
    tenant, session = "hookt", "H1"
    pool = open_pool(seeded, 1)
    try:
        service = HookService(pool.connection, lambda: embedder)

        def call(command: str) -> dict[str, Any] | None:
            tool_input = {"command": command}
            output = service.pre(tenant, HookEvent(PRE, "Bash", tool_input, session), interrupts=False)
            service.post(tenant, HookEvent(POST, "Bash", tool_input, session))
            return output

        first = call("rm -rf build/")
        assert first is not None
        assert "Before running a destructive command" in first["hookSpecificOutput"]["additionalContext"]
        call("psql -c 'DROP TABLE old_users'")
        call("psql -c 'TRUNCATE sessions'")
    finally:
        pool.close()
    rows = session_outcomes(seeded, tenant, session)
    assert ("followed", DESTRUCTIVE_KEY) not in rows
    assert rows == []  # no other surfaced seed memory has a token either


def test_repeating_the_command_a_failure_memory_describes_is_not_following_it(
    seeded: str, embedder: Embedder
) -> None:
    """Was (audit Y): a failure's text names the command that failed as well as the fix, and running the
    failed command again was recorded as following the memory, which raised its outcome signal. A failure
    (or a trace) is no longer judged by its tokens; other advice still is."""
    tenant, session = "failures", "F1"
    failure = (
        "Failure: `rm -rf $BUILD_DIR/*` with BUILD_DIR unset deleted the home directory contents; "
        "use `${BUILD_DIR:?}`"
    )
    rule = "Run `make clean-build` to clear the build folder, never a bare rm of it."
    with psycopg.connect(seeded) as conn:
        # scored as advice whatever the heuristics make of the texts (the test is about the outcome)
        memories = [
            MemoryIn(tenant, "f-rm-build", failure, kind="failure", actionability=0.9),
            MemoryIn(tenant, "r-clean", rule, kind="rule", actionability=0.9),
        ]
        ingest(conn, memories, embedder)
        conn.commit()
    pool = open_pool(seeded, 1)
    try:
        service = HookService(pool.connection, lambda: embedder)
        for command in ("./scripts/clean_build.sh $BUILD_DIR", "rm -rf $BUILD_DIR/* && make clean-build"):
            event = {"command": command}
            service.pre(tenant, HookEvent(PRE, "Bash", event, session), interrupts=False)
            service.post(tenant, HookEvent(POST, "Bash", event, session))
    finally:
        pool.close()
    rows = session_outcomes(seeded, tenant, session)
    with psycopg.connect(seeded) as conn:
        surfaced = conn.execute(
            "SELECT m.key FROM spark.retrieval_items i JOIN spark.memories m "
            "ON m.tenant = i.memory_tenant AND m.id = i.memory_id WHERE i.tenant = %s "
            "AND i.retrieval_id = (SELECT min(id) FROM spark.retrievals "
            "WHERE tenant = %s AND session_id = %s)",
            (tenant, tenant, session),
        ).fetchall()
    assert ("f-rm-build",) in surfaced and ("r-clean",) in surfaced  # both were advice for the first call
    assert rows == [("followed", "r-clean")]
