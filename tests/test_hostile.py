"""Hostile input (issue 6, point 5): property-based tests over the spark.* SQL functions, trigger rules, the
ingest-file reader and the CLI.

Every hostile input must get a clear refusal: in SQL an errcode of class 22 (data exception) or 23
(integrity), never XX000 or a lost connection; in Python an exception of spark_pg.errors' hierarchy (or,
for text psycopg cannot send, its documented client-side refusal: ``psycopg.DataError`` for NUL, and
``UnicodeEncodeError`` for lone surrogates, which no UTF-8 driver can encode); nothing written when it is
refused (row counts of every spark table before and after); nothing hangs (a 5 s statement_timeout on the
connections and hypothesis deadlines).

Defects found are tested at the end of the file (D1 ... D12), each with a docstring saying what it was and
how it is fixed. A defect still open would be pinned there as an ``xfail(strict=True)`` test naming its input,
what happens and what should, with the properties kept clear of that input (a comment saying where).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import random
import re
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import event as hypothesis_event
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.control import currently_in_test_context
from psycopg import errors
from psycopg.rows import dict_row

from spark_pg.cli import main
from spark_pg.config import Settings
from spark_pg.db import connect
from spark_pg.embedding import MODELS, model_dir_for
from spark_pg.errors import IngestError
from spark_pg.ingest import register_model
from spark_pg.records import FIELDS, MemoryIn, read_file
from spark_pg.trigger_patterns import pattern_problem
from spark_pg.triggers import RULE_KEYS, TriggerRule, TriggerRuleError, load_rules, parse_rules, sync_rules
from tests.conftest import temp_database

# hypothesis keeps its caches (unicode tables, constants) outside the repository; no example database
set_hypothesis_home_dir(
    os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY") or Path(tempfile.gettempdir()) / "spark_pg-hypothesis"
)
HOSTILE = settings(
    database=None,
    derandomize=True,  # the same examples on every run: a failure is a finding, never a flake
    deadline=timedelta(seconds=10),  # above the 5 s statement_timeout: a hang in Python shows too
    max_examples=50,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

Conn = psycopg.Connection[Any]
SYSTEM = "_system"
TIMEOUT_MS = 5000
TABLES = (
    "memories",
    "embeddings",
    "embed_queue",
    "trigger_rules",
    "trigger_shadow_hits",
    "retrievals",
    "retrieval_items",
    "outcomes",
    "query_embeddings",
    "revaluations",
    "fusion_weights",
    "tenant_stats",
    "lexeme_stats",
    "tenant_vector_indexes",
    "embedding_models",
)
COUNTS = "SELECT " + ", ".join(f"(SELECT count(*) FROM spark.{t}) AS {t}" for t in TABLES)

# --- hostile values --------------------------------------------------------------------------------------

INJECTIONS = (
    "'; DROP TABLE spark.memories; --",
    "alice' OR '1'='1",
    "alice'); DELETE FROM spark.memories; --",
    "$$; DROP SCHEMA spark CASCADE; $$",
    "$fn$ || pg_sleep(10) || $fn$",
    "\\'; SELECT pg_sleep(10); --",
    "%s %(tenant)s {0} %%",
    SYSTEM,
    "_system' --",
    "E'\\x00'",
    "*/ SELECT 1 /*",
    "1; COMMIT; DROP TABLE spark.memories",
    '" OR ""="',
    "alice\\",
    "::vector",
    "ARRAY['alice']",
    "current_user",
    "spark.system_tenant()",
    "'); SELECT set_config('statement_timeout', '0', false); --",
)
ODD = (
    "\u202eevil\u202c txt.exe",  # right-to-left override
    "\u200f\u200e\u061c",  # direction marks
    "مرحبا بالعالم",
    "עִבְרִית",
    "e\u0301\u0302\u0303\u0304\u0305" * 20,  # stacked combining marks
    "Z\u0351\u0352\u0357\u035b\u0363\u0364",
    "👩‍👩‍👧‍👦🎉🔥🏳️‍🌈",
    "\ufeffbom",
    "zero\u200bwidth",
    "\x00",
    "a\x00b",
    "\t\n\r\x0b\x0c",
    "   ",
    "",
    "\U0010ffff\ufffd\ufffe",
    "\u2028\u2029\x85",
    "İıßﬀ",
    "x" * 129,
)


def hostile_text(max_size: int = 200) -> st.SearchStrategy[str]:
    """Text psycopg can send or must refuse (NUL), never lone surrogates (no UTF-8 driver can send them; D5,
    D7 and D10 below test them where they can arrive: in files and on the command line)."""
    fixed = st.sampled_from(INJECTIONS + ODD)
    return st.one_of(st.text(max_size=max_size), fixed, st.tuples(fixed, st.text(max_size=20)).map("".join))


def mostly(
    valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any], odds: int = 3
) -> st.SearchStrategy[Any]:
    """``odds`` valid draws to one hostile: a hostile value then meets the rest of the call, not only the
    first check an all-hostile call would trip."""
    return st.sampled_from([True] * odds + [False]).flatmap(lambda ok: valid if ok else hostile)


def sendable(strategy: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Hostile text that is still a valid value: not blank, no NUL."""
    return strategy.map(lambda s: "x" + s.replace("\x00", ""))


def vector_literal(dim: int, fill: str, seed: int) -> str:
    rng = random.Random(seed)
    special = {"zero": "0", "nan": "NaN", "inf": "Infinity", "-inf": "-Infinity", "negzero": "-0"}
    values = []
    for i in range(dim):
        if fill in special and i == seed % dim:
            values.append(special[fill])
        elif fill == "zero" or fill == "negzero":
            values.append("0")
        elif fill == "tiny":
            values.append(f"{rng.choice((1, -1)) * 10 ** -rng.randint(20, 45):.1e}")
        elif fill == "large":  # |x| <= 1e15: larger magnitudes overflow float similarity (defect D2)
            values.append(f"{rng.uniform(-1e15, 1e15):.6e}")
        else:
            values.append(f"{rng.uniform(-1, 1):.5f}")
    return "[" + ",".join(values) + "]"


vectors = st.one_of(
    st.none(),
    st.builds(
        vector_literal,
        dim=st.sampled_from((1, 3, 383, 384, 384, 384, 385, 2000)),
        fill=st.sampled_from(("random", "zero", "negzero", "nan", "inf", "-inf", "tiny", "large")),
        seed=st.integers(0, 10_000),
    ),
    st.sampled_from(("[]", "[", "[1,2", "abc", "[1,,2]", "[1e39]", "[-1e39]", "{1,2}", "[NaN]", "[1;2]", "")),
)
valid_vector = st.builds(
    vector_literal, dim=st.just(384), fill=st.sampled_from(("random", "tiny", "large")), seed=st.integers()
)
valid_vectors = st.one_of(st.none(), valid_vector)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    hostile_text(40),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)
AS_OF = ("infinity", "-infinity", "epoch", "now", "294276-12-31", "4713-01-01 BC", "2024-02-30", "soon", "")


