"""Shell command lines: split into simple commands without env assignments, sudo and runner prefixes,
find the segment that says what the command does, and read from its program and subcommand the verb
(test, deploy, migrate, install, a git verb, ...), the intent family, a short target, and whether the
whole line is read-only.
"""

from __future__ import annotations

import functools
import itertools
import re
import shlex
from types import MappingProxyType

from spark_pg.intent.limits import _MAX_TARGET, SCAN_LIMIT
from spark_pg.intent.text import _HASHLIKE, _URL, _cap, _clean_text, _dedupe_words, _path_words, _url_words
from spark_pg.intent.tools import _VERBS

_CMD_PREFIXES = frozenset({"sudo", "time", "nohup", "env", "exec", "command", "nice", "timeout", "xargs"})
# a prefix's options that take the next word as their value
_PREFIX_ARGS = MappingProxyType(
    {
        "sudo": frozenset({"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "--user", "--group"}),
        "timeout": frozenset({"-s", "-k", "--signal", "--kill-after"}),
        "env": frozenset({"-u", "-C", "--unset", "--chdir"}),
        "nice": frozenset({"-n", "--adjustment"}),
        "xargs": frozenset({"-I", "-n", "-P", "-L", "-d", "-s", "-E", "-a"}),
    }
)
# shell keywords a command follows ("if true", "then rm -rf x", "{ ls; }"), and words that start or end a
# compound command, which run nothing themselves ("for f in a b", "case $x in", "fi", "done", "}")
_KEYWORDS = frozenset({"if", "then", "else", "elif", "do", "while", "until", "{", "!"})
_NO_COMMAND = frozenset({"for", "select", "case", "fi", "done", "esac", "}"})
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


_MAX_LINES = 3  # command lines read for the intent, not counting setup-only lines (cd, source, export, ...)
_MAX_SETUP_LINES = 10  # setup-only lines read besides them
_MAX_TOKENS = 200  # shell words read; a command with more is not read whole
# where the scan of a command line must look closer: quotes, escapes, comments, heredocs, arithmetic
_SPECIAL = re.compile(r"""['"\\#\n<$()]""")
_ANSI_C = re.compile(r"'((?:[^'\\]|\\.)*)'?", re.S)  # a $'...' string after its $
_HEREDOC = re.compile(r"""<<(-?)[ \t]*((?:[^\s;&|<>()'"\\]|\\.|'[^'\n]*'|"[^"\n]*")+)""")


@functools.lru_cache(maxsize=64)  # a call reads the same command several times
def _command_lines(command: str) -> tuple[str, ...]:
    """The meaningful lines of a command (its first :data:`SCAN_LIMIT` characters): heredoc bodies, comments
    and blank lines dropped, backslash-continued lines joined. A ``<<`` counts as a heredoc only outside
    quotes and ``$((...))`` (``echo $((1<<3))`` shifts, ``git commit -m 'a << b'`` quotes); a ``$(...)``
    has its own quoting, also inside double quotes (``git commit -m "$(cat <<'EOF' ...)"``: a heredoc). The
    operator and its delimiter leave the line, its body (up to the delimiter line) leaves the command, and
    reading resumes after it. A ``$'...'`` string (whose ``\\'`` does not end it) becomes a plain quoted one.
    """
    text = command[:SCAN_LIMIT]
    if not _SPECIAL.search(text):
        return tuple(ln for ln in text.splitlines() if ln.strip())
    out: list[str] = []
    pending: list[tuple[str, bool]] = []  # heredocs opened on the current line: (delimiter, strip tabs)
    quote = ""
    arithmetic: list[list[int]] = []  # open $(( )): where each starts in out, parentheses open inside it
    substitutions: list[str] = []  # open $( ): the quote around each (its own quoting starts afresh)
    inner: list[int] = []  # and the parentheses open inside each
    i, n = 0, len(text)
    while i < n:
        if quote == "'":
            end = text.find("'", i)
            end = n if end < 0 else end + 1
            out.append(text[i:end])
            quote, i = "", end
            continue
        match = _SPECIAL.search(text, i)
        if match is None:
            out.append(text[i:])
            break
        j = match.start()
        out.append(text[i:j])
        char = text[j]
        i = j + 1
        if char == "\\":
            if text.startswith("\n", i):  # a continued line
                i += 1
            else:
                out.append(text[j : i + 1])
                i += 1
        elif char == "$" and text.startswith("(", i) and not text.startswith("((", i):
            substitutions.append(quote)
            inner.append(0)
            out.append("$(")
            quote, i = "", i + 1
        elif quote == '"':
            out.append(char)
            if char == '"':
                quote = ""
        elif char == "$" and text.startswith("'", i):
            ansi_c, i = _ansi_c_string(text, i)
            out.append(ansi_c)
        elif char in "'\"":
            out.append(char)
            quote = char
        elif char == "#" and (j == 0 or text[j - 1] in " \t\n;&|()"):  # a comment, to the end of the line
            end = text.find("\n", j)
            i = n if end < 0 else end
        elif char == "$" and text.startswith("((", i):
            arithmetic.append([len(out), 0])
            out.append("$((")
            i += 2
        elif char in "()" and arithmetic:
            if char == "(":
                arithmetic[-1][1] += 1
            elif arithmetic[-1][1]:
                arithmetic[-1][1] -= 1
            elif text.startswith(")", i):  # its "<<" shifts, its words say nothing: one word stands for it
                del out[arithmetic.pop()[0] :]
                out.append("$ARITHMETIC")
                i += 1
                continue
            out.append(char)
        elif char in "()" and substitutions:
            out.append(char)
            if char == "(":
                inner[-1] += 1
            elif inner[-1]:
                inner[-1] -= 1
            else:  # the substitution ends: back to the quote it opened in
                quote = substitutions.pop()
                inner.pop()
        elif char == "<" and not arithmetic and text.startswith("<", i) and not text.startswith("<<", i):
            heredoc = _HEREDOC.match(text, j)
            if heredoc is None:
                out.append("<<")
                i += 1
            else:
                delimiter = re.sub(r"""\\(.)|['"]""", r"\1", heredoc.group(2))
                pending.append((delimiter, bool(heredoc.group(1))))
                out.append(" ")
                i = heredoc.end()
        elif char == "\n" and pending:
            out.append("\n")
            for delimiter, strip_tabs in pending:  # each body runs to its delimiter line
                while i < n:
                    end = text.find("\n", i)
                    end = n if end < 0 else end
                    line = text[i:end]
                    i = end + 1
                    if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                        break
            pending = []
        else:
            out.append(char)
            if char == "<" and text.startswith("<<", i):  # a here-string, <<<
                out.append("<<")
                i += 2
    return tuple(ln for ln in "".join(out).splitlines() if ln.strip())


def _ansi_c_string(text: str, start: int) -> tuple[str, int]:
    """The ``$'...'`` string whose quote is at ``start``, as a single-quoted word shlex reads (escapes
    dropped: ``$'it\\'s'`` -> ``'it'\\''s'``), and where it ends; shlex alone read its ``\\'`` as the
    end and the rest of the line as quoted."""
    match = _ANSI_C.match(text, start)
    assert match is not None  # text[start] is a quote
    body = re.sub(r"\\(.)", r"\1", match.group(1), flags=re.S)
    return "'" + body.replace("'", "'\\''") + "'", match.end()


def _tokenize(text: str) -> list[str]:
    """Shell words of a text (a ``#`` is a word: comments are gone already); never raises."""
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = ""
        return list(itertools.islice(lexer, _MAX_TOKENS + 1))
    except ValueError:
        return text.split()[: _MAX_TOKENS + 1]


# how a setup-only line starts: an assignment or a setup command (the whole line is checked after)
_SETUP_START = re.compile(
    r"\s*(?:[A-Za-z_]\w*=|(?:cd|pushd|popd|source|\.|export|set|unset|echo|true)(?=[\s;&|]|$))"
)


def _setup_line(line: str) -> bool:
    """True for a line that only prepares the shell: ``cd /repo``, ``source .venv/bin/activate``,
    ``export X=1``, ``set -e``, ``X=1``."""
    if not _SETUP_START.match(line):
        return False
    return all(not s or s[0] in _CMD_SETUP for s in map(_strip_prefixes, _split_segments(_tokenize(line))))


def _lines(command: str) -> list[str]:
    """The lines read for the intent: up to :data:`_MAX_LINES` lines that act, and up to
    :data:`_MAX_SETUP_LINES` setup-only lines (``cd``, ``source``, ``export``, ...) before and among them."""
    return list(_read_lines(command[:SCAN_LIMIT]))


@functools.lru_cache(maxsize=64)
def _read_lines(command: str) -> tuple[str, ...]:
    read: list[str] = []
    acting = setup = 0
    for line in _command_lines(command):
        if acting == _MAX_LINES:
            break
        if _setup_line(line):
            if setup == _MAX_SETUP_LINES:
                break
            setup += 1
        else:
            acting += 1
        read.append(line)
    return tuple(read)


def _shell_tokens(command: str) -> list[str]:
    """Shell words of the lines read (heredoc bodies and comments dropped), at most :data:`_MAX_TOKENS`
    and one more when there are more; never raises. The lines are joined with ``;``."""
    return list(_line_tokens(command[:SCAN_LIMIT]))


@functools.lru_cache(maxsize=64)
def _line_tokens(command: str) -> tuple[str, ...]:
    return tuple(_tokenize(" ; ".join(_read_lines(command))))


def _split_segments(tokens: list[str]) -> list[list[str]]:
    """Shell words split into simple commands at ``&&``, ``|``, ``;`` and the like (redirects stay)."""
    segments: list[list[str]] = []
    current: list[str] = []
    for token in [*tokens, ";"]:
        if token in _SEPARATORS or (token and set(token) <= set("&|;()")):
            segments.append(current)
            current = []
        else:
            current.append(token)
    return segments


def _segments(command: str) -> list[list[str]]:
    """The simple commands of a command line, each without env assignments, sudo and runner prefixes."""
    stripped = (_strip_prefixes(s) for s in _split_segments(_shell_tokens(command)[:_MAX_TOKENS]))
    return [s for s in stripped if s]


def _strip_prefixes(words: list[str]) -> list[str]:
    """``FOO=1 sudo uv run python -m pytest -x`` -> ``pytest -x``."""
    return _split_prefixes(words)[1]


def _split_prefixes(words: list[str]) -> tuple[list[str], list[str]]:
    """(env assignments, the command without assignments, sudo and runner prefixes, and shell keywords:
    ``then rm -rf x`` is rm; ``for f in a b`` and ``fi`` are none). A bare prefix is its own command:
    ``env`` or ``sudo env`` prints the environment."""
    assignments: list[str] = []
    last_prefix = ""
    i = 0
    while i < len(words):
        word = words[i]
        base = word.rsplit("/", 1)[-1]
        if re.fullmatch(r"[A-Za-z_]\w*=.*", word, re.S):
            assignments.append(word)
            i += 1
        elif base in _CMD_PREFIXES:  # "sudo -E", "timeout 30s", "nice -n 10": skip their options too
            last_prefix = base
            i += 1
            takes = _PREFIX_ARGS.get(base, frozenset())
            while i < len(words) and (words[i].startswith("-") or re.fullmatch(r"\d+[smhd]?", words[i])):
                i += 2 if words[i] in takes else 1  # "sudo -u postgres psql": the program is psql
        elif base in _RUNNERS and i + 1 < len(words) and words[i + 1] == _RUNNERS[base]:
            i += 2
        elif word in _KEYWORDS:
            i += 1
        elif word in _NO_COMMAND and not last_prefix:
            return assignments, []
        elif base in {"npx", "bunx", "pnpx"}:
            i += 1
        elif re.fullmatch(r"python[\d.]*|py", base) and i + 2 < len(words) and words[i + 1] == "-m":
            i += 2
        else:
            break
    rest = words[i:]
    if rest:
        rest = [rest[0].rsplit("/", 1)[-1] if rest[0].startswith(("/", "./")) else rest[0], *rest[1:]]
    elif last_prefix:
        rest = [last_prefix]
    return assignments, rest


def _main_segment(segments: list[list[str]]) -> list[str]:
    """The segment that says what the command does: the first one that is neither cd/export/echo setup nor
    read-only (``git status && git commit``, ``cat dump.sql | psql prod``: the commit, psql), else the first
    that is not setup."""
    acting = [s for s in segments if s[0] not in _CMD_SETUP]
    for segment in acting:
        if not _segment_read_only(segment):
            return segment
    return acting[0] if acting else segments[0] if segments else []


def _subcommand(segment: list[str]) -> str:
    """The first non-flag word after the program ("git -C x commit" -> "commit", best effort)."""
    for word in segment[1:]:
        if not word.startswith("-"):
            return word.lower()
    return ""


# programs whose words are files, names or text, never a subcommand, a script or a target: "rm -rf build"
# builds nothing, "rm -rf release" and "mkdir -p deploy/k8s" deploy nothing
_OPERAND_PROGRAMS = frozenset(
    {"rm", "rmdir", "mkdir", "touch", "mv", "cp", "ln", "chmod", "chown", "chgrp", "ls", "cat", "less",
     "more", "head", "tail", "bat", "grep", "rg", "ag", "fd", "find", "tree", "stat", "file", "du", "wc",
     "echo", "printf", "vim", "vi", "nvim", "nano", "emacs", "code", "sed", "awk", "sort", "diff", "tee",
     "tar", "zip", "unzip", "flock", "truncate", "shred", "readlink", "realpath", "basename", "dirname",
     "open", "xdg-open", "cd", "pushd", "which", "whereis", "test", "["}
)  # fmt: skip
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
                                 "bat", "echo", "rg", "grep", "fd", "find"})  # fmt: skip
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
    return (
        program != "git"
        and program not in _OPERAND_PROGRAMS
        and any(re.search(r"(?<![a-z])(?:deploy|release)(?![a-z])", w) for w in names)
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
    builds = sub == "build" and program not in _OPERAND_PROGRAMS  # "docker build", not "rm -rf build"
    if builds or program in {"make", "tsc", "webpack", "vite", "cmake", "ninja", "bazel"}:
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


# options with which a listing program runs a command or writes (a prefix: "--pre=x", "-fprint0")
_RUNS_OR_WRITES = MappingProxyType(
    {
        "find": ("-delete", "-exec", "-ok", "-fprint", "-fls"),
        "rg": ("--pre",),
        "fd": ("-x", "-X", "--exec"),
        "bat": ("--pager",),
        "less": ("+", "--log-file", "--LOG-FILE", "--lesskey"),
        "more": ("+",),
        "date": ("-s", "--set"),
        "tail": ("--pid",),
        "file": ("--compile",),
    }
)
# short options that write or run, alone or in a cluster: "tree -o out.txt", "tree -ao out.txt",
# "file -C" (compiles magic.mgc), "less -o log" (copies what it shows), "fd -Hx rm" (runs rm), "date -us"
_WRITING_LETTERS = MappingProxyType({"tree": "o", "file": "C", "less": "oO", "fd": "xX", "date": "s"})
# short options that take the rest of their cluster as their value: "date -Iseconds", "fd -tx" (-t x)
_VALUE_LETTERS = MappingProxyType({"date": "dfrI", "fd": "dteEjSco"})
_GIT_RUNS = ("-c", "--config-env", "--exec-path", "--output", "--ext-diff", "--textconv")
_GIT_REFLOG_WRITES = frozenset({"expire", "delete", "drop"})
# shell syntax whose effect the words do not show: a heredoc fed to a program, command and process
# substitution, a redirect of both streams, a $'...' string (its \' is no end of it, as shlex reads it)
_HIDDEN = re.compile(r"<<|`|\$\(|<\(|>\(|&>|\$'")
# redirects that write nothing: a stream joined to another or closed (2>&1, >&-), output thrown away
# (>/dev/null, 2>>/dev/null), each up to a space or an operator; any other ">" writes a file (>&2"x" and
# >/dev/null'x' write to 2x and /dev/nullx)
_HARMLESS_REDIRECT = re.compile(r"\d*>&(?:\d+|-)(?![^\s|&;()<>])|\d*>>?[ \t]*/dev/null(?![^\s|&;()<>])")
# files that hold secrets: printing one is worth advice
_SECRET_WORDS = re.compile(
    r"\.env(?:rc)?\b|secret|passw|credential|token|\.pem\b|\.key\b|\bid_\w+|\.ssh\b|\.gnupg\b|"
    r"[._]netrc\b|\.pgpass\b|\.npmrc\b|\.pypirc\b|\.s3cfg\b|\.kube\b|kubeconfig|docker/config\.json|"
    r"gh/hosts\.ya?ml|\.p12\b|\.pfx\b|\.jks\b|\.keystore\b|\.kdbx\b|(?<![\w-])g?shadow\b|"
    r"\bauth\.json\b|\benviron\b",
    re.I,
)
# env assignments that cannot make a read-only program run or write anything: locale, time zone,
# terminal size and colours. Any other may (GIT_PAGER, LESSOPEN, GIT_EXTERNAL_DIFF, GIT_SSH_COMMAND,
# LD_PRELOAD and PATH name a program to run, GIT_TRACE a file to write).
_INERT_ENV = re.compile(
    r"LANG|LANGUAGE|LC_\w+|TZ|TERM|COLUMNS|LINES|NO_COLOR|CLICOLOR(?:_FORCE)?|FORCE_COLOR|COLORTERM|"
    r"GREP_COLORS?|LS_COLORS|TIME_STYLE|QUOTING_STYLE|(?:DU_|DF_|LS_)?BLOCK_SIZE|BLOCKSIZE|POSIXLY_CORRECT"
)


def _inert_assignment(word: str) -> bool:
    """True for ``LC_ALL=C`` or ``GIT_PAGER=cat``: an env assignment that runs and writes nothing."""
    name, _, value = word.partition("=")
    if _INERT_ENV.fullmatch(name):
        return True
    return name.endswith("PAGER") and value.strip() in {"", "cat", "/bin/cat", "/usr/bin/cat"}


def _option_letters(word: str, takes: str) -> str:
    """The options of a short-option cluster (``-Hx``: H, x), up to the first of ``takes``, whose value is
    the rest (``-Iseconds``: I)."""
    for i, letter in enumerate(word[1:], start=1):
        if letter in takes:
            return word[1 : i + 1]
    return word[1:]


def _segment_read_only(segment: list[str]) -> bool:
    """True for one simple command that only lists or prints (git status, ls, grep without --pre, ...)."""
    program = segment[0].lower()
    if program == "git":
        sub = _subcommand(segment)
        if sub not in _GIT_READ_ONLY or any(w.startswith(_GIT_RUNS) for w in segment[1:]):
            return False
        # "git remote" and "git reflog" list; "git remote add/remove/set-url ...", "git reflog
        # expire/delete" change the repository
        rest = segment[segment.index(sub, 1) + 1 :] if sub in segment[1:] else []
        words = [w for w in rest if not w.startswith("-")]
        if sub == "reflog":
            return not (words and words[0].lower() in _GIT_REFLOG_WRITES)
        return sub != "remote" or not words or rest[0] in {"show"}
    if program not in _READ_ONLY_PROGRAMS:
        return False
    letters, takes = _WRITING_LETTERS.get(program, ""), _VALUE_LETTERS.get(program, "")
    if letters and any(
        w.startswith("-") and not w.startswith("--") and set(_option_letters(w, takes)) & set(letters)
        for w in segment[1:]
    ):
        return False
    risky = _RUNS_OR_WRITES.get(program, ())
    return not any(w.startswith(risky) for w in segment[1:]) if risky else True


def _is_read_only_command(command: str) -> bool:
    """True for a command line made only of listing/printing programs (no redirect but to /dev/null or
    another stream, no secret files, no env assignment but inert ones), read whole: one longer than
    :data:`SCAN_LIMIT`, than the lines or the words read, or with syntax whose effect its words do not show
    (a heredoc, `` `...` ``, ``$(...)``), is not."""
    if not command.strip() or ">" in _HARMLESS_REDIRECT.sub(" ", command) or _SECRET_WORDS.search(command):
        return False
    if len(command) >= SCAN_LIMIT or _HIDDEN.search(command):
        return False
    tokens = _shell_tokens(command)
    if len(tokens) > _MAX_TOKENS or len(_lines(command)) < len(_command_lines(command)):
        return False
    commands = [_split_prefixes(s) for s in _split_segments(tokens)]
    commands = [(env, words) for env, words in commands if env or words]
    return bool(commands) and all(
        all(map(_inert_assignment, env)) and (not words or words[0] == "cd" or _segment_read_only(words))
        for env, words in commands
    )
