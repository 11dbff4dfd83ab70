"""Advisor.advise end to end on a real database with the real model: intent, gates, triggers, the log,
interrupts and outcomes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors
from psycopg.types.json import Jsonb

from spark_pg.advisor import Advisor, AdvisorOptions, action_text, blocking, trigger_text
from spark_pg.config import Settings
from spark_pg.embedding import Embedder
from spark_pg.errors import ArgumentRefused, InputError
from spark_pg.intent import SCAN_LIMIT, extract_intent
from tests.conftest import rolled_back, seeded_database

Conn = psycopg.Connection[Any]
T = "dev"
MEMORIES = [
    ("jwt", "security", "Verify JWT signatures on the server before trusting any claim in the token."),
    (
        "alembic",
        "database",
        "Always write an Alembic revision for schema changes; never alter tables by hand.",
    ),
    ("pytest", "testing", "Run pytest with -x when a suite is slow, so the first failure stops the run."),
    ("tweet", "social", "RT @devguru: JWT auth is so hot right now (eng: 12 likes)"),
    ("depth", "training", "[DEPTH:3] Strong reasoning: the model compared JWT and sessions."),
    (
        "backup",
        "ops",
        "Before any destructive command on the database, take a backup and check you are not on prod.",
    ),
]


@pytest.fixture(scope="module")
def adb(server_url: str, model_settings: Settings, embedder: Embedder) -> Iterator[str]:
    with seeded_database(server_url, model_settings, embedder, T, MEMORIES) as url:
        yield url


@pytest.fixture
def conn(adb: str) -> Iterator[Conn]:
    with rolled_back(adb) as connection:
        yield connection


def keys(advice: list[Any]) -> list[str]:
    return [a.key for a in advice]


def test_ingest_scored_actionability_and_domains(conn: Conn) -> None:
    rows = dict(
        conn.execute("SELECT key, actionability FROM spark.memories WHERE tenant = %s", (T,)).fetchall()
    )
    assert rows["jwt"] >= 0.3 and rows["alembic"] >= 0.3
    assert rows["tweet"] < 0.3 and rows["depth"] < 0.3


def test_advice_for_an_edit_is_relevant_logged_and_free_of_noise(conn: Conn, embedder: Embedder) -> None:
    # a looser relative cutoff than the advisor's default, so the tenant's own rule shows beside the pack's
    advisor = Advisor(conn, embedder, T, session_id="s1", options=AdvisorOptions(adaptive_ratio=0.4))
    advice = advisor.advise(
        "Edit",
        {"file_path": "/home/dev/api/src/auth/middleware.py", "old_string": "x = 1", "new_string": "x = 2"},
        "validate the bearer token of each request",
    )
    assert advice and advice[0].key in {"jwt", "seed:security-server-side-validation"}
    assert "jwt" in keys(advice)
    assert not {"tweet", "depth"} & set(keys(advice))
    first = advice[0]
    assert first.retrieval_id > 0 and first.why and first.source and first.category
    logged = conn.execute(
        "SELECT tool_name, intent_family, session_id FROM spark.retrievals WHERE tenant = %s AND id = %s",
        (T, first.retrieval_id),
    ).fetchone()
    assert logged == ("Edit", advisor.last_intent.family if advisor.last_intent else None, "s1")
    items = conn.execute(
        "SELECT count(*) FROM spark.retrieval_items WHERE tenant = %s AND retrieval_id = %s",
        (T, first.retrieval_id),
    ).fetchone()
    assert items == (len(advice),)


def test_trivial_reads_are_skipped_without_a_round_trip(conn: Conn, embedder: Embedder) -> None:
    before = conn.execute("SELECT count(*) FROM spark.retrievals").fetchone()
    assert Advisor(conn, embedder, T).advise("Read", {"file_path": "/home/dev/api/README.md"}) == []
    assert conn.execute("SELECT count(*) FROM spark.retrievals").fetchone() == before


def test_a_destructive_command_interrupts_only_when_enabled(conn: Conn, embedder: Embedder) -> None:
    call = ("Bash", {"command": "psql -c 'DROP TABLE orders'", "description": "clean up"})
    quiet = Advisor(conn, embedder, T).advise(*call)
    assert "seed:safety-destructive-ops" in keys(quiet) and blocking(quiet) is None
    loud = Advisor(conn, embedder, T, options=AdvisorOptions(interrupts=True)).advise(*call)
    stop = blocking(loud)
    assert stop is not None and stop.priority == "critical" and stop.trigger and stop.trigger["interrupt"]


def test_a_destructive_step_after_a_long_heredoc_still_interrupts(conn: Conn, embedder: Embedder) -> None:
    """Was (audit U): the trigger text stopped at 1,000 characters, so `rm -rf build` after a heredoc of notes
    never reached the rules and the call was not stopped; at the start of the same command it was."""
    notes = "cat > notes.txt <<'EOF'\n" + "line of notes\n" * 80 + "EOF\n"
    for command in (notes + "rm -rf build", "rm -rf build\n" + notes):
        advice = Advisor(conn, embedder, T, options=AdvisorOptions(interrupts=True)).advise(
            "Bash", {"command": command}
        )
        assert blocking(advice) is not None, command[-20:]


def test_every_matching_rule_counts_for_priority_and_interrupt(conn: Conn, embedder: Embedder) -> None:
    """Two rules surface one memory: a normal one at confidence 1.0 and a critical interrupt at 0.95. Only
    the surer rule counted, so the interrupt was lost (priority normal, interrupt false)."""
    for name, priority, interrupt, confidence in (
        ("prod_any", "normal", False, 1.0),
        ("prod_destroy", "critical", True, 0.95),
    ):
        conn.execute(
            "SELECT spark.put_trigger_rule(%s, %s, 'rm -rf /srv/prod', ARRAY['backup'], priority => %s,"
            " interrupt => %s, confidence => %s::real)",
            (T, name, priority, interrupt, confidence),
        )
    advice = Advisor(conn, embedder, T, options=AdvisorOptions(interrupts=True)).advise(
        "Bash", {"command": "rm -rf /srv/prod/cache"}
    )
    stop = next((a for a in advice if a.key == "backup"), None)
    assert stop is not None and stop.blocking, [(a.key, a.why.get("trigger")) for a in advice]
    assert stop.trigger == {
        "rules": ["prod_any", "prod_destroy"],
        "confidence": 1.0,
        "priority": "critical",
        "interrupt": True,
        "interrupt_confidence": 0.95,
    }
    # the surest interrupting rule decides: under the advisor's 0.9 it does not block
    sure = AdvisorOptions(interrupts=True, interrupt_min_confidence=0.96)
    again = Advisor(conn, embedder, T, options=sure).advise("Bash", {"command": "rm -rf /srv/prod/cache"})
    assert [a.blocking for a in again if a.key == "backup"] == [False]


def test_a_critical_trigger_memory_is_not_cut_for_being_weaker_than_the_best(
    conn: Conn, embedder: Embedder
) -> None:
    """A tenant's own critical interrupt rule surfaced its memory, and the adaptive cutoff (0.85 x the best,
    here the pack's item) dropped it: the block came from the pack alone and the tenant's advice was lost."""
    conn.execute(
        "SELECT spark.put_trigger_rule(%s, 'prod-guard', 'rm -rf /srv/prod', ARRAY['pytest'],"
        " priority => 'critical', interrupt => true)",
        (T,),
    )
    advice = Advisor(conn, embedder, T, options=AdvisorOptions(interrupts=True)).advise(
        "Bash", {"command": "rm -rf /srv/prod/cache"}
    )
    assert {"pytest", "seed:safety-destructive-ops"} <= set(keys(advice)), keys(advice)
    own = next(a for a in advice if a.key == "pytest")
    assert own.priority == "critical" and own.blocking


def test_outcomes_move_reliability_and_are_checked(conn: Conn, embedder: Embedder) -> None:
    advisor = Advisor(conn, embedder, T, session_id="s2")
    advice = advisor.advise("Bash", {"command": "alembic revision -m 'add orders table'"}, "schema change")
    own = next(a for a in advice if a.key == "alembic")
    assert advisor.record_outcome(own.memory_id, "helpful", retrieval_id=own.retrieval_id) == pytest.approx(
        2 / 3
    )
    assert advisor.record_outcome(own.memory_id, "unhelpful") == pytest.approx(2 / 4)
    counts = conn.execute(
        "SELECT helpful_count, unhelpful_count FROM spark.memories WHERE id = %s", (own.memory_id,)
    ).fetchone()
    assert counts == (1, 1)
    session = conn.execute(
        "SELECT session_id FROM spark.outcomes WHERE retrieval_id = %s", (own.retrieval_id,)
    ).fetchone()
    assert session == ("s2",)
    pack = next((a for a in advice if a.key.startswith("seed:")), None)
    if pack is not None:  # a pack memory records the outcome but keeps its shared reliability
        assert advisor.record_outcome(pack.memory_id, "unhelpful") == pytest.approx(0.5)
    # the database's refusals reach Python as the one hierarchy's ArgumentRefused, SQLSTATE kept
    with pytest.raises(ArgumentRefused, match="outcome must be") as refused:
        advisor.record_outcome(own.memory_id, "great")
    assert refused.value.sqlstate == "22023"
    assert isinstance(refused.value.__cause__, errors.InvalidParameterValue)
    with pytest.raises(ArgumentRefused, match="not a memory of tenant"):
        Advisor(conn, embedder, "someone-else").record_outcome(own.memory_id, "helpful")
    for bad in (1.5, 2**70, "abc", True):  # were 42883 "function does not exist", or 22P02
        with pytest.raises(InputError, match="memory_id must be an integer"):
            advisor.record_outcome(bad, "helpful")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="retrieval_id must be an integer"):
        advisor.record_outcome(own.memory_id, "helpful", retrieval_id=1.5)  # type: ignore[arg-type]


def test_trigger_text_keeps_commands_verbatim_and_drops_bodies() -> None:
    text = trigger_text(
        "Edit", {"file_path": "/a/b/c.py", "old_string": "SECRET BODY", "new_string": "rm -rf"}, "refactor"
    )
    assert text == "Edit /a/b/c.py refactor"
    assert trigger_text("Bash", {"command": "rm  -rf   /tmp/x"}) == "Bash rm -rf /tmp/x"
    assert len(trigger_text("Bash", "x" * 9000)) == len("Bash ") + SCAN_LIMIT  # as far as the heuristics read


@pytest.mark.parametrize(
    ("tool", "tool_input", "expected"),
    [
        ("mcp__postgres__query", {"sql": "DROP TABLE users"}, "mcp__postgres__query DROP TABLE users"),
        ("Bash", {"cmd": "rm -rf /srv/data"}, "Bash rm -rf /srv/data"),
        ("Bash", {"script": "rm -rf /srv/data"}, "Bash rm -rf /srv/data"),
        ("run", {"args": {"command": "rm -rf /srv/data"}}, "run rm -rf /srv/data"),
        ("shell", {"command": ["bash", "-lc", "rm -rf /srv/app"]}, "shell rm -rf /srv/app"),
        ("shell", {"command": ["rm", "-rf", "/srv/my app"]}, "shell rm -rf '/srv/my app'"),
        ("WebSearch", {"query": "drop table", "prompt": "drop table"}, "WebSearch drop table"),  # once
    ],
)
def test_trigger_text_finds_the_command_wherever_the_tool_puts_it(
    tool: str, tool_input: dict[str, Any], expected: str
) -> None:
    """Each of these gave the rules the tool name alone: a destructive command slipped past them."""
    assert trigger_text(tool, tool_input) == expected


def test_trigger_text_gives_a_long_command_the_room_the_context_leaves() -> None:
    command = "cd /repo && " + "pip install -r requirements-dev.txt && " * 12 + "rm -rf /var/lib/billing/data"
    assert 400 < len(command) < 700  # was cut at 400, before the rm
    text = trigger_text("Bash", {"command": command}, "clean up " * 60)
    assert "rm -rf /var/lib/billing/data" in text and len(text) <= 1000
    assert text.endswith(("clean up " * 60)[:300].strip())


def test_the_advise_log_keeps_no_secret_from_the_command_line(conn: Conn, embedder: Embedder) -> None:
    """The trigger text and the query were logged (spark.retrievals) and cached (spark.query_embeddings)
    verbatim: PGPASSWORD=..., a bearer token, an API key."""
    advisor = Advisor(conn, embedder, T)
    secrets = ("hunter2secret", "ghp_" + "a1B2c3D4e5" * 4, "sk-proj-" + "Zx9Yw8Vu7T" * 3)
    for command in (
        f"PGPASSWORD={secrets[0]} psql -h db.internal -U app -c 'drop table users'",
        f'curl -H "Authorization: Bearer {secrets[1]}" https://api.github.com/user',
        f"export OPENAI_API_KEY={secrets[2]} && python deploy.py",
    ):
        advisor.advise("Bash", {"command": command}, "deploy the release")
    rows = conn.execute(
        """SELECT r.trigger_text || ' ' || r.query_text || ' ' || coalesce(q.query_text, '')
           FROM spark.retrievals r LEFT JOIN spark.query_embeddings q ON q.query_text = r.query_text
           WHERE r.tenant = %s""",
        (T,),
    ).fetchall()
    assert len(rows) >= 3
    logged = " ".join(r[0] for r in rows)
    assert not [s for s in secrets if s in logged], logged
    assert "PGPASSWORD=[REDACTED" in logged  # the name stays, so a rule on "password" still matches
    assert "drop table users" in logged


def test_north_star_is_the_share_of_sessions_helped(conn: Conn, embedder: Embedder) -> None:
    call = ("Bash", {"command": "alembic revision -m 'add orders table'"}, "schema change")
    helped = Advisor(conn, embedder, T, session_id="ns-1")
    first = helped.advise(*call)
    Advisor(conn, embedder, T, session_id="ns-2").advise(*call)
    Advisor(conn, embedder, T).advise(*call)  # no session: a call, not a session
    helped.record_outcome(first[0].memory_id, "helpful", retrieval_id=first[0].retrieval_id)
    helped.record_outcome(first[0].memory_id, "ignored")
    row = conn.execute(
        "SELECT sessions, sessions_helped, share, advise_calls, helpful, ignored "
        "FROM spark.north_star(tenant => %s)",
        (T,),
    ).fetchone()
    assert row == (2, 1, 0.5, 3, 1, 1)
    assert conn.execute("SELECT count(*) FROM spark.north_star('nobody')").fetchone() == (0,)
    later = conn.execute(
        "SELECT count(*) FROM spark.north_star(%s, now() + interval '1 day')", (T,)
    ).fetchone()
    assert later == (0,)


@pytest.mark.parametrize(
    ("sql", "args", "error"),
    [
        ("SELECT * FROM spark.advise(%s, 'deploy', NULL, 0)", (T,), errors.InvalidParameterValue),
        ("SELECT * FROM spark.advise(%s, 'deploy', NULL, 100000)", (T,), errors.InvalidParameterValue),
        ("SELECT * FROM spark.advise(%s, 'deploy')", (None,), errors.NullValueNotAllowed),
        ("SELECT * FROM spark.advise(%s, 'deploy', NULL, 5, '{}', '')", (T,), errors.InvalidParameterValue),
        (
            "SELECT * FROM spark.advise(%s, 'deploy', NULL, 5, '{\"colour\": 1}')",
            (T,),
            errors.InvalidParameterValue,
        ),
        ("SELECT spark.record_outcome(%s, NULL, 'helpful')", (T,), errors.NullValueNotAllowed),
        ("SELECT spark.record_outcome(%s, 1, 'helpful', 999999)", (T,), errors.InvalidParameterValue),
        ("SELECT spark.propose_triggers(%s, 0)", (T,), errors.InvalidParameterValue),
        ("SELECT * FROM spark.promote_triggers(%s, 0)", (T,), errors.InvalidParameterValue),
    ],
)
def test_advisor_sql_refuses_bad_input_and_writes_nothing(
    conn: Conn, sql: str, args: tuple[Any, ...], error: type[Exception]
) -> None:
    before = conn.execute(
        "SELECT (SELECT count(*) FROM spark.retrievals), (SELECT count(*) FROM spark.outcomes)"
    )
    counts = before.fetchone()
    with pytest.raises(error), conn.transaction():  # a savepoint: the failed statement is undone
        conn.execute(sql, args)
    after = conn.execute(
        "SELECT (SELECT count(*) FROM spark.retrievals), (SELECT count(*) FROM spark.outcomes)"
    )
    assert after.fetchone() == counts


def test_advise_for_a_tenant_with_no_memories_gets_the_pack_or_nothing(conn: Conn) -> None:
    rows = conn.execute(
        "SELECT key FROM spark.advise('newcomer', 'deploy to production', NULL, 5)"
    ).fetchall()
    assert rows and all(k.startswith("seed:") for (k,) in rows)
    alone = conn.execute(
        "SELECT count(*) FROM spark.advise('newcomer', 'deploy', NULL, 5, '{\"include_system\": false}')"
    ).fetchone()
    assert alone == (0,)


def pack_factor(conn: Conn, tenant: str, pack_yield: int) -> float:
    row = conn.execute(
        """SELECT (why -> 'terms' ->> 'pack_factor')::float8
           FROM spark.explain(%s, 'deploy to production', NULL, 50, %s)
           WHERE system_default AND why -> 'terms' ? 'pack_factor' LIMIT 1""",
        (tenant, Jsonb({"pack_yield": pack_yield, "precision_mode": "high_recall"})),
    ).fetchone()
    assert row is not None
    return float(row[0])


def test_the_pack_yields_as_own_memories_grow_counted_without_statistics(conn: Conn) -> None:
    """Without a tenant_stats row the own memories are counted per call, up to 20 x pack_yield."""
    tenant = "grower"
    conn.execute(
        """INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash)
           SELECT %s, 'g' || g, 'note ' || g, 'note ' || g, sha256(('note ' || g)::bytea)
           FROM generate_series(1, 50) g""",
        (tenant,),
    )
    assert conn.execute(
        "SELECT count(*) FROM spark.tenant_stats WHERE tenant = %s", (tenant,)
    ).fetchone() == (0,)
    assert pack_factor(conn, tenant, 100) == pytest.approx(1 / (1 + 50 / 100), abs=1e-3)
    assert pack_factor(conn, tenant, 10) == pytest.approx(1 / (1 + 50 / 10), abs=1e-3)
    assert pack_factor(conn, tenant, 1) == pytest.approx(1 / 21, abs=1e-3)  # the count stops at 20
    assert pack_factor(conn, "nobody-here", 1) == pytest.approx(1.0)


def test_an_interrupt_denies_a_call_once_per_session(conn: Conn, embedder: Embedder) -> None:
    """The deny tells the agent to take the backup and try again; the retry was denied too, for ever."""
    call = ("Bash", {"command": "psql -c 'DROP TABLE orders'", "description": "clean up"})
    loud = AdvisorOptions(interrupts=True)
    first = Advisor(conn, embedder, T, session_id="deny-once", options=loud).advise(*call)
    assert blocking(first) is not None
    retry = Advisor(conn, embedder, T, session_id="deny-once", options=loud).advise(*call)
    assert blocking(retry) is None and "seed:safety-destructive-ops" in keys(retry)  # advice, not a deny
    other = ("Bash", {"command": "psql -c 'DROP TABLE customers'", "description": "clean up"})
    assert blocking(Advisor(conn, embedder, T, session_id="deny-once", options=loud).advise(*other))
    # another call whose (lossy) query reads the same is stopped again: the retry is the same call only
    for worse in ("rm -rf /var/data; rm -rf /", "sudo rm -rf /var/data/../.."):
        first_rm = ("Bash", {"command": "rm -rf /var/data"})
        session = f"deny-once-{worse}"
        assert blocking(Advisor(conn, embedder, T, session_id=session, options=loud).advise(*first_rm))
        worse_call = ("Bash", {"command": worse})
        assert blocking(Advisor(conn, embedder, T, session_id=session, options=loud).advise(*worse_call))
    assert blocking(Advisor(conn, embedder, T, session_id="another", options=loud).advise(*call))
    assert blocking(Advisor(conn, embedder, T, options=loud).advise(*call))  # no session: every time
    assert blocking(Advisor(conn, embedder, T, options=loud).advise(*call))


HARMLESS = [
    ("Edit", {"file_path": "/repo/src/utils/truncate.py", "old_string": "n = 10", "new_string": "n = 20"}),
    (
        "Task",
        {
            "description": "Investigate log truncation",
            "prompt": "Find where we truncate long log lines and why the tail is lost",
        },
    ),
    ("Bash", {"command": 'git commit -m "fix: delete from cache only expired keys"'}),
    ("Bash", {"command": "sed -i s/truncate/trim/ src/util.py"}),
    (
        "WebFetch",
        {
            "url": "https://docs.python.org/3/library/io.html#io.IOBase.truncate",
            "prompt": "What does truncate do to the file position?",
        },
    ),
    ("Bash", {"command": "cat > cleanup.sh <<'EOF'\nset -e\nrm -rf \"$TMPDIR/build\"\nEOF"}),
    ("Bash", {"command": 'echo "DROP TABLE users" >> notes.txt'}),
]


@pytest.mark.parametrize(("tool", "tool_input"), HARMLESS)
def test_an_interrupt_does_not_deny_a_call_that_runs_nothing_destructive(
    conn: Conn, embedder: Embedder, tool: str, tool_input: dict[str, Any]
) -> None:
    """The pack's destructive_commands rule matched the trigger text (a path, a prompt, a commit message, a
    URL, a script being written, text being printed) and each of these calls was denied. Advice may still
    show; only the deny was wrong."""
    advice = Advisor(conn, embedder, T, options=AdvisorOptions(interrupts=True)).advise(tool, tool_input)
    assert blocking(advice) is None, [(a.key, a.why.get("trigger")) for a in advice]


@pytest.mark.parametrize(
    ("tool", "tool_input"),
    [
        ("Bash", {"command": "rm -rf /var/data"}),
        ("Bash", {"command": "psql -c 'DROP TABLE orders'", "description": "clean up"}),
        # the adaptive cutoff (0.85 x the best) dropped the pack's critical item under the git and deploy
        # advice until the advisor, with interrupts on, asked to keep interrupting items (keep_interrupts)
        ("Bash", {"command": "git push --force origin main"}),
        ("Bash", {"command": "git reset --hard HEAD~3"}),
        ("Bash", {"command": "cd /repo && sudo rm -Rf build/../data"}),
        ("Bash", {"command": 'ssh prod "rm -rf /srv/app/releases"'}),
        ("Bash", {"command": "echo 'DROP TABLE orders;' | psql shop"}),
        ("Bash", {"command": "psql shop <<'SQL'\nDROP TABLE orders;\nSQL"}),
        ("Bash", {"command": 'echo "$(rm -rf /var/data)"'}),
        ("mcp__postgres__query", {"sql": "TRUNCATE TABLE orders"}),
    ],
)
def test_an_interrupt_still_denies_a_call_that_runs_the_destructive_operation(
    conn: Conn, embedder: Embedder, tool: str, tool_input: dict[str, Any]
) -> None:
    advice = Advisor(conn, embedder, T, options=AdvisorOptions(interrupts=True)).advise(tool, tool_input)
    stop = blocking(advice)
    assert stop is not None, [(a.key, a.why.get("trigger")) for a in advice]
    assert stop.priority == "critical" and stop.trigger and "destructive_commands" in stop.trigger["rules"]


@pytest.mark.parametrize(
    ("tool", "tool_input", "expected"),
    [
        ("Edit", {"file_path": "/a/truncate.py", "new_string": "rm -rf /"}, ""),
        ("Task", {"description": "drop table cleanup", "prompt": "DROP TABLE users"}, ""),
        ("WebFetch", {"url": "https://x.test/rm -rf", "prompt": "rm -rf"}, ""),
        ("Bash", {"command": 'git commit -m "delete from cache" && git push'}, "git commit -m ; git push"),
        ("Bash", {"command": "echo DROP TABLE users >> notes.txt"}, "echo"),
        ("Bash", {"command": "grep -rn 'rm -rf' scripts/ # rm -rf"}, "grep -rn scripts/"),
        ("Bash", {"command": "cat > a.sh <<EOF\nrm -rf /\nEOF\nchmod +x a.sh"}, "cat > a.sh ; chmod +x a.sh"),
        ("Bash", {"command": "psql -c 'DROP TABLE orders'"}, "psql -c DROP TABLE orders"),
        ("Bash", {"command": 'docker exec db sh -c "rm -rf /data"'}, "docker exec db sh -c rm -rf /data"),
        ("mcp__postgres__query", {"query": "TRUNCATE orders"}, "TRUNCATE orders"),
        ("mcp__exa__search", {"query": "how to truncate table orders"}, ""),
    ],
)
def test_action_text_is_what_the_call_runs(tool: str, tool_input: dict[str, Any], expected: str) -> None:
    assert action_text(tool, tool_input) == expected


def test_the_packs_destructive_rule_matches_words_not_parts_of_them(conn: Conn) -> None:
    """The pack's pattern matched "truncate" in truncate.py, "truncation", s/truncate/trim/ and
    IOBase.truncate."""
    (pattern,) = conn.execute(
        "SELECT pattern FROM spark.trigger_rules WHERE tenant = '_system' AND name = 'destructive_commands'"
    ).fetchone() or (None,)
    assert pattern is not None
    misses = [
        "Edit /repo/src/utils/truncate.py",
        "WebFetch https://docs.python.org/3/library/io.html#io.IOBase.truncate",
        "Bash sed -i s/truncate/trim/ src/util.py",
        "Task Investigate log truncation",
        "Bash confirm -rf x",
        "Bash git push -u origin feature-f",
    ]
    hits = [
        "Bash rm -rf /var/data",
        "Bash sudo rm -fr /",
        "Bash rm -r -f build",
        "Bash psql -c DROP TABLE orders",
        "mcp__postgres__query TRUNCATE TABLE orders",
        "Bash truncate -s 0 app.db",
        "Bash git push origin main --force",
        "Bash git clean -xdf",
        "Bash git reset --hard HEAD~3",
        "Bash psql -c DELETE FROM carts",
    ]
    matched = dict(
        conn.execute("SELECT t, t ~* %s FROM unnest(%s::text[]) t", (pattern, misses + hits)).fetchall()
    )
    assert [t for t in misses if matched[t]] == [] and [t for t in hits if not matched[t]] == []


def test_a_long_harmless_command_gets_no_destructive_advice(conn: Conn, embedder: Embedder) -> None:
    """`echo` + 5,000 characters is too long to be read whole, so not read-only (not skipped); its query was
    the bare "run echo", which surfaced the critical destructive-command advice ("run" was all it said)."""
    command = "echo " + "a" * 5000
    intent = extract_intent("Bash", {"command": command})
    assert intent.text == "echo" and not intent.trivial, intent
    advice = Advisor(conn, embedder, T).advise("Bash", {"command": command})
    assert "seed:safety-destructive-ops" not in keys(advice), [(a.key, a.priority) for a in advice]
    assert not [a for a in advice if a.priority == "critical"]
    for short in ("echo " + "a" * 50, "echo " + "a" * 2000):  # read whole: read-only, skipped
        assert Advisor(conn, embedder, T).advise("Bash", {"command": short}) == []
    # the verb stays where the program or the target says more
    assert extract_intent("Bash", {"command": "pytest"}).text == "test pytest"
    assert extract_intent("Bash", {"command": "docker compose up"}).text.startswith("run docker")
    assert extract_intent("Bash", {"command": "rm -rf /var/data"}).text.startswith("delete rm")
