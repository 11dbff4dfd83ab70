"""Trigger rules: read and validate the YAML file, and write the rules to ``spark.trigger_rules``.

The file format follows the seeds::

    version: 1
    rules:
      - name: destructive_commands
        pattern: "rm -rf|drop table|truncate"      # case-insensitive POSIX regular expression
        context_pattern: "bash|sql"                # optional: must match too
        surface: [seed:safety-destructive-ops]     # memory keys (the tenant's or the cold-start pack's)
        priority: critical                         # critical | high | normal | background
        interrupt: true                            # may block the call (advisor, opt-in)
    learned: []                                    # written by the system, not by hand

Patterns run inside every retrieval, so a pattern that could be slow to run or to compile is refused here,
with the rule's name, before it reaches the database (which checks again: ``spark._trigger_pattern_problem``);
the pattern checks are in :mod:`spark_pg.trigger_patterns`.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import psycopg
import yaml
from psycopg.types.json import Jsonb

from spark_pg import queries
from spark_pg.errors import InputError
from spark_pg.records import MAX_KEY, MAX_TENANT, PRIORITIES, SYSTEM_TENANT, json_problem
from spark_pg.refusals import one_line
from spark_pg.rowfiles import (
    StrictYamlLoader,
    read_text_file,
    string_problem,
    text_problem,
    yaml_error_line,
    yaml_error_message,
)
from spark_pg.trigger_patterns import as_python_pattern, pattern_problem

RULE_KEYS = frozenset(
    {
        "name",
        "pattern",
        "context_pattern",
        "surface",
        "priority",
        "interrupt",
        "confidence",
        "shadow",
        "metadata",
    }
)
FILE_KEYS = frozenset({"version", "rules", "learned"})
NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # the whole name (fullmatch: a $ would let "a\n" through)
# the smallest normal number a real (spark.trigger_rules.confidence) holds: a smaller one but 0 underflows
# on its way into the database, or is stored as a denormal of less precision
REAL_MIN = 2.0**-126
RULES_FILE_MAX_BYTES = 16 << 20  # a rules file is read whole before it is checked
METADATA_MAX_BYTES = 65_536  # a rule's metadata as JSON text (spark.put_trigger_rule refuses more)


class TriggerRuleError(InputError):
    """A trigger rule file or rule is invalid; nothing from that file was written. ``sqlstate``: the
    database's errcode when the database refused it (None when the checks here did)."""

    def __init__(self, source: str, rule: str, message: str, sqlstate: str | None = None) -> None:
        self.source = source
        self.rule = rule
        self.sqlstate = sqlstate
        super().__init__(f"{source}: {rule}: {message}")


@dataclass(frozen=True)
class TriggerRule:
    name: str
    pattern: str
    surface: tuple[str, ...]
    context_pattern: str | None = None
    priority: str = "normal"
    interrupt: bool = False
    origin: str = "static"
    confidence: float = 1.0
    shadow: bool = False
    metadata: Mapping[str, Any] | None = None


