"""Text cleaning helpers shared by the intent heuristics: clipping any value to a bounded string, squashing
whitespace, cutting at word boundaries, splitting identifiers into words, reducing file paths and URLs to
their meaningful words, and stripping JSON, code fences, tool metadata, hashes and line numbers from free
text so it makes a clean embedding query.
"""

from __future__ import annotations

import re
from types import MappingProxyType

from spark_pg.intent.limits import SCAN_LIMIT

_WS = re.compile(r"\s+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD_SPLIT = re.compile(r"[\s_\-.+~,]+")
_HASHLIKE = re.compile(r"^(?=[a-z]*\d)(?=\d*[a-z])[0-9a-f]{7,}$|^[0-9a-f]{8}-[0-9a-f-]{27,}$", re.I)
_URL = re.compile(r"\b(?:https?|ftp|wss?)://[^\s<>\"'`)\]}]+|\bwww\.[^\s<>\"'`)\]}]+", re.I)
_PATH = re.compile(
    # the second form starts only where a run of [\w.-] starts: tried inside one, each start read the rest
    # of the run again (a 4,096-character token took 0.5 s)
    r"(?<![\w:/])(?:~|\.{1,2})?(?:[A-Za-z]:)?(?:[\\/][\w.@+\-]+){2,}[\\/]?|(?<![\w.\-])[\w.\-]+(?:/[\w.@+\-]+){2,}"
)
_METADATA = re.compile(  # tool metadata: "file_path=/x.py", "tool_use_id: toolu_01", "offset=200"
    r"\b(?:file_?path|notebook_path|uuid|sha|lineno|line_number|tool_use_id|session_id|request_id|call_id|"
    r"trace_id)\s*[=:]\s*\S+|\b(?:path|id|hash|line|offset|limit)=\S+",
    re.I,
)
_LINE_REF = re.compile(r"\b(?:line|ln|L)\s?\d+(?::\d+)?\b|:\d+(?::\d+)?\b")
_FENCE = re.compile(r"```.*?(?:```|$)", re.S)
# link text and target stop at a bracket or parenthesis, so each "[" reads only up to the next one (text
# that could hold "[" was re-read from every "[" of a "[[[..." prompt)
_MD_LINK = re.compile(r"\[([^\[\]\n]{1,200})\]\([^()\[\]\s]{1,500}\)")
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
