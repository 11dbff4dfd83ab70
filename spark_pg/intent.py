"""What a tool call is about, which action domain a memory belongs to, and whether a memory is advice.

Three text heuristics the advisor runs around retrieval; pure Python, no database and no model:

* :func:`extract_intent` turns a coding agent's tool call (``Edit``, ``Bash``, ``WebSearch``, ...) into a
  short clean query (verb + target + the useful part of the task context), an intent family and the action
  domains whose memories may advise it. Raw tool input makes muddy embeddings: JSON, code bodies, long
  paths and ids are stripped. Read-only calls without task context are marked trivial, so the advisor can
  skip retrieval for them.
* :func:`classify_domain` tags a memory with one of :data:`ACTION_DOMAINS` at ingestion, so an ``Edit`` of
  a Python file never searches tweets or training logs (pre-retrieval filtering beats post-hoc reranking).
* :func:`actionability` scores a memory on four dimensions (directive, condition, specificity, not an
  observation); the advisor drops memories below :data:`ACTIONABILITY_GATE`, because similarity alone cannot
  tell "always verify tokens before deploying" from "RT @user: interesting thread about auth".

Every function accepts odd input (None, nested dicts, huge strings) without raising, and looks at most at
the first :data:`SCAN_LIMIT` characters of any one string.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from types import MappingProxyType
from typing import Any

ACTION_DOMAINS: tuple[str, ...] = (
    "code",
    "system",
    "data",
    "security",
    "research",
    "social",
    "user_context",
    "training_log",
    "general",
)

# Which memories may advise an intent family. "general" is always allowed; code work never sees "social",
# "user_context" or "training_log" memories, and no family asks for training logs at all.
INTENT_FAMILIES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "auth_security": ("security", "code", "system", "general"),
        "deployment_ops": ("system", "code", "data", "security", "general"),
        "testing_validation": ("code", "data", "general"),
        "debugging_errors": ("code", "system", "data", "general"),
        "code_editing": ("code", "data", "security", "general"),
        "data_schema": ("data", "code", "system", "security", "general"),
        "version_control": ("code", "system", "security", "general"),
        "build_dependencies": ("code", "system", "security", "general"),
        "research_decision_support": ("research", "code", "data", "system", "security", "general"),
        "social_content": ("social", "user_context", "research", "general"),
        "file_navigation": ("code", "system", "data", "security", "general"),
        "general": ("code", "system", "data", "security", "research", "general"),
    }
)

ACTIONABILITY_GATE: float = 0.3  # the advisor drops memories scoring below this
SCAN_LIMIT = 4096  # characters of any one input string the heuristics look at
MAX_INTENT_TEXT = 200  # characters of Intent.text
_MAX_TARGET = 100  # characters of Intent.target


@dataclass(frozen=True)
class Intent:
    """The clean, classified intent of one tool call."""

    text: str  # what to embed and keyword-match: action + target + task context, <= MAX_INTENT_TEXT chars
    tool: str
    action: str | None  # the verb: "edit", "run", "test", "deploy", "search", "post", ...
    target: str | None  # what it acts on: "auth login", "alembic upgrade head", a search query, ...
    family: str  # a key of INTENT_FAMILIES
    domains: tuple[str, ...]  # INTENT_FAMILIES[family]
    trivial: bool  # read-only call without task context: the advisor skips retrieval


@dataclass(frozen=True)
class Actionability:
    """How much a memory reads like advice an agent can act on, per dimension and combined (all 0..1)."""

    directive: float  # imperative or prescriptive wording (use, avoid, should, never, prefers, ...)
    condition: float  # a trigger for the advice (when, if, before, after, unless, ...)
    specificity: float  # concrete tools, files, commands, identifiers, numbers
    not_observation: float  # 1.0 for advice; low for tweets, training logs, quotes, code dumps, logs, ...
    score: float  # combined; observations and noise stay below ACTIONABILITY_GATE
    reason: str  # one short phrase saying why


# ------------------------------------------------------------------------------------------- text helpers

_WS = re.compile(r"\s+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD_SPLIT = re.compile(r"[\s_\-.+~,]+")
_HASHLIKE = re.compile(r"^(?=[a-z]*\d)(?=\d*[a-z])[0-9a-f]{7,}$|^[0-9a-f]{8}-[0-9a-f-]{27,}$", re.I)
_URL = re.compile(r"\b(?:https?|ftp|wss?)://[^\s<>\"'`)\]}]+|\bwww\.[^\s<>\"'`)\]}]+", re.I)
_PATH = re.compile(
    r"(?<![\w:/])(?:~|\.{1,2})?(?:[A-Za-z]:)?(?:[\\/][\w.@+\-]+){2,}[\\/]?|[\w.\-]+(?:/[\w.@+\-]+){2,}"
)
_METADATA = re.compile(  # tool metadata: "file_path=/x.py", "tool_use_id: toolu_01", "offset=200"
    r"\b(?:file_?path|notebook_path|uuid|sha|lineno|line_number|tool_use_id|session_id|request_id|call_id|"
    r"trace_id)\s*[=:]\s*\S+|\b(?:path|id|hash|line|offset|limit)=\S+",
    re.I,
)
_LINE_REF = re.compile(r"\b(?:line|ln|L)\s?\d+(?::\d+)?\b|:\d+(?::\d+)?\b")
_FENCE = re.compile(r"```.*?(?:```|$)", re.S)
_MD_LINK = re.compile(r"\[([^\]\n]{1,200})\]\([^)\s]{1,500}\)")
_CURLY = re.compile(r"\{[^{}]*\}")
_SQUARE_DATA = re.compile(r"\[[^\[\]]*[\"':,][^\[\]]*\]")
_LEFTOVER = re.compile(r"[{}\[\]<>\"`|\\]+")

_NOISE_DIRS = frozenset(
    {
        "src", "lib", "libs", "app", "pkg", "internal", "source", "sources", "dist", "build", "out",
        "repo", "repos", "root", "workspace", "workspaces", "work", "tmp", "temp", "var", "opt", "mnt",
        "usr", "local", "code", "projects", "project", "dev", "site-packages", "node_modules", "vendor",
        "main", "java", "com", "org", "versions", "private", "volumes", "etc", "srv", "data",
    }
)  # fmt: skip
_USER_DIRS = frozenset({"home", "users"})  # the segment after these is a user name: dropped too
_NOISE_STEMS = frozenset({"index", "__init__", "__main__", "main", "mod", "init", "default"})
_KEEP_EXT_STEMS = frozenset({"package", "requirements", "pyproject", "cargo", "go", "tsconfig", "composer"})
_EXT_LANG = MappingProxyType(
    {
        "py": "python", "ts": "typescript", "tsx": "typescript react", "js": "javascript",
        "jsx": "javascript react", "go": "go", "rs": "rust", "java": "java", "rb": "ruby", "php": "php",
        "sql": "sql", "md": "markdown", "yml": "yaml", "yaml": "yaml", "json": "json", "toml": "toml",
        "css": "css", "scss": "scss", "html": "html", "sh": "shell", "vue": "vue", "svelte": "svelte",
        "kt": "kotlin", "swift": "swift", "c": "c", "cpp": "c++", "cs": "c#",
    }
)  # fmt: skip


def _clip(value: object, limit: int = SCAN_LIMIT) -> str:
    """A string of at most ``limit`` characters from any value; non-strings become ''."""
    if isinstance(value, str):
        return value[:limit]
    if isinstance(value, bytes):
        return value[:limit].decode("utf-8", "replace")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return ""


def _squash(text: str) -> str:
    return _WS.sub(" ", text).strip()


def _cap(text: str, limit: int) -> str:
    """Cut at a word boundary so the result has at most ``limit`` characters."""
    text = _squash(text)
    if len(text) <= limit:
        return text
    cut = text[: limit + 1].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]
    return cut[:limit].rstrip(" ,;:-")


def _words(text: str) -> list[str]:
    """Lower-case words of an identifier or name: camelCase, snake_case, kebab-case and dots split."""
    spaced = _CAMEL.sub(" ", text)
    return [w for w in (p.strip("()'\"`*?!$#@%^&=") for p in _WORD_SPLIT.split(spaced.lower())) if w]


def _dedupe_words(text: str) -> str:
    """Drop a word that repeats the one before it ("test test auth" -> "test auth")."""
    out: list[str] = []
    for word in text.split():
        if not out or out[-1].lower() != word.lower():
            out.append(word)
    return " ".join(out)


def _path_words(path: str) -> str:
    """A file's meaningful name: stem plus its nearest meaningful folder ("/repo/src/auth/login.py" ->
    "auth login"), or two folders when the stem itself says nothing ("components/Button/index.tsx")."""
    cleaned = _clip(path, 1024).strip().strip("'\"").split("?")[0].split("#")[0]
    parts = [p for p in re.split(r"[\\/]+", cleaned) if p and p not in {".", "..", "~"}]
    if not parts:
        return ""
    name = parts[-1]
    if name.startswith(".") and len(name) > 1:
        name = name[1:]
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem or not ext.isalnum() or len(ext) > 6:
        stem, ext = name, ""
    stem_words = [w for w in _words(stem) if not _HASHLIKE.match(w) and not w.isdigit()]
    if ext and stem.lower() in _KEEP_EXT_STEMS:
        stem_words.append(ext.lower())
    dirs: list[str] = []
    skip_next = False
    for part in parts[:-1]:
        low = part.lower().lstrip(".")
        if skip_next or low in _USER_DIRS:
            skip_next = low in _USER_DIRS
            continue
        if low in _NOISE_DIRS or low.endswith(":") or _HASHLIKE.match(low) or low.isdigit():
            continue
        dirs.append(part.lstrip("."))
    noise_stem = stem.lower() in _NOISE_STEMS or not stem_words
    keep = dirs[-2:] if noise_stem else dirs[-1:]
    if noise_stem and keep:
        stem_words = []
    words: list[str] = []
    for folder in keep:
        folder_words = _words(folder)
        if any(w == f or w == f.rstrip("s") for f in folder_words for w in stem_words):
            continue
        words.extend(folder_words)
    words.extend(stem_words if stem_words or words else _words(stem))
    return " ".join(words)


def _url_words(url: str) -> str:
    """A URL as host + its last meaningful path words, without scheme, query string or fragment."""
    bare = re.sub(r"^[a-z]+://", "", url.strip(), flags=re.I).split("?")[0].split("#")[0]
    host, _, rest = bare.partition("/")
    host = host.lower().removeprefix("www.").split("@")[-1].split(":")[0]
    noise = {"en", "en-us", "latest", "stable", "docs", "doc", "html", "blob", "tree", "wiki", "master"}
    segments = [
        s
        for s in rest.split("/")
        if s and not s.isdigit() and s.lower() not in noise and not re.fullmatch(r"v?\d+(\.\d+)*", s, re.I)
    ]
    words: list[str] = []
    for segment in segments[-3:]:
        stem = re.sub(r"\.(html?|php|aspx?|md|pdf)$", "", segment, flags=re.I)
        words.extend(w for w in _words(stem) if not _HASHLIKE.match(w))
    return _squash(host + " " + " ".join(words))


def _clean_text(text: object) -> str:
    """Free text (task context, descriptions, prompts) without JSON, code fences, URL noise, long paths,
    tool metadata, hashes and line numbers."""
    out = _clip(text)
    if not out.strip():
        return ""
    out = _FENCE.sub(" ", out)
    out = _MD_LINK.sub(r"\1", out)
    out = _URL.sub(lambda m: " " + _url_words(m.group(0)) + " ", out)
    out = _METADATA.sub(" ", out)
    for _ in range(6):  # innermost blobs first, so nested JSON disappears completely
        shorter = _CURLY.sub(" ", out)
        if shorter == out:
            break
        out = shorter
    out = _SQUARE_DATA.sub(" ", out)
    out = _PATH.sub(lambda m: " " + _path_words(m.group(0)) + " ", out)
    out = _LINE_REF.sub(" ", out)
    out = " ".join(w for w in out.split() if not _HASHLIKE.match(w.strip(".,;:()")))
    out = _LEFTOVER.sub(" ", out)
    return _squash(out)


# --------------------------------------------------------------------------------------- tool inputs


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


# ------------------------------------------------------------------------------------------- tool kinds

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


# --------------------------------------------------------------------------------------- shell commands

_CMD_PREFIXES = frozenset({"sudo", "time", "nohup", "env", "exec", "command", "nice", "timeout", "xargs"})
_CMD_SETUP = frozenset({"cd", "pushd", "popd", "source", ".", "export", "set", "unset", "echo", "true"})
_RUNNERS = MappingProxyType(
    {
        "uv": "run", "poetry": "run", "pipenv": "run", "pdm": "run", "hatch": "run", "rye": "run",
        "bundle": "exec", "pnpm": "exec", "conda": "run",
    }
)  # fmt: skip
_KEEP_FLAGS = frozenset(
    {"-rf", "-fr", "-Rf", "--force", "--force-with-lease", "--hard", "--no-verify", "--amend", "--prod",
     "--production", "--dry-run", "--all"}
)  # fmt: skip
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&", ";;", "(", ")", "|&"})


def _shell_tokens(command: str) -> list[str]:
    """Shell words of the first lines of a command (heredoc bodies dropped); never raises."""
    head = command[:SCAN_LIMIT].split("<<", 1)[0]
    lines = [ln for ln in head.splitlines() if ln.strip() and not ln.lstrip().startswith("#")][:3]
    text = " ; ".join(lines)
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        return list(lexer)[:200]
    except ValueError:
        return text.split()[:200]


def _segments(command: str) -> list[list[str]]:
    """The simple commands of a command line, each without env assignments, sudo and runner prefixes."""
    segments: list[list[str]] = []
    current: list[str] = []
    for token in [*_shell_tokens(command), ";"]:
        if token in _SEPARATORS or (token and set(token) <= set("&|;()")):  # redirects stay in the segment
            if current:
                segments.append(_strip_prefixes(current))
            current = []
        else:
            current.append(token)
    return [s for s in segments if s]


def _strip_prefixes(words: list[str]) -> list[str]:
    """``FOO=1 sudo uv run python -m pytest -x`` -> ``pytest -x``."""
    i = 0
    while i < len(words):
        word = words[i]
        base = word.rsplit("/", 1)[-1]
        if re.fullmatch(r"[A-Za-z_]\w*=.*", word):
            i += 1
        elif base in _CMD_PREFIXES:  # "sudo -E", "timeout 30s", "nice -n 10": skip their options too
            i += 1
            while i < len(words) and (words[i].startswith("-") or re.fullmatch(r"\d+[smhd]?", words[i])):
                i += 1
        elif base in _RUNNERS and i + 1 < len(words) and words[i + 1] == _RUNNERS[base]:
            i += 2
        elif base in {"npx", "bunx", "pnpx"}:
            i += 1
        elif re.fullmatch(r"python[\d.]*|py", base) and i + 2 < len(words) and words[i + 1] == "-m":
            i += 2
        else:
            break
    rest = words[i:]
    if rest:
        rest = [rest[0].rsplit("/", 1)[-1] if rest[0].startswith(("/", "./")) else rest[0], *rest[1:]]
    return rest


def _main_segment(segments: list[list[str]]) -> list[str]:
    """The segment that says what the command does: the first one that is not cd/export/echo setup."""
    for segment in segments:
        if segment[0] not in _CMD_SETUP:
            return segment
    return segments[0] if segments else []


def _subcommand(segment: list[str]) -> str:
    """The first non-flag word after the program ("git -C x commit" -> "commit", best effort)."""
    for word in segment[1:]:
        if not word.startswith("-"):
            return word.lower()
    return ""


_TEST_PROGRAMS = frozenset(
    {"pytest", "py.test", "jest", "vitest", "mocha", "rspec", "tox", "nox", "phpunit", "unittest", "ava",
     "karma", "cypress", "behave", "ctest"}
)  # fmt: skip
_PKG_MANAGERS = frozenset({"npm", "yarn", "pnpm", "bun", "pip", "pip3", "poetry", "uv", "cargo", "go",
                           "gem", "bundle", "composer", "brew", "apt", "apt-get", "conda", "dotnet", "mvn",
                           "gradle", "pipenv", "pdm", "hatch", "mix", "deno"})  # fmt: skip
_INSTALL_SUBS = frozenset({"install", "i", "ci", "add", "sync", "get", "update", "upgrade", "remove",
                           "uninstall", "lock"})  # fmt: skip
_DEPLOY_PROGRAMS = frozenset(
    {"kubectl", "helm", "terraform", "ansible", "ansible-playbook", "flyctl", "fly", "vercel", "netlify",
     "heroku", "serverless", "sls", "cdk", "pulumi", "eb", "gcloud", "az", "aws", "doctl", "railway",
     "wrangler", "firebase", "kamal", "capistrano", "cap", "systemctl", "service", "pm2", "supervisorctl",
     "ssh", "scp", "rsync", "nginx", "caddy", "skaffold", "argocd", "nomad"}
)  # fmt: skip
_DATA_PROGRAMS = frozenset(
    {"psql", "mysql", "sqlite3", "sqlite", "pg_dump", "pg_restore", "pg_dumpall", "mongo", "mongosh",
     "redis-cli", "alembic", "flyway", "liquibase", "dbt", "createdb", "dropdb", "sqlcmd", "clickhouse",
     "duckdb", "prisma", "knex", "sequelize", "dbmate", "goose", "atlas", "migrate", "pgcli", "mycli"}
)  # fmt: skip
_BUILD_PROGRAMS = frozenset(
    {"make", "cmake", "ninja", "bazel", "docker", "docker-compose", "podman", "buildah", "tsc", "webpack",
     "vite", "rollup", "esbuild", "babel", "gcc", "g++", "clang", "javac", "ruff", "eslint", "prettier",
     "mypy", "black", "flake8", "pylint", "isort", "pre-commit", "act", "turbo", "nx", "lerna", "twine"}
)  # fmt: skip
_SECURITY_PROGRAMS = frozenset(
    {"openssl", "ssh-keygen", "gpg", "vault", "htpasswd", "trivy", "bandit", "semgrep", "pip-audit",
     "snyk", "gitleaks", "trufflehog", "certbot", "keytool", "sops", "age"}
)  # fmt: skip
_NAV_PROGRAMS = frozenset({"ls", "cat", "head", "tail", "less", "more", "find", "tree", "grep", "rg", "ag",
                           "fd", "wc", "pwd", "which", "file", "stat", "du", "bat", "whereis"})  # fmt: skip
_GIT_VERBS = frozenset(
    {"commit", "push", "pull", "merge", "rebase", "checkout", "switch", "reset", "revert", "cherry-pick",
     "clone", "stash", "tag", "fetch", "add", "rm", "mv", "restore", "bisect", "branch", "init", "apply"}
)  # fmt: skip
_GIT_READ_ONLY = frozenset({"status", "log", "diff", "show", "blame", "shortlog", "describe", "ls-files",
                            "rev-parse", "remote", "reflog"})  # fmt: skip
_READ_ONLY_PROGRAMS = frozenset({"ls", "pwd", "tree", "which", "whoami", "cat", "head", "tail", "wc",
                                 "less", "more", "stat", "file", "du", "df", "date", "uname", "whereis",
                                 "bat", "echo", "rg", "grep", "fd"})  # fmt: skip
_SECRET_WORDS = re.compile(r"\.env\b|secret|passw|credential|token|\.pem\b|id_rsa|\.key\b", re.I)


def _is_test_command(program: str, sub: str, segment: list[str]) -> bool:
    if program in _TEST_PROGRAMS or (
        program in {"go", "cargo", "dotnet", "deno", "bun", "mix"} and sub == "test"
    ):
        return True
    if program in {"npm", "yarn", "pnpm", "make", "just", "task"}:
        words = [w.lower() for w in segment[1:4]]
        return any(w == "test" or w.startswith(("test:", "test-", "e2e")) for w in words)
    return program == "playwright" and sub == "test"


_DEPLOY_TOOLS = frozenset(
    {"kubectl", "helm", "terraform", "flyctl", "fly", "vercel", "netlify", "serverless", "sls", "cdk",
     "pulumi", "eb", "railway", "wrangler", "firebase", "kamal", "cap", "capistrano", "skaffold", "argocd",
     "ansible-playbook", "heroku"}
)  # fmt: skip
_DEPLOY_SUBS = frozenset(
    {"", "apply", "rollout", "set", "scale", "create", "replace", "patch", "install", "upgrade", "rollback",
     "uninstall", "destroy", "deploy", "release", "promote", "push", "up", "sync", "publish"}
)  # fmt: skip


def _is_deploy_command(program: str, sub: str, segment: list[str]) -> bool:
    """True for a command that changes a running environment (``kubectl apply``, ``fly deploy``, ...);
    inspecting one (``kubectl get``, ``terraform plan``) is ops work but not a deploy."""
    if re.search(r"deploy|release|rollout|publish", program):
        return True
    if program in _DEPLOY_TOOLS:
        return sub in _DEPLOY_SUBS or sub.startswith("-") or program == "ansible-playbook"
    joined = " ".join(segment[1:6]).lower()
    if program in {"gcloud", "aws", "az", "doctl"} and re.search(
        r"deploy|update-service|apply|rollout", joined
    ):
        return True
    if program == "docker" and sub == "push":
        return True
    # a script, target or workflow named for a deploy: "make deploy", "gh workflow run deploy.yml"
    names = [w.lower() for w in segment[1:6] if " " not in w and not w.startswith("-")]
    return program not in {"git", "vim", "nano", "code", "cat", "less", "echo"} and any(
        re.search(r"(?<![a-z])(?:deploy|release)(?![a-z])", w) for w in names
    )


def _is_migration_command(program: str, sub: str, segment: list[str]) -> bool:
    joined = " ".join(segment[1:5]).lower()
    if program in {"alembic", "flyway", "liquibase", "dbmate", "goose", "migrate"}:
        return True
    if program in {"prisma", "knex", "sequelize", "atlas"} and "migrat" in joined:
        return True
    if re.search(r"manage\.py", program + " " + joined) and re.search(r"migrat", joined):
        return True
    return program in {"rails", "rake", "npm", "yarn", "pnpm", "make"} and "migrat" in joined


def _command_action(segment: list[str]) -> str:
    """The verb of a command: test, install, build, deploy, migrate, lint, delete, a git verb, or run."""
    if not segment:
        return "run"
    program = segment[0].lower()
    sub = _subcommand(segment)
    if _is_test_command(program, sub, segment):
        return "test"
    if _is_deploy_command(program, sub, segment):
        return "deploy"
    if _is_migration_command(program, sub, segment):
        return "migrate"
    if program == "git":
        return sub if sub in _GIT_VERBS else "run"
    if program in {"gh", "glab"}:
        rest = [w.lower() for w in segment[2:4] if not w.startswith("-")]
        return rest[0] if rest and rest[0] in _VERBS else "run"
    if program in _PKG_MANAGERS and sub in _INSTALL_SUBS:
        return "install"
    if sub == "build" or program in {"make", "tsc", "webpack", "vite", "cmake", "ninja", "bazel"}:
        return "build"
    if program in {"ruff", "eslint", "flake8", "pylint", "mypy", "black", "prettier", "isort"}:
        return "lint"
    simple = {"rm": "delete", "rmdir": "delete", "mkdir": "create", "touch": "create", "mv": "move",
              "cp": "copy", "curl": "request", "wget": "download", "psql": "query", "mysql": "query",
              "sqlite3": "query", "ls": "list", "cat": "read", "grep": "search", "rg": "search",
              "find": "find", "kill": "stop", "pkill": "stop"}  # fmt: skip
    return simple.get(program, "run")


def _reads_logs(program: str, sub: str, segment: list[str]) -> bool:
    """``tail -f app.log``, ``journalctl -u api``, ``kubectl logs``, ``docker logs``: looking for an error."""
    if program in {"journalctl", "dmesg"} or (
        program in {"kubectl", "docker", "heroku", "fly"} and sub == "logs"
    ):
        return True
    return program in _NAV_PROGRAMS and any(re.search(r"\blogs?\b|\.log\b", w) for w in segment[1:8])


def _command_family(command: str) -> str | None:
    """The intent family the program of a command line implies, or None when the program says nothing."""
    segment = _main_segment(_segments(command))
    if not segment:
        return None
    program = segment[0].lower()
    sub = _subcommand(segment)
    if _is_test_command(program, sub, segment):
        return "testing_validation"
    if _reads_logs(program, sub, segment):
        return "debugging_errors"
    if program in {"xurl", "twurl", "toot", "bsky"}:
        return "social_content"
    if _is_migration_command(program, sub, segment) or program in _DATA_PROGRAMS:
        return "data_schema"
    if _is_deploy_command(program, sub, segment) or program in _DEPLOY_PROGRAMS:
        return "deployment_ops"
    if program in {"git", "gh", "hub", "glab", "tig"}:
        return "build_dependencies" if program == "gh" and sub in {"run", "workflow"} else "version_control"
    if program in _SECURITY_PROGRAMS or (program in {"npm", "yarn", "pnpm"} and sub == "audit"):
        return "auth_security"
    if program in _PKG_MANAGERS or program in _BUILD_PROGRAMS:
        return "build_dependencies"
    if program in _NAV_PROGRAMS:
        return "file_navigation"
    if program in {"pdb", "gdb", "lldb", "strace", "ltrace", "valgrind"}:
        return "debugging_errors"
    return None


def _command_summary(command: str) -> tuple[str, str]:
    """(action, target) of a shell command; the target is the main command with paths shortened, quotes
    and most flags dropped: ``cd /repo && python -m pytest tests/test_auth.py -x`` -> ``pytest test auth``."""
    segment = _main_segment(_segments(command))
    if not segment:
        return "run", ""
    words: list[str] = []
    for i, word in enumerate(segment[:24]):
        if word.startswith("-") and word not in _KEEP_FLAGS:
            continue
        if re.fullmatch(r"\d?[<>]+&?\d*", word) or word.startswith("$"):
            continue
        if i == 0:
            words.append(word)
        elif _URL.match(word):
            words.append(_url_words(word))
        elif re.fullmatch(r"[\w.-]+=\S*", word):  # key=value: keep the words, drop ids and hashes
            key, _, value = word.partition("=")
            words.append(" ".join(w for w in (key, value) if w and not _HASHLIKE.match(w)))
        elif "/" in word or "\\" in word or re.search(r"\.\w{1,5}$", word):
            words.append(_path_words(word) if ("/" in word or "\\" in word) else word)
        else:
            words.append(_clean_text(word))
    target = _cap(_dedupe_words(" ".join(w for w in words if w)), _MAX_TARGET)
    return _command_action(segment), target


def _is_read_only_command(command: str) -> bool:
    """True for a command line made only of listing/printing programs (no redirects, no secret files)."""
    if not command.strip() or re.search(r"(?<![<>&\d])>", command) or _SECRET_WORDS.search(command):
        return False
    segments = _segments(command)
    if not segments:
        return False
    for segment in segments:
        program = segment[0].lower()
        if program == "git":
            if _subcommand(segment) not in _GIT_READ_ONLY:
                return False
        elif program == "find":
            if any(w in {"-delete", "-exec", "-execdir", "-ok"} for w in segment):
                return False
        elif program not in _READ_ONLY_PROGRAMS and program != "cd":
            return False
    return True


# -------------------------------------------------------------------------------------- intent families

# Keyword evidence per family: (alternation, weight). Matched as whole words against the normalised text
# (lower case, separators turned into spaces, so "auth/login.py" reads "auth login py").
_FAMILY_WORDS: Mapping[str, tuple[tuple[str, float], ...]] = MappingProxyType(
    {
        "auth_security": (
            (
                r"auth|authn|authz|authentication|authenticate|authorization|authorize|login|logins|logout|"
                r"log in|sign ?in|sign ?up|signup|passwords?|passwd|jwts?|oauth2?|oidc|saml|sso|csrf|xss|"
                r"secrets?|credentials?|api ?keys?|apikey|access tokens?|refresh tokens?|bearer|rbac|"
                r"encrypt|encryption|decrypt|bcrypt|argon2|scrypt|vulnerabilit(?:y|ies)|cve|security|"
                r"injection|2fa|mfa|totp|keycloak|auth0|cognito|session cookies?|htpasswd|user input|"
                r"untrusted input|user supplied",
                2.0,
            ),
            (
                r"tokens?|sessions?|cors|tls|ssl|certificates?|certs?|roles?|permissions?|sanitize|"
                r"sanitise|middleware|hashing|private key|ssh keys?|vault|firewall|acl",
                1.0,
            ),
        ),
        "deployment_ops": (
            (
                r"deploy|deploys|deployed|deploying|deployments?|rollout|rollback|roll back|kubernetes|"
                r"k8s|kubectl|helm|terraform|ansible|heroku|vercel|netlify|flyctl|fly io|cloudformation|"
                r"pulumi|canary|blue green|production|prod|staging|releases?|releasing|downtime|"
                r"load balancer|systemd|systemctl|nginx|infra|infrastructure|ec2|ecs|cloud run",
                2.0,
            ),
            (
                r"servers?|cron|aws|gcp|azure|lambda|hotfix|ssh|dns|env vars?|environment variables?|"
                r"monitoring|alerts?|uptime|scaling|cluster|pods?|ingress|ship|shipping|go live",
                1.0,
            ),
        ),
        "testing_validation": (
            (
                r"tests?|testing|tested|pytest|unittest|jest|vitest|mocha|cypress|playwright|rspec|"
                r"phpunit|coverage|fixtures?|mocks?|mocking|e2e|tdd|conftest|assertions?|test suite|"
                r"specs?|flaky|qa",
                2.0,
            ),
            (r"asserts?|validate|validation|verify|verification|regressions?|snapshots?", 1.0),
        ),
        "debugging_errors": (
            (
                r"debug|debugging|debugger|bugs?|buggy|errors?|exceptions?|traceback|stack ?traces?|"
                r"crash|crashes|crashed|crashing|segfault|panics?|[a-z]+error|[a-z]+exception|"
                r"not working|doesn t work|does not work|broken|root cause|pdb|breakpoint|memory leak|"
                r"deadlock|race condition",
                2.0,
            ),
            (
                r"fix|fixes|fixing|fail|fails|failing|failed|failures?|issues?|timeouts?|hangs?|hanging|"
                r"repro|reproduce|warnings?|500|null pointer|undefined",
                1.0,
            ),
        ),
        "code_editing": (
            (
                r"refactor|refactoring|rename|renaming|implement|implementing|implementation|functions?|"
                r"methods?|class|classes|components?|frontend|front end|css|scss|sass|tailwind|html|jsx|"
                r"tsx|react|vue|svelte|angular|next ?js|typescript|javascript|docstrings?|type hints?|ui|"
                r"ux|layout|stylesheets?|styling|button|modal|navbar|dark mode|responsive",
                2.0,
            ),
            (
                r"code|modules?|features?|endpoints?|apis?|handlers?|backend|styles?|forms?|pages?|hooks?|"
                r"props|variables?|python|helpers?|utils?|parser",
                1.0,
            ),
        ),
        "data_schema": (
            (
                r"databases?|db|dbs|sql|postgres|postgresql|psql|mysql|mariadb|sqlite3?|mongo|mongodb|"
                r"schemas?|migrations?|migrate|migrating|alembic|prisma|sqlalchemy|orm|knex|sequelize|"
                r"typeorm|drizzle|flyway|liquibase|select .{1,80} from|insert into|alter table|"
                r"create table|drop table|truncate|foreign key|primary key|constraints?|not null|nullable|"
                r"upsert|pgvector|supabase|dbt|backfill|query plan|explain analyze|indexes",
                2.0,
            ),
            (
                r"tables?|columns?|rows?|index|query|queries|joins?|redis|etl|pandas|dataframes?|csv|"
                r"parquet|seed data|models?|records?|transactions?",
                1.0,
            ),
        ),
        "version_control": (
            (
                r"git|commits?|committing|branch|branches|merge|merging|rebase|rebasing|cherry pick|"
                r"pull requests?|pr|prs|push|pushing|checkout|stash|gitignore|squash|amend|"
                r"merge conflicts?|bisect|revert|blame|reflog",
                2.0,
            ),
            (r"diff|tags?|changelog|upstream|origin|master|remote|clone|fork|github|gitlab|conflicts?", 1.0),
        ),
        "build_dependencies": (
            (
                r"dependency|dependencies|deps|packages?|pip|npm|yarn|pnpm|poetry|pipenv|conda|"
                r"requirements|pyproject|package json|package lock|lockfiles?|lock file|cargo|gradle|"
                r"maven|mvn|webpack|vite|rollup|esbuild|babel|bundler|docker|dockerfile|docker compose|"
                r"containers?|podman|ci|github actions|makefile|build|builds|building|compile|compiling|"
                r"compiler|install|installing|installation|venv|virtualenv|node modules|semver|brew",
                2.0,
            ),
            (
                r"versions?|pin|pinned|images?|pipelines?|workflows?|toolchain|tsconfig|wheel|registry|"
                r"upgrade|lint|linter|ruff|eslint|prettier|mypy|flake8|formatter",
                1.0,
            ),
        ),
        "research_decision_support": (
            (
                r"research|researching|docs|documentation|compare|comparing|comparison|versus|vs|"
                r"alternatives?|trade ?offs?|pros and cons|survey|papers?|arxiv|rfc|benchmarks?|"
                r"evaluate|evaluating|which is better|best practices?|recommendations?|options|websearch|"
                r"webfetch|web search",
                2.0,
            ),
            (
                r"articles?|blog|learn|investigate|explore|how to|how do|library|libraries|frameworks?|"
                r"decide|decision|choose|choosing|choices?|reference|guide|tutorial|examples?|specification|"
                r"faq",
                1.0,
            ),
        ),
        "social_content": (
            (
                r"tweet|tweets|tweeting|tweeted|retweets?|twitter|x com|on x|followers|engagement|"
                r"hashtags?|linkedin|mastodon|bluesky|social media|viral|quote tweet|newsletter|"
                r"instagram|tiktok|youtube|reddit|hacker news|captions?|audience|posting|post on",
                2.0,
            ),
            (
                r"post|posts|thread|threads|reply|replies|likes|dms?|timeline|mentions|announce|"
                r"announcement|launch|content|community|slack|discord",
                1.0,
            ),
        ),
        "file_navigation": (
            (
                r"find files?|locate|list files|list (?:the )?director(?:y|ies)|where (?:is|are|do|does)|"
                r"find where|glob|navigate|explore (?:the )?(?:code ?base|repo|project)|project structure|"
                r"directory structure|file tree|look for|search the (?:code ?base|repo)|grep|ls",
                2.0,
            ),
            (r"director(?:y|ies)|folders?|files?|open|read|view|browse|structure|tree|code ?base", 1.0),
        ),
    }
)
_FAMILY_PATTERNS: tuple[tuple[str, re.Pattern[str], float], ...] = tuple(
    (family, re.compile(rf"(?<![a-z0-9])(?:{words})(?![a-z0-9])"), weight)
    for family, groups in _FAMILY_WORDS.items()
    for words, weight in groups
)
_FAMILY_ORDER = (  # tie-break: the more specific family wins
    "auth_security",
    "data_schema",
    "deployment_ops",
    "version_control",
    "testing_validation",
    "build_dependencies",
    "debugging_errors",
    "social_content",
    "research_decision_support",
    "code_editing",
    "file_navigation",
    "general",
)
_HEAD_WORDS = 8  # keywords among the first words (action + target) weigh more than the trailing context
_MIN_EVIDENCE = 2.0  # keyword weight a family needs to be chosen without a tool prior
_COMMAND_BONUS = 6.0  # the program of a shell command outweighs the words around it


def _normalise(text: str) -> str:
    """Lower case, camelCase split, separators as spaces: the form keyword patterns match against."""
    spaced = _CAMEL.sub(" ", text[:SCAN_LIMIT])
    return _squash(re.sub(r"[^a-z0-9#@+ ]+", " ", spaced.lower().replace("'", " ")))


def _keyword_scores(text: str) -> dict[str, float]:
    """Weight of the distinct keywords each family matches; matches in the first words count 1.5 times."""
    norm = _normalise(text)
    head_end = sum(len(w) + 1 for w in norm.split(" ")[:_HEAD_WORDS])
    scores: dict[str, float] = {}
    for family, pattern, weight in _FAMILY_PATTERNS:
        seen: set[str] = set()
        for match in pattern.finditer(norm):
            word = match.group(0)
            if word in seen:
                continue
            seen.add(word)
            factor = 1.5 if match.start() < head_end else 1.0
            scores[family] = scores.get(family, 0.0) + weight * factor
    return scores


_SOCIAL_HOST = re.compile(
    r"\b(?:x|twitter|linkedin|bsky|threads|mastodon\.social|reddit)\.(?:com|app|net|social)\b", re.I
)


def _tool_priors(tool: str) -> dict[str, float]:
    """Evidence the tool itself gives: Read is navigation, WebSearch is research, Edit is code editing..."""
    kind = _tool_kind(tool)
    fixed = {
        "edit": ("code_editing", 1.5),
        "write": ("code_editing", 1.5),
        "read": ("file_navigation", 8.0),
        "glob": ("file_navigation", 9.0),
        "grep": ("file_navigation", 8.0),
        "ls": ("file_navigation", 9.0),
        "websearch": ("research_decision_support", 8.0),
        "webfetch": ("research_decision_support", 8.0),
        "social": ("social_content", 6.0),
    }
    if kind in fixed:
        family, weight = fixed[kind]
        return {family: weight}
    if kind != "other":
        return {}
    tokens = set(_tool_tokens(tool))
    hints = (
        (
            {"sql", "db", "database", "postgres", "supabase", "neon", "mysql", "sqlite", "query"},
            "data_schema",
        ),
        ({"github", "git", "gitlab", "pull", "pr", "commit", "branch"}, "version_control"),
        ({"deploy", "vercel", "netlify", "kubernetes", "k8s", "cloudflare", "aws", "fly"}, "deployment_ops"),
        ({"test", "playwright", "puppeteer", "selenium", "cypress"}, "testing_validation"),
        (
            {"search", "fetch", "docs", "browser", "perplexity", "exa", "context7", "scrape"},
            "research_decision_support",
        ),
        ({"sentry", "logs", "debug"}, "debugging_errors"),
    )
    for words, family in hints:
        if tokens & words:
            return {family: 4.0}
    return {}


def classify_family(tool_name: str, text: str) -> str:
    """The intent family (a key of INTENT_FAMILIES) of a tool call, from the tool and a text about it.

    The tool gives a prior (Read -> file_navigation, WebSearch -> research, Edit -> code_editing); for a
    shell tool the program of the command line decides strongly (git -> version_control, pytest ->
    testing_validation, alembic -> data_schema); keywords of the text add evidence, more for the first words.
    The most specific family wins ties; with no evidence at all the answer is "general".
    """
    tool = _clip(tool_name, 200).strip()
    body = _clip(text)
    scores = _keyword_scores(body)
    priors = _tool_priors(tool)
    if "research_decision_support" in priors and _SOCIAL_HOST.search(body):
        priors = {"social_content": priors["research_decision_support"]}  # reading a post or a profile
    for family, weight in priors.items():
        scores[family] = scores.get(family, 0.0) + weight
    if _tool_kind(tool) == "shell" or (not priors and _looks_like_command(body)):
        command_family = _command_family(body.split("\n", 1)[0])
        if command_family is not None:
            scores[command_family] = scores.get(command_family, 0.0) + _COMMAND_BONUS
    floor = max(priors.values(), default=_MIN_EVIDENCE - 0.01)
    ranked = sorted(scores.items(), key=lambda kv: (-kv[1], _FAMILY_ORDER.index(kv[0])))
    if ranked and ranked[0][1] >= floor:
        return ranked[0][0]
    return "general"


def _looks_like_command(text: str) -> bool:
    """True when a text starts like a shell command of a known program (used for unknown tools)."""
    segment = _main_segment(_segments(text.split("\n", 1)[0][:500]))
    return bool(segment) and _command_family(" ".join(segment)) is not None


# ------------------------------------------------------------------------------------------ extraction


@dataclass(frozen=True)
class _Parsed:
    """What a tool-specific parser found: verb, target, secondary context and raw classification text."""

    action: str | None
    target: str
    detail: str = ""  # description, prompt, or identifiers from code bodies (only without task context)
    signal: str = ""  # raw-ish text for classify_family (full path, command line, query)


_PATH_KEYS = ("file_path", "notebook_path", "path", "filepath", "file", "filename", "target_file", "uri")
_BODY_KEYS = ("new_string", "content", "new_source", "code", "patch", "diff")
_TEXT_KEYS = ("text", "content", "message", "body", "tweet", "status", "caption", "comment", "reply")
_TARGET_KEYS = (
    "command", "cmd", "query", "sql", "q", "search", "search_query", "url", "file_path", "path", "filename",
    "title", "name", "subject", "repo", "repository", "branch", "text", "message", "content", "body",
    "description", "prompt", "task", "pattern", "input",
)  # fmt: skip
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


def _parse_file_tool(verb: str, data: Mapping[str, Any]) -> _Parsed:
    path = _field(data, *_PATH_KEYS) or _path_like(_field(data, "input"))
    bodies = [_field(data, key) for key in _BODY_KEYS]
    edits = data.get("edits")
    if isinstance(edits, list):
        bodies.extend(_field(e, "new_string") for e in edits[:10] if isinstance(e, Mapping))
    hint = _identifiers(*bodies) or _identifiers(_field(data, "old_string"))
    return _Parsed(verb, _path_words(path), hint, path)


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
    command = _field(data, "command", "cmd", "script", "input")
    action, target = _command_summary(command)
    description = _clean_text(_field(data, "description"))
    return _Parsed(action, target, description, command)


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


def _tool_verb(tool: str, default: str) -> str:
    """The first verb among a tool name's words ("mcp__x__post_tweet" -> "post")."""
    for token in _tool_tokens(tool):
        if token in _VERBS:
            return token
    return default


