"""The Python API against what a caller may hand it: a MemoryIn built in code with None or an impossible date,
a plain psycopg connection, a failed or read-only transaction, a generator, numpy numbers, a flag that is not
a bool, a naive as_of string, a lost connection (an audit's findings). Each is named by an InputError, or
works; none is a bare psycopg or Python error."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import psycopg
import pytest

from spark_pg.client import SparkClient
from spark_pg.config import Settings
from spark_pg.embedding import Embedder
from spark_pg.errors import ArgumentRefused, InputError
from spark_pg.ingest import ingest
from spark_pg.records import MemoryIn
from spark_pg.refusals import refusals
from spark_pg.retrieve import explain, retrieve

TEXT = "Pin Docker base images by digest in every Dockerfile."
OWN = {"include_system": False}


@pytest.fixture
def client(db_url: str, model_settings: Settings, tenant: str) -> Iterator[SparkClient]:
    with SparkClient(model_settings, url=db_url) as c:
        yield c
        c.conn.rollback()
        c.conn.execute("DELETE FROM spark.memories WHERE tenant = %s", (tenant,))
        c.conn.commit()


@pytest.fixture
def plain(db_url: str, tenant: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain psycopg connection (no pgvector adapters); the tenant's rows deleted at the end."""
    with psycopg.connect(db_url) as c:
        yield c
        c.rollback()
        c.execute("DELETE FROM spark.memories WHERE tenant = %s", (tenant,))
        c.commit()


def stored(conn: psycopg.Connection[Any], tenant: str, key: str) -> tuple[Any, ...] | None:
    return conn.execute(
        "SELECT importance, tier, priority, metadata FROM spark.memories WHERE tenant = %s AND key = %s",
        (tenant, key),
    ).fetchone()


# --- 1: a MemoryIn made in code ----------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["tenant", "key", "text", "kind", "category", "source"])
def test_a_none_the_database_cannot_store_is_named(
    conn: psycopg.Connection[Any], tenant: str, field: str
) -> None:
    """Was: psycopg's NotNullViolation, the whole row in its DETAIL."""
    record = replace(MemoryIn(tenant=tenant, key="k", text=TEXT), **{field: None})
    with pytest.raises(InputError, match=rf"records\[0\]\.{field} must not be None"):
        ingest(conn, [record], None)


def test_a_none_in_a_keepable_field_is_the_default_on_insert_and_kept_on_update(
    conn: psycopg.Connection[Any], tenant: str
) -> None:
    """As a file's row that leaves it out (was: NotNullViolation, and CheckViolation for metadata)."""
    nones = {"importance": None, "tier": None, "priority": None, "metadata": None}
    record = replace(MemoryIn(tenant=tenant, key="k", text=TEXT), **nones)
    assert ingest(conn, [record], None).inserted == 1
    assert stored(conn, tenant, "k") == (0.5, "active", "normal", {})
    conn.execute("UPDATE spark.memories SET importance = 0.9, tier = 'pinned' WHERE tenant = %s", (tenant,))
    assert ingest(conn, [record], None).unchanged == 1
    assert stored(conn, tenant, "k") == (pytest.approx(0.9), "pinned", "normal", {})


def test_a_memoryin_that_names_no_keepable_field_keeps_the_stored_ones(
    conn: psycopg.Connection[Any], tenant: str
) -> None:
    """Was (docs audit): the constructor's defaults were values (0.5, active, normal, {}), so re-ingesting
    ``MemoryIn(tenant, key, text)`` undid a pin, a revaluation, a priority and the metadata, against the
    README's "a row that leaves these fields out keeps the stored values"."""
    assert ingest(conn, [MemoryIn(tenant=tenant, key="k", text=TEXT)], None).inserted == 1
    assert stored(conn, tenant, "k") == (0.5, "active", "normal", {})
    conn.execute(
        "UPDATE spark.memories SET importance = 0.9, tier = 'pinned', priority = 'high', "
        "metadata = '{\"a\": 1}' WHERE tenant = %s",
        (tenant,),
    )
    assert ingest(conn, [MemoryIn(tenant=tenant, key="k", text=TEXT + " Always.")], None).updated == 1
    assert stored(conn, tenant, "k") == (pytest.approx(0.9), "pinned", "high", {"a": 1})
    # named, they are written
    given = MemoryIn(
        tenant=tenant, key="k", text=TEXT, importance=0.5, tier="active", priority="normal", metadata={}
    )
    assert ingest(conn, [given], None).updated == 1
    assert stored(conn, tenant, "k") == (0.5, "active", "normal", {})


@pytest.mark.parametrize(
    "when",
    [datetime(1, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1))), datetime(9999, 12, 31, 23, tzinfo=UTC)],
)
def test_a_created_at_past_a_files_bounds_is_named(
    conn: psycopg.Connection[Any], tenant: str, when: datetime
) -> None:
    """Was stored (before migration 0017; then a CheckViolation): no client could read the row back."""
    record = MemoryIn(tenant=tenant, key="k", text=TEXT, created_at=when)
    with pytest.raises(InputError, match=r"records\[0\]\.created_at .* is not between 0001-01-02 and 9999"):
        ingest(conn, [record], None)