def _rule(raw: Any, where: str, source: str, *, origin: str) -> TriggerRule:
    if not isinstance(raw, Mapping):
        raise TriggerRuleError(source, where, f"must be a mapping, not {type(raw).__name__}")
    name = raw.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise TriggerRuleError(
            source, where, f"name must be 1 to 64 letters, digits or _ . : -, got {name!r}"
        )
    where = f"rule {name!r}"
    unknown = sorted((k for k in raw if k not in RULE_KEYS), key=repr)
    if unknown:
        raise TriggerRuleError(
            source, where, f"unknown key {unknown[0]!r}; allowed: {', '.join(sorted(RULE_KEYS))}"
        )
    patterns: dict[str, str | None] = {}
    for key in ("pattern", "context_pattern"):
        value = raw.get(key)
        if value is None and key == "context_pattern":
            patterns[key] = None
            continue
        if not isinstance(value, str):
            raise TriggerRuleError(source, where, f"{key} must be a string, not {type(value).__name__}")
        problem = string_problem(value)  # a NUL: the database cannot store it
        if problem:
            raise TriggerRuleError(source, where, f"{key} {problem}")
        problem = pattern_problem(value) or (_empty_match_problem(value) if key == "pattern" else None)
        if problem:
            raise TriggerRuleError(source, where, f"{key} {value!r} {problem}")
        patterns[key] = value
    surface = raw.get("surface")
    if isinstance(surface, str):
        surface = [surface]
    if (
        not isinstance(surface, list)
        or not 1 <= len(surface) <= 50
        or not all(isinstance(k, str) and k.strip() and len(k) <= MAX_KEY for k in surface)
    ):
        raise TriggerRuleError(
            source, where, f"surface must list 1 to 50 memory keys of 1 to {MAX_KEY} characters"
        )
    padded = next((k for k in surface if k != k.strip()), None)
    if padded is not None:  # " k " names no memory, and the rule would surface nothing without a word
        raise TriggerRuleError(source, where, f"surface key {padded!r} starts or ends with whitespace")
    for key in surface:
        problem = string_problem(key)
        if problem:
            raise TriggerRuleError(source, where, f"surface key {key!a} {problem}")
    priority = raw.get("priority", "normal")
    if priority not in PRIORITIES:
        raise TriggerRuleError(source, where, f"priority {priority!r} is not one of {', '.join(PRIORITIES)}")
    flags: dict[str, bool] = {}
    for key in ("interrupt", "shadow"):
        value = raw.get(key, origin == "learned" if key == "shadow" else False)
        if not isinstance(value, bool):
            raise TriggerRuleError(source, where, f"{key} must be true or false, got {value!r}")
        flags[key] = value
    confidence = raw.get("confidence", 1.0 if origin == "static" else 0.5)
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
        raise TriggerRuleError(source, where, f"confidence must be a number from 0 to 1, got {confidence!r}")
    if 0 < confidence < REAL_MIN:
        raise TriggerRuleError(
            source,
            where,
            f"confidence {confidence!r} is too small for the database (a real): use 0, or a number from "
            f"{REAL_MIN:.3g} to 1",
        )
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise TriggerRuleError(source, where, "metadata must be a mapping")
    problem = json_problem(metadata)
    if problem:
        raise TriggerRuleError(source, where, f"metadata {problem}")
    try:  # as it will be stored: a date (YAML reads 2024-05-01 as one) as ISO 8601; what is not JSON refused
        metadata = json.loads(json.dumps(metadata, default=_json_date))
    except (TypeError, ValueError) as exc:
        raise TriggerRuleError(source, where, f"metadata is not JSON: {exc}") from None
    size = jsonb_text_bytes(metadata)  # spark.put_trigger_rule's measure
    if size > METADATA_MAX_BYTES:
        raise TriggerRuleError(
            source, where, f"metadata must be at most {METADATA_MAX_BYTES:,} bytes as JSON text, got {size:,}"
        )
    pattern = patterns["pattern"]
    assert pattern is not None
    return TriggerRule(
        name=name,
        pattern=pattern,
        surface=tuple(surface),
        context_pattern=patterns["context_pattern"],
        priority=str(priority),
        interrupt=flags["interrupt"],
        origin=origin,
        confidence=float(confidence),
        shadow=flags["shadow"],
        metadata=dict(metadata),
    )


def _json_date(value: Any) -> str:
    """json.dumps ``default``: a date or time as ISO 8601; nothing else."""
    if isinstance(value, date):  # datetime too
        return value.isoformat()
    raise TypeError(f"a {type(value).__name__} is not JSON")


def _empty_match_problem(pattern: str) -> str | None:
    """Why ``pattern`` would match every call: it matches the empty text (``.*``, ``a|``, ``x?``,
    ``\\mdeploy|``); or None. Checked on the pattern as rewritten for Python's re (:func:`as_python_pattern`:
    PostgreSQL's ``\\m`` is no escape to Python). A pattern that cannot be checked so is refused, never
    passed: pattern_problem has compiled the same rewrite, so this does not happen."""
    python = as_python_pattern(pattern)
    try:
        if isinstance(python, str):
            raise re.error(python)
        with warnings.catch_warnings():  # POSIX classes ([[:alpha:]]) warn in Python; valid in PostgreSQL
            warnings.simplefilter("ignore")
            matches = re.search(python[0], "") is not None
    except (re.error, OverflowError, RecursionError) as exc:
        return f"cannot be checked for matching an empty text: {exc}"
    return "matches an empty text, so every call: say what it seeks" if matches else None