def _parse_social(tool: str, data: Mapping[str, Any]) -> _Parsed:
    text = _clean_text(_find_field(data, _TEXT_KEYS))
    verb = _tool_verb(tool, "post")
    return _Parsed(verb, _cap(text, _MAX_TARGET), "", f"{tool} {text}")


def _parse_other(tool: str, data: Mapping[str, Any]) -> _Parsed:
    """Unknown tools: a command is parsed as shell, a path as a file, else the most telling string."""
    command = _field(data, "command", "cmd")
    if command:
        action, target = _command_summary(command)
        return _Parsed(_tool_verb(tool, action), target, _clean_text(_field(data, "description")), command)
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
    tool_name: str, tool_input: Mapping[str, Any] | str | None, task_context: str = ""
) -> Intent:
    """The intent of one tool call: clean query text, verb, target, family, allowed domains, triviality.

    Never raises: malformed input degrades to an intent named after the tool.
    """
    tool = _squash(_clip(tool_name, 200)) or "unknown"
    context = _clean_text(task_context)
    try:
        kind = _tool_kind(tool)
        parsed = _parse(tool, kind, _as_mapping(tool_input))
    except Exception:  # odd input must never break the advisor: fall back to the bare tool name
        kind, parsed = "other", _Parsed(None, "")
    target = _cap(parsed.target, _MAX_TARGET)
    # identifiers mined from code bodies only stand in for a missing task context
    detail = "" if context and kind in {"edit", "write"} else parsed.detail
    text = _compose(parsed.action, target, context, detail) or " ".join(_tool_tokens(tool))
    family = classify_family(tool, "\n".join(p for p in (parsed.signal, text, context) if p))
    readonly = kind in _READ_ONLY_KINDS or (kind == "shell" and _is_read_only_command(parsed.signal))
    return Intent(
        text=text,
        tool=tool,
        action=parsed.action,
        target=target or None,
        family=family,
        domains=INTENT_FAMILIES[family],
        trivial=readonly and not context,
    )