def test_a_naive_created_at_is_utc_in_any_session_time_zone(
    conn: psycopg.Connection[Any], tenant: str
) -> None:
    """As validate_row reads a file's (was: sent naive, read in the session's TimeZone: 03:00 UTC here)."""
    conn.execute("SET LOCAL TimeZone = 'Asia/Tokyo'")
    ingest(conn, [MemoryIn(tenant=tenant, key="k", text=TEXT, created_at=datetime(2024, 5, 1, 12))], None)
    row = conn.execute("SELECT created_at FROM spark.memories WHERE tenant = %s", (tenant,)).fetchone()
    assert row is not None and row[0] == datetime(2024, 5, 1, 12, tzinfo=UTC)


def test_keep_takes_only_the_keepable_names(conn: psycopg.Connection[Any], tenant: str) -> None:
    """Was: a TypeError for None, and an unknown name kept nothing without a word."""
    for keep in (None, {"nope"}, frozenset({"text"})):
        record = MemoryIn(tenant=tenant, key="k", text=TEXT, keep=keep)  # type: ignore[arg-type]
        with pytest.raises(InputError, match=r"keep must be a set of names from importance, tier, priority"):
            ingest(conn, [record], None)


def test_a_client_side_data_error_is_not_an_argument_refused(conn: psycopg.Connection[Any]) -> None:
    """psycopg failing to load a value (no SQLSTATE) is not the caller's argument; its refusal of a NUL is."""
    with pytest.raises(psycopg.DataError, match="timestamp too small") as raised, refusals():
        conn.execute("SELECT '0001-01-01 00:00:00+00'::timestamptz - interval '1 day'").fetchone()
    assert not isinstance(raised.value, ArgumentRefused)
    with pytest.raises(ArgumentRefused, match="NUL"), refusals():
        conn.execute("SELECT %s::text", ("a\x00b",))


# --- 2, 4, 5: the caller's connection ----------------------------------------------------------------------


def test_a_plain_connection_sends_vectors(
    plain: psycopg.Connection[Any], embedder: Embedder, tenant: str
) -> None:
    """Was: psycopg's ProgrammingError "cannot adapt type 'ndarray'" from all three."""
    result = ingest(plain, [MemoryIn(tenant=tenant, key="pin", text=TEXT)], embedder)
    assert (result.inserted, result.embedded) == (1, 1)
    vector = embedder.embed_query("docker image digests")
    assert [h.key for h in retrieve(plain, tenant, "docker image", embedding=vector, params=OWN)] == ["pin"]
    assert "pin" in [c.key for c in explain(plain, tenant, "docker image", embedding=vector, params=OWN)]


def test_a_failed_transaction_is_named_and_a_clients_own_is_rolled_back(
    plain: psycopg.Connection[Any], client: SparkClient, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: InFailedSqlTransaction, and psycopg's logged "error ignored in rollback"."""
    with pytest.raises(psycopg.errors.DivisionByZero):
        plain.execute("SELECT 1 / 0")
    calls: list[Callable[[], Any]] = [
        lambda: retrieve(plain, tenant, "docker"),
        lambda: explain(plain, tenant, "docker"),
        lambda: ingest(plain, [MemoryIn(tenant=tenant, key="k", text=TEXT)], None),
    ]
    with caplog.at_level(logging.WARNING):
        for call in calls:
            with pytest.raises(InputError, match=r"conn is in a failed transaction.*roll it back"):
                call()
    assert "error ignored" not in caplog.text
    with pytest.raises(psycopg.errors.DivisionByZero):
        client.conn.execute("SELECT 1 / 0")
    client.add(tenant, TEXT, key="pin", defer=True)
    with pytest.raises(psycopg.errors.DivisionByZero):
        client.conn.execute("SELECT 1 / 0")
    assert [h.key for h in client.search(tenant, "docker image digests", params=OWN)] == ["pin"]


def test_ingest_on_a_read_only_connection_says_it_needs_a_writable_one(
    plain: psycopg.Connection[Any], embedder: Embedder, tenant: str
) -> None:
    """Was: ReadOnlySqlTransaction about an internal DROP TABLE step."""
    record = MemoryIn(tenant=tenant, key="k", text=TEXT)
    writable = pytest.raises(InputError, match="ingest needs a writable connection")
    plain.read_only = True
    with writable:
        ingest(plain, [record], None)
    with writable:
        ingest(plain, [record], embedder)
    plain.read_only = None
    plain.execute("SET default_transaction_read_only = on")
    plain.commit()
    with writable:
        ingest(plain, [record], None)
    plain.execute("SET default_transaction_read_only = off")
    plain.commit()


# --- 3, 6, 7, 8: values of the wrong kind ------------------------------------------------------------------


def test_a_generator_of_records_is_written(client: SparkClient, tenant: str) -> None:
    """Was: IngestResult(0, 0, 0): the type check used the generator up."""
    records = [MemoryIn(tenant=tenant, key=f"k{i}", text=f"{TEXT} ({i})") for i in range(2)]
    assert client.ingest_records((r for r in records), defer=True).inserted == 2


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c, t: c.advisor(t, foo=1), "the advisor has no option 'foo'; its options: k, "),
        (lambda c, t: c.ingest_records(None), "records must be a list of MemoryIn, got NoneType"),
        (
            lambda c, t: c.ingest_file(None),
            r"path must be a file path \(a str or a pathlib.Path\), got NoneType",
        ),
        (lambda c, t: c.ingest_file(5), "path must be a file path .*, got int"),
        (lambda c, t: retrieve(None, t, "docker"), "conn must be a psycopg connection, got NoneType"),
        (lambda c, t: SparkClient(c.settings, url=5), r"url must be a database URL \(a string\), got int"),
        (lambda c, t: SparkClient("x"), "settings must be a spark_pg.config.Settings .*got str"),
    ],
)
def test_a_value_of_the_wrong_type_is_named(
    client: SparkClient, tenant: str, call: Callable[[SparkClient, str], Any], message: str
) -> None:
    """Were TypeError and AttributeError (url: at the first call), or accepted (settings)."""
    with pytest.raises(InputError, match=message):
        call(client, tenant)


