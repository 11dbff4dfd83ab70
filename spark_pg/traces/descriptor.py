"""Deterministic descriptors: a task attempt (trace) and a learning's semantic handle, normalised, scrubbed.

A trace's descriptor is what gets stored as its text and embedded::

    Intent: Fix auth token refresh | Files: src/auth/refresh.py, src/auth/session.py | Outcome: failure
    | Key issue: refresh token reused after rotation | Tags: auth, tokens

(one line). Fields come in that order; an empty optional field (Files, Key issue, Tags) is left out, never
written as "none", so that two traces are not made similar by their missing parts. Every field is first
normalised, then scrubbed (:mod:`spark_pg.traces.scrub`), then cut:

* Unicode NFKC (full-width and other compatibility forms as plain letters), invisible format characters
  dropped (zero-width spaces and joiners, soft hyphens, bidi overrides), control characters (NUL included)
  and every kind of whitespace as single spaces, ``|`` (the separator) written as ``/``. Normalising
  before scrubbing means a secret split from its name by a newline or hidden by a zero-width space is
  seen whole by the scrubber, so the squashed text cannot bring it back together;
* intent at most 200 characters, key issue 300 (cut at a word boundary, never inside a placeholder);
* files: ``\\`` as ``/``, a leading ``./`` dropped, ``//`` as ``/`` and a home folder (``/home/<user>/``,
  ``/Users/<user>/``, ``C:/Users/<user>/`` in any case, ``/root/``) as ``~/`` (after scrubbing, before the
  cut: :func:`clean_path`), duplicates dropped, sorted, at most 10 of 200 characters each (then
  ``(+N more)``); only the first 4 times its limit of a path or a tag is scrubbed (:data:`LOOK_FACTOR`:
  enough past the limit that a secret running across it is still recognised);
* tags: lower case, spaces as ``-``, a leading ``#`` dropped, duplicates dropped, sorted, at most 12 of 40
  characters each;
* outcome: ``success`` or ``failure`` (any case).

The same attempt therefore always yields the same descriptor, and its SHA-256 is the trace's identity: the
key is ``trace:`` and the first 24 hex digits. A learning's handle (at most 500 characters) is normalised
like a field; its key is ``learning:`` and the first 24 hex digits of the handle's SHA-256.
:func:`stated_outcome` reads a descriptor's Outcome field back, and :func:`trace_outcome` checks a trace's
given outcome against it (an imported trace, spark_pg.records). Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spark_pg.errors import InputError
from spark_pg.rowfiles import checked_text, flattened
from spark_pg.traces.scrub import scrub

DESCRIPTOR_VERSION = 1
HANDLE_VERSION = 1
OUTCOMES = ("success", "failure")
MAX_RAW = 20_000  # characters of any one field looked at (scrubbed, then cut to the field's limit)
MAX_INTENT = 200
MAX_ISSUE = 300
MAX_FILE = 200
MAX_FILES = 10
MAX_TAG = 40
MAX_TAGS = 12
MAX_HANDLE = 500
MAX_CATEGORY = 64
# how much of one file path or tag is scrubbed (after normalising), as a multiple of its limit: 4 times, so
# that a secret starting before the limit and running past it is still recognised (600 characters past a
# path's limit, 120 past a tag's); without it 1,000 paths of 20,000 characters each were 20 million
# characters to scrub (tens of seconds of CPU for one call)
LOOK_FACTOR = 4

_HOME = re.compile(r"^(?:/home/[^/]{1,100}/|(?:[A-Za-z]:)?/(?i:users)/[^/]{1,100}/|/root/)")
_PLACEHOLDER = re.compile(r"\[(?:REDACTED(?::[a-z_]{1,40})?|EMAIL|PHONE|IP)\]")


def _cut(text: str, limit: int) -> str:
    """At most ``limit`` characters, cut at a word boundary when one is near, never inside a placeholder."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    if space >= limit * 0.6:
        cut = cut[:space]
    for m in _PLACEHOLDER.finditer(text, max(0, len(cut) - 60), len(cut) + 60):
        if m.start() < len(cut) < m.end():  # the cut would fall inside [REDACTED:...] / [EMAIL]
            cut = cut[: m.start()]
            break
    return cut.rstrip(" ,;:/-")


