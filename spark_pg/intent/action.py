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
# programs that run a quoted command they are given (watch 'cmd', flock f -c 'cmd', script -qc 'cmd',
# nix-shell --run 'cmd', tmux new-session 'cmd', parallel 'cmd {}' ::: a): as :data:`_RUNS_TEXT`, but only
# as a command's program, since their names are common words ("grep 'rm -rf' script" runs no script)
_RUNS_QUOTED = frozenset({"watch", "flock", "script", "nix-shell", "tmux", "screen", "parallel"})
_PRINTS = frozenset({"echo", "printf"})  # programs whose words are printed, never run
_SQL_TOOL_FIELDS = ("sql", "statement")
# how an SQL statement starts; DO, CALL and EXECUTE only as SQL writes them ("do you know ..." is no SQL)
_SQL_START = re.compile(
    r"(?:SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|TRUNCATE|WITH|BEGIN|GRANT|REVOKE|MERGE|COPY)\b"
    r"|DO\s+(?:LANGUAGE\s+\w+\s+)?(?:\$\w*\$|')|CALL\s+[\w.\"]+\s*\(|EXECUTE\s+\w+\s*(?:\(|;|$)",
    re.I,
)
# what may come before a statement: white space, comments, "(", EXPLAIN and its options
_SQL_LEAD = re.compile(
    r"\s+|--[^\n]*|/\*.*?\*/|\(|EXPLAIN\b(?:\s*\([^)]*\)|\s+(?:ANALY[SZ]E|VERBOSE)\b)*", re.I | re.S
)


def action_text(tool_name: str, tool_input: Mapping[str, Any] | str | CleanInput | None) -> str:
    """What a call runs, for the interrupt check: an interrupting rule blocks a call only when its pattern
    matches this too, not only the trigger text (which also holds descriptions, messages and the task
    context). A shell call (also an unknown tool's command): its command line without comments, heredoc
    bodies and the words that were quoted (a commit message, ``echo "..."``'s text, a grep pattern), and
    without what ``echo`` and ``printf`` print; a pipeline with a program that runs the text it is given
    (:data:`_RUNS_TEXT`: ``psql -c '...'``, ``bash -c``, ``ssh host '...'``, ``... | sh``; as the program,
    :data:`_RUNS_QUOTED`: ``watch '...'``) keeps its quoted words, and such a command with a heredoc is
    read whole; so does ``git -c alias.x='...'``. A word with ``$(`` or a backquote is kept (command
    substitution runs, quoted or not; a heredoc's body in it is gone). A command with more shell words than
    are read is read whole. An unknown tool's ``sql`` or ``statement``, or a ``query`` that begins like SQL
    (:func:`_begins_like_sql`): that text. A JSON object given as a string is read as the mapping. Any
    other call (file edits and writes, reads, searches, URL fetches, sub-agent tasks): '' (it runs
    nothing)."""
    clean = clean_input(tool_input)
    kind = _tool_kind(tool_name)
    if kind not in {"shell", "other"}:
        return ""
    if clean.text is not None:  # given as one string that is no JSON object
        if kind == "other" and _begins_like_sql(clean.text):
            return clean.text[:SCAN_LIMIT]
        return _shell_action(clean.text)
    parts = [_shell_action(command_text(clean.data))]
    if kind == "other":
        parts.extend(_find_field(clean.data, (f,)) for f in _SQL_TOOL_FIELDS)
        query = _find_field(clean.data, ("query",))
        parts.append(query if _begins_like_sql(query) else "")
    return " ; ".join(p for p in parts if p.strip())


def _begins_like_sql(text: str) -> bool:
    """True for a text that starts like an SQL statement after any white space, comments, "(" and EXPLAIN
    (``-- note\\nDROP TABLE x``, ``EXPLAIN ANALYZE DELETE ...``, ``DO $$ ... $$``): such a statement used to
    run without being read."""
    i, text = 0, text[:SCAN_LIMIT]
    while (lead := _SQL_LEAD.match(text, i)) and lead.end() > i:
        i = lead.end()
    return bool(_SQL_START.match(text, i))


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
        programs = [(_strip_prefixes(segment) or [""])[0] for segment in pipeline]
        runs = any(w.rsplit("/", 1)[-1].lower() in _RUNS_TEXT for segment in pipeline for w in segment)
        runs = runs or any(p.rsplit("/", 1)[-1].lower() in _RUNS_QUOTED for p in programs)
        if runs and "<<" in command:  # a heredoc may be what it runs
            return command[:SCAN_LIMIT]
        out.append(" | ".join(_kept_words(s, p, runs) for s, p in zip(pipeline, programs, strict=True)))
    return " ; ".join(p for p in out if p.strip())


def _kept_words(segment: list[str], program: str, runs: bool) -> str:
    """The words of one simple command that say what it runs (see :func:`action_text`)."""
    substitutes = any("$(" in w or "`" in w for w in segment)  # runs, quoted or not
    prints = program.lower() in _PRINTS and not substitutes
    return " ".join(
        w
        for i, w in enumerate(segment)
        if runs
        or w == program
        or "$(" in w
        or "`" in w
        or not (prints or re.search(r"\s", w))
        # git -c alias.p='push --force' p: the alias is what "git p" runs
        or (program == "git" and i > 0 and segment[i - 1] == "-c" and w.lower().startswith("alias."))
    )
