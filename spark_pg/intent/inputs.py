"""Reading a tool call's raw input: JSON strings become mappings, every string is cleaned and scrubbed of
secrets before anything parses it (:func:`clean_input`), fields are looked up (also in nested mappings and
lists, breadth first and bounded) and clipped, and a few identifiers are mined from code bodies: those an
edit adds, else those a body defines (a hint when there is no task context).
"""

from __future__ import annotations

import json
import re
import shlex
import unicodedata
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import islice, pairwise
from typing import Any

from spark_pg.intent.limits import SCAN_LIMIT
from spark_pg.intent.text import _HASHLIKE, _clip


def _json_mapping(text: str) -> Mapping[str, Any] | None:
    """``text`` parsed, when it is a JSON object of at most ``SCAN_LIMIT * 16`` characters; else None."""
    stripped = text.strip()
    if stripped.startswith("{") and len(stripped) <= SCAN_LIMIT * 16:
        try:
            parsed = json.loads(stripped)
        except (ValueError, RecursionError):
            return None
        if isinstance(parsed, Mapping):
            return parsed
    return None


def _as_mapping(tool_input: object) -> Mapping[str, Any]:
    """The tool input as a mapping: JSON strings are parsed, anything else is wrapped as ``input``."""
    if tool_input is None:
        return {}
    if isinstance(tool_input, Mapping):
        return tool_input
    if isinstance(tool_input, bytes):
        tool_input = tool_input[: SCAN_LIMIT * 16].decode("utf-8", "replace")
    if isinstance(tool_input, str):
        parsed = _json_mapping(tool_input)
        return parsed if parsed is not None else {"input": tool_input.strip()[:SCAN_LIMIT]}
    return {"input": _clip(tool_input)}


# --- cleaning: what the heuristics and the log may see of a tool input ----------------------------------

# characters past SCAN_LIMIT the scrubber reads too, so that a secret across the heuristics' cut is seen whole
_SCRUB_MARGIN = 512
# characters of one tool input scrubbed in all (about 30 ms of code, 80 of text made to be slow); strings past
# it are dropped
MAX_SCRUBBED = 32_768
# items of one mapping or list copied: the heuristics look a key up in a mapping, read at most 50 items of a
# list, 64 words of an argv
_MAX_KEYS, _MAX_ITEMS = 200, 64
_MAX_VALUES = 2_000  # values copied in all, breadth first (the heuristics read at most 200)
# NUL and the other control characters but tab and line breaks; PostgreSQL refuses NUL in text
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# what scrub() puts in place of a finding (spark_pg.traces.scrub.PLACEHOLDERS)
_PLACEHOLDER = re.compile(r"\[(?:REDACTED(?::[a-z_]+)?|EMAIL|PHONE|IP)\]")
# what the intent shows in place of a secret: no word to embed or match, and no value the scrubber takes
# for a secret (after an empty "password=", the scrubber would take the next word for the password)
ELIDED = "..."
# a value after a secret's name and a space, a colon or =, which the scrubber does not take for an
# assignment: ``set aws_secret_access_key x`` outside a config command, ``vault login token x``, "use
# password x for the db"
_AFTER_SECRET_NAME = re.compile(
    r"(?i)(?:passw(?:or)?d|passphrase|secret|token|credentials?|api[_-]?key|access[_-]?key|private[_-]?key)"
    r"(?![A-Za-z0-9])(?P<sep>[\"']?(?:[ \t]{0,3}[:=][ \t]{0,3}|[ \t]{1,3})[\"']?)"
    r"(?P<value>[^\s\"'`,;&()\[\]{}<>]{6,200})"
)


@dataclass(frozen=True)
class CleanInput:
    """A tool input as the advisor may read it (:func:`clean_input`): every string without NUL and other
    control characters or lone surrogates, in NFKC, and scrubbed (spark_pg.traces.scrub), bounded."""

    data: Mapping[str, Any]  # secrets replaced by their placeholders: what the trigger text is made of
    # the same with :data:`ELIDED` for each placeholder and each secret-looking value after a secret's
    # name: what the intent is parsed from (a placeholder is no word of what the call does; the name before
    # it is)
    words: Mapping[str, Any]
    # a tool input given as one string that is not a JSON object, as ``data`` holds it (the trigger text's)
    text: str | None = None