# -------------------------------------------------------------------------------------- memory domains

_SOCIAL_SOURCES = re.compile(r"x_research|x_social|engagement|social|twitter|tweet|\bx\b", re.I)
_TRAINING_SOURCES = re.compile(r"depth|training", re.I)
_RETWEET = re.compile(r"^\s*RT\s+@\w+|\(eng:")
_ENGAGEMENT = re.compile(r"\b\d[\d,.]*\s*[kK]?\s+(?:likes|retweets|reposts|impressions|faves|rts)\b")
_TRAINING_LOG = re.compile(  # "DEPTH" is matched in capitals only: "max depth 3" is not a training log
    r"^\s*\[(?i:depth)\b|\bDEPTH\b|(?i:\bstrong\b[^.\n]{0,40}\breasoning\s*:)|"
    r"^\s*\[(?i:round|epoch|step|iteration)\s*[:#]?\s*\d+\]"
)
_USER_QUOTE = re.compile(
    r"^\s*(?:the\s+)?user\s+(?:said|says|asked|asks|wrote|writes|typed|mentioned|told|requested|replied|"
    r"prefers|wants|likes)\b\s*(?:[:,-]\s*)?[\"\u201c'\u2018]"
    r"|^\s*(?:the\s+)?user\s+(?:said|says|asked|asks|wrote|typed|replied|requested)\s*:",
    re.I,
)
_USER_REQUEST = re.compile(
    r"^\s*(?:now,?\s+)?(?:can|could|would)\s+(?:we|you)\b|^\s*(?:ok|okay|hey|hi|thanks|thank you|lol|"
    r"hmm|yeah|yep)\b[,!. ]",
    re.I,
)
_QUOTED = re.compile(
    r"\"[^\"]{2,}\"|\u201c[^\u201d]{2,}\u201d|(?<![A-Za-z])'[^'\n]{12,}'(?![A-Za-z])|\u2018[^\u2019]{2,}\u2019"
)
_USER_CATEGORIES = frozenset(
    {"user_understanding", "user_context", "user", "persona", "profile", "user_profile", "communication"}
)
_CROSS_CUTTING_CATEGORIES = frozenset({"safety", "workflow", "process", "collaboration", "wisdom"})
_DOMAIN_CATEGORIES = MappingProxyType(
    {
        "security": "security", "auth": "security", "secrets": "security", "authentication": "security",
        "database": "data", "data": "data", "sql": "data", "schema": "data", "migrations": "data",
        "db": "data", "deployment": "system", "deploy": "system", "ops": "system", "devops": "system",
        "infra": "system", "infrastructure": "system", "ci": "system", "system": "system",
        "shell": "system", "docker": "system", "code": "code", "coding": "code", "testing": "code",
        "debugging": "code", "git": "code", "dependencies": "code", "performance": "code",
        "architecture": "code", "style": "code", "frontend": "code", "backend": "code",
        "refactoring": "code", "code_quality": "code", "research": "research", "social": "social",
        "x": "social", "twitter": "social", "engagement": "social", "content": "social",
        "marketing": "social",
    }
)  # fmt: skip
# Which intent families' keyword evidence counts for a memory domain, and how much. Build words count only
# half for code: Docker and CI are infrastructure (system), packages and lockfiles are code.
_DOMAIN_FAMILIES: Mapping[str, tuple[tuple[str, float], ...]] = MappingProxyType(
    {
        "security": (("auth_security", 1.0),),
        "data": (("data_schema", 1.0),),
        "system": (("deployment_ops", 1.0),),
        "code": (
            ("code_editing", 1.0),
            ("testing_validation", 1.0),
            ("debugging_errors", 1.0),
            ("version_control", 1.0),
            ("build_dependencies", 0.5),
        ),
        "research": (("research_decision_support", 1.0),),
        "social": (("social_content", 1.0),),
    }
)
# Extra words per domain, each distinct one worth its weight: memories talk differently from tool calls.
_DOMAIN_WORDS: tuple[tuple[str, re.Pattern[str], float], ...] = tuple(
    (domain, re.compile(rf"(?<![a-z0-9])(?:{words})(?![a-z0-9])"), weight)
    for domain, words, weight in (
        (
            "system",
            r"docker|dockerfile|containers?|ci|cd|pipelines?|github actions|kubernetes|k8s|pods?|"
            r"nginx|load balancer",
            2.0,
        ),
        (
            "system",
            r"shell|bash|zsh|terminal|command line|sudo|chmod|chown|rm rf|processes|daemon|disk|cpu|ram|"
            r"memory usage|linux|macos|filesystem|ports?|backups?|restore|environment|env|logs|logging|"
            r"cron|services?|ssh|network|firewall|oom|uptime",
            1.0,
        ),
        (
            "data",
            r"quer(?:y|ies)|tables?|columns?|rows?|n\+1|selectinload|joinedload|replicas?|vacuum|"
            r"statement timeout|connection pool|pool size|orm|records|datasets?|etl|warehouse",
            1.0,
        ),
        (
            "code",
            r"debounce|throttle|memoi[sz]e|callbacks?|render|renders|re render|hooks?|props|state|async|"
            r"await|regex|null|none|functions?|types?|typing|lint|linting|formatter|dependency|"
            r"dependencies|packages?|lockfile|semver|changelog|commit messages?|variables?|compiler",
            1.0,
        ),
        (
            "social",
            r"thread below|my timeline|hot take|unpopular opinion|this thread|a thread|followers|audience|"
            r"posting|went viral|dm me",
            2.0,
        ),
        (
            "research",
            r"best way|trade ?offs?|pros and cons|compare|comparison|evaluate|evaluating|license|"
            r"bus factor|docs|documentation|articles?|papers?|sources?|citations?",
            1.0,
        ),
    )
)
_EMOJI = re.compile("[\U0001f300-\U0001faff\u2600-\u27bf]")
_CODE_SYNTAX = re.compile(
    r"\bdef \w+\(|\bclass \w+[:(]|^\s*import \w|\bfrom [\w.]+ import\b|=>|\bfunction\s*\w*\(|"
    r"\b(?:const|let|var) \w+ ?=|[{};]\s*$|\w+\(\)|\bself\.\w+|\breturn\b",
    re.M,
)
_DOMAIN_ORDER = ("security", "data", "system", "code", "research", "social")