def params_text(keys: Sequence[str]) -> st.SearchStrategy[str | None]:
    """A params argument as JSON text: known keys with hostile values, unknown keys, non-objects, bad JSON."""
    value = st.one_of(json_values, st.sampled_from(AS_OF), st.integers(-5, 5000), st.floats(-1, 2))
    objects = st.dictionaries(st.one_of(st.sampled_from(tuple(keys)), hostile_text(20)), value, max_size=5)
    return st.one_of(
        st.none(),
        objects.map(json.dumps),  # NaN / Infinity come out as JSON PostgreSQL refuses: 22P02
        json_values.map(json.dumps),
        st.sampled_from(
            ("", "{", "{'a': 1}", '{"a": }', "[1,", "nul", '{"k": 1e999999}', '"\\ud800"', "{}}")
        ),
    )


valid_retrieve_params = st.fixed_dictionaries(
    {},
    optional={
        "include_system": st.booleans(),
        "keep_interrupts": st.booleans(),
        "fusion": st.sampled_from(["weighted", "rrf"]),
        "precision_mode": st.sampled_from(["high_recall", "adaptive", "high_precision"]),
        "min_similarity": st.floats(-1, 1),
        "pool_random": st.integers(0, 50),
        "recent_days": st.integers(0, 3650),
        "half_life_days": st.floats(1, 365),
        "w_keyword": st.floats(0, 10),
        "trigger_text": hostile_text(300),
        "domains": st.one_of(st.none(), st.lists(hostile_text(12), max_size=3)),
        "as_of": st.sampled_from([None, "2020-01-01", "2030-06-01T00:00:00+14:00"]),
        "seed": st.integers(-(2**31), 2**31 - 1),
        "query_model": st.one_of(st.none(), hostile_text(20)),
    },
).map(json.dumps)
valid_reflect_params = st.fixed_dictionaries(
    {},
    optional={
        "min_score": st.floats(0, 1),
        "kinds": st.sampled_from([["trace"], ["learning"], ["learning", "trace"]]),
        "outcome": st.sampled_from([None, "success", "failure"]),
        "linked_per_trace": st.integers(0, 20),
        "pool": st.integers(1, 100),
        "half_life_days": st.floats(1, 365),
        "recency_floor": st.floats(0, 1),
        "as_of": st.sampled_from([None, "2030-06-01"]),
    },
).map(json.dumps)
VALID_TENANTS = ("alice", SYSTEM, "nobody", "مرحبا", "👩‍👩‍👧", *INJECTIONS[:6])


# --- fixtures --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile_db(server_url: str, model_settings: Settings) -> Iterator[str]:
    """A fresh install with the configured model registered, a few memories, a trace and a rule."""
    spec = MODELS[model_settings.get_str("embedding.model")]
    with temp_database(server_url, install=True) as url:
        with connect(url, autocommit=True) as conn:
            model_id = register_model(conn, spec)
            for tenant in ("alice", SYSTEM):
                for i, text in enumerate(
                    (
                        "Run alembic upgrade head on a staging copy before production.",
                        "Deploy the release on Tuesdays, never on Fridays.",
                        "Pin base images by digest.",
                    )
                ):
                    conn.execute(
                        """WITH m AS (INSERT INTO spark.memories
                                          (tenant, key, text, descriptor, content_hash, kind, metadata)
                                      VALUES (%s, %s, %s, %s, sha256(convert_to(%s, 'UTF8')), %s, %s)
                                      RETURNING tenant, id, created_at)
                           INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding)
                           SELECT tenant, id, %s, created_at, %s::vector FROM m""",
                        (
                            tenant,
                            f"k{i}",
                            text,
                            text,
                            text,
                            "trace" if i == 0 else "insight",
                            '{"outcome": "failure"}' if i == 0 else "{}",
                            model_id,
                            vector_literal(spec.dim, "random", i),
                        ),
                    )
            conn.execute("SELECT spark.put_trigger_rule('alice', 'deploy', 'deploy|alembic', ARRAY['k1'])")
        yield url


@pytest.fixture(scope="module")
def db(hostile_db: str) -> Iterator[Conn]:
    """Autocommit (each call is its own transaction, as a client's would be), 5 s statement timeout."""
    connection = connect(hostile_db, statement_timeout_ms=TIMEOUT_MS, autocommit=True)
    try:
        yield connection
    finally:
        connection.close()


def counts(conn: Conn) -> dict[str, int]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(COUNTS).fetchone()
    assert row is not None
    return dict(row)


def event(name: str) -> None:
    """hypothesis.event (shown by --hypothesis-show-statistics), a no-op outside a property."""
    if currently_in_test_context():
        hypothesis_event(name)


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings(k)
            yield from strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from strings(v)


# class 22 states that mean a value reached arithmetic or a cast inside a spark function unchecked (the
# message names no parameter): numeric value out of range, datetime field overflow, division by zero, invalid
# datetime format. The same states raised before any spark function runs (the argument's own type refusing
# it: an int past 2**31 - 1 for an integer, 1e39 in a vector, 1e-207 for a real) are a clean refusal.
UNGUARDED = frozenset({"22003", "22008", "22012", "22007"})


def check_refusal(exc: BaseException, inputs: Any) -> None:
    """A clean refusal: SQLSTATE class 22/23 (one of UNGUARDED only from outside the spark functions), or
    psycopg's client-side refusal of NUL in a text parameter."""
    event(f"refused: {getattr(exc, 'sqlstate', None) or type(exc).__name__}")
    if isinstance(exc, psycopg.Error) and exc.sqlstate is not None:
        message = str(exc).strip()
        assert exc.sqlstate[:2] in ("22", "23"), f"SQLSTATE {exc.sqlstate}: {message}"
        inside = "spark." in (exc.diag.context or "")
        assert not inside or exc.sqlstate not in UNGUARDED, f"unguarded SQLSTATE {exc.sqlstate}: {message}"
        return
    if isinstance(exc, psycopg.DataError) and any("\x00" in s for s in strings(inputs)):
        return
    raise exc


def finite(value: Any) -> bool:
    return value is None or math.isfinite(value)


# --- the SQL functions -----------------------------------------------------------------------------------

CALL_ARGS = (
    "tenant => %(tenant)s, query_text => %(query)s, query_embedding => %(vec)s::vector, k => %(k)s::integer, "
    "params => %(params)s::jsonb"
)
READ_CALLS = {
    "retrieve": f"spark.retrieve({CALL_ARGS})",
    "explain": f"spark.explain({CALL_ARGS})",
    "reflect": f"spark.reflect({CALL_ARGS})",
    "advise": f"spark.advise({CALL_ARGS}, session_id => %(session)s, tool_name => %(tool)s)",
    "advise_with_warnings": f"spark.advise_with_warnings({CALL_ARGS}, session_id => %(session)s, "
    "warning_min_score => %(wms)s::float8, warning_k => %(wk)s::integer, "
    "reflect_params => %(rparams)s::jsonb)",
}
RETRIEVE_KEYS = (
    "as_of",
    "fusion",
    "precision_mode",
    "pool_random",
    "recent_days",
    "half_life_days",
    "w_keyword",
    "min_similarity",
    "domains",
    "trigger_text",
    "include_system",
    "keep_interrupts",
    "query_model",
    "seed",
    "week_cap",
)
REFLECT_KEYS = (
    "min_score",
    "half_life_days",
    "recency_floor",
    "kinds",
    "outcome",
    "linked_per_trace",
    "pool",
    "as_of",
)
ints = st.one_of(st.none(), st.integers(-10, 1200), st.integers(-(2**70), 2**70))


