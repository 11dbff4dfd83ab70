"""The scrubber's rules for a secret found by the name in front of it (:mod:`spark_pg.traces.scrub`):
a secret-named key and its value (``DB_PASSWORD=...``, ``"token": "..."``, ``password: |``), an XML
element (``<password>...</password>``), a flag (``--password X``, ``--db-password X``, ``-storepass X``),
and curl's ``-u user:password``. :data:`KEY_RULES` are spliced into :data:`~spark_pg.traces.scrub.RULES`
after the vendor keys and before the command-line rules. Pure: no I/O, no state.
"""

from __future__ import annotations

import re

from spark_pg.traces.scrub_values import (
    _BLOCK,
    _BLOCK_ONLY,
    _BOOLEAN_FLAG_WORDS,
    _NOT_SECRET,
    _PASSWORD_NAMES,
    _PROSE_AFTER_FLAG,
    _QUOTED,
    _SECRET_NAMES,
    _UNTERMINATED,
    _VALUE,
    Rule,
    _b,
    _flag_value,
    _no_secret,
    _plain_word,
    _reference,
    _referenced,
    _secret_name,
    _split_quoted,
)


def _assignment(m: re.Match[str]) -> str | None:
    """``name = value``: a secret after = (or in quotes); after a bare colon only when it does not read like
    prose: ``password: field`` and ``token: 512`` stay, ``PASSWORD: letmein`` and ``password: s3cret!`` go.
    A short number after a name that is not a password's is a count or a limit (``max_token=512``)."""
    name, sep, quoted = m.group("name"), m.group("sep"), m.group("quoted")
    if not _secret_name(name, m.group("secret")):
        return None
    leaf = m.group("secret").lower()
    kind = "password" if leaf in _PASSWORD_NAMES else "secret"
    if quoted:
        opening, value, closing = _split_quoted(quoted)
        value = value.strip()
        if _no_secret(value):
            return None
        return f"{name}{sep}{opening}[REDACTED:{kind}]{closing}"
    block, opening = m.group("block") or "", m.group("open") or ""
    value_group = "bvalue" if block else "bare" if opening else "value"
    value, trail = m.group(value_group), ""
    while value and value[-1] in ".:),;\\":  # end-of-sentence punctuation is not part of the secret
        trail = value[-1] + trail
        value = value[:-1]
    if not value or value.startswith("[") or _NOT_SECRET.match(value) or _reference(value):
        return None
    if value.upper() in ("N", "E") and m.string[m.end(value_group) : m.end(value_group) + 1] in ("'", '"'):
        # PASSWORD = N'x' (SQL Server), E'x' (PostgreSQL): the quoted literal is the value (sql_password)
        return None
    if _referenced(value, m.string, m.start(value_group)) or _BLOCK_ONLY.fullmatch(value):
        return None  # a reference, or a block indicator with its value past the end (password: |)
    if leaf == "pwd" and value[:1] in "/~." and not block:
        return None  # PWD=/home/...: the working directory, not a password
    if kind != "password" and value.isdigit() and len(value) < 5:
        return None  # max_token=512, token_limit: 4096
    if block or (":" in sep and "=" not in sep and not name.isupper()):
        # a bare colon in prose ("the password: field"); an ENV_STYLE name is always an assignment, and
        # so is a YAML block scalar ("password: |" and the value on the next line)
        if not block and _plain_word(value):
            return None
        if value.isdigit() and len(value) < 8:
            return None
    return f"{name}{sep}{block}{opening}[REDACTED:{kind}]{trail}"


_OPENSSL_SOURCE = re.compile(r"(?i)(?:pass|env|file|fd):|stdin$")


def _cli_flag(m: re.Match[str]) -> str | None:
    """``--password X``, ``--db-password X``, ``-storepass X``. A prefix must end in ``-`` or ``_``
    (``--bypass`` is no flag of a pass) and hold no word of a flag that takes no value
    (:data:`_BOOLEAN_FLAG_WORDS`: ``psql --no-password mydb``)."""
    prefix = m.group("prefix")
    if prefix and (
        prefix[-1] not in "-_" or _BOOLEAN_FLAG_WORDS.intersection(re.split(r"[-_]+", prefix.lower()))
    ):
        return None
    found = _flag_value(m)
    if found is None:
        return None
    value, opening, closing, quoted = found
    flag = m.group("flag")
    if flag.lower().lstrip("-") == "pass" and _OPENSSL_SOURCE.match(value):
        # openssl -pass env:NAME, file:path, fd:N, stdin name where the password is; pass:X holds it
        if not value.lower().startswith("pass:"):
            return None
        opening, value = opening + value[:5], value[5:]
        if _no_secret(value):
            return None
    kind = "password" if "pass" in flag.lower() else "secret"
    # prose ("the --token flag is deprecated"): a token is never a plain word; a password may be one
    # (--password letmein), so after a password flag only the words prose puts there are declined
    word = not quoted and _plain_word(value)
    if word and (kind == "secret" or value.lower() in _PROSE_AFTER_FLAG):
        return None
    if prefix and kind == "secret" and value.isdigit() and len(value) < 5:
        return None  # --max-token 512: a limit
    return f"{flag}{m.group('sp')}{opening}[REDACTED:{kind}]{closing}"


