"""SparkClient.advisor: the advice it gives is retrieved with the configured retrieval.* keys, as
SparkClient.search and the hook server retrieve (docs/tuneables.md, spark.retrieve params)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from spark_pg.client import SparkClient
from spark_pg.config import RETRIEVE_PARAM_KEYS, Settings
from spark_pg.errors import InputError
from spark_pg.hooks.service import retrieve_params

CONFIGURED = {
    "retrieval.fusion": "rrf",
    "retrieval.precision_mode": "high_precision",
    "retrieval.min_similarity": 0.4,
    "retrieval.min_fusion_score": 0.35,
    "retrieval.repeat_after_minutes": 5,
}


@pytest.fixture
def settings(model_settings: Settings) -> Settings:
    """The model's settings with every retrieval key spark.retrieve takes set away from its default."""
    return Settings(model_settings.as_dict() | CONFIGURED)


def test_the_advisor_asks_with_the_configured_retrieval_keys(
    db_url: str, settings: Settings, tenant: str
) -> None:
    with SparkClient(settings, url=db_url) as client:
        advisor = client.advisor(tenant)
        expected = {name: CONFIGURED[f"retrieval.{name}"] for name in RETRIEVE_PARAM_KEYS}
        assert advisor.options.params == expected == retrieve_params(settings)  # the hook server's
        assert advisor.options.params == client.retrieve_params()  # search's
        advisor.advise("Bash", {"command": "git push --force origin main"})
    with psycopg.connect(db_url) as conn:  # what spark.advise was given, as it logged the call
        row = conn.execute("SELECT params FROM spark.retrievals WHERE tenant = %s", (tenant,)).fetchone()
    assert row is not None
    logged: dict[str, Any] = row[0]
    assert {name: logged.get(name) for name in RETRIEVE_PARAM_KEYS} == expected


def test_params_given_to_the_advisor_win_over_the_configured_ones(
    db_url: str, settings: Settings, tenant: str
) -> None:
    with SparkClient(settings, url=db_url) as client:
        advisor = client.advisor(tenant, params={"fusion": "weighted", "week_cap": 0}, k=3)
        assert advisor.options.k == 3
        assert advisor.options.params == {
            "fusion": "weighted",
            "precision_mode": "high_precision",
            "min_similarity": 0.4,
            "min_fusion_score": 0.35,
            "repeat_after_minutes": 5,
            "week_cap": 0,
        }
        with pytest.raises(InputError, match="params"):
            client.advisor(tenant, params=["fusion"])