@pytest.mark.parametrize("fn", list(READ_CALLS))
@HOSTILE
@given(
    tenant=mostly(st.sampled_from(VALID_TENANTS), st.one_of(st.none(), hostile_text(140))),
    query=mostly(
        st.one_of(
            st.sampled_from(
                ("deploy release", "alembic upgrade head on staging", "pin base images by digest")
            ),
            sendable(hostile_text(2000)),
            hostile_text(100).map(lambda q: "deploy the release " + q.replace("\x00", "")),
        ),
        st.one_of(st.none(), hostile_text(50)),
        odds=5,
    ),
    vec=mostly(valid_vectors, vectors),
    k=mostly(st.integers(1, 50), ints),
    retrieve_params=mostly(valid_retrieve_params, params_text(RETRIEVE_KEYS + REFLECT_KEYS)),
    reflect_params=mostly(valid_reflect_params, params_text(REFLECT_KEYS + RETRIEVE_KEYS)),
    session=mostly(st.one_of(st.none(), st.text(min_size=1, max_size=40)), hostile_text(300)),
    wms=mostly(st.floats(0, 1), st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))),
    wk=mostly(st.integers(0, 20), ints),
    rparams=mostly(valid_reflect_params, params_text(REFLECT_KEYS)),
)
def test_read_and_advise_functions_refuse_hostile_input_cleanly(
    db: Conn,
    fn: str,
    tenant: str | None,
    query: str | None,
    vec: str | None,
    k: int | None,
    retrieve_params: str | None,
    reflect_params: str | None,
    session: str | None,
    wms: float | None,
    wk: int | None,
    rparams: str | None,
) -> None:
    args = {
        "tenant": tenant,
        "query": query,
        "vec": vec,
        "k": k,
        "params": reflect_params if fn == "reflect" else retrieve_params,
        "session": session,
        "tool": session,
        "wms": wms,
        "wk": wk,
        "rparams": rparams,
    }
    before = counts(db)
    try:
        with db.cursor(row_factory=dict_row) as cur:
            rows = cur.execute("SELECT * FROM " + READ_CALLS[fn], args).fetchall()
    except (psycopg.Error, UnicodeEncodeError) as exc:
        check_refusal(exc, args)
        assert counts(db) == before, "a refused call wrote something"
        return
    after = counts(db)
    event(f"answered with {'no' if not rows else 'some'} rows")
    for row in rows:
        assert (
            finite(row.get("score")) and finite(row.get("semantic_sim")) and finite(row.get("similarity"))
        ), row
    if fn.startswith("advise"):
        assert after["retrievals"] == before["retrievals"] + 1
        changed = {t for t in TABLES if after[t] != before[t]}
        assert changed <= {"retrievals", "retrieval_items", "trigger_shadow_hits"}
    else:
        assert after == before, f"spark.{fn} wrote something"


@HOSTILE
@given(
    tenant=mostly(st.sampled_from(VALID_TENANTS), st.one_of(st.none(), hostile_text(140))),
    vec=mostly(valid_vector, vectors),
    k=mostly(st.integers(1, 1000), ints),
    min_similarity=mostly(
        st.floats(-1, 1), st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))
    ),
)
def test_search_semantic_refuses_hostile_input_cleanly(
    db: Conn, tenant: str | None, vec: str | None, k: int | None, min_similarity: float | None
) -> None:
    args = (tenant, vec, k, min_similarity)
    try:
        rows = db.execute(
            "SELECT key, similarity FROM spark.search_semantic(%s, %s::vector, %s::integer, %s::float8)", args
        ).fetchall()
    except (psycopg.Error, UnicodeEncodeError) as exc:
        check_refusal(exc, args)
        return
    event(f"answered with {'no' if not rows else 'some'} rows")
    assert all(finite(sim) for _, sim in rows)


ATOMS = (
    "a",
    "b",
    "deploy",
    "rm -rf",
    ".",
    "\\.",
    "*",
    "+",
    "?",
    "{1,3}",
    "{2}",
    "{,",
    "{0,255}",
    "(",
    ")",
    "(?:",
    "(?=",
    "(?!",
    "(?<=",
    "[",
    "]",
    "[a-z]",
    "[^x]",
    "[[:alpha:]]",
    "[[:nope:]]",
    "|",
    "^",
    "$",
    "\\1",
    "\\2",
    "\\m",
    "\\y",
    "\\w",
    "\\d",
    "\\s",
    "\\",
    "(?i)",
    "***",
    "x{",
    "é",
    "🎉",
    "\u202e",
    "\x00",
)
patterns = st.one_of(
    st.lists(st.sampled_from(ATOMS), min_size=1, max_size=12).map("".join),
    hostile_text(60),
    st.text(alphabet="()[]{}*+?|\\^$.ab1,:", max_size=40),
    st.just("x" * 501),
)


@HOSTILE
@given(
    tenant=mostly(st.sampled_from(VALID_TENANTS), st.one_of(st.none(), hostile_text(140))),
    name=mostly(
        st.from_regex(r"[A-Za-z0-9_.:-]{1,64}", fullmatch=True), st.one_of(st.none(), hostile_text(70))
    ),
    pattern=mostly(patterns, st.none(), odds=8),
    context_pattern=st.one_of(st.none(), patterns),
    surface=mostly(
        st.lists(sendable(hostile_text(30)), min_size=1, max_size=5),
        st.one_of(st.none(), st.lists(st.one_of(st.none(), hostile_text(30)), max_size=52)),
    ),
    priority=mostly(
        st.sampled_from(("critical", "high", "normal", "background")), st.one_of(st.none(), hostile_text(20))
    ),
    confidence=mostly(st.floats(0, 1), st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))),
    flag=mostly(st.booleans(), st.none()),
    metadata=mostly(st.just("{}"), params_text(("note",))),
    trigger_text=hostile_text(1200),
)
def test_put_trigger_rule_refuses_unsafe_or_bad_rules_and_accepted_ones_run(
    db: Conn,
    tenant: str | None,
    name: str | None,
    pattern: str | None,
    context_pattern: str | None,
    surface: list[str | None] | None,
    priority: str | None,
    confidence: float | None,
    flag: bool | None,
    metadata: str | None,
    trigger_text: str,
) -> None:
    args = {
        "tenant": tenant,
        "name": name,
        "pattern": pattern,
        "cp": context_pattern,
        "surface": surface,
        "priority": priority,
        "confidence": confidence,
        "flag": flag,
        "metadata": metadata,
    }
    before = counts(db)
    try:
        db.execute(
            "SELECT spark.put_trigger_rule(tenant => %(tenant)s, name => %(name)s, pattern => %(pattern)s, "
            "surface => %(surface)s::text[], context_pattern => %(cp)s, priority => %(priority)s, "
            "interrupt => %(flag)s, confidence => %(confidence)s::real, shadow => %(flag)s, "
            "metadata => %(metadata)s::jsonb)",
            args,
        )
    except (psycopg.Error, UnicodeEncodeError) as exc:
        check_refusal(exc, args)
        assert counts(db) == before, "a refused rule was written"
        return
    event("rule accepted")
    try:
        # an accepted pattern runs inside retrieval: it must neither fail nor hang there
        db.execute(
            "SELECT count(*) FROM spark.explain(%s, 'deploy', NULL, 5, "
            "jsonb_build_object('trigger_text', %s::text))",
            (tenant, trigger_text.replace("\x00", "")),
        )
    finally:
        db.execute("DELETE FROM spark.trigger_rules WHERE tenant = %s AND name = %s", (tenant, name))


