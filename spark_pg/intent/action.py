"""What a tool call runs, for the interrupt check (spark_pg.advisor): an interrupting trigger rule denies a
call only when its pattern matches this text too, not only the trigger text, which also holds descriptions,
commit messages, file paths and the task context."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from spark_pg.intent.inputs import CleanInput, _find_field, clean_input, command_text
from spark_pg.intent.limits import SCAN_LIMIT
from spark_pg.intent.shell import _MAX_TOKENS, _SEPARATORS, _command_lines, _strip_prefixes, _tokenize
from spark_pg.intent.tools import _tool_kind

# programs that run the text they are given (a -c script, SQL, a remote command, stdin): their quoted words,
# and a heredoc fed to one of them, are what the call runs
_RUNS_TEXT = frozenset(
    {"bash", "sh", "zsh", "dash", "ksh", "fish", "eval", "ssh", "su", "psql", "mysql", "mariadb", "sqlite3",
     "sqlite", "sqlcmd", "duckdb", "clickhouse", "clickhouse-client", "pgcli", "mycli", "mongo", "mongosh",
     "redis-cli", "python", "python3", "node", "perl", "ruby", "php", "deno"}
)  # fmt: skip
_PRINTS = frozenset({"echo", "printf"})  # programs whose words are printed, never run
_SQL_TOOL_FIELDS = ("sql", "statement")
_SQL_START = re.compile(
    r"\s*(?:SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|TRUNCATE|WITH|BEGIN|GRANT|REVOKE|MERGE|COPY)\b",
    re.I,
)


def action_text(tool_name: str, tool_input: Mapping[str, Any] | str | CleanInput | None) -> str:
    """What a call runs, for the interrupt check: an interrupting rule blocks a call only when its pattern
    matches this too, not only the trigger text (which also holds descriptions, messages and the task
    context). A shell call (also an unknown tool's command): its command line without comments, heredoc
    bodies and the words that were quoted (a commit message, ``echo "..."``'s text, a grep pattern), and
    without what ``echo`` and ``printf`` print; a pipeline with a program that runs the text it is given
    (:data:`_RUNS_TEXT`: ``psql -c '...'``, ``bash -c``, ``ssh host '...'``, ``... | sh``) keeps its quoted
    words, and such a command with a heredoc is read whole. A word with ``$(`` or a backquote is kept
    (command substitution runs, quoted or not). A command with more shell words than are read is read whole.
    An unknown tool's ``sql`` or ``statement``, or a ``query`` that begins like SQL: that text. Any other
    call (file edits and writes, reads, searches, URL fetches, sub-agent tasks): '' (it runs nothing)."""
    clean = clean_input(tool_input)
    kind = _tool_kind(tool_name)
    if kind not in {"shell", "other"}:
        return ""
    if clean.text is not None:  # given as one string
        if kind == "other" and _SQL_START.match(clean.text):
            return clean.text[:SCAN_LIMIT]
        return _shell_action(clean.text)
    parts = [_shell_action(command_text(clean.data))]
    if kind == "other":
        parts.extend(_find_field(clean.data, (f,)) for f in _SQL_TOOL_FIELDS)
        query = _find_field(clean.data, ("query",))
        parts.append(query if _SQL_START.match(query) else "")
    return " ; ".join(p for p in parts if p.strip())


def _shell_action(command: str) -> str:
    """A command line as :func:`action_text` reads it (intent.shell's reading of lines and words)."""
    if not command.strip():
        return ""
    tokens = _tokenize(" ; ".join(_command_lines(command)))
    if len(tokens) > _MAX_TOKENS:  # not read whole: as given
        return command[:SCAN_LIMIT]
    pipelines: list[list[list[str]]] = [[[]]]
    for token in tokens:
        if token in {"|", "|&"}:
            pipelines[-1].append([])
        elif token in _SEPARATORS or (token and set(token) <= set("&|;()")):
            pipelines.append([[]])
        else:
            pipelines[-1][-1].append(token)
    out: list[str] = []
    for pipeline in pipelines:
        runs = any(w.rsplit("/", 1)[-1].lower() in _RUNS_TEXT for segment in pipeline for w in segment)
        if runs and "<<" in command:  # a heredoc may be what it runs
            return command[:SCAN_LIMIT]
        kept: list[str] = []
        for segment in pipeline:
            program = (_strip_prefixes(segment) or [""])[0]
            substitutes = any("$(" in w or "`" in w for w in segment)  # runs, quoted or not
            prints = program.lower() in _PRINTS and not substitutes
            kept.append(
                " ".join(
                    w
                    for w in segment
                    if runs or w == program or "$(" in w or "`" in w or not (prints or re.search(r"\s", w))
                )
            )
        out.append(" | ".join(kept))
    return " ; ".join(p for p in out if p.strip())
