"""The Python API's own inputs: a bad value is an InputError naming it, raised before anything is written, and
the caller's connection is left as it was (a fresh-eyes audit's findings, session 14)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from spark_pg.advisor import Advisor, AdvisorOptions
from spark_pg.client import SparkClient
from spark_pg.config import Settings
from spark_pg.errors import InputError, SchemaError, SparkPgError
from spark_pg.ingest import ingest
from spark_pg.records import MemoryIn
from spark_pg.retrieve import retrieve
from spark_pg.revalue import store as revalue_store
from tests.conftest import temp_database

IDLE = psycopg.pq.TransactionStatus.IDLE


@pytest.fixture
def client(db_url: str, model_settings: Settings, tenant: str) -> Iterator[SparkClient]:
    with SparkClient(model_settings, url=db_url) as c:
        c.add(tenant, "Pin Docker base images by digest in every Dockerfile.", key="pin", defer=True)
        yield c
        c.conn.rollback()
        c.conn.execute("DELETE FROM spark.memories WHERE tenant = %s", (tenant,))
        c.conn.commit()


def test_a_client_whose_schema_check_failed_checks_again_on_the_next_call(
    server_url: str, model_settings: Settings
) -> None:
    """Was: the connection was kept after the SchemaError, so the next call skipped the check and met
    "cannot adapt type 'ndarray'" or 'type "vector" does not exist'."""
    with temp_database(server_url, install=False) as url, SparkClient(model_settings, url=url) as client:
        for _ in range(2):
            with pytest.raises(SchemaError, match="run `spark-pg init`"):
                client.search("alice", "tests")
        assert client._conn is None  # nothing open, nothing held


def test_the_revaluation_sample_leaves_the_callers_connection_idle(client: SparkClient, tenant: str) -> None:
    conn = client.conn
    conn.commit()
    revalue_store.sample(conn, tenant, 5, min_age_days=0)
    assert conn.info.transaction_status == IDLE  # was INTRANS: the caller's next commit was ours
    with pytest.raises(InputError, match="tenant"):
        revalue_store.sample(conn, None)  # type: ignore[arg-type]
    assert conn.info.transaction_status == IDLE  # was INERROR: the caller's next statement failed
    conn.execute("SELECT 1")


def test_ingest_refuses_what_it_cannot_count_before_writing(client: SparkClient, tenant: str) -> None:
    conn = client.conn
    conn.commit()
    dated = MemoryIn(tenant=tenant, key="m7", text="Some text worth keeping.")
    bad = replace(dated, created_at="2024-01-01")  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"records\[0\]\.created_at must be a datetime, got str"):
        ingest(conn, [bad], None)  # was: stored and committed, then TypeError counting the dated-ahead
    with pytest.raises(InputError, match=r"records\[1\] must be a MemoryIn .*got dict"):
        ingest(conn, [dated, {"tenant": tenant, "text": "x"}], None)  # type: ignore[list-item]
    assert conn.execute("SELECT count(*) FROM spark.memories WHERE key = 'm7'").fetchone() == (0,)


def test_advise_refuses_a_tool_name_or_context_it_cannot_send(client: SparkClient, tenant: str) -> None:
    advisor = Advisor(client.conn, None, tenant)
    for args, message in (
        ((None, {"command": "ls"}), "tool_name must be a string, got NoneType"),  # was TypeError
        (("Bash", {"command": "rm x"}, 5), "task_context must be a string, got int"),  # was TypeError
        (("Ba\x00sh", {"command": "rm -rf x"}), "tool_name .*NUL"),  # was psycopg.DataError
    ):
        with pytest.raises(InputError, match=message):
            advisor.advise(*args)  # type: ignore[arg-type]
    assert client.conn.info.transaction_status == IDLE


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"k": 2.5}, "AdvisorOptions.k must be an integer"),
        ({"interrupt_min_confidence": "0.9"}, "AdvisorOptions.interrupt_min_confidence must be a finite"),
        ({"min_actionability": float("nan")}, "AdvisorOptions.min_actionability must be a finite"),
        ({"warnings": "yes"}, "AdvisorOptions.warnings must be True or False"),
        ({"params": [1, 2]}, "AdvisorOptions.params must be a mapping"),
        ({"reflect_params": {"pool": float("inf")}}, "AdvisorOptions.reflect_params.pool must be a finite"),
    ],
)
def test_advisor_options_of_the_wrong_type_are_refused_when_made(options: dict[str, Any], name: str) -> None:
    with pytest.raises(InputError, match=name):
        AdvisorOptions(**options)


def test_reflect_of_nothing_is_nothing_and_of_a_non_text_an_error(client: SparkClient, tenant: str) -> None:
    advisor = Advisor(client.conn, None, tenant)
    client.add_trace(tenant, "None of the handlers fired on None input", "failure", defer=True)
    assert advisor.reflect(None) == []  # type: ignore[arg-type]  # was a search for the text "None"
    with pytest.raises(InputError, match="reflect takes an Intent or a text, got int"):
        advisor.reflect(5)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="k must be an integer"):
        client.reflect(tenant, "auth", k=1.5)  # type: ignore[arg-type]  # was 42883


def test_params_take_a_datetime_and_refuse_what_json_cannot_hold(client: SparkClient, tenant: str) -> None:
    conn = client.conn
    later = datetime.now(UTC) + timedelta(days=1)
    for as_of in (later, later.replace(tzinfo=None)):  # naive: UTC
        hits = retrieve(conn, tenant, "Docker base images", params={"as_of": as_of, "include_system": False})
        assert [h.key for h in hits] == ["pin"]
    hidden = retrieve(conn, tenant, "Docker base images", params={"as_of": datetime(2000, 1, 1)})
    assert "pin" not in [h.key for h in hidden]  # the time counted: the memory is not born yet
    for params, message in (
        ({"rrf_k": float("nan")}, r"params\.rrf_k must be a finite number, got nan"),  # was 22P02
        ([1, 2], "params must be a mapping of str keys, got list"),
        ({"as_of": object()}, "params holds a value JSON cannot hold"),
    ):
        with pytest.raises(InputError, match=message):
            retrieve(conn, tenant, "Docker", params=params)  # type: ignore[arg-type]
    assert conn.info.transaction_status == IDLE


def test_trace_fields_that_cannot_be_stored_are_named(client: SparkClient, tenant: str) -> None:
    for call, message in (
        (lambda: client.add_trace(tenant, "Fix \udcff z", "failure", defer=True), "intent contains a lone"),
        (lambda: client.add_learning(tenant, "Use \udcff always", defer=True), "contains a lone surrogate"),
        (lambda: client.add_trace(tenant, "Fix y", "failure", files=5), "files must be a string or strings"),
        (lambda: client.add_trace(tenant, "Fix y", "failure", tags=7), "tags must be a string or strings"),
        (
            lambda: client.add_trace(tenant, "Fix y", "failure", category="x"),
            "add_trace has no field 'category'",
        ),
    ):
        with pytest.raises(InputError, match=message):
            call()  # were UnicodeEncodeError and TypeError


def test_a_url_that_is_not_one_is_a_database_error(model_settings: Settings) -> None:
    from spark_pg.errors import DatabaseError

    with pytest.raises(DatabaseError, match='cannot connect to the database: missing "="'):
        SparkClient(model_settings, url="localhost:5432").init()  # was psycopg.ProgrammingError


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        # any other name hid the memory from every domain-filtered advice call, without a word
        ("action_domain", "securty", r"records\[0\]\.action_domain must be one of code, system, .*'securty'"),
        ("actionability", 5.0, r"records\[0\]\.actionability must be a number from 0 to 1, got 5\.0"),
        ("actionability", float("nan"), r"actionability must be a number from 0 to 1, got nan"),
        ("actionability", True, r"actionability must be a number from 0 to 1, got True"),
    ],
)
def test_ingest_refuses_a_domain_or_actionability_given_in_code_before_writing(
    client: SparkClient, tenant: str, field: str, value: Any, message: str
) -> None:
    conn = client.conn
    conn.commit()
    bad = replace(
        MemoryIn(tenant=tenant, key="m8", text="Rotate the signing keys monthly."), **{field: value}
    )
    with pytest.raises(InputError, match=message):
        ingest(conn, [bad], None)
    assert conn.execute("SELECT count(*) FROM spark.memories WHERE key = 'm8'").fetchone() == (0,)
    good = replace(bad, action_domain="security", actionability=0.9)
    ingest(conn, [good], None)
    stored = conn.execute(
        "SELECT action_domain, actionability FROM spark.memories WHERE tenant = %s AND key = 'm8'", (tenant,)
    ).fetchone()
    assert stored == ("security", pytest.approx(0.9))


def test_advise_refuses_a_tool_name_longer_than_the_log_keeps(client: SparkClient, tenant: str) -> None:
    advisor = Advisor(client.conn, None, tenant)
    with pytest.raises(InputError, match="tool_name is 257 characters; the limit is 256"):
        advisor.advise("T" * 257, {"command": "docker build ."})
    assert advisor.advise("T" * 256, {"command": "docker build ."}) is not None  # the limit itself is fine


def test_an_advisor_from_the_client_outlives_a_closed_client_connection(
    client: SparkClient, tenant: str
) -> None:
    client.conn.commit()
    advisor = client.advisor(tenant, params={"include_system": False})  # the tenant's own memory alone
    call = ("Bash", {"command": "docker build -t api ."})
    before = advisor.advise(*call)
    assert [a.key for a in before] == ["pin"]
    client.close()  # was: every later call raised "the connection is closed"
    after = advisor.advise(*call)
    assert [a.key for a in after] == [a.key for a in before]
    assert (
        client._conn is not None and not client._conn.closed
    )  # the client's new connection, as its own calls


def test_search_explain_and_outcomes_name_an_argument_of_the_wrong_type(
    client: SparkClient, tenant: str, tmp_path: Any
) -> None:
    """Were: psycopg's UndefinedFunction (a tenant, outcome or source that is not a str picks no function),
    AttributeError (a query that is not a str, an extra pack path given as a str), TypeError or ValueError
    (params that are not a mapping): none of them a SparkPgError."""
    advisor = client.advisor(tenant)
    for call, message in (
        (lambda: client.search(5, "x"), "tenant must be a string, got int"),  # type: ignore[arg-type]
        (lambda: client.explain(5, "x"), "tenant must be a string, got int"),  # type: ignore[arg-type]
        (lambda: client.search(tenant, 5), "query must be a string, got int"),  # type: ignore[arg-type]
        (lambda: client.search(tenant, "x", params=[1]), "params must be a mapping"),  # type: ignore[arg-type]
        (lambda: client.search(tenant, "x", params="abc"), "params must be a mapping"),  # type: ignore[arg-type]
        (lambda: advisor.record_outcome(1, 5), "outcome must be a string, got int"),  # type: ignore[arg-type]
        (
            lambda: advisor.record_outcome(1, "helpful", source=3),  # type: ignore[arg-type]
            "source must be a string, got int",
        ),
    ):
        with pytest.raises(InputError, match=message):
            call()
    assert client.conn.info.transaction_status == IDLE
    with pytest.raises(SparkPgError, match=r"no-such\.yaml"):  # a str path: was AttributeError on .suffix
        client.load_seed_pack(extra=str(tmp_path / "no-such.yaml"))