rule_values = st.one_of(json_values, patterns, st.lists(hostile_text(20), max_size=3))
rule_docs = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "version": st.one_of(st.just(1), json_scalars),
            "rules": st.one_of(
                json_values,
                st.lists(
                    st.dictionaries(
                        # every key a rule file may hold, and one it may not
                        st.sampled_from((*sorted(RULE_KEYS), "colour")),
                        rule_values,
                        max_size=6,
                    ),
                    max_size=3,
                ),
            ),
            "learned": json_values,
        },
    ),
)


@HOSTILE
@given(doc=rule_docs)
def test_trigger_rule_documents_parse_or_fail_with_trigger_rule_error(doc: Any) -> None:
    try:
        rules = parse_rules(doc, "hostile.yaml")
    except TriggerRuleError as exc:
        assert "hostile.yaml" in str(exc)
        return
    assert all(isinstance(r, TriggerRule) and pattern_problem(r.pattern) is None for r in rules)


# YAML text with explicit tags, anchors and aliases, digits (implicit timestamps, huge integers) and
# characters YAML calls non-printable (NUL, C0/C1 controls): what defects D5 and D6 were about
RAW_YAML = st.one_of(
    st.text(
        alphabet=st.sampled_from(
            [*"abcxyz -:[]{},\"'#|>?.\n\t_é🎉\\!&*0123456789", "\u2028", "\x00", "\x85"]
        ),
        max_size=300,
    ),
    st.lists(
        st.sampled_from(
            (
                "- text: x\n",
                "  created_at: ",
                "2024-13-45",
                "2024-01-01 25:00:00",
                "!!int ",
                "!!float ",
                "!!bool ",
                "!!timestamp ",
                "!!binary ",
                "!!set ",
                "!!omap ",
                "&a ",
                "*a",
                "metadata: ",
                "[",
                "]",
                "{a: ",
                "}",
                "abc",
                "9" * 5000,
                "\n",
            )
        ),
        max_size=30,
    ).map("".join),
)


@HOSTILE
@given(doc=st.one_of(rule_docs.map(lambda d: yaml.safe_dump(d, allow_unicode=True)), RAW_YAML))
def test_trigger_rule_files_load_or_fail_with_trigger_rule_error(tmp_path_factory: Any, doc: str) -> None:
    path = tmp_path_factory.mktemp("rules") / "rules.yaml"
    path.write_text(doc, encoding="utf-8")
    try:
        rules = load_rules(path)
    except TriggerRuleError:
        return
    assert all(isinstance(r, TriggerRule) for r in rules)


@HOSTILE
@given(
    pattern=patterns,
    context_pattern=st.one_of(st.none(), patterns),
    surface=st.lists(hostile_text(30), min_size=1, max_size=3),
    name=st.from_regex(r"[A-Za-z0-9_.:-]{1,64}", fullmatch=True),
)
def test_sync_rules_writes_all_or_nothing(
    db: Conn, pattern: str, context_pattern: str | None, surface: list[str], name: str
) -> None:
    """Patterns and keys the Python checks may not catch meet the database's: all rules or none land."""
    tenant = f"sync-{uuid.uuid4().hex[:8]}"
    rules = [
        TriggerRule(name="fine", pattern="deploy", surface=("k1",)),
        TriggerRule(name=name, pattern=pattern, context_pattern=context_pattern, surface=tuple(surface)),
    ]
    before = counts(db)
    try:
        result = sync_rules(db, tenant, rules)
        stored = db.execute(
            "SELECT name FROM spark.trigger_rules WHERE tenant = %s ORDER BY name", (tenant,)
        ).fetchall()
    except TriggerRuleError:
        event("refused: TriggerRuleError")
        assert counts(db) == before
        return
    except (psycopg.Error, UnicodeEncodeError) as exc:  # NUL (client side) or a class 22 refusal
        check_refusal(exc, [pattern, context_pattern, surface])
        assert counts(db) == before
        return
    finally:
        db.execute("DELETE FROM spark.trigger_rules WHERE tenant = %s", (tenant,))
    event("rules written")
    assert result.written == 2 and [n for (n,) in stored] == sorted({"fine", name})


# --- ingest files ----------------------------------------------------------------------------------------

row_values = st.one_of(
    json_values,
    hostile_text(100),
    st.sampled_from(
        ("insight", "trace", "pinned", "critical", "2024-05-01T13:56:00Z", "2024-02-30", "yesterday")
    ),
    st.floats(allow_nan=True, allow_infinity=True),
)
valid_rows = st.fixed_dictionaries(
    {"text": mostly(sendable(hostile_text(300)), row_values, odds=20)},
    optional={
        "tenant": mostly(st.sampled_from(VALID_TENANTS), row_values, odds=12),
        "key": mostly(sendable(hostile_text(40)), row_values, odds=12),
        "kind": mostly(st.sampled_from(("insight", "trace", "rule", "note")), row_values, odds=12),
        "category": mostly(sendable(st.text(max_size=20)), row_values, odds=12),
        "source": mostly(st.sampled_from(("user", "agent", "مرحبا")), row_values, odds=12),
        "context": mostly(sendable(hostile_text(100)), row_values, odds=12),
        "created_at": mostly(
            st.sampled_from(("2024-05-01T13:56:00Z", "2024-05-01", "1999-12-31 23:59")), row_values, odds=12
        ),
        "importance": mostly(st.floats(0, 1), row_values, odds=12),
        "tier": mostly(st.sampled_from(("pinned", "active", "archive")), row_values, odds=12),
        "priority": mostly(
            st.sampled_from(("critical", "high", "normal", "background")), row_values, odds=12
        ),
        "metadata": mostly(
            st.dictionaries(st.text(max_size=8), json_values, max_size=3), row_values, odds=12
        ),
    },
)
rows = st.lists(
    mostly(
        valid_rows,
        st.dictionaries(st.one_of(st.sampled_from(FIELDS), hostile_text(10)), row_values, max_size=8)
        | json_values,
        odds=12,
    ),
    min_size=1,
    max_size=3,
)
RAW_JSONL = st.text(
    alphabet=st.sampled_from([*'{}[]":,abtex 0123456789.-\n\\', "\u2028", "\x00"]), max_size=300
)