def _is_user_quote(text: str) -> bool:
    """A user's utterance rather than a lesson: 'User said: "..."', "Now, can we ...", mostly quotes."""
    if _USER_QUOTE.search(text) or _USER_REQUEST.search(text):
        return True
    quoted = sum(len(m.group(0)) for m in _QUOTED.finditer(text))
    return len(text.strip()) > 0 and quoted / len(text.strip()) >= 0.6


def _domain_scores(text: str, category: str, source: str) -> dict[str, float]:
    keyword = _keyword_scores(text)
    scores: dict[str, float] = {}
    for domain, families in _DOMAIN_FAMILIES.items():
        total = sum(keyword.get(f, 0.0) * factor for f, factor in families)
        if total:
            scores[domain] = total
    norm = _normalise(text)
    for domain, pattern, weight in _DOMAIN_WORDS:
        hits = len(set(pattern.findall(norm)))
        if hits:
            scores[domain] = scores.get(domain, 0.0) + weight * hits
    if _EMOJI.search(text):
        scores["social"] = scores.get("social", 0.0) + 1.0
    syntax_hits = len(_CODE_SYNTAX.findall(text[:SCAN_LIMIT]))
    if syntax_hits:
        scores["code"] = scores.get("code", 0.0) + min(4.0, 2.0 * syntax_hits)
    hinted = _DOMAIN_CATEGORIES.get(category.strip().lower())
    if hinted:
        scores[hinted] = scores.get(hinted, 0.0) + 2.5
    if "research" in source.lower():
        scores["research"] = scores.get("research", 0.0) + 2.5
    return scores