def normalise(raw: str) -> str:
    """:func:`spark_pg.rowfiles.flattened`, ``|`` as ``/`` (the descriptor's separator), at most MAX_RAW
    characters. What the scrubber is given."""
    return flattened(raw).replace("|", "/")[:MAX_RAW]  # after NFKC: it makes | of U+FF5C


def _look(limit: int) -> int:
    """Characters of a list item (a file path, a tag) scrubbed before it is cut to ``limit``."""
    return LOOK_FACTOR * limit


def clean(value: object, field: str, limit: int, *, required: bool = False, look: int = MAX_RAW) -> str:
    """One free-text field: normalised (:func:`normalise`), cut to ``look`` characters, scrubbed, then cut
    to at most ``limit`` characters. Empty is allowed unless ``required`` (InputError naming the field)."""
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise InputError(f"{field} must be a string, not {type(value).__name__}")
    # NUL is a control character like any other (dropped); a lone surrogate is refused: PostgreSQL
    # cannot store it and it was a UnicodeEncodeError when hashed
    raw = checked_text(field, value[:MAX_RAW].replace("\x00", " "))
    text = _cut(scrub(normalise(raw)[:look]), limit)
    if required and not text:
        raise InputError(f"{field} must not be empty")
    return text


def _lower(text: str) -> str:
    """Lower case, except the scrubber's placeholders (scrubbing comes first: AKIA... must still match)."""
    out, pos = [], 0
    for m in _PLACEHOLDER.finditer(text):
        out += [text[pos : m.start()].lower(), m.group(0)]
        pos = m.end()
    return "".join([*out, text[pos:].lower()])


def _items(value: str | Iterable[str] | None, field: str) -> list[str]:
    """A list from a comma-separated string or any iterable of strings."""
    if value is None:
        return []
    if isinstance(value, str):
        return value.split(",")
    if not isinstance(value, Iterable):  # files=5 was a TypeError
        raise InputError(f"{field} must be a string or strings, not {type(value).__name__}")
    items = list(value)
    if not all(isinstance(v, str) for v in items):
        raise InputError(f"{field} must be strings")
    return [piece for item in items for piece in item.split(",")]


MAX_FILES_LOOKED_AT = 1000  # distinct paths normalised and scrubbed; the rest are only counted


def clean_path(raw: str) -> str:
    """One file path: ``\\`` as ``/``, normalised and scrubbed (the first :func:`_look` characters), then
    without a leading ``./``, with ``//`` as ``/`` and a home folder as ``~/``, and only then cut to
    MAX_FILE: so a file has one path, however long it is and whoever's home it is in. (Cut first, the home
    folder's length moved the cut: /home/al/ and /home/alexandra/ gave two traces.) The rewrites come after
    the scrubber, which must see the path as given: ``//`` as ``/`` before it made
    ``postgres://user:pw@host`` a text it does not read as a URL."""
    look = _look(MAX_FILE)
    path = clean(raw.replace("\\", "/"), "files", look, look=look)
    while path.startswith("./"):
        path = path[2:]
    return _cut(_HOME.sub("~/", re.sub(r"/{2,}", "/", path)), MAX_FILE)


def clean_files(value: str | Iterable[str] | None) -> tuple[tuple[str, ...], int]:
    """Normalised file paths, sorted and deduplicated; returns (the first MAX_FILES, how many more).

    Only the first MAX_FILES_LOOKED_AT distinct paths (as given) are normalised; the distinct ones after
    them are added to the count of more."""
    given = list(dict.fromkeys(item.strip() for item in _items(value, "files") if item.strip()))
    paths = set()
    for raw in given[:MAX_FILES_LOOKED_AT]:
        path = clean_path(raw)
        if path:
            paths.add(path)
    ordered = sorted(paths)
    unseen = max(0, len(given) - MAX_FILES_LOOKED_AT)
    return tuple(ordered[:MAX_FILES]), max(0, len(ordered) - MAX_FILES) + unseen