def as_jsonl(items: list[Any], ascii_only: bool) -> str:
    return "\n".join(json.dumps(item, ensure_ascii=ascii_only) for item in items) + "\n"


def as_yaml(items: list[Any], wrapped: bool) -> str:
    return yaml.safe_dump({"memories": items} if wrapped else items, allow_unicode=True)


ingest_files = st.one_of(
    st.tuples(st.just(".jsonl"), st.builds(as_jsonl, rows, st.booleans())),
    st.tuples(st.just(".yaml"), st.builds(as_yaml, rows, st.booleans())),
    st.tuples(st.just(".jsonl"), RAW_JSONL),
    st.tuples(st.just(".yml"), RAW_YAML),
    st.tuples(
        st.sampled_from((".jsonl", ".yaml")),
        st.builds(lambda s, n: s[:n], st.builds(as_yaml, rows, st.booleans()), st.integers(0, 400)),
    ),
)


def check_records(records: list[MemoryIn]) -> None:
    """What ingest computes next must work for every record read_file returned."""
    for r in records:
        assert isinstance(r, MemoryIn) and r.tenant and r.text.strip() and r.key
        assert len(r.content_hash) == 32 and r.descriptor


@HOSTILE
@given(file=ingest_files, default_tenant=mostly(st.just("t"), st.one_of(st.none(), hostile_text(20))))
def test_read_file_returns_records_or_raises_ingest_error(
    tmp_path_factory: Any, file: tuple[str, str], default_tenant: str | None
) -> None:
    suffix, text = file
    path = tmp_path_factory.mktemp("ingest") / f"memories{suffix}"
    path.write_text(text, encoding="utf-8")
    started = time.monotonic()
    try:
        records = read_file(path, default_tenant)
    except IngestError as exc:
        assert str(path) in str(exc)
        event("refused")
        return
    finally:
        assert time.monotonic() - started < 5
    event(f"read {'no' if not records else 'some'} records")
    check_records(records)


@HOSTILE
@given(
    data=st.binary(max_size=200), suffix=st.sampled_from((".jsonl", ".yaml", ".yml", ".ndjson", ".txt", ""))
)
def test_read_file_of_arbitrary_bytes(tmp_path_factory: Any, data: bytes, suffix: str) -> None:
    path = tmp_path_factory.mktemp("bytes") / f"memories{suffix}"
    path.write_bytes(data)
    with contextlib.suppress(IngestError):
        check_records(read_file(path, "t"))


def test_megabyte_texts_and_files(tmp_path: Path, db: Conn) -> None:
    big = "deploy release " * 70_000  # 1.05 MB: a query that size is refused (22023), nothing written
    before = counts(db)
    for fn in ("retrieve", "explain", "reflect"):
        with pytest.raises(errors.InvalidParameterValue, match="query_text"):
            db.execute(f"SELECT count(*) FROM spark.{fn}('alice', %s)", (big,)).fetchone()
    assert counts(db) == before
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps({"tenant": "t", "text": big}) + "\n", encoding="utf-8")
    with pytest.raises(IngestError, match="the limit is 100000"):
        read_file(path)
    many = tmp_path / "many.jsonl"
    many.write_text("".join(json.dumps({"tenant": "t", "text": f"memory {i}"}) + "\n" for i in range(5_000)))
    assert len(read_file(many)) == 5_000


def test_nul_and_lone_surrogates_are_refused_before_reaching_the_server(db: Conn) -> None:
    before = counts(db)
    for bad in ("a\x00b", "x\ud800y", "\udcff"):
        for statement, args in (
            ("SELECT * FROM spark.retrieve(%s, 'x')", (bad,)),
            ("SELECT * FROM spark.retrieve('alice', %s)", (bad,)),
            ("SELECT * FROM spark.advise('alice', 'deploy', session_id => %s)", (bad,)),
            ("SELECT spark.put_trigger_rule('alice', 'r2', %s, ARRAY['k1'])", (bad,)),
        ):
            expected = psycopg.DataError if "\x00" in bad else UnicodeEncodeError
            with pytest.raises(expected):
                db.execute(statement, args)
    assert counts(db) == before
    assert db.execute("SELECT 1").fetchone() == (1,)  # the connection is still usable


def test_sql_injection_strings_are_just_tenant_names(db: Conn) -> None:
    """Stored, found and removed as plain names: every function binds them as values."""
    before = counts(db)
    for tenant in (t for t in INJECTIONS if t != SYSTEM):
        db.execute(
            "INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash) "
            "VALUES (%s, 'injected', 'deploy the release', 'deploy the release', '\\x00')",
            (tenant,),
        )
        try:
            for fn in ("retrieve", "explain"):
                keys = db.execute(
                    f"SELECT key FROM spark.{fn}(%s, 'deploy release', NULL, 8, %s::jsonb)",
                    (tenant, '{"include_system": false}'),
                ).fetchall()
                assert keys == [("injected",)], (tenant, fn)
            db.execute("SELECT spark.put_trigger_rule(%s, 'r', 'deploy', ARRAY['injected'])", (tenant,))
        finally:
            db.execute("DELETE FROM spark.trigger_rules WHERE tenant = %s", (tenant,))
            db.execute("DELETE FROM spark.memories WHERE tenant = %s", (tenant,))
    assert counts(db) == before


# --- the CLI ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_db(
    hostile_db: str, model_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The CLI pointed at this module's database (no user config), with a 5 s statement timeout."""
    config = tmp_path_factory.mktemp("cli") / "config.yaml"
    config.write_text("embedding:\n  model_dir: " + str(model_dir_for(model_settings)) + "\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPARK_PG_DATABASE_URL", hostile_db)
        patch.setenv("SPARK_PG_CONFIG", str(config))
        patch.setenv("SPARK_PG_DATABASE_STATEMENT_TIMEOUT_MS", str(TIMEOUT_MS))
        yield hostile_db


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse's usage errors (e.g. a text that starts with '-')
            code = exc.code if isinstance(exc.code, int) else 2
            assert code == 2
    return code, out.getvalue(), err.getvalue()


def check_cli_error(code: int, err: str, inputs: Sequence[Any]) -> None:
    assert code in (1, 2), (code, err)
    assert err.startswith(("spark-pg: error", "spark-pg: database error", "usage:")), err
    state = re.match(r"spark-pg: (?:database )?error \[(\w{5})\]", err)
    refused = err.startswith(("spark-pg: database error", "spark-pg: error ["))
    if refused:  # one line: no CONTEXT naming PL/pgSQL internals
        assert err.endswith("\n") and "\n" not in err[:-1] and "PL/pgSQL" not in err, err
    if state:  # an argument the database refused exits 2, as one Python refuses; a constraint 1
        assert (state.group(1)[:2], code) in (("22", 2), ("23", 1)), err
    elif refused:
        assert any("\x00" in s for s in strings(list(inputs))), err  # psycopg refuses NUL client side


