"""Unit tests of spark_pg.config: layering, coercion and validation. No database, no model."""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from spark_pg import config
from spark_pg.config import CONFIG_ENV, KEY_BY_NAME, KEYS, MODEL_NAMES, Settings, load_settings
from spark_pg.errors import ConfigError, SparkPgError

DEFAULTS: dict[str, Any] = {k.name: k.default for k in KEYS}


@pytest.fixture
def no_user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the implicit config path at a file that does not exist (never the real user config)."""
    missing = tmp_path / "nowhere" / "config.yaml"
    monkeypatch.setattr(config, "default_config_path", lambda: missing)
    return missing


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def load(
    tmp_path: Path,
    yaml_text: str | None = None,
    env: dict[str, str] | None = None,
    overrides: dict[str, Any] | None = None,
) -> Settings:
    """load_settings with an explicit config file (empty unless given) and an explicit environ."""
    path = write(tmp_path, yaml_text or "")
    return load_settings(overrides, environ=env or {}, config_file=path)


def raises_config(
    tmp_path: Path,
    yaml_text: str | None = None,
    env: dict[str, str] | None = None,
    overrides: dict[str, Any] | None = None,
) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, yaml_text, env, overrides)
    return info.value


# --- the key table --------------------------------------------------------------------------------------


def test_every_key_has_help_and_a_spark_pg_env_name() -> None:
    assert KEYS, "no keys defined"
    for key in KEYS:
        assert key.help.strip(), key.name
        assert key.env.startswith("SPARK_PG_"), key.name
        assert key.env == key.env.upper(), key.name
        assert "." not in key.env and "-" not in key.env, key.name
        assert key.allowed(), key.name


def test_key_names_and_env_names_are_unique() -> None:
    assert len(KEY_BY_NAME) == len(KEYS)
    assert len({k.env for k in KEYS}) == len(KEYS)
    assert CONFIG_ENV not in {k.env for k in KEYS}


@pytest.mark.parametrize(
    ("name", "env"),
    [
        ("home", "SPARK_PG_HOME"),
        ("database.url", "SPARK_PG_DATABASE_URL"),
        ("retrieval.k", "SPARK_PG_RETRIEVAL_K"),
        ("embedding.batch_size", "SPARK_PG_EMBEDDING_BATCH_SIZE"),
    ],
)
def test_env_names(name: str, env: str) -> None:
    assert KEY_BY_NAME[name].env == env


@pytest.mark.parametrize(
    ("name", "allowed"),
    [
        ("retrieval.k", "an integer >= 1 and <= 1000"),
        ("retrieval.min_similarity", "a number >= -1 and <= 1"),
        ("embedding.threads", "an integer >= 1 and <= 256 (or empty for none)"),
        ("embedding.model", "one of " + ", ".join(MODEL_NAMES)),
        ("database.url", "a string (or empty for none)"),
        ("home", "a path (or empty for none)"),
    ],
)
def test_allowed_text(name: str, allowed: str) -> None:
    assert KEY_BY_NAME[name].allowed() == allowed


def test_defaults_are_themselves_valid(tmp_path: Path) -> None:
    settings = load(tmp_path, overrides=dict(DEFAULTS))
    assert settings.as_dict() == DEFAULTS


# --- layering -------------------------------------------------------------------------------------------


def test_defaults_with_empty_environ_and_no_config_file(no_user_config: Path) -> None:
    settings = load_settings(environ={})
    assert settings.as_dict() == DEFAULTS
    assert settings.config_file is None
    assert settings.get_int("retrieval.k") == 8
    assert settings.get_float("retrieval.min_similarity") == 0.25
    assert settings.get_str("embedding.model") == MODEL_NAMES[0]
    assert settings.opt_str("database.url") is None
    assert settings.opt_int("embedding.threads") is None
    assert settings.opt_path("home") is None
    assert settings.get_int("database.statement_timeout_ms") == 30000
    assert settings.get_int("embedding.batch_size") == 16
    assert settings.get_int("ingest.chunk_rows") == 500


def test_empty_config_file_gives_defaults(tmp_path: Path) -> None:
    settings = load(tmp_path, "")
    assert settings.as_dict() == DEFAULTS
    assert settings.config_file == tmp_path / "config.yaml"


def test_file_overrides_defaults(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        "retrieval:\n  k: 12\n  min_similarity: 0.5\n"
        "embedding:\n  batch_size: 32\n  model: BAAI/bge-small-en-v1.5\n"
        "database:\n  url: postgresql://db/x\n"
        f"home: {tmp_path / 'home'}\n",
    )
    assert settings.get_int("retrieval.k") == 12
    assert settings.get_float("retrieval.min_similarity") == 0.5
    assert settings.get_int("embedding.batch_size") == 32
    assert settings.get_str("embedding.model") == "BAAI/bge-small-en-v1.5"
    assert settings.opt_str("database.url") == "postgresql://db/x"
    assert settings.opt_path("home") == tmp_path / "home"
    assert settings.home == tmp_path / "home"
    # untouched keys keep their defaults
    assert settings.get_int("ingest.chunk_rows") == 500


def test_spark_pg_config_env_selects_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "retrieval:\n  k: 3\n", "other.yaml")
    settings = load_settings(environ={CONFIG_ENV: str(path)})
    assert settings.get_int("retrieval.k") == 3
    assert settings.config_file == path


def test_config_file_argument_may_be_a_str(tmp_path: Path) -> None:
    path = write(tmp_path, "retrieval:\n  k: 6\n", "as-text.yaml")
    settings = load_settings(environ={}, config_file=str(path))  # was an AttributeError
    assert settings.get_int("retrieval.k") == 6 and settings.config_file == path


def test_a_nul_in_a_text_setting_is_refused_when_loaded(tmp_path: Path) -> None:
    err = raises_config(tmp_path, overrides={"home": "/tmp/a\x00b"})  # was a ValueError at first use
    assert err.key == "home" and "contains a NUL character" in str(err)


def test_config_file_argument_beats_spark_pg_config(tmp_path: Path) -> None:
    chosen = write(tmp_path, "retrieval:\n  k: 4\n", "chosen.yaml")
    ignored = write(tmp_path, "retrieval:\n  k: 5\n", "ignored.yaml")
    settings = load_settings(environ={CONFIG_ENV: str(ignored)}, config_file=chosen)
    assert settings.get_int("retrieval.k") == 4
    assert settings.config_file == chosen


def test_env_overrides_file(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        "retrieval:\n  k: 12\n  min_similarity: 0.5\n",
        env={"SPARK_PG_RETRIEVAL_K": "20"},
    )
    assert settings.get_int("retrieval.k") == 20
    assert settings.get_float("retrieval.min_similarity") == 0.5  # file value not shadowed


def test_overrides_beat_env_and_file(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        "retrieval:\n  k: 12\n",
        env={"SPARK_PG_RETRIEVAL_K": "20", "SPARK_PG_EMBEDDING_BATCH_SIZE": "64"},
        overrides={"retrieval.k": 30},
    )
    assert settings.get_int("retrieval.k") == 30
    assert settings.get_int("embedding.batch_size") == 64


def test_unrelated_environment_variables_are_ignored(tmp_path: Path) -> None:
    settings = load(tmp_path, env={"SPARK_PG_NOT_A_KEY": "1", "HOME": "/x", "retrieval.k": "3"})
    assert settings.as_dict() == DEFAULTS


def test_empty_overrides_change_nothing(tmp_path: Path) -> None:
    assert load(tmp_path, overrides={}).as_dict() == DEFAULTS


# --- coercion -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env_name", "raw", "name", "expected"),
    [
        ("SPARK_PG_RETRIEVAL_K", "17", "retrieval.k", 17),
        ("SPARK_PG_RETRIEVAL_K", " 17 ", "retrieval.k", 17),
        ("SPARK_PG_RETRIEVAL_K", "1", "retrieval.k", 1),
        ("SPARK_PG_RETRIEVAL_K", "1000", "retrieval.k", 1000),
        ("SPARK_PG_DATABASE_STATEMENT_TIMEOUT_MS", "0", "database.statement_timeout_ms", 0),
        ("SPARK_PG_RETRIEVAL_MIN_SIMILARITY", "0.4", "retrieval.min_similarity", 0.4),
        ("SPARK_PG_RETRIEVAL_MIN_SIMILARITY", "-1", "retrieval.min_similarity", -1.0),
        ("SPARK_PG_RETRIEVAL_MIN_SIMILARITY", "1", "retrieval.min_similarity", 1.0),
        ("SPARK_PG_EMBEDDING_THREADS", "4", "embedding.threads", 4),
        ("SPARK_PG_EMBEDDING_THREADS", "", "embedding.threads", None),
        ("SPARK_PG_EMBEDDING_THREADS", "   ", "embedding.threads", None),
        ("SPARK_PG_DATABASE_URL", "", "database.url", None),
        ("SPARK_PG_DATABASE_URL", "postgresql://h/db", "database.url", "postgresql://h/db"),
        ("SPARK_PG_HOME", "", "home", None),
        ("SPARK_PG_EMBEDDING_MODEL", "BAAI/bge-small-en-v1.5", "embedding.model", "BAAI/bge-small-en-v1.5"),
    ],
)
def test_env_strings_are_coerced(tmp_path: Path, env_name: str, raw: str, name: str, expected: Any) -> None:
    value = load(tmp_path, env={env_name: raw}).raw(name)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize(
    ("name", "spelling", "expected"),
    [
        ("retrieval.k", "8", 8),
        ("retrieval.k", "8.0", 8),  # the environment refused what the file took
        ("retrieval.k", "1e3", 1000),
        ("retrieval.k", "1_0", 10),  # YAML 1.1 and Python both read it as 10
        ("retrieval.cache_queries", "0", False),  # the file refused what the environment took
        ("retrieval.cache_queries", "1", True),
        ("retrieval.cache_queries", "off", False),
        ("retrieval.cache_queries", "yes", True),
    ],
)
def test_a_spelling_means_the_same_in_the_file_and_the_environment(
    tmp_path: Path, name: str, spelling: str, expected: Any
) -> None:
    top, sub = name.split(".")
    from_file = load(tmp_path, f"{top}:\n  {sub}: {spelling}\n").raw(name)
    from_env = load(tmp_path, env={"SPARK_PG_" + name.replace(".", "_").upper(): spelling}).raw(name)
    assert (from_file, from_env) == (expected, expected)
    assert type(from_file) is type(from_env) is type(expected)


@pytest.mark.parametrize("spelling", ["2", "-1", "0.0"])
def test_a_number_other_than_0_or_1_is_no_boolean(tmp_path: Path, spelling: str) -> None:
    err = raises_config(tmp_path, f"retrieval:\n  cache_queries: {spelling}\n")
    assert err.key == "retrieval.cache_queries" and "is not a boolean" in str(err)


def test_env_path_is_expanded(tmp_path: Path) -> None:
    settings = load(tmp_path, env={"SPARK_PG_HOME": "~/spark-home", "SPARK_PG_EMBEDDING_MODEL_DIR": "/m/x"})
    home = settings.opt_path("home")
    assert home == Path("~/spark-home").expanduser()
    assert home is not None and "~" not in str(home)
    assert settings.opt_path("embedding.model_dir") == Path("/m/x")


def test_file_path_is_expanded(tmp_path: Path) -> None:
    settings = load(tmp_path, "embedding:\n  cache_dir: ~/cache\n")
    assert settings.opt_path("embedding.cache_dir") == Path("~/cache").expanduser()


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [
        ("retrieval.k", 2.0, 2),  # an integral float is an integer
        ("retrieval.min_similarity", 0, 0.0),  # an int is a number
        ("retrieval.min_similarity", "0.5", 0.5),
        ("retrieval.k", "9", 9),
        ("embedding.threads", None, None),
        ("database.url", None, None),
    ],
)
def test_override_values_are_coerced(tmp_path: Path, name: str, raw: Any, expected: Any) -> None:
    value = load(tmp_path, overrides={name: raw}).raw(name)
    assert value == expected
    assert type(value) is type(expected)


def test_yaml_null_for_nullable_key(tmp_path: Path) -> None:
    settings = load(tmp_path, "database:\n  url:\nembedding:\n  threads: null\n")
    assert settings.opt_str("database.url") is None
    assert settings.opt_int("embedding.threads") is None


def test_settings_raw_unknown_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path).raw("retrieval.kk")
    assert info.value.key == "retrieval.kk"
    assert "unknown key" in str(info.value)


# --- errors ---------------------------------------------------------------------------------------------


def test_config_error_is_a_spark_pg_error() -> None:
    err = ConfigError("retrieval.k", "boom")
    assert isinstance(err, SparkPgError)
    assert err.key == "retrieval.k"
    assert str(err) == "config key 'retrieval.k': boom"


def test_unknown_key_in_file(tmp_path: Path) -> None:
    err = raises_config(tmp_path, "retrieval:\n  kk: 3\n")
    assert err.key == "retrieval.kk"
    message = str(err)
    assert "unknown key" in message
    assert str(tmp_path / "config.yaml") in message
    assert "retrieval.k" in message.split("known keys:")[1]  # lists the allowed keys


def test_unknown_top_level_key_in_file(tmp_path: Path) -> None:
    err = raises_config(tmp_path, "verbose: true\n")
    assert err.key == "verbose"
    assert "unknown key" in str(err)


def test_a_key_set_twice_in_the_file_is_refused_not_last_one_wins(tmp_path: Path) -> None:
    err = raises_config(tmp_path, "retrieval:\n  k: 3\nembedding: {}\nretrieval:\n  k: 9\n")
    assert "repeats the key 'retrieval' (first on line 1)" in str(err) and "line 4" in str(err)


def test_a_section_whose_keys_are_all_commented_out_is_an_empty_section(tmp_path: Path) -> None:
    """YAML reads `embedding:` with only comments below it as null: that stopped every command with
    "config key 'embedding': unknown key"."""
    settings = load(tmp_path, "embedding:\n  # model: x\nretrieval:\n  k: 5\nreflection:\n")
    assert settings.get_int("retrieval.k") == 5
    assert settings.get_str("embedding.model") == DEFAULTS["embedding.model"]
    assert settings.origins == {"retrieval.k": "file"}
    # only a section's name: a null anything else is still an unknown key, and a known key still a value
    assert raises_config(tmp_path, "verbose:\n").key == "verbose"
    assert raises_config(tmp_path, "retrieval:\n  k:\n").key == "retrieval.k"


def test_non_string_key_in_file(tmp_path: Path) -> None:
    err = raises_config(tmp_path, "1: 2\n")
    assert err.key == "1"
    assert "keys must be strings" in str(err)


def test_unknown_key_in_overrides(tmp_path: Path) -> None:
    err = raises_config(tmp_path, overrides={"retrieval.top_k": 3})
    assert err.key == "retrieval.top_k"
    message = str(err)
    assert "unknown key (from arguments)" in message
    for name in KEY_BY_NAME:
        assert name in message


RANGE_CASES = [
    ("retrieval.k", 0, "an integer >= 1 and <= 1000"),
    ("retrieval.k", 1001, "an integer >= 1 and <= 1000"),
    ("retrieval.k", -5, "an integer >= 1 and <= 1000"),
    ("database.statement_timeout_ms", -1, "an integer >= 0 and <= 3600000"),
    ("embedding.batch_size", 1025, "an integer >= 1 and <= 1024"),
    ("embedding.threads", 0, "an integer >= 1 and <= 256 (or empty for none)"),
    ("ingest.chunk_rows", 100_001, "an integer >= 1 and <= 100000"),
    ("retrieval.min_similarity", 1.5, "a number >= -1 and <= 1"),
    ("retrieval.min_similarity", -1.01, "a number >= -1 and <= 1"),
]


@pytest.mark.parametrize(("name", "value", "allowed"), RANGE_CASES)
def test_out_of_range_override(tmp_path: Path, name: str, value: float, allowed: str) -> None:
    err = raises_config(tmp_path, overrides={name: value})
    assert err.key == name
    assert f"{value!r} is out of range (from arguments)" in str(err)
    assert f"allowed: {allowed}" in str(err)


@pytest.mark.parametrize(("name", "value", "allowed"), RANGE_CASES)
def test_out_of_range_env(tmp_path: Path, name: str, value: float, allowed: str) -> None:
    env_name = KEY_BY_NAME[name].env
    err = raises_config(tmp_path, env={env_name: str(value)})
    assert err.key == name
    assert "is out of range" in str(err)
    assert f"(from {env_name})" in str(err)
    assert f"allowed: {allowed}" in str(err)


def test_out_of_range_in_file_names_the_file(tmp_path: Path) -> None:
    err = raises_config(tmp_path, "retrieval:\n  k: 0\n")
    assert err.key == "retrieval.k"
    assert f"0 is out of range (from {tmp_path / 'config.yaml'})" in str(err)
    assert "allowed: an integer >= 1 and <= 1000" in str(err)


@pytest.mark.parametrize(
    ("layer", "raw", "why"),
    [
        ("env", "abc", "'abc' is not an integer"),
        ("env", "2.5", "'2.5' is not an integer"),
        ("env", "8.5", "'8.5' is not an integer"),
        ("override", "abc", "'abc' is not an integer"),
        ("override", 2.5, "2.5 is not an integer"),
        ("override", [3], "[3] is not an integer"),
        ("override", True, "True is not a number"),
        ("override", Decimal("Infinity"), "Decimal('Infinity') is not an integer"),  # was OverflowError
        ("file", "abc", "'abc' is not an integer"),
        ("file", "2.5", "2.5 is not an integer"),
        ("file", "'2.5'", "'2.5' is not an integer"),
        ("file", "true", "True is not a number"),
    ],
)
def test_non_integer_for_int_key(tmp_path: Path, layer: str, raw: Any, why: str) -> None:
    if layer == "env":
        err = raises_config(tmp_path, env={"SPARK_PG_RETRIEVAL_K": raw})
    elif layer == "override":
        err = raises_config(tmp_path, overrides={"retrieval.k": raw})
    else:
        err = raises_config(tmp_path, f"retrieval:\n  k: {raw}\n")
    assert err.key == "retrieval.k"
    assert why in str(err)
    assert "allowed: an integer >= 1 and <= 1000" in str(err)


@pytest.mark.parametrize(
    ("layer", "raw"),
    [
        ("env", "nan"),
        ("env", "NaN"),
        ("env", "inf"),
        ("env", "-inf"),
        ("override", math.nan),
        ("override", math.inf),
        ("override", -math.inf),
        ("file", ".nan"),
        ("file", ".inf"),
        ("file", "-.inf"),
    ],
)
def test_nan_and_inf_for_float_key(tmp_path: Path, layer: str, raw: Any) -> None:
    if layer == "env":
        err = raises_config(tmp_path, env={"SPARK_PG_RETRIEVAL_MIN_SIMILARITY": raw})
    elif layer == "override":
        err = raises_config(tmp_path, overrides={"retrieval.min_similarity": raw})
    else:
        err = raises_config(tmp_path, f"retrieval:\n  min_similarity: {raw}\n")
    assert err.key == "retrieval.min_similarity"
    assert "is not finite" in str(err)
    assert "allowed: a number >= -1 and <= 1" in str(err)


@pytest.mark.parametrize("raw", ["abc", "0.5.1", ""])
def test_non_number_for_float_key(tmp_path: Path, raw: str) -> None:
    err = raises_config(tmp_path, overrides={"retrieval.min_similarity": raw or None})
    assert err.key == "retrieval.min_similarity"
    assert "allowed: a number >= -1 and <= 1" in str(err)


@pytest.mark.parametrize(
    ("env", "overrides", "why"),
    [
        (
            {"SPARK_PG_EMBEDDING_MODEL": "text-embedding-3-small"},
            None,
            "'text-embedding-3-small' is not allowed",
        ),
        ({"SPARK_PG_EMBEDDING_MODEL": "all-minilm-l6-v2-int8"}, None, "is not allowed"),  # case matters
        (None, {"embedding.model": "gpt"}, "'gpt' is not allowed"),
        (None, {"embedding.model": 5}, "5 is not a string"),
    ],
)
def test_bad_choice_for_embedding_model(
    tmp_path: Path, env: dict[str, str] | None, overrides: dict[str, Any] | None, why: str
) -> None:
    err = raises_config(tmp_path, env=env, overrides=overrides)
    assert err.key == "embedding.model"
    assert why in str(err)
    assert "allowed: one of all-MiniLM-L6-v2-int8, BAAI/bge-small-en-v1.5" in str(err)


@pytest.mark.parametrize(
    ("env", "overrides", "yaml_text", "name"),
    [
        ({"SPARK_PG_RETRIEVAL_K": ""}, None, None, "retrieval.k"),
        ({"SPARK_PG_RETRIEVAL_K": "  "}, None, None, "retrieval.k"),
        ({"SPARK_PG_EMBEDDING_MODEL": ""}, None, None, "embedding.model"),
        (None, {"embedding.batch_size": None}, None, "embedding.batch_size"),
        (None, {"retrieval.min_similarity": ""}, None, "retrieval.min_similarity"),
        (None, None, "ingest:\n  chunk_rows:\n", "ingest.chunk_rows"),
    ],
)
def test_empty_for_non_nullable_key(
    tmp_path: Path,
    env: dict[str, str] | None,
    overrides: dict[str, Any] | None,
    yaml_text: str | None,
    name: str,
) -> None:
    err = raises_config(tmp_path, yaml_text, env=env, overrides=overrides)
    assert err.key == name
    assert "must not be empty" in str(err)
    assert f"allowed: {KEY_BY_NAME[name].allowed()}" in str(err)
    assert "(or empty for none)" not in str(err)


@pytest.mark.parametrize(("name", "raw"), [("database.url", 5), ("home", ["a"]), ("embedding.model_dir", 1)])
def test_non_string_for_string_or_path_key(tmp_path: Path, name: str, raw: Any) -> None:
    err = raises_config(tmp_path, overrides={name: raw})
    assert err.key == name
    assert f"{raw!r} is not a string" in str(err)


def test_spark_pg_config_pointing_at_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError) as info:
        load_settings(environ={CONFIG_ENV: str(missing)})
    assert info.value.key == "(file)"
    assert CONFIG_ENV in str(info.value)
    assert str(missing) in str(info.value)
    assert "does not exist" in str(info.value)


def test_spark_pg_config_pointing_at_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(environ={CONFIG_ENV: str(tmp_path)})
    assert info.value.key == "(file)"
    assert "does not exist" in str(info.value)


def test_config_file_argument_missing(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError) as info:
        load_settings(environ={}, config_file=missing)
    assert info.value.key == "(file)"
    assert str(missing) in str(info.value)
    assert "does not exist" in str(info.value)


def test_empty_spark_pg_config_falls_back_to_default_path(no_user_config: Path) -> None:
    settings = load_settings(environ={CONFIG_ENV: ""})
    assert settings.as_dict() == DEFAULTS
    assert settings.config_file is None


def test_default_path_file_is_read_when_present(no_user_config: Path) -> None:
    no_user_config.parent.mkdir(parents=True)
    no_user_config.write_text("retrieval:\n  k: 7\n", encoding="utf-8")
    settings = load_settings(environ={})
    assert settings.get_int("retrieval.k") == 7
    assert settings.config_file == no_user_config


@pytest.mark.parametrize("text", ["retrieval: [k: 3\n", "retrieval:\n  k: 3\n k2: 4\n", "a: b: c\n"])
def test_invalid_yaml(tmp_path: Path, text: str) -> None:
    err = raises_config(tmp_path, text)
    assert err.key == "(file)"
    assert "is not valid YAML" in str(err)
    assert str(tmp_path / "config.yaml") in str(err)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("retrieval:\n  k: !!int abc\n", "'abc' is not a valid int"),
        ("home: 2024-13-45\n", "'2024-13-45' is not a valid timestamp"),
    ],
)
def test_yaml_value_its_tag_cannot_build(tmp_path: Path, text: str, problem: str) -> None:
    """yaml.safe_load raises a plain ValueError for these; the file must still fail as a ConfigError."""
    err = raises_config(tmp_path, text)
    assert type(err) is ConfigError
    assert err.key == "(file)"
    assert str(tmp_path / "config.yaml") in str(err)
    assert "is not valid YAML" in str(err)
    assert problem in str(err)


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * 5000 + "]" * 5000 + "\n",
        "a:\n" + "".join("  " * depth + f"k{depth}:\n" for depth in range(1, 200)),
    ],
)
def test_yaml_nested_too_deeply(tmp_path: Path, text: str) -> None:
    """Deep nesting fails as a ConfigError naming the file (the flow form made yaml.safe_load raise
    RecursionError; the block form is refused at the same depth limit)."""
    err = raises_config(tmp_path, text)
    assert type(err) is ConfigError
    assert err.key == "(file)"
    assert str(tmp_path / "config.yaml") in str(err)
    assert "nests deeper than" in str(err)


@pytest.mark.parametrize(
    ("text", "type_name"), [("- 1\n- 2\n", "list"), ("just a string\n", "str"), ("42\n", "int")]
)
def test_yaml_top_level_not_a_mapping(tmp_path: Path, text: str, type_name: str) -> None:
    err = raises_config(tmp_path, text)
    assert err.key == "(file)"
    assert f"must hold a mapping of sections, not {type_name}" in str(err)


def test_non_utf8_config_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"retrieval:\n  k: \xff\xfe\n")
    with pytest.raises(ConfigError) as info:
        load_settings(environ={}, config_file=path)
    assert info.value.key == "(file)"


def test_a_config_path_that_cannot_be_looked_at_is_a_config_error(tmp_path: Path) -> None:
    """ENAMETOOLONG (or EACCES on a folder we may not search) was an OSError traceback."""
    too_long = tmp_path / ("a" * 300)
    with pytest.raises(ConfigError, match=r"cannot look at .*File name too long") as info:
        load_settings(environ={CONFIG_ENV: str(too_long)})
    assert info.value.key == "(file)"


# --- a password in database.url is never shown ----------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "value", "seen"),
    [
        (
            "file",
            '"postgresql://app:hunter2@db.example/prod\\0"',
            "'postgresql://app:***@db.example/prod\\x00'",
        ),
        (
            "file",
            '["postgresql://app:hunter2@db.example/prod"]',
            "a list (not shown: it may hold a password)",
        ),
        ("file", "{password: hunter2}", "a dict (not shown: it may hold a password)"),
        ("arguments", "postgresql://db/prod?password=hunter2\x00", "?password=***"),
        ("arguments", "host=db password=hunter2\x00", "password=***"),
        # what the redaction cannot read (libpq: "missing =", urlsplit: an unclosed [): not shown at all
        ("arguments", "host=db password=hunter2 junk\x00", "a string (not shown: it may hold a password)"),
        (
            "arguments",
            "postgresql://app:hunter2@[db/prod\x00",
            "a string (not shown: it may hold a password)",
        ),
    ],
)
def test_an_invalid_database_url_is_named_without_its_password(
    tmp_path: Path, where: str, value: str, seen: str
) -> None:
    """The error names the key and shows the value as `spark-pg config` does, the password as ***."""
    if where == "file":
        err = raises_config(tmp_path, f"database:\n  url: {value}\n")
    else:
        err = raises_config(tmp_path, overrides={"database.url": value})
    assert err.key == "database.url" and seen in str(err)
    assert "hunter2" not in str(err)


def test_other_keys_show_their_invalid_value_as_it_is(tmp_path: Path) -> None:
    err = raises_config(tmp_path, overrides={"embedding.model": "secret:hunter2@x"})
    assert "'secret:hunter2@x' is not allowed" in str(err)