def clean_input(tool_input: object) -> CleanInput:
    """The tool input, JSON strings parsed, with every string cleaned and scrubbed before any heuristic
    parses it: parsing rewrites ``password=x`` as "password x", which the scrubber no longer sees. Each
    string is read up to SCAN_LIMIT characters and a margin, at most :data:`MAX_SCRUBBED` in all (later
    strings are dropped, never kept unscrubbed). Never raises: what cannot be read is left out."""
    if isinstance(tool_input, CleanInput):
        return tool_input
    budget = [MAX_SCRUBBED]
    try:
        if isinstance(tool_input, bytes):
            tool_input = tool_input[: SCAN_LIMIT * 16].decode("utf-8", "replace")
        if isinstance(tool_input, str):
            parsed = _json_mapping(tool_input)
            if parsed is None:
                text, words = _clean_string(tool_input.strip(), budget)
                return CleanInput({"input": text}, {"input": words}, text)
            # a JSON object (OpenAI-style arguments) is read as the mapping it is, also for what the call runs
            # and the trigger text: as one string, '{"command": "rm -rf /"}' ran '{command:' and held bodies
            return CleanInput(*_clean_tree(parsed, budget))
        return CleanInput(*_clean_tree(_as_mapping(tool_input), budget))
    except Exception:  # an odd mapping that fails when read: nothing of it, rather than anything unscrubbed
        return CleanInput({}, {})


def clean_text(text: str) -> str:
    """Free text (a task context) as :func:`clean_input` leaves a string for the intent: cleaned,
    scrubbed, each secret elided."""
    return _clean_string(text, [MAX_SCRUBBED])[1] if isinstance(text, str) else ""