@HOSTILE
@given(
    tenant=hostile_text(140),
    text=hostile_text(3000),
    options=st.lists(
        st.tuples(
            st.sampled_from(
                ("--key", "--kind", "--category", "--source", "--importance", "--tier", "--priority")
            ),
            st.one_of(
                hostile_text(30), st.sampled_from(("nan", "inf", "-1", "0.5", "1e309", "insight", "pinned"))
            ),
        ),
        max_size=3,
    ),
)
def test_cli_add_refuses_or_stores_and_never_crashes(
    cli_db: str, db: Conn, tenant: str, text: str, options: list[tuple[str, str]]
) -> None:
    argv = ["add", "--tenant", tenant, "--defer-embedding", *[x for pair in options for x in pair], text]
    before = counts(db)
    code, _, err = run_cli(*argv)
    event(f"exit {code}")
    if code == 0:
        return
    check_cli_error(code, err, argv)
    assert counts(db) == before


@settings(HOSTILE, max_examples=25)  # each example embeds its query
@given(
    tenant=st.one_of(st.just("alice"), hostile_text(140)),
    query=st.one_of(st.just("deploy release"), hostile_text(1000)),
    k=st.integers(-5, 2000),
    explain=st.booleans(),
)
def test_cli_search_answers_or_refuses_and_never_crashes(
    cli_db: str, db: Conn, tenant: str, query: str, k: int, explain: bool
) -> None:
    argv = [
        "search",
        "--tenant",
        tenant,
        "--k",
        str(k),
        *(["--explain"] if explain else []),
        "--json",
        "--",
        query,
    ]
    before = counts(db)
    code, out, err = run_cli(*argv)
    event(f"exit {code}")
    if code == 0:
        assert isinstance(json.loads(out), list)
        return
    check_cli_error(code, err, argv)
    assert counts(db) == before


@HOSTILE
@given(file=ingest_files)
def test_cli_ingest_all_or_nothing_and_never_crashes(
    cli_db: str, db: Conn, tmp_path_factory: Any, file: tuple[str, str]
) -> None:
    suffix, text = file
    path = tmp_path_factory.mktemp("cli-ingest") / f"memories{suffix}"
    path.write_text(text, encoding="utf-8")
    before = counts(db)
    code, out, err = run_cli(
        "ingest", str(path), "--tenant", f"ing-{uuid.uuid4().hex[:6]}", "--quiet", "--defer-embedding"
    )
    event(f"exit {code}")
    if code == 0:
        assert "inserted" in out
        return
    check_cli_error(code, err, [text])
    assert counts(db) == before


# --- defects found (issue 6, point 5), each now tested as fixed ---------------------------------------------


@pytest.mark.parametrize(
    ("fn", "when", "params"),
    [
        ("retrieve", "'1900-01-01'", "{}"),
        ("advise", "'1900-01-01'", "{}"),
        ("reflect", "'1700-01-01'", "{}"),
        ("retrieve", "now()", '{"as_of": "2200-01-01"}'),
        ("retrieve", "now() - interval '2 days'", '{"half_life_days": 0.001}'),
    ],
)
def test_d1_very_old_memories_do_not_break_retrieval(db: Conn, fn: str, when: str, params: str) -> None:
    """Was D1: recency 0.5 ^ (age / half_life) underflowed for a memory ~88 years before as_of (22003 for the
    whole tenant); half-lives are now capped at 100 (still a real)."""
    tenant = f"old-{uuid.uuid4().hex[:8]}"
    try:
        db.execute(
            f"""INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash, kind, created_at)
                VALUES (%s, 'old', 'deploy the release', 'deploy the release', '\\x00', 'trace', {when})""",
            (tenant,),
        )
        db.execute(f"SELECT * FROM spark.{fn}(%s, 'deploy release', params => %s::jsonb)", (tenant, params))
    finally:
        db.execute("DELETE FROM spark.retrievals WHERE tenant = %s", (tenant,))
        db.execute("DELETE FROM spark.memories WHERE tenant = %s", (tenant,))


@pytest.mark.parametrize("fn", ["retrieve", "search_semantic"])
def test_d2_a_huge_query_vector_gives_finite_scores(db: Conn, fn: str) -> None:
    """Was D2: components near float's limit made cosine NaN, which passed every gate; such a vector is now
    compared at unit length."""
    vec = "[" + ",".join(["3e38"] * 384) + "]"
    column = "score" if fn == "retrieve" else "similarity"
    args = "'alice', 'zzz', %s::vector" if fn == "retrieve" else "'alice', %s::vector"
    rows = db.execute(f"SELECT {column} FROM spark.{fn}({args})", (vec,)).fetchall()
    unit = "[" + ",".join(["1"] * 384) + "]"  # the same direction: the same answer
    same = db.execute(f"SELECT {column} FROM spark.{fn}({args})", (unit,)).fetchall()
    assert [r[0] for r in rows] == pytest.approx([r[0] for r in same], abs=1e-5)
    assert all(finite(r[0]) for r in rows), rows


@pytest.mark.parametrize("words", [130_000, 60_000])
def test_d3_an_oversized_query_text_is_refused_fast(db: Conn, words: int) -> None:
    """Was D3: no size limit (1 MB failed with 54000, 420 KB took ~15 s); now 22023 over 10,000 characters."""
    rng = random.Random(words)
    query = " ".join("".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=6)) for _ in range(words))
    db.execute("SET statement_timeout = '2s'")
    try:
        for fn in ("retrieve", "reflect"):
            with pytest.raises(errors.InvalidParameterValue, match=r"query_text is .* the limit is 10000"):
                db.execute(f"SELECT count(*) FROM spark.{fn}('alice', %s)", (query,)).fetchall()
        assert db.execute("SELECT count(*) FROM spark.retrieve('alice', %s)", (query[:9_999],)).fetchone()
    finally:
        db.execute(f"SET statement_timeout = {TIMEOUT_MS}")


D4_REFUSED = (
    "(a|b){0,255}" * 30,  # ~1 s to compile on a fresh connection
    "(a|b){0,255}" * 41,  # ~2.4 s
    "a{0,255}" * 30,
    "(a|b){0,255}" * 2,
    "((a|b){0,10}c){0,100}",  # nested bounds multiply
    "(((a){0,9}b){0,9}c){0,9}d{0,200}",
    "[[:alpha:]]{0,50}" * 21,
    "x{99999999999}",  # past PostgreSQL's 255 as well
)
D4_ACCEPTED = (  # the largest of their kinds under the limit
    "(a|b){0,255}",
    "a{0,16}" * 62,
    "(a|b){0,12}" * 41,
    "[[:alpha:]]{0,50}" * 20,
    "[0-9a-f]{40}|[a-z]{1,255}[0-9]{1,255}",
    "(((a){0,9}b){0,9}c){0,9}",
    "(deploy|release|rollback|kubectl|helm|terraform|ansible|docker|compose|nginx){0,14}",
)