def classify_domain(
    text: str, *, category: str = "general", source: str = "user", kind: str = "insight"
) -> str:
    """The action domain (one of ACTION_DOMAINS) of a stored memory, decided once at ingestion.

    Hard text markers first: retweets, engagement counts and hashtag posts -> social; training logs ->
    training_log; user quotes -> user_context; log output -> system; a code dump -> code (SQL -> data); a
    bare link -> research. Source markers (x_research, x_social, engagement, social -> social; depth ->
    training_log) come next, except for actionable text with clear technical evidence: a CI rule learned
    from X research is still a CI rule. Otherwise keyword evidence for security, data, system, code, research
    and social (plus a bonus for a matching category) decides; a memory of a cross-cutting category (safety,
    workflow), one that speaks to three or more domains alike, or one that speaks to none clearly, is
    "general", which every intent may see.
    """
    body = _clip(text)
    category = _clip(category, 100) or "general"
    source = _clip(source, 200)
    marked = _marked_domain(body)
    if marked is not None:
        return marked
    scores = _domain_scores(body, category, source)
    ranked = sorted(scores.items(), key=lambda kv: (-kv[1], _DOMAIN_ORDER.index(kv[0])))
    if _SOCIAL_SOURCES.search(source) or _TRAINING_SOURCES.search(source):
        provenance = "social" if _SOCIAL_SOURCES.search(source) else "training_log"
        if not _technical_advice(body, ranked):
            return provenance
    if category.strip().lower() in _CROSS_CUTTING_CATEGORIES:
        return "general"
    if ranked and ranked[0][1] >= _MIN_EVIDENCE:
        spread = [score for _, score in ranked[:3] if score >= _MIN_EVIDENCE]
        if len(spread) == 3 and spread[2] >= 0.5 * spread[0]:
            return "general"  # cross-cutting advice (safety, workflow) belongs to every intent
        return ranked[0][0]
    if category.strip().lower() in _USER_CATEGORIES:
        return "user_context"
    if _clip(kind, 50) in {"trace", "failure"}:
        return "code"  # traces and failures are records of coding work even when their words are plain
    return "general"


