"""Tuneables: layering and validation errors that name the key and the allowed range."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_pg.config import KEYS, load_settings
from spark_pg.errors import ConfigError


@pytest.fixture
def empty_file(tmp_path: Path) -> Path:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    return path


def test_defaults(empty_file: Path) -> None:
    settings = load_settings(environ={}, config_file=empty_file)
    assert settings.as_dict() == {k.name: k.default for k in KEYS}
    assert settings.get_int("retrieval.k") == 8
    assert settings.get_str("embedding.model") == "all-MiniLM-L6-v2-int8"
    assert settings.opt_str("database.url") is None


def test_layers_file_then_env_then_overrides(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("retrieval:\n  k: 5\n  min_similarity: 0.4\nembedding:\n  batch_size: 8\n")
    env = {"SPARK_PG_RETRIEVAL_K": "6", "SPARK_PG_HOME": "~/sp", "SPARK_PG_EMBEDDING_THREADS": ""}
    settings = load_settings({"embedding.batch_size": 4}, environ=env, config_file=cfg)
    assert settings.get_int("retrieval.k") == 6  # env beats file
    assert settings.get_float("retrieval.min_similarity") == pytest.approx(0.4)  # file beats default
    assert settings.get_int("embedding.batch_size") == 4  # overrides beat everything
    assert settings.home == Path("~/sp").expanduser()
    assert settings.opt_int("embedding.threads") is None  # empty env value = none, for a nullable key
    assert settings.config_file == cfg


def test_config_env_var_names_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("retrieval:\n  k: 3\n")
    assert load_settings(environ={"SPARK_PG_CONFIG": str(cfg)}).get_int("retrieval.k") == 3
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(environ={"SPARK_PG_CONFIG": str(tmp_path / "missing.yaml")})


@pytest.mark.parametrize(
    ("env", "key", "fragment"),
    [
        ({"SPARK_PG_RETRIEVAL_K": "0"}, "retrieval.k", ">= 1 and <= 1000"),
        ({"SPARK_PG_RETRIEVAL_K": "1001"}, "retrieval.k", "out of range"),
        ({"SPARK_PG_RETRIEVAL_K": "abc"}, "retrieval.k", "is not an integer"),
        ({"SPARK_PG_RETRIEVAL_K": "2.5"}, "retrieval.k", "is not an integer"),
        ({"SPARK_PG_RETRIEVAL_MIN_SIMILARITY": "nan"}, "retrieval.min_similarity", "not finite"),
        ({"SPARK_PG_RETRIEVAL_MIN_SIMILARITY": "1.5"}, "retrieval.min_similarity", ">= -1 and <= 1"),
        ({"SPARK_PG_EMBEDDING_MODEL": "gpt-embed"}, "embedding.model", "one of all-MiniLM-L6-v2-int8"),
        ({"SPARK_PG_EMBEDDING_BATCH_SIZE": ""}, "embedding.batch_size", "must not be empty"),
    ],
)
def test_bad_env_values_name_key_and_range(
    empty_file: Path, env: dict[str, str], key: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(environ=env, config_file=empty_file)
    assert info.value.key == key
    assert fragment in str(info.value)
    assert next(k.env for k in KEYS if k.name == key) in str(info.value)  # says where the value came from


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        ("retrieval:\n  kk: 3\n", "retrieval.kk", "unknown key"),
        ("retrieval:\n  k: [1, 2]\n", "retrieval.k", "is not an integer"),
        ("retrieval:\n  k: true\n", "retrieval.k", "is not a number"),
        ("embedding:\n  model: 7\n", "embedding.model", "is not a string"),
        ("retrieval: {k: 3\n", "(file)", "not valid YAML"),
        ("- just\n- a list\n", "(file)", "must hold a mapping"),
    ],
)
def test_bad_files_name_key(tmp_path: Path, text: str, key: str, fragment: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_settings(environ={}, config_file=cfg)
    assert info.value.key == key
    assert fragment in str(info.value)


def test_unknown_override_lists_known_keys(empty_file: Path) -> None:
    with pytest.raises(ConfigError, match=r"known keys: home, database\.url"):
        load_settings({"retrieval.weight_similarity": 0.5}, environ={}, config_file=empty_file)


def test_every_key_is_documented_and_has_an_env_name() -> None:
    for key in KEYS:
        assert key.help.strip()
        assert key.env.startswith("SPARK_PG_") and key.env.isupper()