@pytest.mark.parametrize("pattern", D4_REFUSED)
def test_d4_patterns_that_compile_slowly_are_refused_by_both_checks(db: Conn, pattern: str) -> None:
    """Was D4: many bounded repetitions ('(a|b){0,255}' x 30: ~1 s to compile, x 41: ~2.4 s, on every fresh
    connection) passed both checks; now both refuse a pattern over 1000 atoms with its bounded repetitions
    written out (2201B in the database)."""
    problem = pattern_problem(pattern)
    assert problem is not None and problem.startswith("repeats too much"), problem
    try:
        with pytest.raises(errors.InvalidRegularExpression, match="repeats too much") as info:
            db.execute("SELECT spark.put_trigger_rule('alice', 'slow', %s, ARRAY['k1'])", (pattern,))
    finally:
        db.execute("DELETE FROM spark.trigger_rules WHERE tenant = 'alice' AND name = 'slow'")
    assert problem in str(info.value)  # the same words from both checks


@pytest.mark.parametrize("pattern", D4_ACCEPTED)
def test_d4_patterns_under_the_repetition_limit_are_accepted_and_compile_fast(
    hostile_db: str, pattern: str
) -> None:
    assert pattern_problem(pattern) is None
    with connect(hostile_db, statement_timeout_ms=TIMEOUT_MS, autocommit=True) as fresh:
        assert fresh.execute("SELECT spark._trigger_pattern_problem(%s)", (pattern,)).fetchone() == (None,)
    with connect(hostile_db, statement_timeout_ms=TIMEOUT_MS, autocommit=True) as fresh:  # an empty cache
        started = time.monotonic()
        fresh.execute("SELECT 'deploy' ~* %s", (pattern,))
        assert time.monotonic() - started < 0.5  # ~30 ms at most idle; the refused ones take 0.3 to 2.4 s


REPETITION_ATOMS = (
    "a",
    "b",
    "(",
    ")",
    "(a|b)",
    "|",
    "[[:alpha:]]",
    "[]a]",
    "[^]{]",
    "\\w",
    "\\{",
    "^",
    "*",
    "?",
    "{0,255}",
    "{3}",
    "{2,}",
    "{0,12}",
    "{1,100}",
    "+",
    "(a+)",
    "\\+",
    "{,5}",
    "{0,0000005}",
    "{",
    "[[:x",
    "[=a=]",
)


@settings(HOSTILE, max_examples=300)
@given(pattern=st.lists(st.sampled_from(REPETITION_ATOMS), min_size=1, max_size=60).map("".join))
def test_d4_both_checks_count_repetitions_alike(db: Conn, pattern: str) -> None:
    """spark._trigger_pattern_problem and trigger_patterns.pattern_problem refuse the same patterns for
    repeating too much, in the same words (each also compiles the pattern, where Python's re and PostgreSQL's
    differ: only the repetition verdicts are compared)."""
    ours = pattern_problem(pattern)
    theirs = db.execute("SELECT spark._trigger_pattern_problem(%s)", (pattern,)).fetchone()
    assert theirs is not None
    for words in ("repeats too much", "nests quantifiers"):
        verdicts = [p is not None and p.startswith(words) for p in (ours, theirs[0])]
        event(f"{words}: {verdicts[0]}")
        assert verdicts[0] == verdicts[1], (ours, theirs[0])
        if verdicts[0]:
            assert ours == theirs[0]


NESTED = ("(a+)+$", "((a+))+$", "((a*)b)*", "(x(ab)*){2,5}", "(a{2,})*", "(?:[a-z]+\\.)+com")
NOT_NESTED = ("(a+)?", "(\\+)+", "([+*])+", "(a{2})*", "(ab)+c*", "(deploy|release)+ now", "a+(b)+")


@pytest.mark.parametrize("pattern", NESTED + NOT_NESTED)
def test_nested_quantifiers_are_refused_at_any_depth_by_both_checks(db: Conn, pattern: str) -> None:
    """A group holding an unbounded repetition, at any depth, repeated again is refused by both checks
    (the database's check once saw only innermost groups: ((a+))+ passed); escaped or bracketed + and *
    are characters, and a bounded repetition inside is left to the written-out size."""
    ours = pattern_problem(pattern)
    theirs = db.execute("SELECT spark._trigger_pattern_problem(%s)", (pattern,)).fetchone()
    assert theirs is not None and ours == theirs[0]
    if pattern in NESTED:
        assert ours is not None and ours.startswith("nests quantifiers"), pattern
    else:
        assert ours is None, ours


D5_FILES = {
    "yaml-explicit-int": ("x.yaml", "- text: !!int abc\n"),
    "yaml-explicit-float": ("x.yaml", "- text: !!float abc\n"),
    "yaml-explicit-bool": ("x.yaml", "- text: !!bool maybe\n"),
    "yaml-explicit-timestamp": ("x.yaml", "- text: x\n  created_at: !!timestamp abc\n"),
    "yaml-bad-date": ("x.yaml", "- text: x\n  created_at: 2024-13-45\n"),
    "yaml-bad-time": ("x.yaml", "- text: x\n  created_at: 2024-01-01 25:00:00\n"),
    "yaml-deep": ("x.yaml", "- text: x\n  metadata: {a: " + "[" * 1500 + "]" * 1500 + "}\n"),
    "json-deep": ("x.jsonl", '{"text": "x", "metadata": ' + '{"a":' * 1500 + "1" + "}" * 1500 + "}\n"),
    "json-long-int": ("x.jsonl", '{"text": "x", "importance": ' + "1" * 5000 + "}\n"),
    "json-lone-surrogate": ("x.jsonl", '{"text": "x\\ud800y"}\n'),
    "yaml-lone-surrogate": ("x.yaml", '- text: "x\\ud800"\n'),
    "yaml-nul": ("x.yaml", "- text: x\x00\n"),
    "yaml-control-character": ("x.yaml", "- text: x\x01\n"),
}


@pytest.mark.parametrize("case", list(D5_FILES))
def test_d5_read_file_raises_only_ingest_error_naming_the_line(tmp_path: Path, case: str) -> None:
    """Was D5: YAML values their tag cannot build (!!int abc, 2024-13-45 ...) raised ValueError / KeyError /
    AttributeError, deep nesting RecursionError, a NUL in YAML ReaderError (the loader was built outside the
    try), a JSON integer over 4,300 digits ValueError, a lone surrogate UnicodeEncodeError. Now the YAML
    loader turns them into YAML errors at their line, nesting is capped at 100 levels, and JSON's number
    and depth limits and lone surrogates are IngestErrors too."""
    name, text = D5_FILES[case]
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(IngestError, match=rf"{re.escape(str(path))} line [12]\b"):
        read_file(path, "t")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("rules:\n  - name: r\n    pattern: !!int abc\n    surface: [k]\n", 3),
        ("rules:\n  - name: r\n    pattern: x\x00\n    surface: [k]\n", 3),
        ("rules:\n  - name: r\n    pattern: x\n    surface: " + "[" * 200 + "]" * 200 + "\n", 4),
        ("rules:\n  - &r {name: r, pattern: x, surface: [k]}\n  - *r\n", 3),
        ("rules:\n  - {name: r, pattern: x, surface: [k], 1: a, null: b}\n", 0),
    ],
)
def test_d5_load_rules_raises_only_trigger_rule_error(tmp_path: Path, text: str, line: int) -> None:
    """Was D5 (trigger files): load_rules caught only yaml.YAMLError, so '!!int abc' and friends raised
    ValueError (and mixed key types TypeError); rule files now use the ingest files' loader."""
    path = tmp_path / "rules.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TriggerRuleError, match=f"line {line}:" if line else "unknown key") as info:
        load_rules(path)
    assert str(path) in str(info.value)


