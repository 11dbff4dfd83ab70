"""Reading a tool call's raw input: JSON strings become mappings, fields are looked up (also in nested
mappings and lists, breadth first and bounded) and clipped, and a few identifiers are mined from code
bodies: those an edit adds, else those a body defines (a hint when there is no task context).
"""

from __future__ import annotations

import json
import re
import shlex
from collections import deque
from collections.abc import Iterator, Mapping
from itertools import islice
from typing import Any

from spark_pg.intent.limits import SCAN_LIMIT
from spark_pg.intent.text import _HASHLIKE, _clip


def _as_mapping(tool_input: object) -> Mapping[str, Any]:
    """The tool input as a mapping: JSON strings are parsed, anything else is wrapped as ``input``."""
    if tool_input is None:
        return {}
    if isinstance(tool_input, Mapping):
        return tool_input
    if isinstance(tool_input, bytes):
        tool_input = tool_input[: SCAN_LIMIT * 16].decode("utf-8", "replace")
    if isinstance(tool_input, str):
        stripped = tool_input.strip()
        if stripped.startswith("{") and len(stripped) <= SCAN_LIMIT * 16:
            try:
                parsed = json.loads(stripped)
            except ValueError:
                parsed = None
            if isinstance(parsed, Mapping):
                return parsed
        return {"input": stripped[:SCAN_LIMIT]}
    return {"input": _clip(tool_input)}


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
                if len(name) >= 6 and name not in names:
                    names.append(name)
    return " ".join(names[:limit])


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
            if _HASHLIKE.match(name):  # a revision id or a commit hash says nothing
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