def jsonb_text_bytes(value: Any) -> int:
    """The bytes of ``value`` (JSON as :func:`json.loads` reads it) as PostgreSQL prints it as jsonb text:
    ", " and ": " between items, and numbers in full (jsonb keeps them as numeric: 1e300 is 301 digits,
    where json.dumps writes 1e+300)."""
    from decimal import Decimal

    if isinstance(value, bool) or value is None:
        return 4 if value in (True, None) else 5
    if isinstance(value, int):
        return len(str(value))
    if isinstance(value, float):
        return len(format(Decimal(repr(value)), "f"))
    if isinstance(value, str):
        return len(json.dumps(value, ensure_ascii=False).encode())
    if isinstance(value, list):
        return 2 + sum(jsonb_text_bytes(v) for v in value) + 2 * max(0, len(value) - 1)
    if isinstance(value, dict):
        items = [jsonb_text_bytes(str(k)) + 2 + jsonb_text_bytes(v) for k, v in value.items()]
        return 2 + sum(items) + 2 * max(0, len(items) - 1)
    raise TypeError(f"not JSON: {type(value).__name__}")


def parse_rules(data: Any, source: str = "<rules>") -> list[TriggerRule]:
    """Validate a parsed YAML document; every rule is checked before any is returned. The document must
    name its ``rules`` (``rules: []`` for none): loading makes the tenant's static rules exactly the file's,
    so an empty or truncated file read as no rules removed every one of them."""
    if data is None:
        raise TriggerRuleError(
            source, "file", "is empty; write 'rules: []' to remove every static rule of the tenant"
        )
    if not isinstance(data, Mapping):
        raise TriggerRuleError(source, "file", "must be a mapping with a 'rules' list")
    unknown = sorted((k for k in data if k not in FILE_KEYS), key=repr)
    if unknown:
        raise TriggerRuleError(
            source, "file", f"unknown key {unknown[0]!r}; allowed: {', '.join(sorted(FILE_KEYS))}"
        )
    if "rules" not in data:
        raise TriggerRuleError(
            source, "file", "has no 'rules' list; write 'rules: []' to remove every static rule of the tenant"
        )
    version = data.get("version", 1)
    if isinstance(version, bool) or version != 1:  # True == 1 in Python
        raise TriggerRuleError(source, "file", f"version {version!r} is not supported (1 is)")
    rules: list[TriggerRule] = []
    for section, origin in (("rules", "static"), ("learned", "learned")):
        items = data.get(section)
        if items is None:  # `rules:` left empty, or no learned section: none
            items = []
        if not isinstance(items, list):  # `rules: {}` read as no rules, and loading removed them all
            raise TriggerRuleError(source, section, "must be a list")
        rules.extend(_rule(raw, f"{section}[{i}]", source, origin=origin) for i, raw in enumerate(items))
    names = [r.name for r in rules]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise TriggerRuleError(source, f"rule {duplicate!r}", "is defined twice")
    return rules


def check_load_tenant(source: str, tenant: object) -> None:
    """TriggerRuleError when ``tenant`` is no tenant a rules file can be loaded for, as spark.put_trigger_rule
    refuses it (22023): blank, over-long or unstorable, or the pack's, which only ``spark-pg seed`` writes.
    For ``triggers load --check``, which touches no database, so that what it calls valid loads."""
    problem = text_problem(tenant, MAX_TENANT)
    if problem:
        raise TriggerRuleError(source, "tenant", problem)
    if tenant == SYSTEM_TENANT:
        message = "holds the cold-start pack that every tenant sees: only `spark-pg seed` writes its rules"
        raise TriggerRuleError(source, f"tenant {tenant}", message)


