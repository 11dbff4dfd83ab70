"""The Python side of retrieval: the typed wrapper, the query cache it fills, and `spark-pg search`."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg.types.json import Jsonb

from spark_pg import queries
from spark_pg.cli import main
from spark_pg.client import SparkClient
from spark_pg.config import Settings
from spark_pg.db import connect
from spark_pg.errors import ArgumentRefused, InputError
from spark_pg.retrieve import explain, one_statement, retrieve


@pytest.fixture
def client(db_url: str, model_settings: Settings, tenant: str) -> Iterator[SparkClient]:
    with SparkClient(model_settings, url=db_url) as c:
        c.add(
            tenant,
            "Game physics jitter came from a variable timestep; use a fixed 1/60 s step",
            key="physics",
            kind="failure",
            category="debugging",
        )
        c.add(tenant, "The user prefers dark mode in every editor", key="dark", kind="preference")
        yield c


def test_search_returns_typed_rows_with_reasons(client: SparkClient, tenant: str) -> None:
    hits = client.search(tenant, "fixing game physics that stutters", k=3, params={"include_system": False})
    assert [h.key for h in hits] == ["physics"]
    hit = hits[0]
    assert hit.semantic_sim is not None and hit.semantic_sim > 0.4
    assert hit.why["status"] == "surfaced" and "semantic" in hit.pools
    assert "found by" in hit.reason and "own failure" in hit.reason


def test_a_query_with_half_a_character_is_an_input_error_naming_it(client: SparkClient, tenant: str) -> None:
    """A lone surrogate (half an emoji) reached the tokenizer (TypeError) or psycopg (UnicodeEncodeError)."""
    for call in (client.search, client.explain, client.reflect):
        with pytest.raises(InputError, match=r"query text contains a lone surrogate \('\\ud800'\)"):
            call(tenant, "de\ud800ploy")  # type: ignore[operator]
    with pytest.raises(InputError, match="tenant contains a lone surrogate"):
        retrieve(client.conn, "t\udc00", "deploy")
    for k in (2.5, True, 2**40):  # no spark.retrieve takes them: 42883 "function does not exist" before
        with pytest.raises(InputError, match=f"k must be an integer between 1 and 1000, got {k!r}"):
            client.search(tenant, "deploy", k=k)  # type: ignore[arg-type]


def test_the_agent_query_can_be_replayed_from_sql_by_text(client: SparkClient, tenant: str) -> None:
    query = "fixing game physics that stutters"
    client.search(tenant, query, params={"include_system": False})
    replay = retrieve(client.conn, tenant, query, embedding=None, params={"include_system": False})
    assert [r.key for r in replay] == ["physics"]
    assert replay[0].why["query_embedding"] == "cache"
    with client.conn.transaction():
        uses = client.conn.execute(
            "SELECT uses FROM spark.query_embeddings WHERE tenant = %s AND query_text = %s", (tenant, query)
        ).fetchone()
    assert uses == (1,)
    client.search(tenant, query)
    with client.conn.transaction():
        again = client.conn.execute(
            "SELECT uses FROM spark.query_embeddings WHERE tenant = %s AND query_text = %s", (tenant, query)
        ).fetchone()
    assert again == (2,)


def test_the_cache_write_skips_the_wal_flush_only_for_a_call_of_its_own(
    client: SparkClient, db_url: str, tenant: str
) -> None:
    """A retrieve that is its own transaction commits its cache entry without waiting for the WAL flush; one
    inside the caller's transaction leaves the caller's synchronous_commit alone (it covers their writes)."""
    query = "fixing game physics that stutters"
    vec = client.embedder.embed_query(query)
    conn = client.conn
    conn.commit()
    with conn.transaction():
        retrieve(conn, tenant, query, embedding=vec, params={"include_system": False})
        assert conn.execute("SELECT current_setting('synchronous_commit')").fetchone() == ("on",)
    retrieve(conn, tenant, query + " again", embedding=vec, params={"include_system": False})
    assert conn.execute("SELECT current_setting('synchronous_commit')").fetchone() == ("on",)  # local: reset
    conn.rollback()
    with SparkClient(client.settings, url=db_url) as other:  # both entries are committed
        cached = other.conn.execute(
            "SELECT query_text FROM spark.query_embeddings WHERE tenant = %s ORDER BY query_text", (tenant,)
        ).fetchall()
    assert [q for (q,) in cached] == [query, query + " again"]
    with conn.transaction():  # what the wrapper sends for a call of its own turns the flush wait off
        conn.execute(
            queries.RETRIEVE_OWN_TRANSACTION,
            {
                "tenant": tenant,
                "query": "third",
                "embedding": vec,
                "k": 3,
                "params": Jsonb({}),
                "cache": True,
            },
        ).fetchall()
        assert conn.execute("SELECT current_setting('synchronous_commit')").fetchone() == ("off",)


def test_a_call_of_its_own_is_one_round_trip_and_leaves_the_connection_as_it_was(
    client: SparkClient, tenant: str
) -> None:
    """On an idle connection retrieve and explain run as one statement in autocommit mode (no BEGIN and COMMIT
    round trips), then hand the connection back unchanged, also when the call fails."""
    conn = client.conn
    conn.commit()
    assert not conn.autocommit
    retrieve(conn, tenant, "game physics", params={"include_system": False})
    explain(conn, tenant, "game physics", params={"include_system": False})
    assert not conn.autocommit
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # nothing left open
    with pytest.raises(ArgumentRefused, match="k must be between 1 and 1000, got 5000") as refused:
        retrieve(conn, tenant, "game physics", k=5000)
    assert refused.value.sqlstate == "22023"
    assert not conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_a_read_only_connection_keeps_its_transaction_settings(
    client: SparkClient, db_url: str, tenant: str
) -> None:
    """read_only (like isolation_level and deferrable) reaches the server only through BEGIN: such a
    connection takes the transaction path, and the call leaves the query cache alone (it used to send the
    cache write and fail with ReadOnlySqlTransaction). A read-only transaction opened in SQL still refuses
    the write: nothing tells the wrapper before it sends the statement."""
    vec = client.embedder.embed_query("game physics")
    with connect(db_url) as conn:
        conn.read_only = True
        with one_statement(conn) as own:
            assert not own and conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.rollback()
        rows = retrieve(conn, tenant, "game physics", embedding=vec, params={"include_system": False})
        assert rows[0].key == "physics"
        conn.read_only = None
        conn.execute("BEGIN READ ONLY")
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            retrieve(conn, tenant, "game physics", embedding=vec, params={"include_system": False})
        conn.rollback()
        with one_statement(conn) as own:
            assert own and conn.autocommit
        assert not conn.autocommit


def test_a_connection_lost_mid_call_raises_the_servers_error(db_url: str) -> None:
    """The server's own error (here 57P01, the session terminated) reaches the caller, not a second error from
    handing the connection back."""
    with psycopg.connect(db_url) as conn:
        with pytest.raises(psycopg.errors.AdminShutdown), one_statement(conn):
            conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        assert conn.closed


def test_explain_lists_surfaced_first_then_the_dropped_with_reasons(client: SparkClient, tenant: str) -> None:
    rows = explain(
        client.conn,
        tenant,
        "fixing game physics that stutters",
        embedding=client.embedder.embed_query("fixing game physics that stutters"),
        params={"include_system": False},
    )
    assert rows[0].status == "surfaced" and rows[0].rank == 1
    dropped = [r for r in rows if r.status != "surfaced"]
    assert dropped and all(r.rank is None and r.status.startswith(("dropped", "not chosen")) for r in dropped)
    assert any(r.key == "dark" for r in dropped)


def test_cli_search_explain(cli_env: str, tenant: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["add", "--tenant", tenant, "--key", "dark", "The user prefers dark mode in every editor"]) == 0
    )
    capsys.readouterr()
    assert main(["search", "--tenant", tenant, "--explain", "which editor theme does the user like"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:6] == ["rank", "score", "sim", "kw", "rec", "key"]
    assert "surfaced" in out and "dark" in out