def _xml_element(m: re.Match[str]) -> str | None:
    """``<password>hunter2</password>``: an element named like a secret (closed by the same name)."""
    name, value = m.group("name"), m.group("value").strip()
    if m.group("close").lower() != name.lower() or not _secret_name(name, m.group("secret")):
        return None
    if _no_secret(value):
        return None
    kind = "password" if m.group("secret").lower() in _PASSWORD_NAMES else "secret"
    return f"<{name}{m.group('attrs') or ''}>[REDACTED:{kind}]</{m.group('close')}>"


def _user_flag(m: re.Match[str]) -> str | None:
    """``curl -u admin:hunter2``, ``--user admin:hunter2``: the user name stays, the password goes.
    ``-u`` only on a line that runs curl (docker run -u app:app is a user and a group); a numeric
    uid:gid or a name twice (``node:node``) is not a password."""
    user, password = m.group("user"), m.group("password").rstrip(".,;:)")
    trail = m.group("password")[len(password) :]
    if not password or password.startswith("[REDACTED") or user == password:
        return None
    if user.isdigit() and password.isdigit():
        return None
    if m.group("flag") == "-u":
        text, start = m.string, m.start()
        line = text[text.rfind("\n", max(0, start - 300), start) + 1 : start]
        if "curl" not in line.lower():
            return None
    return f"{m.group('flag')}{m.group('sp')}{m.group('q')}{user}:[REDACTED:password]{trail}"


KEY_RULES: tuple[Rule, ...] = (
    Rule(
        "assignment",
        _b(
            r"(?i)(?P<name>(?<![A-Za-z0-9_.-])[A-Za-z0-9_.-]{0,60}?(?P<secret>"
            + _SECRET_NAMES
            + r")(?![A-Za-z0-9]))(?P<sep>(?:\\{0,4}[\"'])?[ \t]{0,5}(?::=|=>|[:=])[ \t]{0,5})(?:"
            + _BLOCK
            + r"(?P<bvalue>"
            + _VALUE
            + r")|(?P<quoted>"
            + _QUOTED
            + r")|"
            + _UNTERMINATED
            + r"|(?P<value>"
            + _VALUE
            + r"))"
        ),
        _assignment,
        "a secret-named key and its value: api_key=..., DB_PASSWORD=..., PGPASSWORD=..., dbPassword: ..., "
        'token: ..., "secret": "...", {\\"secret\\": \\"...\\"}, password: | (a YAML block) '
        "(placeholder password for password-like names, else secret)",
        resume="name",
    ),
    Rule(
        "xml_element",
        _b(
            r"(?i)<(?P<name>[A-Za-z0-9_.:-]{0,60}?(?P<secret>"
            + _SECRET_NAMES
            + r"))(?P<attrs>[ \t][^<>\r\n]{0,200})?>(?P<value>[^<>\r\n]{1,400})"
            r"</(?P<close>[A-Za-z0-9_.:-]{1,80})>"
        ),
        _xml_element,
        "an XML element named like a secret: <password>...</password>, <ApiKey>...</ApiKey>",
    ),
    Rule(
        "cli_flag",
        _b(
            r"(?i)(?<![A-Za-z0-9_-])(?P<flag>--?(?:(?P<prefix>[A-Za-z0-9_-]{0,60}?)"
            r"(?:password|passwd|passphrase|token|secret|api[-_]?key)|pass|(?:src|dest)?(?:store|key)pass))"
            r"(?P<sp>[ \t]{1,5})(?:(?P<quoted>"
            + _QUOTED
            + r")|"
            + _UNTERMINATED
            + r"|(?P<value>[^\s\"'`-][^\s\"'`]{0,399}))"
        ),
        _cli_flag,
        "a command-line flag and its value: --password hunter2, --token abc, --password 'hunter2', "
        "--db-password x, --admin-token x (a prefix ending in - or _; not --no-password and other switches), "
        "keytool's -storepass, -keypass, -srcstorepass, ... (not a word of prose: the --token flag)",
    ),
    Rule(
        "user_flag",
        _b(
            r"(?<![A-Za-z0-9_-])(?P<flag>-u|--user)(?P<sp>[ \t]{1,5}|=)(?P<q>[\"']?)"
            r"(?P<user>[^\s\"'`:/]{1,256}):(?P<password>[^\s\"'`]{1,512})"
        ),
        _user_flag,
        "curl -u user:password, --user user:password (the user name stays)",
    ),
)