def load_rules(path: str | Path) -> list[TriggerRule]:
    """Read and validate a trigger rule YAML file."""
    path = Path(path)

    def fail(line: int, message: str) -> TriggerRuleError:
        return TriggerRuleError(str(path), f"line {line}" if line else "file", message)

    # the guarded reader: a FIFO or a device (/dev/zero) is refused, not read forever
    text = read_text_file(path, fail, RULES_FILE_MAX_BYTES)
    # the memories files' loader: no aliases, bounded nesting, bad tagged values as YAML errors
    loader: StrictYamlLoader | None = None
    try:
        loader = StrictYamlLoader(text)
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        line = yaml_error_line(exc, text)
        raise TriggerRuleError(
            str(path), f"line {line}", f"is not valid YAML: {yaml_error_message(exc)}"
        ) from None
    finally:
        if loader is not None:
            loader.dispose()
    return parse_rules(data, str(path))


@dataclass(frozen=True)
class SyncResult:
    written: int
    removed: int


def checked_rule(rule: object, source: str = "rules") -> TriggerRule:
    """``rule`` checked as a rule file's are (a TriggerRule built in code can hold anything): the rule with
    its fields as they will be stored, or TriggerRuleError naming it."""
    if not isinstance(rule, TriggerRule):
        raise TriggerRuleError(source, "rule", f"must be a TriggerRule, not {type(rule).__name__}")
    where = f"rule {rule.name!r}"
    if rule.origin not in ("static", "learned"):
        raise TriggerRuleError(source, where, f"origin must be static or learned, got {rule.origin!r}")
    fields = {key: getattr(rule, key) for key in RULE_KEYS}
    if isinstance(rule.surface, tuple):
        fields["surface"] = list(rule.surface)
    return _rule(fields, where, source, origin=rule.origin)


def sync_rules(conn: psycopg.Connection[Any], tenant: str, rules: Sequence[TriggerRule]) -> SyncResult:
    """Make the tenant's static rules exactly ``rules`` in one transaction; learned ones are only upserted.
    Each rule is checked first, as a rule file's are (:func:`checked_rule`), and then the tenant, as every
    write of spark.put_trigger_rule checks it: with no rules, the delete alone would otherwise empty the
    pack's rules (tenant _system) for every tenant. Syncs of one tenant take turns (a lock held to the
    end of the transaction): the delete of the static rules not in ``rules`` cannot see those another
    sync has written and not yet committed, and two at once left the rules of both. Raises
    TriggerRuleError, naming the rule and carrying the errcode (``sqlstate``), for anything the database
    refuses."""
    rules = [checked_rule(rule, "sync_rules") for rule in rules]
    with conn.transaction(), conn.cursor() as cur:
        try:
            cur.execute(queries.CHECK_WRITER, {"tenant": tenant})
        except psycopg.DataError as exc:  # 22023 a bad tenant, 22004 NULL; a NUL (client side)
            raise TriggerRuleError("database", f"tenant {tenant!r}", one_line(exc), exc.sqlstate) from None
        cur.execute(queries.ADVISORY_XACT_LOCK, (f"spark.trigger_rules\x1f{tenant}",))
        for rule in rules:
            try:
                cur.execute(
                    queries.PUT_TRIGGER_RULE,
                    {
                        "tenant": tenant,
                        "name": rule.name,
                        "pattern": rule.pattern,
                        "surface": list(rule.surface),
                        "context_pattern": rule.context_pattern,
                        "priority": rule.priority,
                        "interrupt": rule.interrupt,
                        "origin": rule.origin,
                        "confidence": rule.confidence,
                        "shadow": rule.shadow,
                        "metadata": Jsonb(dict(rule.metadata or {})),
                    },
                )
            except psycopg.DataError as exc:  # 2201B, 22023 ...: what the checks here let through
                raise TriggerRuleError(
                    "database", f"rule {rule.name!r}", one_line(exc), exc.sqlstate
                ) from None
        static = [r.name for r in rules if r.origin == "static"]
        cur.execute(queries.DROP_OTHER_STATIC_RULES, {"tenant": tenant, "names": static})
        removed = cur.rowcount
    return SyncResult(written=len(rules), removed=removed)
