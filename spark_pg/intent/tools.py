"""What a tool's name says: its kind (edit, write, read, glob, grep, ls, shell, websearch, webfetch, task,
todo, social or other) across agent and MCP naming styles, the words of the name, and the first known
action verb among them. An MCP tool (``mcp__server__tool``) takes a kind from its name only on a server
known to mean it (filesystem, shell, fetch servers) or when it posts to a social network; any other is
"other".
"""

from __future__ import annotations

import re
from types import MappingProxyType

from spark_pg.intent.text import _words

_TOOL_KINDS = MappingProxyType(
    {
        "edit": "edit", "multiedit": "edit", "strreplaceeditor": "edit", "strreplacebasededittool": "edit",
        "notebookedit": "edit", "applypatch": "edit", "replace": "edit",
        "write": "write", "createfile": "write", "writefile": "write",
        "read": "read", "readfile": "read", "notebookread": "read", "view": "read", "cat": "read",
        "glob": "glob", "findfiles": "glob",
        "grep": "grep", "searchfiles": "grep", "ripgrep": "grep", "codesearch": "grep",
        "ls": "ls", "listdir": "ls", "listdirectory": "ls", "listfiles": "ls",
        "bash": "shell", "shell": "shell", "terminal": "shell", "runcommand": "shell",
        "executecommand": "shell", "runterminalcmd": "shell", "powershell": "shell", "exec": "shell",
        "bashoutput": "read", "killshell": "other",
        "websearch": "websearch", "googlesearch": "websearch",
        "webfetch": "webfetch", "fetch": "webfetch", "fetchurl": "webfetch", "browse": "webfetch",
        "task": "task", "agent": "task", "subagent": "task",
        "todowrite": "todo", "todoread": "todo",
    }
)  # fmt: skip
_READ_ONLY_KINDS = frozenset({"read", "glob", "grep", "ls"})
_FILE_KINDS = frozenset({"edit", "write", "read", "glob", "grep", "ls"})
# MCP servers whose tool names mean what _TOOL_KINDS says (mcp__filesystem__read_file reads a file), and the
# kinds each may take from it. On any other server the same words say nothing certain (mcp__postgres__exec
# runs SQL, mcp__git__fetch fetches a remote, mcp__db__read may take a query): the tool is "other", which
# is never skipped as trivial and is read from its most telling field.
_MCP_SERVER_KINDS = MappingProxyType(
    {
        "filesystem": _FILE_KINDS, "fs": _FILE_KINDS, "files": _FILE_KINDS,
        "desktopcommander": _FILE_KINDS | {"shell"},
        "shell": frozenset({"shell"}), "terminal": frozenset({"shell"}), "bash": frozenset({"shell"}),
        "fetch": frozenset({"webfetch"}),
    }
)  # fmt: skip
_SOCIAL_NAMES = frozenset(
    {"x", "tweet", "tweets", "twitter", "retweet", "linkedin", "mastodon", "bluesky", "threads", "social",
     "reddit", "farcaster", "typefully"}
)  # fmt: skip
_SOCIAL_VERBS = frozenset({"post", "reply", "repost", "quote"})
_POSTING_WORDS = _SOCIAL_VERBS | {"tweet", "retweet", "toot"}
_NOT_SOCIAL = frozenset({"http", "api", "request", "webhook", "graphql", "rest", "pr", "issue", "review"})


def _tool_tokens(tool: str) -> list[str]:
    """Words of a tool name: "mcp__github__create_pull_request" -> [mcp, github, create, pull, request]."""
    return _words(tool.replace("__", " "))


def _mcp_parts(tool: str) -> tuple[str, str] | None:
    """(server, tool) of an MCP tool name, ``mcp__server__tool``, the server as lower-case letters and
    digits ("mcp__desktop-commander__read_file" -> ("desktopcommander", "read_file")); None for other
    names."""
    parts = tool.split("__")
    if len(parts) < 3 or parts[0].lower() != "mcp":
        return None
    return re.sub(r"[^a-z0-9]", "", parts[1].lower()), "__".join(parts[2:])


def _tool_kind(tool: str) -> str:
    """edit, write, read, glob, grep, ls, shell, websearch, webfetch, task, todo, social or other."""
    mcp = _mcp_parts(tool)
    if mcp is not None:
        return _mcp_kind(*mcp)
    key = re.sub(r"[^a-z0-9]", "", tool.split("__")[-1].lower())
    kind = _TOOL_KINDS.get(key)
    if kind is not None:
        return kind
    tokens = set(_tool_tokens(tool))
    if tokens & _SOCIAL_NAMES or (tokens & _SOCIAL_VERBS and not tokens & _NOT_SOCIAL):
        return "social"
    return "other"


def _mcp_kind(server: str, name: str) -> str:
    """The kind of an MCP tool: the table's on a server known to follow it; social for a posting tool of
    a social network (mcp__x__post_tweet, mcp__linkedin__create_post, not mcp__stripe__create_quote or
    mcp__x__get_user); else other."""
    kind = _TOOL_KINDS.get(re.sub(r"[^a-z0-9]", "", name.lower()))
    if kind is not None and kind in _MCP_SERVER_KINDS.get(server, frozenset()):
        return kind
    words = set(_words(name))
    if words & _POSTING_WORDS and (server in _SOCIAL_NAMES or words & _SOCIAL_NAMES):
        return "social"
    return "other"


_VERBS = frozenset(
    {"add", "analyze", "analyse", "audit", "build", "call", "check", "clean", "click", "close", "commit",
     "compare", "configure", "create", "debug", "delete", "deploy", "design", "document", "download",
     "draft", "edit", "evaluate", "execute", "explain", "explore", "fetch", "find", "fix", "follow",
     "generate", "get", "implement", "improve", "inspect", "install", "investigate", "like", "list", "load",
     "merge", "migrate", "monitor", "move", "navigate", "open", "optimize", "plan", "post", "publish",
     "push", "query", "read", "refactor", "release", "remove", "rename", "reply", "repost", "research",
     "review", "run", "save", "schedule", "scrape", "search", "send", "set", "setup", "share", "summarize",
     "test", "trace", "update", "upload", "validate", "verify", "write"}
)  # fmt: skip


def _tool_verb(tool: str, default: str) -> str:
    """The first verb among a tool name's words ("mcp__x__post_tweet" -> "post")."""
    for token in _tool_tokens(tool):
        if token in _VERBS:
            return token
    return default
