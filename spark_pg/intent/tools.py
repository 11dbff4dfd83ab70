"""What a tool's name says: its kind (edit, write, read, glob, grep, ls, shell, websearch, webfetch, task,
todo, social or other) across agent and MCP naming styles, the words of the name, and the first known
action verb among them.
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
_SOCIAL_NAMES = frozenset(
    {"x", "tweet", "tweets", "twitter", "retweet", "linkedin", "mastodon", "bluesky", "threads", "social",
     "reddit", "farcaster", "typefully"}
)  # fmt: skip
_SOCIAL_VERBS = frozenset({"post", "reply", "repost", "quote"})
_NOT_SOCIAL = frozenset({"http", "api", "request", "webhook", "graphql", "rest", "pr", "issue", "review"})


def _tool_tokens(tool: str) -> list[str]:
    """Words of a tool name: "mcp__github__create_pull_request" -> [mcp, github, create, pull, request]."""
    return _words(tool.replace("__", " "))


def _tool_kind(tool: str) -> str:
    """edit, write, read, glob, grep, ls, shell, websearch, webfetch, task, todo, social or other."""
    key = re.sub(r"[^a-z0-9]", "", tool.split("__")[-1].lower())
    kind = _TOOL_KINDS.get(key)
    if kind is not None:
        return kind
    tokens = set(_tool_tokens(tool))
    if tokens & _SOCIAL_NAMES or (tokens & _SOCIAL_VERBS and not tokens & _NOT_SOCIAL):
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