def _marked_domain(body: str) -> str | None:
    """The domain that text markers alone decide (tweets, training logs, quotes, logs, code, links)."""
    if _RETWEET.search(body) or _ENGAGEMENT.search(body) or _social_post(body) or re.match(r"^\s*@\w+", body):
        return "social"
    if _TRAINING_LOG.search(body):
        return "training_log"
    if _is_user_quote(body):
        return "user_context"
    if _is_log(body):
        return "system"
    if _code_dump(body):
        return "data" if _SQL_STATEMENT.match(body) else "code"
    if _URL.search(body) and len(_URL.sub(" ", body).split()) <= 3:  # a bare link is a reference
        return "social" if re.search(r"//(?:www\.)?(?:x|twitter)\.com/", body) else "research"
    return None


def _technical_advice(body: str, ranked: list[tuple[str, float]]) -> bool:
    """Actionable text whose clear technical domain outweighs its social or training provenance."""
    if not ranked or ranked[0][0] == "social" or ranked[0][1] < 2 * _MIN_EVIDENCE:
        return False
    social = dict(ranked).get("social", 0.0)
    return social * 2 <= ranked[0][1] and actionability(body).score >= ACTIONABILITY_GATE


def _social_post(text: str) -> bool:
    """Hashtags and mentions, the thread emoji or a "Thread:" opener: text written for a social feed."""
    return (
        len(_HASHTAG.findall(text)) >= 2
        or (bool(_HASHTAG.search(text)) and bool(_MENTION.search(text)))
        or "\U0001f9f5" in text  # the thread emoji
        or bool(re.match(r"^\s*(?:a |new )?thread\s*:", text, re.I))
    )


# -------------------------------------------------------------------------------------- actionability

_STOPWORDS = frozenset(
    {"the", "a", "an", "to", "of", "and", "or", "in", "on", "for", "with", "when", "before", "after",
     "is", "are", "be", "it", "that", "this", "you", "your", "we", "so", "not", "never", "always", "if",
     "then", "because", "only", "at", "by", "as", "from", "into", "than", "every", "any", "all", "do"}
)  # fmt: skip
_CODE_LINE = re.compile(
    r"^\s*(?:def|class|import|from\s+\S+\s+import|return|async\s+def|function|const|let|var|public|"
    r"private|protected|package|#include|fn|func|try:|except\b|elif\b|else:|@\w+|if\s*\(|for\s*\(|"
    r"while\s*\(|}|{)|[;{}]\s*$|=>|^\s*\w[\w.]*\s*=\s*\S|^\s*\w[\w.]*\(.*\)\s*$|"
    r"^\s*\.\w+\(|^\s*[)\]}]+[,;]?\s*$|"  # method chains, closing brackets
    r"^\s*-?\s*[\w.-]+:(?:\s+\S.*)?$|"  # YAML keys and list items
    r"^\s*(?:FROM|RUN|COPY|ADD|WORKDIR|ENV|ARG|USER|CMD|ENTRYPOINT|EXPOSE|LABEL)\s+\S",  # Dockerfile
)
_SQL_STATEMENT = re.compile(
    r"^\s*(?:SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|WITH|TRUNCATE)\b.{0,200}?"
    r"\b(?:FROM|INTO|SET|TABLE|WHERE|INDEX|AS)\b",
    re.S,
)
_PLACEHOLDER = re.compile(
    r"^\W*(?:todo|tbd|fixme|xxx|wip|n/?a|none|null|placeholder|lorem ipsum|example|sample|test|foo|bar|"
    r"insight|note|tip|advice|guidance)\b\W*$|^\W*(?:todo|tbd|fixme|xxx)\b|lorem ipsum|"
    r"<[^>]*(?:insert|placeholder|todo|your)[^>]*>|\{\{[^}]*\}\}",
    re.I,
)
_VAGUE = frozenset(
    {"guidance", "advice", "guidelines", "best", "practices", "recommendations", "tips", "approach",
     "strategy", "stuff", "things", "thing", "it", "this", "that", "them", "patterns", "pattern",
     "principles", "process", "careful", "good", "better", "properly", "correctly", "right", "wisely",
     "appropriate", "appropriately", "something", "accordingly"}
)  # fmt: skip
_GENERIC = frozenset(
    {"docs", "documentation", "procedure", "procedures", "standard", "usual", "normal", "proceeding",
     "steps", "instructions", "rules", "policy", "relevant", "everything", "anything", "carefully",
     "first", "before", "always", "checklist", "notes", "details", "same", "way"}
)  # fmt: skip
_LOG_LINE = re.compile(
    r"^\s*\[?\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}|^\s*\[?\d{1,2}:\d{2}:\d{2}\b|"
    r"^\s*\[?(?:INFO|DEBUG|WARN|WARNING|ERROR|TRACE|FATAL|CRITICAL)\]?[\s:|-]|"
    r"Traceback \(most recent call last\)|^\s*File \"[^\"]+\", line \d+|^\s*at [\w.$]+\(.*:\d+\)|"
    r"^\s*(?:FAILED|PASSED|ERROR|XFAIL|XPASS|SKIPPED)\s+\S+::|"  # pytest
    r"^\s*#\d+ (?:\[|\d+\.\d+ |DONE|CACHED)|"  # docker buildkit
    r"^\s*[\u2713\u2714\u2717\u2718\u00d7]\s|"  # check marks of build tools
    r"\s[\u2502|]\s.*\b\d+(?:\.\d+)?\s*[kKMG]i?B\b",  # size tables
    re.M,
)
_PROMOTION = re.compile(
    r"^\W*(?:check (?:it |this )?out|follow @|join (?:us|our|the)|sign up|don'?t miss|subscribe|"
    r"link in bio|dm me|giveaway|big news|excited to (?:announce|share))\b",
    re.I,
)
_HASHTAG = re.compile(r"(?<![\w#])#[A-Za-z]\w+")
_MENTION = re.compile(r"(?<![\w@])@[A-Za-z_]\w+")
_QUESTION = re.compile(
    r"^\s*(?:how|what|why|when|where|which|who|can|could|should|would|is|are|does|do|did|will)\b", re.I
)