def test_numpy_numbers_are_numbers(client: SparkClient, tenant: str) -> None:
    """Was: "k must be an integer between 1 and 1000, got np.int64(3)", and params refused np.int64."""
    record = MemoryIn(tenant=tenant, key="pin", text=TEXT, importance=np.float32(0.75))  # type: ignore[arg-type]
    client.ingest_records([record], defer=True)
    conn = client.conn
    assert stored(conn, tenant, "pin") == (0.75, "active", "normal", {})
    params = {"pool_semantic": np.int64(5), "w_recency": np.float32(0.25), **OWN}
    hits = retrieve(conn, tenant, "docker image digests", k=np.int64(3), params=params)  # type: ignore[arg-type]
    assert [h.key for h in hits] == ["pin"]
    assert [h.key for h in client.search(tenant, "docker digests", k=np.int64(2), params=params)] == ["pin"]
    with pytest.raises(InputError, match="k must be an integer"):
        retrieve(conn, tenant, "docker", k=np.bool_(True))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda c, t: retrieve(c.conn, t, "docker", cache="no"), "cache"),
        (lambda c, t: c.add(t, TEXT, defer="yes"), "defer"),
        (lambda c, t: c.ingest_records([MemoryIn(tenant=t, key="k", text=TEXT)], progress=1), "progress"),
        (lambda c, t: c.add_trace(t, "Fix the login", "failure", defer=0), "defer"),
    ],
)
def test_a_flag_must_be_true_or_false(
    client: SparkClient, tenant: str, call: Callable[[SparkClient, str], Any], name: str
) -> None:
    """Was read by its truth: cache="no" cached, defer="yes" deferred."""
    with pytest.raises(InputError, match=f"{name} must be True or False, got "):
        call(client, tenant)
    assert client.conn.execute(
        "SELECT count(*) FROM spark.memories WHERE tenant = %s", (tenant,)
    ).fetchone() == (0,)


# --- 9: as_of -----------------------------------------------------------------------------------------------


def test_a_naive_as_of_string_is_utc_in_any_session_time_zone(
    conn: psycopg.Connection[Any], tenant: str
) -> None:
    """Was read in the session's TimeZone: in Asia/Tokyo, 12:30 was 03:30 UTC, before the memory."""
    ingest(
        conn,
        [MemoryIn(tenant=tenant, key="pin", text=TEXT, created_at=datetime(2024, 5, 1, 12, tzinfo=UTC))],
        None,
    )
    conn.execute("SET LOCAL TimeZone = 'Asia/Tokyo'")
    for as_of in ("2024-05-01T12:30:00", "2024-05-01 12:30", "2024-05-01T12:30:00Z"):
        hits = retrieve(conn, tenant, "docker image digests", params={"as_of": as_of, **OWN})
        assert [h.key for h in hits] == ["pin"], as_of
    assert (
        retrieve(conn, tenant, "docker image digests", params={"as_of": "2024-05-01T11:30:00", **OWN}) == []
    )


# --- 10: a lost connection ----------------------------------------------------------------------------------


def test_a_clients_read_connects_again_once_after_its_connection_was_lost(
    client: SparkClient, db_url: str, tenant: str
) -> None:
    """Was: the first search after a server restart raised AdminShutdown. A write is not sent again: it
    raises, and the next call connects again."""
    client.add(tenant, TEXT, key="pin", defer=True)

    def lose() -> None:
        pid = client.conn.info.backend_pid
        with psycopg.connect(db_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            give_up = time.monotonic() + 10
            while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
                assert time.monotonic() < give_up, "the backend did not end"
                time.sleep(0.02)

    lose()
    assert [h.key for h in client.search(tenant, "docker image digests", params=OWN)] == ["pin"]
    lose()
    with pytest.raises(psycopg.OperationalError):
        client.add(tenant, TEXT + " Always.", key="pin2", defer=True)
    assert [h.key for h in client.explain(tenant, "docker image digests", params=OWN)][:1] == ["pin"]