def clean_tags(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """Normalised tags: lower case, ``-`` for spaces, sorted, deduplicated, at most MAX_TAGS."""
    tags = set()
    for raw in _items(value, "tags")[:1000]:
        tag = _lower(clean(raw, "tags", MAX_TAG, look=_look(MAX_TAG))).lstrip("#").strip()
        tag = "-".join(tag.split())
        if tag:
            tags.add(tag)
    return tuple(sorted(tags)[:MAX_TAGS])


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Trace:
    """One task attempt, normalised and scrubbed. ``descriptor`` is its text; ``key`` its identity."""

    intent: str
    outcome: str
    files: tuple[str, ...] = ()
    more_files: int = 0
    issue: str = ""
    tags: tuple[str, ...] = ()

    @property
    def descriptor(self) -> str:
        parts = [f"Intent: {self.intent}"]
        if self.files:
            more = f" (+{self.more_files} more)" if self.more_files else ""
            parts.append(f"Files: {', '.join(self.files)}{more}")
        parts.append(f"Outcome: {self.outcome}")
        if self.issue:
            parts.append(f"Key issue: {self.issue}")
        if self.tags:
            parts.append(f"Tags: {', '.join(self.tags)}")
        return " | ".join(parts)

    @property
    def descriptor_hash(self) -> str:
        return _hash(self.descriptor)

    @property
    def key(self) -> str:
        return "trace:" + self.descriptor_hash[:24]

    def metadata(self) -> dict[str, object]:
        """The structured fields, as stored in the memory's metadata (next to the counters)."""
        return {
            "intent": self.intent,
            "files": list(self.files),
            "more_files": self.more_files,
            "outcome": self.outcome,
            "issue": self.issue or None,
            "tags": list(self.tags),
            "descriptor_version": DESCRIPTOR_VERSION,
            "descriptor_hash": self.descriptor_hash,
        }


def make_trace(
    intent: str,
    outcome: str,
    *,
    files: str | Sequence[str] | None = None,
    issue: str | None = None,
    tags: str | Sequence[str] | None = None,
) -> Trace:
    """Normalise and scrub a task attempt (InputError naming a bad field)."""
    if not isinstance(outcome, str) or outcome.strip().lower() not in OUTCOMES:
        raise InputError(f"outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}")
    paths, more = clean_files(files)
    return Trace(
        intent=clean(intent, "intent", MAX_INTENT, required=True),
        outcome=outcome.strip().lower(),
        files=paths,
        more_files=more,
        issue=clean(issue, "issue", MAX_ISSUE),
        tags=clean_tags(tags),
    )


_OUTCOME_FIELD = re.compile(r"(?i)outcome\s*:\s*(success|failure)\b")


def stated_outcome(text: str) -> str | None:
    """The outcome a trace's text states: success or failure (lower case) from its ``Outcome:`` field, as
    :attr:`Trace.descriptor` writes it. A field is the text or a part of it between ``|`` separators; it
    states an outcome when, stripped, it starts with ``Outcome:`` (any case) and the word after it is
    success or failure (any case). None when no field does (free text, or ``Outcome: partial``);
    InputError when two fields state different ones."""
    stated = {m.group(1).lower() for part in text.split("|") if (m := _OUTCOME_FIELD.match(part.strip()))}
    if len(stated) > 1:
        raise InputError("the text states two outcomes (Outcome: failure and Outcome: success)")
    return stated.pop() if stated else None


def trace_outcome(text: str, given: object) -> str | None:
    """The outcome to store with a trace whose text is ``text`` and whose metadata gives ``given`` (None: not
    given): ``given`` in lower case, checked against the outcome the text states (:func:`stated_outcome`),
    or the text's when none is given; None when neither says. InputError when ``given`` is not success or
    failure (any case), or contradicts the text: reflection reads metadata.outcome, so a failure stored as
    a success would never warn, and the text's is what was embedded and what the key is made of."""
    outcome = None
    if given is not None:
        if not isinstance(given, str) or given.strip().lower() not in OUTCOMES:
            raise InputError(f"outcome of a trace must be success or failure, got {given!r:.60}")
        outcome = given.strip().lower()
    stated = stated_outcome(text)
    if outcome is not None and stated is not None and outcome != stated:
        raise InputError(f"outcome {outcome!r} contradicts the text's Outcome: {stated}")
    return outcome or stated


@dataclass(frozen=True)
class Learning:
    """A learning's semantic handle ("When working with X, do Y so that Z"), normalised and scrubbed."""

    handle: str
    category: str = "general"

    @property
    def handle_hash(self) -> str:
        return _hash(self.handle)

    @property
    def key(self) -> str:
        return "learning:" + self.handle_hash[:24]


def make_learning(handle: str, category: str | None = None) -> Learning:
    """Normalise and scrub a learning (InputError naming a bad field)."""
    cat = clean(category, "category", MAX_CATEGORY) if category is not None else "general"
    return Learning(handle=clean(handle, "handle", MAX_HANDLE, required=True), category=cat or "general")