_IMPERATIVES = frozenset(
    {"use", "avoid", "check", "ensure", "prefer", "run", "add", "keep", "make", "write", "test", "verify",
     "validate", "set", "pin", "commit", "read", "review", "remember", "follow", "document", "handle", "log",
     "store", "load", "cache", "limit", "wrap", "call", "pass", "split", "group", "build", "measure",
     "profile", "deploy", "restart", "rebase", "squash", "back", "confirm", "consider", "try", "stop",
     "start", "install", "upgrade", "update", "configure", "enable", "disable", "escape", "sanitize",
     "sanitise", "quote", "lock", "index", "batch", "retry", "throttle", "guard", "give", "put", "move",
     "rename", "delete", "remove", "clean", "reproduce", "change", "introduce", "know", "skip", "include",
     "exclude", "separate", "monitor", "tag", "lint", "format", "annotate", "mock", "stub", "seed",
     "migrate", "roll", "default", "favor", "favour", "reuse", "extract", "ask", "tell", "open", "close",
     "free", "post", "reply", "schedule", "lead", "cap", "bound", "await", "debounce", "return", "raise",
     "throw", "catch", "wait", "double-check", "look", "search", "grep", "prefix", "name", "pair", "gate",
     "drop", "treat", "assume", "compare", "benchmark", "fix", "refactor", "inline", "declare", "define",
     "export", "import", "isolate", "snapshot", "rotate", "revoke", "hash", "encrypt", "persist",
     "flush", "release", "tweet", "thread", "reach", "share", "mention", "respond", "draft", "publish",
     "respect", "honor", "honour", "match", "align", "copy", "fetch", "pull", "push", "merge", "shorten",
     "simplify", "be", "don't", "do", "stay", "aim", "backfill", "paginate", "memoize", "chunk", "shard",
     "partition", "vacuum", "redact", "mask", "encode", "decode", "serialize", "normalize", "dedupe",
     "trim", "bump", "vendor", "bundle", "minify", "compress", "prefetch", "preload", "warm", "invalidate",
     "purge", "evict", "expire", "refresh", "renew", "scope", "namespace", "label", "assert", "poll",
     "stream", "buffer", "queue", "cancel", "abort", "drain", "scale", "provision", "sign", "audit",
     "scan", "trace", "instrument", "alert", "notify", "describe", "explain", "summarize", "link", "cite",
     "convert", "send", "emit", "wire", "attach", "bind", "parameterize", "parametrize", "whitelist",
     "allowlist", "block", "deny", "allow", "require", "reject", "accept", "prune", "squash-merge",
     "offload", "defer", "debug", "inspect", "watch", "observe", "combine"}
)  # fmt: skip
_NOT_IMPERATIVE_NEXT = frozenset(
    {"is", "are", "was", "were", "of", "has", "have", "had", "will", "can", "could", "would", "seems",
     "looks", "means", "'s", "did", "does", "results", "cases"}
)  # fmt: skip
_LEAD_SKIP = frozenset(
    {"always", "please", "first", "then", "also", "just", "only", "still", "so", "and", "but", "instead",
     "now", "carefully", "explicitly", "immediately", "rather", "generally", "usually", "next", "finally"}
)  # fmt: skip
_STRONG_DIRECTIVE = re.compile(
    r"\b(?:never|always|do not|don't|dont|must(?: not)?|mustn't|should(?: not)?|shouldn't|need(?:s)? to|"
    r"have to|has to|ought to|make sure|be sure to|remember to|is required|are required|required to|"
    r"mandatory|it is (?:better|best|safer) to|better to|avoid|(?:is|are) not allowed|(?:is|are) forbidden|"
    r"not permitted|needs?)\b",
    re.I,
)
_PREFERENCE = re.compile(
    r"\b(?:prefers?|preferred|likes|dislikes?|hates?|wants|expects|insists on|favou?rs)\b", re.I
)
_DECISION = re.compile(
    r"\b(?:we (?:chose|picked|decided|use|settled on|went with|standardi[sz]ed on)|decided to|"
    r"the convention is|by convention|source of truth|the rule is|instead of|rather than|"
    r"(?:go|goes) through|^\s*only (?:the|a|an|one|admins?|owners?)\b|"
    r"^\s*(?:every|each|all) (?!time\b)\w+|\w+ only[,;.]|\(no [^)]{2,40}\)|"
    r"^\s*(?:decision|rule|convention|policy|guideline|preference|lesson|gotcha)s?\b[^:]{0,30}:)",
    re.I,
)
_PROCEDURE = re.compile(  # "X first, then Y", "To do X: <command>"
    r"\bfirst\b.{0,100}\b(?:then|last|afterwards)\b|^\s*to [a-z]+\b[^:.]{0,80}:\s*\S",
    re.I | re.S,
)
_NARRATIVE = re.compile(  # what happened in a session, not what to do
    r"^\s*(?:the\s+)?(?:user|users|agent|assistant|session|last \w+ sessions?|in (?:the|this) session)\b"
    r"[^.]{0,60}?\b(?:\w+ed|ran|saw|said|went|took|made|began|spent|wrote|did|got)\b",
    re.I,
)
_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|me|my|mine)\b")
_LESSON = re.compile(
    r"\b(?:because|caused(?: by)?|fixed (?:it|by|the)|fails? (?:when|if|because)|failed because|broke|"
    r"breaks|root cause|turned out|the fix (?:is|was)|resolved by|(?:was|is|were|are) missing|leads? to|"
    r"prevents?|works only|only works|doesn't work|does not work|won't work|slow(?:er)? when|"
    r"(?:is|are|was|were) slow|faster|safer|cheaper|, not)\b",
    re.I,
)
_CONDITION = re.compile(
    r"\b(?:when|whenever|if|unless|before|after|until|once|while|in case|as soon as|prior to|every time|"
    r"each time|otherwise)\b",
    re.I,
)
_SOFT_CONDITION = re.compile(
    r"\b(?:in (?:this|the) (?:repo|project|codebase)|in (?:production|prod|staging|ci)|"
    r"on (?:main|master|ci|windows|linux|macos)|for (?:large|small|new|every|each|all|any)|per (?:request|"
    r"user|tenant))\b",
    re.I,
)
_SPECIFIC_PATTERNS = (
    re.compile(r"`[^`\n]+`"),
    re.compile(
        r"\b[\w./-]+\.(?:py|js|ts|tsx|jsx|go|rs|java|rb|php|sql|sh|ya?ml|json|toml|ini|cfg|md|html|"
        r"css|env|lock|txt|conf)\b|\b\w+/[\w./-]+"
    ),
    re.compile(r"(?<![\w-])--[a-z][\w-]+|(?<=\s)-[a-zA-Z]{1,3}\b"),
    re.compile(
        r"\b[a-z]+_[a-z0-9_]+\b|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b|\b[a-z]+[A-Z]\w*\b|\b\w+\.\w+\(|\w+\(\)"
    ),
    re.compile(r"\b\d+(?:[.,/]\d+)*\s*(?:ms|s|sec|seconds?|minutes?|min|hours?|h|days?|mb|gb|kb|%|x|k)?\b"),
    re.compile(r"\b(?:DROP|DELETE|TRUNCATE|SELECT|INSERT|UPDATE|ALTER|WHERE|EXPLAIN|CREATE)\b"),
)
_TECH_TERMS = re.compile(
    r"(?<![a-z0-9])(?:git|docker|pytest|npm|pip|postgres|postgresql|alembic|kubectl|jwt|oauth|react|sql|"
    r"redis|nginx|terraform|aws|ci|api|http|https|json|yaml|css|html|python|javascript|typescript|rust|"
    r"node|django|flask|fastapi|sqlalchemy|pgvector|index|indexes|migrations?|transactions?|mypy|ruff|"
    r"eslint|prettier|webpack|vite|jest|cargo|linux|bash|ssh|tls|cors|csrf|xss|unicode|regex|cron|k8s|"
    r"helm|github|gitlab|vercel|stripe|tests?|commits?|branch|main|lockfile|backups?|schema|queries|"
    r"query|env|environment variables?|secrets?|tokens?|passwords?|credentials|fixtures?|mocks?|"
    r"tweets?|threads?|hashtags?|replies|deploys?|deployment|rollback|staging|production|dockerfile|"
    r"utc|timezone|utf ?8|async|await|mutex|locks?|retries|timeouts?|rate limit|pagination|webhooks?|"
    r"endpoints?|headers?|cookies?|sessions?|cache|caching|logs?|stack trace|error message|exceptions?)"
    r"(?![a-z0-9])"
)
_PROPER_NAME = re.compile(r"\b[A-Z][a-z]+[A-Z]\w*\b|\b[A-Z]{2,}\b")


def _is_log(text: str) -> bool:
    """Log or tool output: a timestamp, level, traceback, test report or build line in the first lines."""
    return bool(_LOG_LINE.search("\n".join(text.strip().splitlines()[:3])))


def _code_dump(text: str) -> bool:
    """Mostly code or symbols rather than prose: code lines dominate, or letters are under half."""
    stripped = text.strip()
    if not stripped:
        return False
    visible = [c for c in stripped[:SCAN_LIMIT] if not c.isspace()]
    letters = sum(c.isalpha() for c in visible)
    if len(visible) >= 12 and letters / len(visible) < 0.5:
        return True
    lines = [ln for ln in stripped[:SCAN_LIMIT].splitlines() if ln.strip()]
    code_lines = sum(1 for ln in lines if _CODE_LINE.search(ln))
    prose = _prose_ratio(stripped)
    if _SQL_STATEMENT.match(stripped) and prose < 0.25:
        return True
    if len(lines) >= 2:
        return code_lines / len(lines) >= 0.5 and prose < 0.2
    return code_lines == 1 and prose < 0.12 and bool(re.search(r"[(){}=;:]", stripped))


