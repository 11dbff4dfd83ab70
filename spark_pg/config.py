"""Tuneables: defaults, then a YAML file, then environment variables, each validated.

The file is ``$SPARK_PG_CONFIG`` if set (it must then exist), else ``config.yaml`` in the user config
directory. It holds one mapping per section (``embedding: {model: ...}``). Every key also reads the
environment variable ``SPARK_PG_<SECTION>_<KEY>`` (``home`` reads ``SPARK_PG_HOME``, ``database.url``
reads ``SPARK_PG_DATABASE_URL``). Unknown keys, wrong types and out-of-range values raise
:class:`~spark_pg.errors.ConfigError` naming the key and what is allowed.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs
import yaml

from spark_pg.errors import ConfigError

APP = "spark_pg"
CONFIG_ENV = "SPARK_PG_CONFIG"
MODEL_NAMES = ("all-MiniLM-L6-v2-int8", "BAAI/bge-small-en-v1.5")


@dataclass(frozen=True)
class Key:
    """One tuneable: its dotted name, type, default, allowed range and meaning."""

    name: str
    kind: type
    default: Any
    help: str
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] | None = None
    nullable: bool = False

    @property
    def env(self) -> str:
        return "SPARK_PG_" + self.name.upper().replace(".", "_").replace("-", "_")

    def allowed(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind is bool:
            return "true or false"
        parts = []
        for op, bound in ((">=", self.lo), ("<=", self.hi)):
            if bound is not None:
                parts.append(f"{op} {int(bound)}" if self.kind is int else f"{op} {bound:g}")
        base = {int: "an integer", float: "a number", str: "a string", Path: "a path"}[self.kind]
        text = base + (" " + " and ".join(parts) if parts else "")
        return text + (" (or empty for none)" if self.nullable else "")


KEYS: tuple[Key, ...] = (
    Key(
        "home",
        Path,
        None,
        "Folder for the embedded server's data and the model files (default: the per-user data directory).",
        nullable=True,
    ),
    Key(
        "database.url",
        str,
        None,
        "PostgreSQL URL of an external server; empty means the embedded server under `home`.",
        nullable=True,
    ),
    Key(
        "database.shared_buffers_mb",
        int,
        512,
        "shared_buffers of the embedded server, applied (ALTER SYSTEM, restart) when spark-pg starts it. "
        "The PostgreSQL default of 128 MB holds little of a 100,000-memory corpus and its HNSW index. "
        "More than the machine's memory is refused; a value the server cannot start with is undone (the "
        "previous one put back, the server started again) and refused.",
        lo=16,
        hi=1_048_576,
    ),
    Key(
        "database.statement_timeout_ms",
        int,
        30000,
        "Statement timeout for spark_pg's sessions (0 = none). An ingest's load and the statistics refresh "
        "after a write run without it: they take as long as the data needs.",
        lo=0,
        hi=3_600_000,
    ),
    Key(
        "database.migration_lock_timeout_ms",
        int,
        10000,
        "How long `spark-pg init` waits for a lock before it gives up and changes nothing (0 = no limit): an "
        "upgrade queued behind a long transaction would hold up every query that comes after it.",
        lo=0,
        hi=3_600_000,
    ),
    Key(
        "embedding.model",
        str,
        MODEL_NAMES[0],
        "Embedding model. The default works offline from "
        "registry packages; BAAI/bge-small-en-v1.5 needs network on first use.",
        choices=MODEL_NAMES,
    ),
    Key(
        "embedding.model_dir",
        Path,
        None,
        "Folder holding the model files (default: `home`/models/<model>).",
        nullable=True,
    ),
    Key(
        "embedding.cache_dir",
        Path,
        None,
        "fastembed's download cache (default: `home`/fastembed).",
        nullable=True,
    ),
    Key(
        "embedding.threads",
        int,
        None,
        "ONNX Runtime threads (empty: one per core; `spark-pg serve` uses 1 unless set).",
        lo=1,
        hi=256,
        nullable=True,
    ),
    Key(
        "embedding.batch_size",
        int,
        16,
        "Texts per embedding call during ingest. Small batches avoid padding every text to the longest one.",
        lo=1,
        hi=1024,
    ),
    Key(
        "ingest.chunk_rows",
        int,
        500,
        "Rows embedded and written per step during ingest (progress "
        "granularity; the whole file is still one transaction).",
        lo=1,
        hi=100_000,
    ),
    Key("retrieval.k", int, 8, "How many memories a search returns by default.", lo=1, hi=1000),
    Key(
        "retrieval.min_similarity",
        float,
        0.25,
        "spark.retrieve gate: a candidate whose only evidence is semantic needs at least this cosine "
        "similarity. Calibrated for the default MiniLM model, whose related texts score 0.3-0.6.",
        lo=-1.0,
        hi=1.0,
    ),
    Key(
        "retrieval.min_fusion_score",
        float,
        0.2,
        "spark.retrieve decision gate on the fused score.",
        lo=0.0,
        hi=10.0,
    ),
    Key(
        "retrieval.precision_mode",
        str,
        "adaptive",
        "high_recall lowers both gates; adaptive also drops scores below adaptive_ratio x the best; "
        "high_precision raises both gates.",
        choices=("high_recall", "adaptive", "high_precision"),
    ),
    Key(
        "retrieval.fusion",
        str,
        "weighted",
        "weighted: weighted sum of the signals; rrf: Reciprocal Rank Fusion of the ranks in the candidate "
        "pools that found a memory, with per-pool weights (params rrf_w_<pool>).",
        choices=("weighted", "rrf"),
    ),
    Key(
        "retrieval.repeat_after_minutes",
        int,
        30,
        "spark.advise: advice an earlier call of the session was shown within this many minutes is marked a "
        "repeat (why.repeat), and the hooks leave it out of the context they inject; critical advice is "
        "never a repeat. 0: every call shows its advice.",
        lo=0,
        hi=100_000,
    ),
    Key(
        "retrieval.cache_queries",
        bool,
        True,
        "Store each query's vector in spark.query_embeddings so psql can replay it by text.",
    ),
    Key(
        "reflection.top_k",
        int,
        5,
        "How many similar past traces and learnings `spark-pg reflect` and SparkClient.reflect return "
        "(spark.reflect's k; linked learnings come on top).",
        lo=1,
        hi=100,
    ),
    Key(
        "reflection.min_score",
        float,
        0.25,
        "spark.reflect gate: a past trace or learning comes back when similarity x recency factor reaches "
        "this (MiniLM: related tasks score 0.27-0.65 against a trace descriptor, unrelated ones under 0.2).",
        lo=0.0,
        hi=1.0,
    ),
    Key(
        "reflection.recency_half_life_days",
        float,
        90.0,
        "spark.reflect recency halves every this many days; a score is similarity x (0.5 + 0.5 x recency).",
        lo=0.001,
        hi=36500.0,
    ),
    Key(
        "reflection.warning_min_score",
        float,
        0.45,
        "The advisor warns of a past failure (a trace with outcome failure) whose reflection score reaches "
        "this; used by SparkClient.advisor and `spark-pg reflect`.",
        lo=0.0,
        hi=1.0,
    ),
)
# keys whose value can hold a password: shown with it as *** (:func:`shown`)
SECRET_KEYS = frozenset({"database.url"})
_MAY_HOLD_PASSWORD = re.compile(r"password|:[^/@]*@", re.IGNORECASE)  # password=x, user:x@host
# config keys passed to spark.retrieve as params of the same name (their defaults must match the SQL's)
RETRIEVE_PARAM_KEYS = (
    "min_similarity",
    "min_fusion_score",
    "precision_mode",
    "fusion",
    "repeat_after_minutes",  # read by spark.advise only
)
# config keys passed to spark.reflect as params (their defaults must match spark.reflect_defaults())
REFLECT_PARAM_KEYS = {
    "reflection.min_score": "min_score",
    "reflection.recency_half_life_days": "half_life_days",
}
KEY_BY_NAME: dict[str, Key] = {k.name: k for k in KEYS}


def default_config_path() -> Path:
    return platformdirs.user_config_path(APP) / "config.yaml"


def shown(name: str, value: Any) -> str:
    """``value`` of the key ``name`` as a message may show it: repr, except for a key that can hold a
    password (:data:`SECRET_KEYS`): a string with the password as ``***`` (as `spark-pg config` and `db
    status` show it), or not at all when the redaction cannot find it in a string that may hold one (a
    conninfo libpq cannot read, a URL urlsplit cannot); a number as it is; anything else (a list, a
    mapping) by its type alone."""
    if name not in SECRET_KEYS or isinstance(value, bool | int | float):
        return repr(value)
    if not isinstance(value, str):  # a list or mapping of the URL, say: it could hold the password anywhere
        return f"a {type(value).__name__} (not shown: it may hold a password)"
    from spark_pg.redact import NOT_SHOWN, redact_url

    redacted = redact_url(value)
    if redacted == NOT_SHOWN or (redacted == value and _MAY_HOLD_PASSWORD.search(value)):
        return "a string (not shown: it may hold a password)"
    return repr(redacted)


def _coerce(key: Key, raw: Any, origin: str) -> Any:
    """Turn a raw value (from YAML or an env string) into the key's type, or raise ConfigError. A message
    shows the value (:func:`shown`: a password never)."""

    def bad(why: str) -> ConfigError:
        return ConfigError(key.name, f"{why} (from {origin}); allowed: {key.allowed()}")

    if raw is None or (isinstance(raw, str) and raw.strip() == ""):
        if key.nullable:
            return None
        raise bad("must not be empty")
    if key.kind is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, int) and raw in (0, 1):  # YAML `0` / `1`, as the environment's "0" / "1"
            return raw == 1
        if isinstance(raw, str) and raw.strip().lower() in (
            "true",
            "1",
            "yes",
            "on",
            "false",
            "0",
            "no",
            "off",
        ):
            return raw.strip().lower() in ("true", "1", "yes", "on")
        raise bad(f"{shown(key.name, raw)} is not a boolean")
    if key.kind in (int, float):
        if isinstance(raw, bool):
            raise bad(f"{shown(key.name, raw)} is not a number")
        try:
            num: int | float
            if key.kind is int:
                if isinstance(raw, float) and not raw.is_integer():
                    raise ValueError
                num = int(raw) if not isinstance(raw, str) else _int_text(raw.strip())
            else:
                num = float(raw)
        except (TypeError, ValueError, OverflowError):  # OverflowError: int(Decimal("Infinity"))
            what = "an integer" if key.kind is int else "a number"
            raise bad(f"{shown(key.name, raw)} is not {what}") from None
        if isinstance(num, float) and not math.isfinite(num):
            raise bad(f"{shown(key.name, raw)} is not finite")
        if (key.lo is not None and num < key.lo) or (key.hi is not None and num > key.hi):
            raise bad(f"{num!r} is out of range")
        return num
    if not isinstance(raw, str):
        raise bad(f"{shown(key.name, raw)} is not a string")
    if "\x00" in raw:  # no file name, URL or model name holds one; it failed later, as a bare ValueError
        raise bad(f"{shown(key.name, raw)} contains a NUL character")
    if key.choices and raw not in key.choices:
        raise bad(f"{shown(key.name, raw)} is not allowed")
    if key.kind is Path:
        return Path(raw).expanduser()
    return raw


def _int_text(text: str) -> int:
    """An integer written in the environment; ``8.0`` counts, as it does in the YAML file."""
    try:
        return int(text)
    except ValueError:
        num = float(text)  # ValueError for what is no number at all
        if not num.is_integer():  # 8.5, and inf / nan
            raise ValueError(text) from None
        return int(num)


# the file's sections: the part before the dot of the dotted keys (embedding, retrieval, ...)
SECTIONS = frozenset(k.name.split(".", 1)[0] for k in KEYS if "." in k.name)


def _flatten(data: Mapping[str, Any], origin: str) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for top, value in data.items():
        if not isinstance(top, str):
            raise ConfigError(str(top), f"keys must be strings (in {origin})")
        if value is None and top in SECTIONS:
            # a section whose keys are all commented out (`embedding:` and `# model: x` below it) is read
            # by YAML as null: an empty section, not a value for an unknown key `embedding`
            continue
        if isinstance(value, Mapping):
            for sub, v in value.items():
                flat[f"{top}.{sub}"] = v
        else:
            flat[top] = value
    return flat


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("(file)", f"{path} is not UTF-8 text: {exc.reason}") from None
    except OSError as exc:
        raise ConfigError("(file)", f"cannot read {path}: {exc.strerror}") from None
    # the memories files' loader: no aliases, bounded nesting, a bad tagged value (``!!int abc``, a date
    # like 2024-13-45) as a YAML error at its line; imported here, as only a config file needs it
    from spark_pg.rowfiles import StrictYamlLoader, yaml_error_line, yaml_error_message

    loader: StrictYamlLoader | None = None
    try:
        loader = StrictYamlLoader(text)  # a non-printable character is refused here already
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        line = yaml_error_line(exc, text)
        raise ConfigError(
            "(file)", f"{path} is not valid YAML: line {line}: {yaml_error_message(exc)}"
        ) from None
    except (ValueError, TypeError, RecursionError) as exc:  # what the loader's checks might still miss
        raise ConfigError("(file)", f"{path} is not valid YAML: {type(exc).__name__}: {exc}") from None
    finally:
        if loader is not None:
            loader.dispose()
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError("(file)", f"{path} must hold a mapping of sections, not {type(data).__name__}")
    return _flatten(data, str(path))


class Settings:
    """Validated tuneables. Read them with the typed accessors (``settings.get_int("retrieval.k")``)."""

    def __init__(
        self,
        values: Mapping[str, Any],
        config_file: Path | None = None,
        origins: Mapping[str, str] | None = None,
    ) -> None:
        self._values = dict(values)
        self.config_file = config_file
        self.origins = dict(origins or {})  # key -> "file", "environment" or "arguments"; absent: default

    def raw(self, name: str) -> Any:
        if name not in KEY_BY_NAME:
            raise ConfigError(name, "unknown key")
        return self._values[name]

    def get_int(self, name: str) -> int:
        value = self.raw(name)
        assert isinstance(value, int)
        return value

    def opt_int(self, name: str) -> int | None:
        value = self.raw(name)
        assert value is None or isinstance(value, int)
        return value

    def get_bool(self, name: str) -> bool:
        value = self.raw(name)
        assert isinstance(value, bool)
        return value

    def get_float(self, name: str) -> float:
        return float(self.raw(name))

    def get_str(self, name: str) -> str:
        value = self.raw(name)
        assert isinstance(value, str)
        return value

    def opt_str(self, name: str) -> str | None:
        value = self.raw(name)
        assert value is None or isinstance(value, str)
        return value

    def opt_path(self, name: str) -> Path | None:
        value = self.raw(name)
        assert value is None or isinstance(value, Path)
        return value

    @property
    def home(self) -> Path:
        return self.opt_path("home") or platformdirs.user_data_path(APP)

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)


def _is_file(path: Path) -> bool:
    """``path.is_file()``, with a path that cannot be looked at (a name too long, a folder we may not
    search) refused as a ConfigError naming it instead of a traceback."""
    try:
        return path.is_file()
    except OSError as exc:
        raise ConfigError("(file)", f"cannot look at {path}: {exc.strerror or exc}") from None


def load_settings(
    overrides: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    config_file: Path | str | None = None,
) -> Settings:
    """Defaults, then the YAML file, then ``SPARK_PG_*`` variables, then ``overrides``."""
    env = os.environ if environ is None else environ
    if config_file is not None and not isinstance(config_file, Path):
        config_file = Path(config_file)  # a str was an AttributeError
    explicit = config_file or (Path(env[CONFIG_ENV]).expanduser() if env.get(CONFIG_ENV) else None)
    path = explicit or default_config_path()
    if explicit is not None and not _is_file(explicit):
        origin = "the config_file argument" if config_file else CONFIG_ENV
        raise ConfigError("(file)", f"{origin} points at {explicit}, which does not exist or is not a file")
    layers: list[tuple[str, dict[str, Any]]] = []
    if _is_file(path):
        layers.append((str(path), _read_file(path)))
    layers.append(("environment", {k.name: env[k.env] for k in KEYS if k.env in env}))
    if overrides:
        layers.append(("arguments", dict(overrides)))

    values = {k.name: k.default for k in KEYS}
    origins: dict[str, str] = {}
    for origin, layer in layers:
        for name, raw in layer.items():
            key = KEY_BY_NAME.get(name)
            if key is None:
                raise ConfigError(name, f"unknown key (from {origin}); known keys: {', '.join(KEY_BY_NAME)}")
            values[name] = _coerce(
                key, raw, f"{KEY_BY_NAME[name].env}" if origin == "environment" else origin
            )
            origins[name] = origin if origin in ("environment", "arguments") else "file"
    return Settings(values, path if path.is_file() else None, origins)
