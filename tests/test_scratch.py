"""Scratch databases (spark_pg.scratch): the claim that lets one eval or benchmark run at a time."""

from __future__ import annotations

import pytest

from spark_pg import scratch
from tests.conftest import temp_database


def test_a_claim_holds_whichever_database_of_the_server_the_url_names(server_url: str) -> None:
    """Advisory locks belong to one database: taken in the database each URL named, two runs of one scratch
    database through URLs naming two databases of the server both got the claim, and the --fresh of one
    dropped the database under the other."""
    with temp_database(server_url, install=False) as other:
        assert scratch.with_dbname(other, "x") == scratch.with_dbname(server_url, "x")  # one server
        assert other != server_url
        with scratch.claimed(server_url, "spark_eval_claim_test") as first:
            assert first
            with scratch.claimed(other, "spark_eval_claim_test") as second:
                assert not second
            with scratch.claimed(other, "spark_eval_another_one") as unrelated:
                assert unrelated
        with scratch.claimed(other, "spark_eval_claim_test") as again:  # released with the block
            assert again


def test_without_the_postgres_database_the_claim_is_taken_in_the_urls_own(
    server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scratch, "LOCK_DATABASE", "spark_no_such_database")
    with temp_database(server_url, install=False) as url, scratch.claimed(url, "spark_eval_claim") as first:
        assert first
        with scratch.claimed(url, "spark_eval_claim") as second:
            assert not second


def test_a_claim_never_holds_a_session_in_template1(server_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session in template1 makes every CREATE DATABASE of the server fail."""
    from spark_pg.errors import DatabaseError

    monkeypatch.setattr(scratch, "LOCK_DATABASE", "spark_no_such_database")
    with pytest.raises(DatabaseError), scratch.claimed(scratch.with_dbname(server_url, "template1"), "x"):
        pass