def _observation(text: str, directive: float) -> tuple[float, str]:
    """(not_observation, reason) from the observation detectors; (1.0, "") when none fires."""
    stripped = text.strip()
    words = re.findall(r"[A-Za-z][A-Za-z'-]*", stripped)
    detectors: tuple[tuple[bool, float, str], ...] = (
        (not words, 0.0, "empty or no words"),
        (bool(re.match(r"^\s*RT\s+@\w+", stripped)), 0.0, "retweet"),
        (bool(re.search(r"\(eng:", stripped) or _ENGAGEMENT.search(stripped)), 0.0, "engagement metrics"),
        (bool(_TRAINING_LOG.search(stripped)), 0.1, "training log"),
        (_is_log(stripped), 0.1, "log line"),
        (bool(_PLACEHOLDER.search(stripped)), 0.1, "placeholder"),
        (_is_user_quote(stripped), 0.2, "user quote"),
        (len(_URL.sub(" ", stripped).split()) <= 3 and bool(_URL.search(stripped)), 0.1, "bare url"),
        (_code_dump(stripped), 0.1, "code dump"),
        (_social_post(stripped), 0.1, "social post"),
        (bool(re.match(r"^\s*@\w+", stripped)) and directive < 1.0, 0.1, "social reply"),
        (bool(_PROMOTION.match(stripped)), 0.1, "promotional post"),
        (_vague(words), 0.1, "vague placeholder"),
        (bool(_NARRATIVE.match(stripped)) and directive < 0.6, 0.2, "session observation"),
        (bool(_FIRST_PERSON.search(stripped)) and directive < 0.6, 0.2, "personal opinion"),
        (
            stripped.endswith("?") and bool(_QUESTION.match(stripped)) and stripped.count(". ") == 0,
            0.2,
            "question",
        ),
    )
    for fired, value, reason in detectors:
        if fired:
            return value, reason
    return 1.0, ""


def _vague(words: list[str]) -> bool:
    """Advice with nothing to act on: a short text whose object is a vague word ("Use packet guidance.",
    "Be careful."), or a short directive whose content words are mostly generic ("Check the docs before
    proceeding.", "Follow the standard deploy procedure.")."""
    lowered = [w.lower() for w in words]
    if len(lowered) <= 2:
        return not any(_TECH_TERMS.search(w) for w in lowered)
    if len(lowered) <= 4 and any(w in _VAGUE for w in lowered[1:]):
        return True
    content = [w for w in lowered[1:] if w not in _STOPWORDS]
    generic = sum(w in _VAGUE or w in _GENERIC for w in content)
    return 0 < len(content) <= 5 and generic * 3 >= len(content) * 2


def _clauses(text: str) -> list[str]:
    """Sentences and comma/semicolon clauses, bullets stripped."""
    out: list[str] = []
    for sentence in re.split(r"(?<=[.!?;:])\s+|\n+", text):
        sentence = re.sub(r"^\s*(?:[-*•>]+|\d+[.)])\s*", "", sentence)
        out.extend(part for part in re.split(r",\s+|\s+-\s+|\s+—\s+", sentence) if part.strip())
    return out


def _imperative(clause: str) -> bool:
    """True when a clause starts with a bare verb ("Use ...", "Then make ...", "Always run ...")."""
    words = re.findall(r"[A-Za-z][A-Za-z'-]*", clause.lower())[:6]
    while words and words[0] in _LEAD_SKIP:
        words = words[1:]
    # a hyphenated verb counts by its last part: "rate-limit", "double-check", "pre-compute"
    if len(words) < 2 or (words[0] not in _IMPERATIVES and words[0].rsplit("-", 1)[-1] not in _IMPERATIVES):
        return False  # a lone word ("Thread:", "Update.") is a label, not an instruction
    return words[1] not in _NOT_IMPERATIVE_NEXT


def _directive(text: str) -> tuple[float, str]:
    """(directive strength, kind): an imperative opening 1.0; deontic words (never, must, should, needs)
    or a later imperative 0.8-0.9; preferences, decisions, rules stated as facts ("Every X needs ...",
    "Decision: ...") and procedures ("first ..., then ...") 0.6; lessons (cause and fix) 0.5; a technical
    fact full of identifiers, paths or flags 0.4; anything else 0."""
    clauses = _clauses(text)
    if clauses and _imperative(clauses[0]):
        return 1.0, "directive"
    if _STRONG_DIRECTIVE.search(text):
        return 0.9, "directive"
    sentence_starts = [
        re.sub(r"^\s*(?:[-*•>]+|\d+[.)])\s*", "", s) for s in re.split(r"(?<=[.!?;])\s+|\n+", text)
    ]
    if any(_imperative(s) for s in sentence_starts[1:]):
        return 0.9, "directive"
    if (
        any(_imperative(c) for c in clauses[1:])
        or any(_conditional_command(s) for s in sentence_starts)
        or any(_verb_object(c, first=i == 0) for i, c in enumerate(clauses))
    ):
        return 0.8, "directive"
    if _PREFERENCE.search(text):
        return 0.6, "preference"
    if _DECISION.search(text):
        return 0.6, "decision"
    if _PROCEDURE.search(text):
        return 0.6, "procedure"
    if _LESSON.search(text):
        return 0.5, "lesson"
    if _code_anchors(text) >= 2 and _prose_ratio(text) >= 0.12:
        return 0.4, "technical fact"
    return 0.0, ""


def _code_anchors(text: str) -> int:
    """Code spans, paths, flags and identifiers: what project facts are full of and news is not."""
    return sum(len(pattern.findall(text)) for pattern in _SPECIFIC_PATTERNS[:4])


def _prose_ratio(text: str) -> float:
    """Share of English function words among the words: sentences have many, code and tool output few."""
    words = re.findall(r"[A-Za-z']+", text[:SCAN_LIMIT])
    return sum(w.lower() in _STOPWORDS for w in words) / max(1, len(words))


_NOT_VERB_START = frozenset(
    {"the", "a", "an", "it", "its", "you", "we", "i", "they", "he", "she", "this", "that", "these", "those",
     "there", "then", "our", "your", "their", "my", "his", "her", "some", "all", "no", "not", "each", "every",
     "one", "both", "most", "many", "nothing", "everything", "something", "which", "what", "who", "when",
     "whenever", "if", "unless", "before", "after", "until", "once", "while", "because", "since", "although",
     "though", "for", "in", "on", "at", "with", "by", "from", "to", "of", "as", "so", "but", "and", "or",
     "yet", "how", "why", "where", "here", "now", "today", "yesterday", "just", "even", "still", "about"}
)  # fmt: skip


def _conditional_command(sentence: str) -> bool:
    """True for "When/If/Before X, <verb> Y": the main clause after a leading condition starts with a bare
    verb the vocabulary does not know ("If it re-renders too often, memoize the callback")."""
    if not _CONDITION.match(sentence.strip()) or "," not in sentence:
        return False
    words = re.findall(r"[A-Za-z][A-Za-z'-]*", sentence.split(",", 1)[1])[:3]
    if not words or not words[0].islower() or words[0] in _NOT_VERB_START:
        return False
    first = words[0]
    if first.endswith(("ed", "ing", "ly")) or (first.endswith("s") and not first.endswith("ss")):
        return False
    return len(words) == 1 or words[1].lower() not in _NOT_IMPERATIVE_NEXT


_OBJECT_START = frozenset(
    {"the", "a", "an", "it", "them", "your", "all", "each", "every", "any", "this", "that", "these", "those",
     "out", "up", "down", "back", "away", "off"}
)  # fmt: skip
_CLAUSE_OBJECT_START = _OBJECT_START | {"with", "to", "on", "by", "into"}


def _verb_object(clause: str, *, first: bool) -> bool:
    """True for a clause shaped like "<bare verb> <object>" with a verb the vocabulary does not know
    ("Memoize the callback", "...; paginate with cursor tokens"). Words ending in -s, -ed, -ing or -ly are
    not taken for bare verbs, so "holes in", "integrating the" and "caching the" do not count."""
    words = re.findall(r"[A-Za-z][A-Za-z'-]*", clause)[:2]
    if len(words) < 2:
        return False
    verb, following = words[0], words[1].lower()
    if not first and not verb.islower():
        return False
    verb = verb.lower()
    if verb in _NOT_VERB_START or verb in _LEAD_SKIP or not verb.replace("-", "").isalpha() or len(verb) < 3:
        return False
    if verb.endswith(("ed", "ing", "ly")) or (verb.endswith("s") and not verb.endswith("ss")):
        return False
    return following in (_OBJECT_START if first else _CLAUSE_OBJECT_START)


def _specificity(text: str) -> float:
    """Concrete anchors: code spans, paths, flags, identifiers, numbers, SQL words, tool names (0..1)."""
    hits = sum(len(pattern.findall(text)) for pattern in _SPECIFIC_PATTERNS)
    hits += min(2, len(set(_TECH_TERMS.findall(text.lower()))))
    names = 0.5 * len(set(_PROPER_NAME.findall(text)))
    return min(1.0, (hits + names) / 2.0)


def _condition(text: str) -> float:
    if _CONDITION.search(text):
        return 1.0
    return 0.5 if _SOFT_CONDITION.search(text) else 0.0


def actionability(text: str) -> Actionability:
    """How actionable a memory is, on four dimensions combined into a 0..1 score.

    score = not_observation * min(1, 0.08 + 0.5 * directive + 0.2 * condition + 0.2 * specificity). An
    observation detector (retweet, engagement metrics, training log, log or tool output, placeholder, user
    quote, bare URL, code dump, social post, promotion, vague or generic directive, session narrative,
    first-person opinion, question) sets not_observation to 0.2 or less, so such a memory always scores
    below ACTIONABILITY_GATE. Without a directive signal a statement passes only when it is both conditional
    and specific; a specific statement alone ("OpenClaw hit 10k stars in 2 weeks") stays at 0.28 at most.
    """
    body = _clip(text, 2000)
    directive, kind = _directive(body)
    condition = _condition(body)
    specificity = _specificity(body)
    not_observation, flagged = _observation(body, directive)
    base = min(1.0, 0.08 + 0.5 * directive + 0.2 * condition + 0.2 * specificity)
    score = round(not_observation * base, 3)
    return Actionability(
        directive=directive,
        condition=condition,
        specificity=round(specificity, 3),
        not_observation=not_observation,
        score=score,
        reason=flagged or _reason(kind, condition, specificity, score),
    )


def _reason(kind: str, condition: float, specificity: float, score: float) -> str:
    if kind == "directive":
        return "directive with condition" if condition >= 0.5 else "directive"
    if kind:
        return kind + (" with condition" if condition >= 0.5 else "")
    if score >= ACTIONABILITY_GATE:
        return "specific conditional statement"
    return "observation without directive" if specificity or condition else "no directive"