def _clean_tree(data: Mapping[str, Any], budget: list[int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two bounded copies of ``data`` (see :class:`CleanInput`), breadth first as the heuristics read it; an
    argv under a command key becomes the command line it runs."""
    roots: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    queue: deque[tuple[Mapping[Any, Any] | list[Any] | tuple[Any, ...], Any, Any]] = deque([(data, *roots)])
    values = 0
    while queue and values < _MAX_VALUES:
        source, into_data, into_words = queue.popleft()
        pairs: Iterator[tuple[Any, Any]] = (
            islice(source.items(), _MAX_KEYS)
            if isinstance(source, Mapping)
            else enumerate(islice(source, _MAX_ITEMS))
        )
        for key, value in pairs:
            values += 1
            if isinstance(value, list | tuple) and key in COMMAND_KEYS and _is_argv(value):
                value = _argv_text([str(w) for w in value[:64]])
            if isinstance(value, str | bytes):
                text = value if isinstance(value, str) else value[: SCAN_LIMIT * 2].decode("utf-8", "replace")
                copies: tuple[Any, Any] = _clean_string(text, budget)
            elif value is None or isinstance(value, bool | int | float):
                copies = (value, value)
            elif isinstance(value, Mapping):
                copies = ({}, {})
                queue.append((value, *copies))
            elif isinstance(value, list | tuple):
                copies = ([], [])
                queue.append((value, *copies))
            else:
                continue  # no heuristic reads other objects
            for into, copy in zip((into_data, into_words), copies, strict=True):
                if isinstance(into, dict):
                    into[key] = copy
                else:
                    into.append(copy)
    return roots


def _is_argv(value: list[Any] | tuple[Any, ...]) -> bool:
    return bool(value) and all(isinstance(w, str) for w in value[:64])


def _clean_string(value: str, budget: list[int]) -> tuple[str, str]:
    """``value`` cleaned and scrubbed, and that with each placeholder and each secret-looking value after a
    secret's name elided (:data:`ELIDED`). A string cut here keeps at least SCAN_LIMIT characters in the
    second, so that the heuristics still see it was long (a long command is never read-only)."""
    from spark_pg.traces.scrub import scrub  # its patterns take ~20 ms to compile: only once a call needs it

    limit = max(0, min(len(value), SCAN_LIMIT + _SCRUB_MARGIN, budget[0]))
    budget[0] -= limit
    text = _plain(value[:limit])[: SCAN_LIMIT + _SCRUB_MARGIN]
    if not text.strip():  # nothing left to read (a string past the budget is dropped, not cut)
        return text, text
    scrubbed = scrub(text)
    words = _PLACEHOLDER.sub(ELIDED, scrubbed) if "[" in scrubbed else scrubbed
    words = _AFTER_SECRET_NAME.sub(_drop_secret_value, words)
    return scrubbed, words.ljust(SCAN_LIMIT) if len(value) > limit else words


def _plain(text: str) -> str:
    """NUL and other control characters (but tab and line breaks) as spaces, a lone surrogate as ``?``,
    and non-ASCII text in NFKC without invisible format characters (zero-width space, soft hyphen, ...),
    so that the scrubber sees a name or a secret split by one whole."""
    if not text.isascii():
        text = _SURROGATE.sub("?", text)
        text = "".join(c for c in unicodedata.normalize("NFKC", text) if unicodedata.category(c) != "Cf")
    return _CONTROL.sub(" ", text) if _CONTROL.search(text) else text


def _drop_secret_value(match: re.Match[str]) -> str:
    value = match.group("value").rstrip(".:)")
    if not _looks_random(value) or value[0] in "-$%~./":
        return match.group(0)
    return match.group(0)[: match.start("value") - match.start()] + ELIDED


def _looks_random(value: str) -> bool:
    """A credential's shape rather than a word's or a name's: letters and digits mixed, or long and of
    both cases (``Hunter2Secret9``, ``wJalrXUtnFEMI/K7MDENG``; not ``getSecret``, ``field``, ``str``)."""
    letters = sum(c.isalpha() for c in value)
    digits = sum(c.isdigit() for c in value)
    if letters and digits:
        return True
    return len(value) >= 20 and any(c.isupper() for c in value[1:]) and any(c.islower() for c in value)


def _field(data: Mapping[str, Any], *keys: str) -> str:
    """The first non-empty string (or number) among ``keys``, clipped to SCAN_LIMIT."""
    for key in keys:
        try:
            value = data.get(key)
        except (TypeError, AttributeError):
            return ""
        text = _clip(value)
        if text.strip():
            return text
    return ""


def _nodes(data: object, max_nodes: int = 200) -> Iterator[object]:
    """The values nested in mappings and lists, breadth first; bounded, so odd inputs stay cheap."""
    queue: deque[object] = deque([data])
    for _ in range(max_nodes):
        if not queue:
            return
        node = queue.popleft()
        yield node
        if isinstance(node, Mapping):
            queue.extend(islice(node.values(), 50))
        elif isinstance(node, list | tuple):
            queue.extend(node[:50])


def _find_field(data: Mapping[str, Any], keys: tuple[str, ...]) -> str:
    """Like :func:`_field` but also searches nested mappings and lists."""
    for node in _nodes(data):
        found = _field(node, *keys) if isinstance(node, Mapping) else ""
        if found:
            return found
    return ""


COMMAND_KEYS = ("command", "cmd", "script")
_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh", "fish"})


def command_text(data: Mapping[str, Any]) -> str:
    """A shell call's command line, also nested (``{"args": {"command": ...}}``) and given as argv
    (``["bash", "-lc", "rm -rf x"]``: the script; ``["rm", "-rf", "x"]``: the words joined)."""
    for node in _nodes(data):
        if not isinstance(node, Mapping):
            continue
        for key in COMMAND_KEYS:
            try:
                value = node.get(key)
            except (TypeError, AttributeError):
                return ""
            if isinstance(value, list | tuple) and value and all(isinstance(w, str) for w in value[:64]):
                return _argv_text([str(w) for w in value[:64]])
            text = _clip(value)
            if text.strip():
                return text
    return ""


def _argv_text(argv: list[str]) -> str:
    """An argv as the command line it runs: a shell's ``-c`` script, else the words joined."""
    if argv[0].rsplit("/", 1)[-1] in _SHELLS:
        for i, word in enumerate(argv[1:-1], start=1):
            if re.fullmatch(r"-[a-z]*c[a-z]*", word):
                return argv[i + 1][:SCAN_LIMIT]
    return shlex.join(argv)[:SCAN_LIMIT]


def _first_string(data: Mapping[str, Any]) -> str:
    """The first non-empty string anywhere in nested mappings and lists."""
    for node in _nodes(data):
        if isinstance(node, str) and node.strip():
            return node[:SCAN_LIMIT]
    return ""


_DEF_NAME = re.compile(
    r"\b(?:def|class|function|func|fn|interface|type|struct|enum|trait)\s+([A-Za-z_]\w{2,})"
    r"|\b(?:const|let|var)\s+([A-Za-z_]\w{3,})\s*=",
)
_IDENT = re.compile(r"\b(?:[a-z]+_[a-z0-9_]+|[a-z]+[A-Z][A-Za-z0-9]+|[A-Z][a-z]+[A-Z][A-Za-z0-9]+)\b")


def _identifiers(*bodies: str, limit: int = 3) -> str:
    """A few identifiers defined (else used) in code bodies: a light hint when there is no task context."""
    names: list[str] = []
    for body in bodies:
        for match in _DEF_NAME.finditer(body[:SCAN_LIMIT]):
            name = match.group(1) or match.group(2)
            if name and name not in names:
                names.append(name)
    if not names:
        for body in bodies:
            for name in _IDENT.findall(body[:SCAN_LIMIT]):
                if len(name) >= 6 and name not in names and not _credential_like(name):
                    names.append(name)
    return " ".join(names[:limit])


def _credential_like(name: str) -> bool:
    """A token no one names a thing: 12 characters or more without ``_`` or ``.``, with four digits or
    more, or letters and digits taking turns three times (``AbCdEf1234567890GhIj``, ``Hunter2Secret9``; not
    ``sha256Digest``, ``base64Encode``). A secret the scrubber does not know, in a body, is one."""
    if len(name) < 12 or "_" in name or "." in name:
        return False
    turns = sum(a.isdigit() != b.isdigit() for a, b in pairwise(name))
    return sum(c.isdigit() for c in name) >= 4 or turns >= 3


_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_KEYWORDS = frozenset({
    "return", "await", "async", "self", "None", "True", "False", "import", "from", "const", "let", "var",
    "function", "export", "default", "class", "def", "raise", "except", "try", "with", "else", "elif",
    "while", "for", "print", "type", "interface", "string", "number", "boolean", "null", "undefined",
    "this", "new",
})  # fmt: skip


# imports, includes and comment lines name what a file uses, not what an edit does
_NOT_ACTION_LINE = re.compile(
    r"^\s*(?:from\s+[\w.]+\s+import\b|import\b|#\s*include\b|use\s+[\w:]+|#|//|/\*|\*|--).*$"
    r"|^\s*(?:const|let|var)\s+\w+\s*=\s*require\(.*$",
    re.M,
)


def _added_identifiers(new_bodies: list[str], old_body: str, limit: int = 3) -> str:
    """The first few identifiers an edit introduces (in the new code, not in the replaced code), in order:
    ``HTTPException``, ``onMutate``, ``queryClient.setQueryData``. What an edit adds is what advice is
    about. Language keywords and plain short words do not count."""
    old = {_bare(t) for t in _TOKEN.findall(old_body[:SCAN_LIMIT])}
    names: list[str] = []
    for body in new_bodies:
        for name in map(_bare, _TOKEN.findall(_NOT_ACTION_LINE.sub("", body[:SCAN_LIMIT]))):
            if name in old or name in _KEYWORDS or name in names or len(name) < 4:
                continue
            if "." in name and len(name.split(".", 1)[0]) < 2:  # i.price: a loop variable's attribute
                continue
            if _HASHLIKE.match(name) or _credential_like(name):  # a commit hash says nothing; a secret, never
                continue
            if any(c.isupper() for c in name[1:]) or "_" in name or "." in name or len(name) >= 7:
                names.append(name)
                if len(names) == limit:
                    return " ".join(names)
    return " ".join(names)


def _bare(name: str) -> str:
    """``self.session.commit`` -> ``session.commit``: the receiver says nothing."""
    for prefix in ("self.", "this.", "cls."):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name