def test_d6_yaml_aliases_are_refused(tmp_path: Path) -> None:
    """Was D6: aliases expanded without limit (a 'billion laughs' in metadata: 6 levels of 9 aliases, 531,441
    items from 7 short lines, were read; 8 levels ran for gigabytes); the YAML loader now refuses aliases."""
    levels = ["    a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, cur in zip("abcde", "bcdef", strict=True):
        levels.append(f"    {cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    path = tmp_path / "bomb.yaml"
    path.write_text("- text: x\n  tenant: t\n  metadata:\n" + "\n".join(levels) + "\n")
    started = time.monotonic()
    with pytest.raises(IngestError, match=r"bomb\.yaml line 5: .*alias \(\*a\)"):
        read_file(path)
    assert time.monotonic() - started < 1
    plain = tmp_path / "plain.yaml"  # an anchor alone expands nothing: still fine
    plain.write_text("- text: &t x\n  tenant: t\n")
    assert [r.text for r in read_file(plain)] == ["x"]


@pytest.mark.parametrize(
    "argv",
    [
        ("add", "--tenant", "t", "--defer-embedding", "text \udcff"),
        ("add", "--tenant", "t\udcff", "--defer-embedding", "text"),
        ("search", "--tenant", "alice", "query \udcff"),
        ("search", "--tenant", "alice\udcff", "query"),
        ("ingest", "memories-\udcff.jsonl"),
        ("search", "--tenant", "alice", "lone \ud800"),
    ],
)
def test_d7_invalid_utf8_arguments_are_refused(cli_db: str, db: Conn, argv: tuple[str, ...]) -> None:
    """Was D7: invalid UTF-8 on the command line (Python passes it as lone surrogates) crashed add and search
    with a traceback (UnicodeEncodeError, or TypeError from the tokenizer); main() now refuses any such
    argument before a command runs."""
    before = counts(db)
    code, out, err = run_cli(*argv)
    assert code == 2 and out == ""
    assert err.startswith("spark-pg: error: argument ") and "is not valid UTF-8 (" in err, err
    assert counts(db) == before


def test_an_invalid_utf8_argument_is_named_by_position_not_echoed() -> None:
    # the argument was printed whole: `trace add --intent 'PGPASSWORD=... caf\xe9'` put the password on stderr
    code, out, err = run_cli(
        "trace", "add", "--tenant", "t", "--intent", "PGPASSWORD=Hunter2secret caf\udce9"
    )
    assert code == 2 and out == ""
    assert err == "spark-pg: error: argument 6 is not valid UTF-8 (byte 0xe9 at byte 28)\n"


@pytest.mark.parametrize("k", ["99999999999", "2147483648", "-2147483649", "-99999999999999999999"])
def test_d8_a_k_beyond_int4_is_refused_like_any_other_bad_k(cli_db: str, k: str) -> None:
    """Was D8: a k beyond PostgreSQL's integer reached spark.retrieve as a bigint: 42883 'function
    spark.retrieve(..., k => bigint, ...) does not exist'; the CLI's --k now refuses it in _check_k's
    words."""
    code, _, err = run_cli("search", "--tenant", "alice", "--k", k, "deploy")
    check_cli_error(code, err, [])
    assert f"k must be between 1 and 1000, got {int(k)}" in err
    code, _, err = run_cli(
        "search", "--tenant", "alice", "--k", "2147483647", "deploy"
    )  # int4: the database's
    assert code == 2 and "[22023]" in err and "k must be between 1 and 1000" in err


@pytest.mark.parametrize(
    ("fn", "params"), [("retrieve", '{"pool_random": 1.0}'), ("reflect", '{"pool": 5.0}')]
)
def test_d9_an_integer_param_written_as_a_float_names_the_key(db: Conn, fn: str, params: str) -> None:
    """Was D9: 1.0 passed the range check and failed the ::integer cast with 22P02 naming nothing."""
    key = next(iter(json.loads(params)))
    with pytest.raises(errors.InvalidParameterValue, match=rf"params\.{key} must be an integer"):
        db.execute(f"SELECT * FROM spark.{fn}('alice', 'deploy', params => %s::jsonb)", (params,)).fetchall()


@pytest.mark.parametrize(
    "value",
    [
        "NaN",
        "Infinity",
        "-Infinity",
        "1e999",
        '"\\u0000"',
        '{"\\u0000": 1}',
        '["\\udc00"]',
        "[" * 101 + "]" * 101,
    ],
)
def test_d10_metadata_the_database_cannot_store_is_refused(tmp_path: Path, value: str) -> None:
    """Was D10: metadata with NaN, Infinity or \\u0000 passed validation and failed at the database (22P02 /
    22P05, after embedding); read_file now refuses it, and lone surrogates and nesting past 100 levels, naming
    the line and field."""
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"tenant": "t", "text": "ok"}\n{"tenant": "t", "text": "x", "metadata": {"a": ' + value + "}}\n"
    )
    with pytest.raises(IngestError, match=r"m\.jsonl line 2, field 'metadata'"):
        read_file(path)


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])  # \v \f \x1c-\x1e: escaped in JSON
def test_d11_jsonl_lines_end_at_newline_only(tmp_path: Path, separator: str) -> None:
    """Was D11: JSONL was split with str.splitlines(), which also breaks on U+2028, U+2029 and U+0085, which
    JSON allows raw inside strings, so a valid file was refused; lines now end at \\n (or \\r\\n) only."""
    path = tmp_path / "m.jsonl"
    rows = [{"tenant": "t", "text": f"one{separator}two"}, {"tenant": "t", "text": "three"}]
    path.write_bytes("\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows).encode() + b"\r\n")
    assert [r.text for r in read_file(path)] == [f"one{separator}two", "three"]


def test_d12_posix_classes_pass_the_python_check_without_warnings() -> None:
    """Was D12: Python's re.compile warned (FutureWarning) on POSIX classes such as '[[:alpha:]]', valid in
    PostgreSQL, so parse_rules raised wherever warnings are errors; the check now compiles without them."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rules = parse_rules({"rules": [{"name": "r", "pattern": "[[:alpha:]]+ deploy", "surface": ["k"]}]})
        assert [r.pattern for r in rules] == ["[[:alpha:]]+ deploy"]
        assert pattern_problem("[[:digit:][:space:]]{2} x") is None
