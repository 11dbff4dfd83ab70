"""One exception hierarchy for everything spark_pg raises on purpose.

Callers catch :class:`SparkPgError`; the subclasses say which part failed.
"""

from __future__ import annotations


class SparkPgError(Exception):
    """Base class of every error spark_pg raises deliberately."""


class ConfigError(SparkPgError):
    """A tuneable is missing, has the wrong type, or is out of its allowed range."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"config key {key!r}: {message}")


class DatabaseError(SparkPgError):
    """The database cannot be reached, started, or is not in the expected state."""


class SchemaError(DatabaseError):
    """The schema is missing or at an unexpected revision (run `spark-pg init`)."""


class EmbeddingError(SparkPgError):
    """An embedding model cannot be loaded or produced an unusable vector."""


class ModelNotAvailable(EmbeddingError):
    """The configured model's files are not installed; the message says how to get them."""


class ModelMismatch(EmbeddingError):
    """The configured model differs from the model the stored vectors were made with."""


class InputError(SparkPgError, ValueError):
    """A caller passed a bad value; the message names the parameter."""


class ArgumentRefused(InputError):
    """A SQL function refused an argument (SQLSTATE class 22: 22023 a bad value, 22004 a NULL, 22000 a
    vector of the wrong dimension, 2201B a bad pattern). The message is the server's, which names the
    argument; ``sqlstate`` says which class of refusal; the psycopg error is the ``__cause__``."""

    def __init__(self, sqlstate: str | None, message: str) -> None:
        self.sqlstate = sqlstate
        super().__init__(message)


class IngestError(InputError):
    """A row of an ingest file is invalid; nothing from that file was written."""

    def __init__(self, source: str, line: int, field: str | None, message: str) -> None:
        self.source = source
        self.line = line
        self.field = field
        what = f", field {field!r}" if field else ""
        where = f" line {line}" if line else ""  # 0: the file as a whole
        super().__init__(f"{source}{where}{what}: {message}")
