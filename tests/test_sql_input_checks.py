"""Edge inputs of the SQL functions that once slipped past their checks: each is refused with an errcode and a
message naming the parameter, or (where NULL has a meaning) answered as documented."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest
from psycopg import errors
from psycopg.types.json import Jsonb

Conn = psycopg.Connection[Any]
DIM = 384


def one_hot(dim: int = DIM) -> str:
    return "[1" + ",0" * (dim - 1) + "]"


def refused(conn: Conn, sql: str, args: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message), conn.transaction():
        conn.execute(sql, args).fetchall()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ('{"as_of": "infinity"}', "params.as_of must be a finite time"),
        ('{"as_of": "-infinity"}', "params.as_of must be a finite time"),
        # parsed, then as_of - recent_days fell off PostgreSQL's range: a raw 22008 that named nothing
        ('{"as_of": "4714-11-24 00:00:00+00 BC"}', "params.as_of must be a time from year 1 to 9999"),
        ('{"as_of": "4700-01-01 BC", "recent_days": 36500}', "params.as_of must be a time from year 1"),
        ('{"as_of": "10000-01-01 00:00:00+00"}', "params.as_of must be a time from year 1 to 9999"),
        # numeric holds it, double precision does not: the cast used to fail without naming the key (22003)
        ('{"w_keyword": 1e-400}', "params.w_keyword is too close to 0 .below 1e-9: write 0."),
        ('{"min_similarity": -1e-330}', "params.min_similarity is too close to 0 .below 1e-9"),
        # double precision holds them, the arithmetic did not: an overflow dividing by the half-life, an
        # underflow multiplying the weight (22003 without the key)
        ('{"decay_half_life_days": 1e-310}', "params.decay_half_life_days is too close to 0"),
        (
            '{"w_recency": 1e-300, "half_life_days": 0.001, "recency_floor": 0}',
            "params.w_recency is too close",
        ),
    ],
)
@pytest.mark.parametrize("function", ["retrieve", "explain", "reflect"])
def test_params_no_double_precision_or_timestamp_can_hold_are_refused(
    conn: Conn, function: str, params: str, message: str
) -> None:
    if function == "reflect" and "as_of" not in params:
        params = '{"min_score": 1e-400}'
        message = "params.min_score is too close to 0 .below 1e-9: write 0."
    refused(
        conn,
        f"SELECT * FROM spark.{function}('t', 'deploy', NULL, 5, %s::jsonb)",
        (params,),
        errors.InvalidParameterValue,
        message,
    )


@pytest.mark.parametrize("function", ["retrieve", "explain", "reflect"])
def test_the_first_and_last_as_of_with_the_widest_windows_are_fine(conn: Conn, function: str) -> None:
    for at in ("0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"):
        wide = {} if function == "reflect" else {"recent_days": 36500, "include_system": False}
        params = json.dumps({"as_of": at} | wide)
        sql = f"SELECT * FROM spark.{function}('as-of-edges', 'deploy', NULL, 5, %s::jsonb)"
        assert conn.execute(sql, (params,)).fetchall() == []


@pytest.mark.parametrize("value", ["0", "-0", "1e-9", "0.000000001"])
def test_the_smallest_params_that_mean_something_are_fine(conn: Conn, value: str) -> None:
    conn.execute(
        "SELECT * FROM spark.retrieve('t', 'deploy', NULL, 5, %s::jsonb)", (f'{{"w_keyword": {value}}}',)
    ).fetchall()


@pytest.mark.parametrize("blank", ["", "   ", "\t\n", " \r\n\t ", "\u00a0", "\u2028\u3000"])
def test_a_blank_query_without_a_vector_is_refused(conn: Conn, blank: str) -> None:
    for function in ("retrieve", "explain", "reflect"):
        refused(
            conn,
            f"SELECT * FROM spark.{function}('t', %s, NULL, 5)",
            (blank,),
            errors.InvalidParameterValue,
            "query_text must not be empty when query_embedding is NULL",
        )


@pytest.mark.parametrize(
    ("k", "error"),
    [
        (0, errors.InvalidParameterValue),
        (1001, errors.InvalidParameterValue),
        (None, errors.NullValueNotAllowed),
    ],
)
def test_explain_checks_k_like_retrieve(conn: Conn, k: int | None, error: type[Exception]) -> None:
    refused(conn, "SELECT * FROM spark.explain('t', 'deploy', NULL, %s)", (k,), error, "k must")


def test_explain_edges(conn: Conn) -> None:
    refused(conn, "SELECT * FROM spark.explain(NULL, 'x')", (), errors.NullValueNotAllowed, "tenant")
    refused(conn, "SELECT * FROM spark.explain('', 'x')", (), errors.InvalidParameterValue, "tenant")
    # a tenant without memories (and without the pack) answers nothing; the largest k allowed is fine
    empty = "SELECT * FROM spark.explain('nobody-here', 'deploy', NULL, 1000, '{\"include_system\": false}')"
    assert conn.execute(empty).fetchall() == []


@pytest.mark.parametrize("tenant", ["", "x" * 129])
def test_north_star_checks_a_named_tenant(conn: Conn, tenant: str) -> None:
    refused(conn, "SELECT * FROM spark.north_star(%s)", (tenant,), errors.InvalidParameterValue, "tenant")


def test_north_star_of_every_tenant_and_of_one_without_calls(conn: Conn) -> None:
    conn.execute(
        "SELECT * FROM spark.advise('ns-a', 'pin base images', NULL, 5, session_id => 's1')"
    ).fetchall()
    rows = conn.execute("SELECT tenant_name, sessions FROM spark.north_star()").fetchall()
    assert ("ns-a", 1) in rows
    assert conn.execute("SELECT * FROM spark.north_star('nobody-here')").fetchall() == []


@pytest.mark.parametrize("session", ["", "s" * 257])
def test_record_outcome_checks_the_session_like_advise(conn: Conn, session: str) -> None:
    refused(
        conn,
        "SELECT spark.record_outcome('t', 1, 'helpful', session_id => %s)",
        (session,),
        errors.InvalidParameterValue,
        "session_id must be 1 to 256 characters",
    )


def test_assign_tiers_edges(conn: Conn) -> None:
    refused(conn, "SELECT * FROM spark.assign_tiers(NULL)", (), errors.NullValueNotAllowed, "tenant")
    refused(conn, "SELECT * FROM spark.assign_tiers('')", (), errors.InvalidParameterValue, "tenant")
    for at in ("infinity", "-infinity", "4714-12-24 BC", "0001-12-31 23:59:59+00 BC", "10000-01-01"):
        refused(
            conn,
            "SELECT * FROM spark.assign_tiers('t', %s::timestamptz)",
            (at,),
            errors.InvalidParameterValue,
            "as_of must be a time from year 1 to 9999",
        )
    for at in ("0001-01-01 00:00:00+00", "9999-12-31 23:59:59+00"):  # the first and last accepted
        assert conn.execute("SELECT * FROM spark.assign_tiers('t', %s::timestamptz)", (at,)).fetchall() == []
    assert conn.execute("SELECT * FROM spark.assign_tiers('nobody-here')").fetchall() == []


@pytest.mark.parametrize(
    ("min_age", "cooldown", "names"),
    [
        ("300000 years", "90 days", "min_age"),
        ("7 days", "2000 years", "cooldown"),
        ("infinity", "1 day", "min_age"),
    ],
)
def test_revalue_sample_refuses_ages_no_timestamp_can_reach(
    conn: Conn, min_age: str, cooldown: str, names: str
) -> None:
    refused(
        conn,
        "SELECT * FROM spark.revalue_sample('t', 5, 0.3, %s::interval, %s::interval)",
        (min_age, cooldown),
        errors.InvalidParameterValue,
        f"{names} must be at most 1000 years",
    )


def test_learned_trigger_functions_refuse_null_arguments_with_22004(conn: Conn) -> None:
    for sql, name in (
        ("SELECT spark.propose_triggers(NULL)", "tenant"),
        ("SELECT spark.propose_triggers('t', NULL)", "min_helpful"),
        ("SELECT * FROM spark.promote_triggers(NULL)", "tenant"),
        ("SELECT * FROM spark.promote_triggers('t', NULL)", "min_hits"),
        ("SELECT * FROM spark.promote_triggers('t', 5, NULL)", "min_precision"),
    ):
        refused(conn, sql, (), errors.NullValueNotAllowed, name)
    # a tenant with no advise calls: nothing to propose or promote
    assert conn.execute("SELECT spark.propose_triggers('nobody-here')").fetchone() == (0,)
    assert conn.execute("SELECT * FROM spark.promote_triggers('nobody-here')").fetchall() == []


RULE = {
    "name": "r1",
    "pattern": "deploy",
    "surface": ["k1"],
    "priority": "high",
    "interrupt": False,
    "origin": "static",
    "confidence": 0.9,
    "shadow": False,
    "metadata": Jsonb({}),
}

TYPES = {
    "name": "text",
    "pattern": "text",
    "surface": "text[]",
    "priority": "text",
    "interrupt": "boolean",
    "origin": "text",
    "confidence": "real",
    "shadow": "boolean",
    "metadata": "jsonb",
}


@pytest.mark.parametrize("field", sorted(RULE))
def test_put_trigger_rule_refuses_every_null_argument_with_22004(conn: Conn, field: str) -> None:
    args = RULE | {field: None}
    names = ", ".join(f"{k} => %({k})s::{TYPES[k]}" for k in args)
    refused(
        conn,
        f"SELECT spark.put_trigger_rule(tenant => 't', {names})",
        args,
        errors.NullValueNotAllowed,
        f"{field} must not be NULL",
    )


def test_put_trigger_rule_refuses_metadata_over_64_kib_and_writes_nothing(conn: Conn) -> None:
    """Was (audit W, left out in session 25): any size was stored, and every call of the tenant reads its
    rules."""
    names = ", ".join(f"{k} => %({k})s::{TYPES[k]}" for k in RULE)
    call = f"SELECT spark.put_trigger_rule(tenant => 'meta-cap', {names})"
    big = {"note": "x" * 70_000}
    refused(
        conn,
        call,
        RULE | {"metadata": Jsonb(big)},
        errors.InvalidParameterValue,
        "rule r1: metadata must be at most 65,536 bytes as JSON text, got 70,012",
    )
    stored = "SELECT count(*) FROM spark.trigger_rules WHERE tenant = 'meta-cap'"
    assert conn.execute(stored).fetchone() == (0,)
    conn.execute(call, RULE | {"metadata": Jsonb({"note": "x" * 65_000})})  # under the cap: stored
    assert conn.execute(stored).fetchone() == (1,)


def test_activate_model_refuses_a_null_name_with_22004(conn: Conn) -> None:
    refused(conn, "SELECT * FROM spark.activate_model(NULL)", (), errors.NullValueNotAllowed, "name")


def test_warnings_ignore_a_vector_of_another_model_like_the_advice_does(conn: Conn) -> None:
    # a client still on the old model during a switch: its vector (here another dimension) must not reach
    # spark.reflect, which used to fail the whole call with 22000
    conn.execute("SELECT spark.register_model('warn-test-model', %s, 'mean', 256)", (DIM,))
    conn.execute("SELECT * FROM spark.activate_model('warn-test-model')")
    text = "Intent: deploy the payments service | Outcome: failure | Issue: the migration locked the table"
    conn.execute(
        """INSERT INTO spark.memories (tenant, key, kind, text, descriptor, content_hash, metadata,
                                       action_domain, actionability)
           VALUES ('warn-t', 'trace:deploy', 'trace', %(d)s, %(d)s, sha256('x'), '{"outcome": "failure"}',
                   'general', 0)""",
        {"d": text},
    )
    rows = conn.execute(
        """SELECT key, warning, why
           FROM spark.advise_with_warnings('warn-t', 'deploy the payments service', '[1,0,0]'::vector, 5,
                                           '{"query_model": "older-model"}', warning_min_score => 0)"""
    ).fetchall()
    warnings = [(key, why) for key, warning, why in rows if warning]
    assert [key for key, _ in warnings] == ["trace:deploy"]  # found lexically, by its words
    assert all(why["match"] != "semantic" for _, why in warnings)
    # blank text and a vector of another model: nothing to reflect on, the advice alone (as spark.advise)
    assert conn.execute(
        """SELECT count(*) FILTER (WHERE warning) FROM spark.advise_with_warnings('warn-t', '  ',
               '[1,0,0]'::vector, 5, '{"query_model": "older-model"}')"""
    ).fetchone() == (0,)
    refused(  # the same vector without saying which model made it is still an error
        conn,
        "SELECT * FROM spark.advise_with_warnings('warn-t', 'deploy', '[1,0,0]'::vector, 5)",
        (),
        errors.DataException,
        "3 dimensions",
    )


def test_warnings_with_no_model_registered_answer_as_the_advice_does(conn: Conn) -> None:
    """Was: with no active model and a blank text, spark.advise answered (the vector ignored) but the
    warnings passed the vector on to spark.reflect, which refused the blank text: 22023 for the call."""
    conn.execute("UPDATE spark.embedding_models SET active = false")  # rolled back with the test
    call = "SELECT count(*) FROM spark.{}('warn-t', %s, '[1,0,0]'::vector, 5)"
    assert conn.execute(call.format("advise"), ("  ",)).fetchone() == (0,)
    assert conn.execute(call.format("advise_with_warnings"), ("  ",)).fetchone() == (0,)
    conn.execute(
        """INSERT INTO spark.memories (tenant, key, kind, text, descriptor, content_hash, metadata)
           VALUES ('warn-t', 'trace:x', 'trace', 'deploy failed', 'deploy failed', sha256('x'),
                   '{"outcome": "failure"}')"""
    )
    why = conn.execute(  # with words, the reflection runs and says why the vector was not used
        "SELECT why FROM spark.advise_with_warnings('warn-t', 'deploy failed', '[1,0,0]'::vector, 5, "
        "warning_min_score => 0) WHERE warning"
    ).fetchone()
    assert why is not None and why[0]["query_embedding"].startswith("ignored: no embedding model registered")


def test_the_why_helper_is_stable_not_immutable(conn: Conn) -> None:
    # its week is to_char of a timestamptz, which follows the session's TimeZone
    row = conn.execute("SELECT provolatile FROM pg_proc WHERE oid = 'spark._why'::regproc").fetchone()
    assert row == ("s",)


def without_a_model(conn: Conn) -> None:
    """No active embedding model for the rest of the test (other modules may have committed one)."""
    conn.execute("UPDATE spark.embedding_models SET active = false WHERE active")
    assert conn.execute("SELECT id FROM spark.active_model()").fetchone() == (None,)


@pytest.mark.parametrize("blank", ["", "  "])
def test_reflect_without_a_model_refuses_a_blank_query_saying_the_vector_is_ignored(
    conn: Conn, blank: str
) -> None:
    without_a_model(conn)
    refused(  # it used to say "when query_embedding is NULL", though a vector was given
        conn,
        "SELECT * FROM spark.reflect('t', %s, '[1,0,0]'::vector, 5)",
        (blank,),
        errors.InvalidParameterValue,
        "query_text must not be empty: query_embedding is ignored while no embedding model is registered",
    )


@pytest.mark.parametrize("function", ["retrieve", "explain", "reflect"])
def test_a_zero_vector_is_refused_even_without_a_model(conn: Conn, function: str) -> None:
    without_a_model(conn)
    refused(
        conn,
        f"SELECT * FROM spark.{function}('t', 'deploy', '[0,0,0]'::vector, 5)",
        (),
        errors.InvalidParameterValue,
        "zero vector",
    )


def test_retrieve_refuses_a_zero_vector_of_another_model(conn: Conn) -> None:
    conn.execute("SELECT spark.register_model('zero-test-model', %s, 'mean', 256)", (DIM,))
    conn.execute("SELECT * FROM spark.activate_model('zero-test-model')")
    sql = "SELECT * FROM spark.retrieve('t', 'deploy', %s::vector, 5, '{\"query_model\": \"older-model\"}')"
    conn.execute(sql, ("[1,0,0]",)).fetchall()  # another model's vector: ignored, lexical mode
    refused(conn, sql, ("[0,0,0]",), errors.InvalidParameterValue, "zero vector")


def test_record_outcome_refuses_a_null_source_with_22004(conn: Conn) -> None:
    refused(  # it used to be 22023, as for a bad source
        conn,
        "SELECT spark.record_outcome('t', 1, 'helpful', source => NULL)",
        (),
        errors.NullValueNotAllowed,
        "source must not be NULL",
    )


@pytest.mark.parametrize(
    ("tenant", "outcome", "source", "error", "message"),
    [
        (None, "helpful", "api", errors.NullValueNotAllowed, "tenant must not be NULL"),
        ("t", None, "api", errors.NullValueNotAllowed, "outcome must not be NULL"),
        ("", "helpful", "api", errors.InvalidParameterValue, "tenant must be 1 to 128 characters"),
        ("t", "helpful", "", errors.InvalidParameterValue, "source must be 1 to 64 characters"),
        ("t", "helpful", "s" * 65, errors.InvalidParameterValue, "source must be 1 to 64 characters"),
    ],
)
def test_record_outcome_edges_name_the_argument(
    conn: Conn, tenant: str | None, outcome: str | None, source: str, error: type[Exception], message: str
) -> None:
    refused(
        conn,
        "SELECT spark.record_outcome(%s, 1, %s, source => %s)",
        (tenant, outcome, source),
        error,
        message,
    )


@pytest.mark.parametrize(
    ("query", "k", "error", "message"),
    [
        (None, 5, errors.NullValueNotAllowed, "query_text must not be NULL"),
        ("deploy", None, errors.NullValueNotAllowed, "k must not be NULL"),
        ("deploy", 0, errors.InvalidParameterValue, "k must be between 1 and 1000"),
    ],
)
def test_advise_edges_name_the_argument(
    conn: Conn, query: str | None, k: int | None, error: type[Exception], message: str
) -> None:
    refused(conn, "SELECT * FROM spark.advise('t', %s, NULL, %s)", (query, k), error, message)


def test_advise_for_a_tenant_without_memories_answers_nothing(conn: Conn) -> None:
    rows = conn.execute(
        "SELECT * FROM spark.advise('nobody-here', 'deploy', NULL, 5, '{\"include_system\": false}')"
    ).fetchall()
    assert rows == []


def add_failure_trace(conn: Conn, tenant: str) -> None:
    text = "Intent: deploy the payments service | Outcome: failure | Issue: the migration locked the table"
    conn.execute(
        """INSERT INTO spark.memories (tenant, key, kind, text, descriptor, content_hash, metadata,
                                       action_domain, actionability)
           VALUES (%(t)s, 'trace:deploy', 'trace', %(d)s, %(d)s, sha256('x'), '{"outcome": "failure"}',
                   'general', 0)""",
        {"t": tenant, "d": text},
    )


@pytest.mark.parametrize(
    ("min_score", "k", "message"),
    [
        (None, 2, "warning_min_score must not be NULL"),
        (0.5, None, "warning_k must not be NULL"),
        (None, None, "warning_k must not be NULL"),
    ],
)
def test_advise_with_warnings_refuses_a_null_warning_argument_with_22004(
    conn: Conn, min_score: float | None, k: int | None, message: str
) -> None:
    refused(
        conn,
        """SELECT * FROM spark.advise_with_warnings('t', 'deploy', NULL, 5,
               warning_min_score => %s::double precision, warning_k => %s::integer)""",
        (min_score, k),
        errors.NullValueNotAllowed,
        message,
    )


def test_advise_with_warnings_gives_no_warning_for_warning_k_zero(conn: Conn) -> None:
    add_failure_trace(conn, "warn-zero")
    sql = """SELECT count(*) FILTER (WHERE warning), count(*) FILTER (WHERE NOT warning)
             FROM spark.advise_with_warnings('warn-zero', 'deploy the payments service', NULL, 5,
                                             '{"include_system": false}', warning_min_score => 0,
                                             warning_k => %s)"""
    warned = conn.execute(sql, (2,)).fetchone()
    assert warned is not None and warned[0] == 1  # the past failure, found by its words
    assert conn.execute(sql, (0,)).fetchone() == (0, warned[1])  # the advice alone, unchanged


def test_advise_with_warnings_for_a_tenant_without_memories_answers_nothing(conn: Conn) -> None:
    rows = conn.execute(
        """SELECT * FROM spark.advise_with_warnings('nobody-here', 'deploy', NULL, 5,
                                                    '{"include_system": false}', warning_min_score => 0)"""
    ).fetchall()
    assert rows == []


def test_revalue_apply_on_a_tenant_without_memories(conn: Conn) -> None:
    assert conn.execute("SELECT * FROM spark.revalue_apply('nobody-here', '[]')").fetchall() == []
    add_failure_trace(conn, "revalue-other")  # a real id, of another tenant
    row = conn.execute("SELECT id FROM spark.memories WHERE tenant = 'revalue-other'").fetchone()
    assert row is not None
    refused(
        conn,
        "SELECT * FROM spark.revalue_apply('nobody-here', %s)",
        (Jsonb([{"id": row[0], "importance": 0.5}]),),
        errors.InvalidParameterValue,
        re.escape(f"decisions[0]: id {row[0]} is not a memory of tenant 'nobody-here'"),
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # the name's unique index could not hold it: 54000 "index row size exceeds" named nothing
        (("m" * 6400, ""), "name must be a model name of 1 to 200 characters, got 6400 characters"),
        (("m" * 201, ""), "name must be a model name of 1 to 200 characters, got 201 characters"),
        (("m", "q" * 1001), "query_prefix is 1001 characters; the limit is 1000"),
    ],
)
def test_register_model_refuses_an_over_long_name_or_prefix_with_22023(
    conn: Conn, args: tuple[str, str], message: str
) -> None:
    refused(
        conn,
        "SELECT spark.register_model(%s, 8, 'mean', 128, query_prefix => %s)",
        args,
        errors.InvalidParameterValue,
        message,
    )


def test_register_model_takes_a_name_and_prefixes_at_their_limits(conn: Conn) -> None:
    name = "m" * 200
    conn.execute("SELECT spark.register_model(%s, 8, 'mean', 128, %s, %s)", (name, "q" * 1000, "d" * 1000))
    row = conn.execute(
        "SELECT length(query_prefix), length(document_prefix) FROM spark.embedding_models WHERE name = %s",
        (name,),
    ).fetchone()
    assert row == (1000, 1000)


@pytest.mark.parametrize(
    ("tool", "family", "message"),
    [
        ("t" * 257, None, "tool_name is 257 characters; the limit is 256"),
        (None, "f" * 300, "intent_family is 300 characters; the limit is 256"),
    ],
)
def test_advise_refuses_an_over_long_tool_name_or_family_and_logs_nothing(
    conn: Conn, tool: str | None, family: str | None, message: str
) -> None:
    before = conn.execute("SELECT count(*) FROM spark.retrievals").fetchone()
    refused(
        conn,
        "SELECT * FROM spark.advise('t', 'deploy', tool_name => %s, intent_family => %s)",
        (tool, family),
        errors.InvalidParameterValue,
        message,
    )
    assert conn.execute("SELECT count(*) FROM spark.retrievals").fetchone() == before


def test_advise_records_a_tool_name_and_family_at_the_limit(conn: Conn) -> None:
    conn.execute(
        "SELECT * FROM spark.advise('t', 'deploy', tool_name => %s, intent_family => %s)",
        ("t" * 256, "f" * 256),
    ).fetchall()
    row = conn.execute(
        "SELECT length(tool_name), length(intent_family) FROM spark.retrievals WHERE tenant = 't'"
    ).fetchone()
    assert row == (256, 256)


@pytest.mark.parametrize(
    "surface",
    [
        "{{a,b},{c,d}}",  # two dimensions: unnest flattened it, so it was stored and never matched as given
        "{" + "k" * 513 + "}",  # longer than any memory key (spark.memories.key: 1 to 512 characters)
    ],
)
def test_put_trigger_rule_refuses_a_surface_no_memory_key_list_can_be(conn: Conn, surface: str) -> None:
    refused(
        conn,
        "SELECT spark.put_trigger_rule('t', 'r1', 'deploy', %s::text[])",
        (surface,),
        errors.InvalidParameterValue,
        "surface must list 1 to 50 memory keys of 1 to 512 characters",
    )


def test_check_k_refuses_a_null_bound(conn: Conn) -> None:
    refused(conn, "SELECT spark._check_k(5, NULL)", (), errors.NullValueNotAllowed, "max_k must not be NULL")


TENANT_CALLS = {
    "advise": "SELECT * FROM spark.advise(%s, 'deploy')",
    "advise_with_warnings": "SELECT * FROM spark.advise_with_warnings(%s, 'deploy')",
    "assign_tiers": "SELECT * FROM spark.assign_tiers(%s)",
    "explain": "SELECT * FROM spark.explain(%s, 'deploy')",
    "north_star": "SELECT * FROM spark.north_star(%s)",
    "promote_triggers": "SELECT * FROM spark.promote_triggers(%s)",
    "propose_triggers": "SELECT * FROM spark.propose_triggers(%s)",
    "put_trigger_rule": "SELECT spark.put_trigger_rule(%s, 'r', 'deploy', ARRAY['k'])",
    "record_outcome": "SELECT spark.record_outcome(%s, 1, 'helpful')",
    "reflect": "SELECT * FROM spark.reflect(%s, 'deploy')",
    "refresh_tenant_stats": "SELECT * FROM spark.refresh_tenant_stats(%s)",
    "retrieve": "SELECT * FROM spark.retrieve(%s, 'deploy')",
    "revalue_apply": "SELECT * FROM spark.revalue_apply(%s, '[]')",
    "revalue_sample": "SELECT * FROM spark.revalue_sample(%s, 5)",
    "search_semantic": f"SELECT * FROM spark.search_semantic(%s, '{one_hot()}')",
    "tenant_index_plan": "SELECT * FROM spark.tenant_index_plan(%s)",
}


def test_every_public_function_taking_a_tenant_is_listed(conn: Conn) -> None:
    """TENANT_CALLS covers each spark.* function with a tenant argument (a new one joins the test below)."""
    names = {
        r[0]
        for r in conn.execute(
            r"""SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'spark'::regnamespace
                  AND p.proname !~ '^_' AND pg_get_function_identity_arguments(p.oid) ~ '\mtenant text'"""
        ).fetchall()
    }
    assert names == set(TENANT_CALLS)


# white space Python's str.strip() removes and [[:space:]] did not (audit W): no-break spaces, the separators
# \x1c-\x1f, NEL, Unicode's line separator
UNICODE_BLANKS = ["\u00a0", "\x1c\x1f", "\u0085", "\u2007\u202f", "\u2028 \u3000"]


@pytest.mark.parametrize("blank", [" ", "\t", " \n ", *UNICODE_BLANKS])
@pytest.mark.parametrize("function", sorted(TENANT_CALLS))
def test_a_blank_tenant_is_refused_by_every_function(conn: Conn, function: str, blank: str) -> None:
    """The Python API refuses a tenant of white space; the SQL functions took one, so a tenant could hold
    trigger rules and an advise log but never store a memory (the audit's `triggers load --tenant " "`)."""
    refused(conn, TENANT_CALLS[function], (blank,), errors.InvalidParameterValue, "tenant must not be blank")


def test_python_and_sql_agree_on_what_is_blank(conn: Conn) -> None:
    every = "".join(chr(c) for c in range(0x3001))
    spaces = "".join(c for c in every if not c.strip())
    row = conn.execute(
        "SELECT string_agg(c, '' ORDER BY o) FILTER (WHERE spark._blank(c)) "
        "FROM unnest(regexp_split_to_array(%s, '')) WITH ORDINALITY u(c, o)",
        (every.replace("\x00", ""),),
    ).fetchone()
    assert row == (spaces,)
    assert conn.execute("SELECT spark._blank(''), spark._blank(NULL), spark._blank('a ')").fetchone() == (
        True,
        None,
        False,
    )


@pytest.mark.parametrize(
    ("params", "message"),
    [
        # a log row held a megabyte of it (audit W)
        ({"trigger_text": "rm -rf " * 1500}, "params.trigger_text is 10500 characters; the limit is 10000"),
        ({"query_model": "m" * 201}, "params.query_model must be a model name .up to 200 characters."),
        ({"domains": ["x"] * 101}, "params.domains must be null or an array of up to 100"),
        ({"domains": ["x" * 101]}, "params.domains must be null or an array of up to 100"),
        # PostgreSQL's other readings of a time: one of them depends on the session's DateStyle
        ({"as_of": "tomorrow"}, "params.as_of must be an ISO 8601 time string"),
        ({"as_of": "1/2/2020"}, "params.as_of must be an ISO 8601 time string"),
        ({"as_of": "May 1 2024"}, "params.as_of must be an ISO 8601 time string"),
        # a time padded to a megabyte parses, and was logged whole (found in review); the message echoes 80
        ({"as_of": " " * 100_000 + "2024-05-01"}, 'params.as_of must be an ISO 8601 time string .* got "  '),
    ],
)
def test_params_too_large_to_log_or_not_iso_are_refused(
    conn: Conn, params: dict[str, Any], message: str
) -> None:
    with pytest.raises(errors.InvalidParameterValue, match=message) as caught, conn.transaction():
        conn.execute("SELECT * FROM spark.advise('t', 'deploy', NULL, 5, %s)", (Jsonb(params),)).fetchall()
    assert len(str(caught.value)) < 12_000  # the message never echoes a megabyte either


@pytest.mark.parametrize(
    "at",
    [
        "2024-05-01",
        "2024-05-01T12:00",
        "2024-05-01 12:00:00.123456+02:00",
        "2024-05-01t12:00:00z",
        # found in review: ISO 8601 and RFC 3339 forms PostgreSQL reads, refused at first
        "20240501T123000Z",  # basic format
        "2024-05-01T12:30:00.123456789Z",  # nanoseconds (Go, Kubernetes)
        "1850-01-01T00:17:30+00:17:30",  # an offset with seconds, as to_jsonb writes a historical zone's
    ],
)
def test_iso_times_of_every_precision_are_taken_as_as_of_and_the_log_stays_small(conn: Conn, at: str) -> None:
    params = {"as_of": at, "trigger_text": "x" * 10000, "query_model": "m" * 200, "domains": ["d"] * 100}
    sql = "SELECT retrieval_id FROM spark.advise('t', 'deploy', NULL, 5, %s)"
    assert conn.execute(sql, (Jsonb(params),)).fetchall() == []
    logged = conn.execute(
        "SELECT length(params::text) FROM spark.retrievals WHERE tenant = 't' ORDER BY id DESC LIMIT 1"
    ).fetchone()
    assert logged is not None and logged[0] < 12_000  # every params value is bounded


@pytest.mark.parametrize(
    ("reflect_params", "message"),
    [
        ('{"bogus": 1}', r'unknown reflect_params key "bogus"'),
        ("[]", "reflect_params must be a JSON object, got array"),
        ('{"min_score": 2}', r"reflect_params.min_score must be a number from 0 to 1"),
        ('{"kinds": []}', r"reflect_params.kinds must be a non-empty array"),
        ('{"as_of": "tomorrow"}', r"reflect_params.as_of must be an ISO 8601 time string"),
    ],
)
def test_advise_with_warnings_names_reflect_params_in_its_errors(
    conn: Conn, reflect_params: str, message: str
) -> None:
    """Was (audit W): the messages said params, whose allowed keys are spark.retrieve's."""
    refused(
        conn,
        "SELECT * FROM spark.advise_with_warnings('t', 'x', reflect_params => %s::jsonb)",
        (reflect_params,),
        errors.InvalidParameterValue,
        message,
    )


@pytest.mark.parametrize(
    ("name", "max_tokens", "message"),
    [
        ("   ", 256, "name must be a model name, not blank and without control"),
        ("\u00a0", 256, "name must be a model name, not blank"),
        ("\x01\x1b[2J", 256, "without control, bidirectional or invisible characters\n"),
        ("m\u0085", 256, "without control"),  # C1: to_json echoed it raw (found in review)
        ("m\u202ex", 256, "without control"),
        ("m\u200bx", 256, "without control"),
        ("m", 2_000_000, "max_tokens must be between 1 and 1000000, got 2000000"),
    ],
)
def test_register_model_refuses_a_blank_or_control_name_and_an_absurd_max_tokens(
    conn: Conn, name: str, max_tokens: int, message: str
) -> None:
    refused(
        conn,
        "SELECT spark.register_model(%s, 8, 'mean', %s)",
        (name, max_tokens),
        errors.InvalidParameterValue,
        message,
    )
