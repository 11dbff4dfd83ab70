"""Tool-call intent extraction (:func:`extract_intent`): the tool input is cleaned and scrubbed of secrets
first (:func:`~spark_pg.intent.inputs.clean_input`), then one parser per tool kind finds the verb, the
target and secondary context of a call; the result is composed into a short clean query, classified into
an intent family with its allowed domains, and marked trivial when the call is read-only and has no task
context.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_pg.intent.families import _normalise, classify_family, file_names
from spark_pg.intent.inputs import (
    CleanInput,
    _added_identifiers,
    _field,
    _find_field,
    _first_string,
    _identifiers,
    _plain,
    clean_input,
    clean_text,
    command_text,
)
from spark_pg.intent.limits import _MAX_TARGET, MAX_INTENT_TEXT, SCAN_LIMIT
from spark_pg.intent.shell import _command_summary, _is_read_only_command
from spark_pg.intent.taxonomy import INTENT_FAMILIES
from spark_pg.intent.text import (
    _EXT_LANG,
    _LEFTOVER,
    _NOISE_DIRS,
    _cap,
    _clean_text,
    _clip,
    _path_words,
    _squash,
    _url_words,
    _words,
)
from spark_pg.intent.tools import (
    _READ_ONLY_KINDS,
    _VERBS,
    _mcp_parts,
    _tool_kind,
    _tool_tokens,
    _tool_verb,
)


@dataclass(frozen=True)
class Intent:
    """The clean, classified intent of one tool call."""

    text: str  # what to embed and keyword-match: action + target + task context, <= MAX_INTENT_TEXT chars
    tool: str
    action: str | None  # the verb: "edit", "run", "test", "deploy", "search", "post", ...
    target: str | None  # what it acts on: "auth login", "alembic upgrade head", a search query, ...
    family: str  # a key of INTENT_FAMILIES
    domains: tuple[str, ...]  # INTENT_FAMILIES[family]
    trivial: bool  # read-only, or nothing to go on, and no task context: the advisor skips retrieval


@dataclass(frozen=True)
class _Parsed:
    """What a tool-specific parser found: verb, target, secondary context and raw classification text."""

    action: str | None
    target: str
    detail: str = ""  # description, prompt, or identifiers from code bodies (only without task context)
    signal: str = ""  # raw-ish text for classify_family (full path, command line, query)
    added: str = ""  # identifiers an edit or write introduces (always part of the intent)
    names: frozenset[str] = frozenset()  # a command's words that only name files (families.file_names)


_PATH_KEYS = ("file_path", "notebook_path", "path", "filepath", "file", "filename", "target_file", "uri")
_BODY_KEYS = ("new_string", "content", "new_source", "code", "new_str", "file_text")
_OLD_KEYS = ("old_string", "old_str")
_PATCH_KEYS = ("input", "patch", "diff")  # apply_patch's patch is its input
_TEXT_KEYS = ("text", "content", "message", "body", "tweet", "status", "caption", "comment", "reply")
_TARGET_KEYS = (
    "command", "cmd", "query", "sql", "q", "search", "search_query", "url", "file_path", "path", "filename",
    "title", "name", "subject", "repo", "repository", "branch", "text", "message", "content", "body",
    "description", "prompt", "task", "pattern", "input",
)  # fmt: skip


def _parse_file_tool(verb: str, data: Mapping[str, Any]) -> _Parsed:
    path = _field(data, *_PATH_KEYS) or _path_like(_field(data, "input"))
    bodies = [_field(data, key) for key in _BODY_KEYS]
    olds = [_field(data, *_OLD_KEYS)]
    for key in _PATCH_KEYS:  # a patch: its first file, the lines it adds and those it removes
        text = _field(data, key)
        patched, added, removed = _patch(text)
        path = path or patched
        bodies.append(added if patched else "" if key == "input" else text)
        olds.append(removed)
    edits = data.get("edits")
    if isinstance(edits, list):
        bodies.extend(_field(e, "new_string") for e in edits[:10] if isinstance(e, Mapping))
        olds.extend(_field(e, "old_string") for e in edits[:10] if isinstance(e, Mapping))
    hint = _identifiers(*bodies) or _identifiers(olds[0])
    return _Parsed(
        verb, _path_words(path), hint, path, _added_identifiers([b for b in bodies if b], "\n".join(olds))
    )


# a patch's files: Codex's apply_patch (``*** Update File: src/x.py``, Add, Delete) and unified diffs
_PATCH_FILE = re.compile(r"^\*\*\* (?:Update|Add|Delete) File: *(\S[^\n]*?)\s*$|^\+\+\+ (?:b/)?(\S+)", re.M)


def _patch(text: str) -> tuple[str, str, str]:
    """A patch's first file, the lines it adds and the lines it removes; all '' when ``text`` names no
    file the way a patch does."""
    text = text[:SCAN_LIMIT]
    files = [m.group(1) or m.group(2) for m in _PATCH_FILE.finditer(text)]
    files = [f for f in files if f != "/dev/null"]
    if not files:
        return "", "", ""
    added: list[str] = []
    removed: list[str] = []
    for line in text.splitlines():
        if line.startswith(("+++ ", "--- ", "***")):
            continue
        if line.startswith("+"):
            added.append(line[1:])
        elif line.startswith("-"):
            removed.append(line[1:])
    return files[0], "\n".join(added), "\n".join(removed)


def _editor_kind(kind: str, data: Mapping[str, Any]) -> str:
    """The kind of an editor call by its command (str_replace_based_edit_tool): ``view`` reads, ``create``
    writes a new file; the other commands (str_replace, insert, undo_edit) edit."""
    if kind == "edit":
        command = _field(data, "command").strip().lower()
        return {"view": "read", "create": "write"}.get(command, kind)
    return kind


def _path_like(text: str) -> str:
    """The text when it looks like one file path (no spaces, has a slash or an extension), else ''."""
    text = text.strip()
    return text if text and " " not in text and re.search(r"[\\/]|\.\w{1,6}$", text) else ""


def _parse_read(data: Mapping[str, Any]) -> _Parsed:
    path = _field(data, *_PATH_KEYS) or _path_like(_field(data, "input"))
    return _Parsed("read", _path_words(path), "", path)


def _glob_words(pattern: str) -> str:
    """A glob as words: ``src/**/*.test.ts`` -> "test typescript files"."""
    ext = re.search(r"\.\{?([A-Za-z0-9,]+)\}?\s*$", pattern)
    if ext and "*" not in pattern[: ext.start()]:
        ext = None
    body = pattern[: ext.start()] if ext else pattern
    words = [w for w in _words(re.sub(r"[*?\[\]{}!]+|/", " ", body)) if w not in _NOISE_DIRS]
    if ext:
        langs = [_EXT_LANG.get(e.lower(), e.lower()) for e in ext.group(1).split(",") if e]
        words.extend([*dict.fromkeys(langs), "files"])
    return " ".join(words)


def _parse_glob(data: Mapping[str, Any]) -> _Parsed:
    pattern = _field(data, "pattern", "glob", "input")
    path = _path_words(_field(data, "path", "directory"))
    target = _glob_words(pattern) + (f" in {path}" if path else "")
    return _Parsed("find", _squash(target), "", f"{pattern} {_field(data, 'path')}")


def _regex_words(pattern: str) -> str:
    """A regex as the words it searches for: ``def\\s+validate_\\w+`` -> "def validate_"."""
    text = re.sub(r"\\[bBdDsSwWnt]|\[\^?|\]|[()^$*+?{}|\\]|\.\*|\.\+", " ", pattern[:300])
    return _squash(text.replace(".", " "))


def _parse_grep(data: Mapping[str, Any]) -> _Parsed:
    pattern = _field(data, "pattern", "query", "regex", "input")
    where = _path_words(_field(data, "path", "directory")) or _glob_words(_field(data, "glob", "include"))
    kind = _field(data, "type")
    target = _regex_words(pattern) + (f" in {where}" if where else "") + (f" {kind} files" if kind else "")
    return _Parsed("search", _cap(target, _MAX_TARGET), "", f"{pattern} {_field(data, 'path')}")


def _parse_ls(data: Mapping[str, Any]) -> _Parsed:
    path = _field(data, "path", "directory", "dir", "input")
    return _Parsed("list", _path_words(path) or "directory", "", path)


def _parse_shell(data: Mapping[str, Any]) -> _Parsed:
    command = command_text(data) or _field(data, "input")
    action, target = _command_summary(command)
    description = _clean_text(_field(data, "description"))
    return _Parsed(action, target, description, command, names=file_names(command))


def _parse_websearch(data: Mapping[str, Any]) -> _Parsed:
    query = _clean_text(_field(data, "query", "q", "search", "input"))
    return _Parsed("search", _cap(query, _MAX_TARGET), "", query)


def _parse_webfetch(data: Mapping[str, Any]) -> _Parsed:
    url = _field(data, "url", "uri", "link", "input")
    target = _url_words(url) if url else ""
    prompt = _clean_text(_field(data, "prompt", "question", "query"))
    return _Parsed("fetch", target, prompt, f"{target} {prompt}")


def _parse_task(data: Mapping[str, Any]) -> _Parsed:
    description = _clean_text(_field(data, "description", "title", "task"))
    prompt = _clean_text(_field(data, "prompt", "instructions", "input"))
    first = description.split(" ", 1)
    verb = first[0].lower() if first and first[0].lower() in _VERBS else "delegate"
    target = first[1] if verb != "delegate" and len(first) > 1 else description
    return _Parsed(verb, _cap(target, _MAX_TARGET), prompt, f"{description} {prompt[:300]}")


def _parse_todo(data: Mapping[str, Any]) -> _Parsed:
    todos = data.get("todos")
    items: list[str] = []
    if isinstance(todos, list):
        for todo in todos[:20]:
            text = _field(todo, "content", "title", "activeForm") if isinstance(todo, Mapping) else ""
            if text and (not isinstance(todo, Mapping) or todo.get("status") != "completed"):
                items.append(_clean_text(text))
    target = _cap("; ".join(items[:3]), _MAX_TARGET)
    return _Parsed("plan", target, "", " ".join(items))


def _parse_social(tool: str, data: Mapping[str, Any]) -> _Parsed:
    text = _clean_text(_find_field(data, _TEXT_KEYS))
    verb = _tool_verb(tool, "post")
    return _Parsed(verb, _cap(text, _MAX_TARGET), "", f"{tool} {text}")


def _parse_other(tool: str, data: Mapping[str, Any]) -> _Parsed:
    """Unknown tools: a command is parsed as shell, a path as a file, else the most telling string."""
    command = _field(data, "command", "cmd")
    if command:
        action, target = _command_summary(command)
        description = _clean_text(_field(data, "description"))
        return _Parsed(_tool_verb(tool, action), target, description, command, names=file_names(command))
    url = _field(data, "url")
    if url:
        return _Parsed(_tool_verb(tool, "fetch"), _url_words(url), _clean_text(_field(data, "prompt")), url)
    path = _field(data, *_PATH_KEYS)
    if path and not _field(data, "query", "sql", "q"):
        return _Parsed(_tool_verb(tool, "use"), _path_words(path), "", path)
    text = _clean_text(_find_field(data, _TARGET_KEYS) or _first_string(data))
    if not text:  # nothing telling in the input: the tool's own words are the target
        verb = _tool_verb(tool, "use")
        text = " ".join(w for w in _tool_tokens(tool) if w not in {"mcp", verb})
    return _Parsed(_tool_verb(tool, "use"), _cap(text, _MAX_TARGET), "", text)


def _parse(tool: str, kind: str, data: Mapping[str, Any]) -> _Parsed:
    if kind in {"edit", "write"}:
        return _parse_file_tool(kind, data)
    simple = {
        "read": _parse_read,
        "glob": _parse_glob,
        "grep": _parse_grep,
        "ls": _parse_ls,
        "shell": _parse_shell,
        "websearch": _parse_websearch,
        "webfetch": _parse_webfetch,
        "task": _parse_task,
        "todo": _parse_todo,
    }
    if kind in simple:
        return simple[kind](data)
    if kind == "social":
        return _parse_social(tool, data)
    return _parse_other(tool, data)


def _compose(action: str | None, target: str, *contexts: str) -> str:
    """``action target: context`` within MAX_INTENT_TEXT characters, without braces or quotes; the verb is
    left out when the target already says it ("git commit ...", "fly deploy")."""
    said = action is not None and action.lower() in target.lower().split()
    head = _squash(target if said else f"{action or ''} {target}")
    parts = [head] if head else []
    for context in contexts:
        context = _squash(context)
        if (
            context
            and context.lower() not in head.lower()
            and sum(len(p) + 2 for p in parts) < MAX_INTENT_TEXT
        ):
            parts.append(context)
    text = parts[0] + (": " + ". ".join(parts[1:]) if len(parts) > 1 else "") if parts else ""
    return _cap(_LEFTOVER.sub(" ", text), MAX_INTENT_TEXT)


def extract_intent(
    tool_name: str, tool_input: Mapping[str, Any] | str | CleanInput | None, task_context: str = ""
) -> Intent:
    """The intent of one tool call: clean query text, verb, target, family, allowed domains, triviality.

    The tool input and the task context are scrubbed of secrets before they are parsed (a
    :class:`~spark_pg.intent.inputs.CleanInput` is used as it is): the text holds no secret the scrubber
    knows, and no placeholder of one. Never raises: malformed input degrades to an intent named after the
    tool.
    """
    tool = _squash(_plain(_clip(tool_name, 200))) or "unknown"
    context = _clean_text(clean_text(task_context))
    try:
        data = clean_input(tool_input).words
        kind = _editor_kind(_tool_kind(tool), data)
        parsed = _parse(tool, kind, data)
        if (
            kind != "other"
            and _mcp_parts(tool)
            and not (parsed.target or parsed.detail)
            and _first_string(data)
        ):
            # an MCP tool of a known server whose fields are not the ones its kind reads ("code", not
            # "command"): read from its most telling field, never skipped as blank
            kind, parsed = "other", _parse_other(tool, data)
    except Exception:  # odd input must never break the advisor: fall back to the bare tool name
        kind, parsed = "other", _Parsed(None, "")
    target = _cap(parsed.target, _MAX_TARGET)
    # what an edit introduces is part of its intent; identifiers it merely defines only stand in for a
    # missing task context
    detail = parsed.added or ("" if context and kind in {"edit", "write"} else parsed.detail)
    # "run" is the verb of a command whose program says nothing of what it does; before a target that is
    # only that program's name it is all the query says, and running surfaces the loudest advice: "echo "
    # + 5,000 characters (too long to be read whole, so not read-only) read "run echo" and got the critical
    # destructive-command advice. The query is the name alone ("echo"); the call is not skipped.
    bare = kind == "shell" and parsed.action == "run" and len(target.split()) == 1
    text = _compose(None if bare else parsed.action, target, context, detail) or " ".join(_tool_tokens(tool))
    # a folder or file a command only names is no evidence of a deployment (mkdir -p deploy/k8s), unless
    # the task context says the word too
    names = parsed.names - frozenset(_normalise(context).split())
    family = classify_family(tool, "\n".join(p for p in (parsed.signal, text, context) if p), names=names)
    readonly = kind in _READ_ONLY_KINDS or (kind == "shell" and _is_read_only_command(parsed.signal))
    # a known kind of call with nothing to go on (a shell call without a command, a write without a path):
    # its bare verb would surface whatever is loudest ("run" -> the destructive-commands rule)
    blank = kind != "other" and not (target or detail or context)
    return Intent(
        text=text,
        tool=tool,
        action=parsed.action,
        target=target or None,
        family=family,
        domains=INTENT_FAMILIES[family],
        trivial=(readonly and not context) or blank,
    )
