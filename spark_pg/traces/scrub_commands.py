"""The scrubber's command-line and SQL rules (:mod:`spark_pg.traces.scrub`): a password after a short
flag of a command that reads it there (:data:`_FLAG_USES`: ``docker login -p X``, ``mysql -pX``), Samba's
``-U user%password``, ``htpasswd -b``'s password operand, SQL's ``PASSWORD 'x'`` and ``IDENTIFIED BY 'x'``,
and a secret-named key set by a config command (``npm config set _authToken X``). :data:`COMMAND_RULES` are
spliced into :data:`~spark_pg.traces.scrub.RULES` after the key-name rules and before the personal data.
Pure: no I/O, no state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spark_pg.traces.scrub_values import (
    _PASSWORD_NAMES,
    _PROSE_AFTER_FLAG,
    _QUOTED,
    _SECRET_NAMES,
    _UNTERMINATED,
    Rule,
    _b,
    _flag_value,
    _no_secret,
    _plain_word,
    _referenced,
    _secret_name,
    _split_quoted,
)

# --- command lines: a password after a short flag of a named command, and the like ----------------------


def _segment(text: str, start: int) -> str:
    """The command ``text[start]`` is part of: back to the start of its line or to the last ``;``, ``|``
    or ``&`` before it (``docker run -p 80:80 x && docker login ...`` are two), at most 300 characters."""
    low = max(0, start - 300)
    cut = max(text.rfind(c, low, start) for c in "\n;|&")
    return text[max(low, cut + 1) : start]


class _Command:
    """Command names (``mysql|mysqldump``), each found as a word followed by a space (or a quote), with a
    path before it or ``.exe`` after it (``/usr/bin/mysql``, ``mysql.exe``); not as part of another name
    (``mysqlx_port``, ``mysql-host``, ``--name=mysql``, ``mysql:8``) nor as a word of prose (``docker
    login, then``)."""

    def __init__(self, names: str) -> None:
        words = names.split("|")
        # a plain substring test first: most command lines hold none of the names
        self.needles = tuple(w for w in words if not any(o != w and o in w for o in words))
        self.pattern = re.compile(r"(?s).*" + _command_word(names))  # .* first: the last one, one match

    def last(self, segment: str) -> int:
        """Where the last of the names in ``segment`` ends, or -1."""
        if not any(needle in segment for needle in self.needles):
            return -1
        found = self.pattern.match(segment)
        return -1 if found is None else found.end()


def _command_word(names: str) -> str:
    return r"(?<![\w.:=@$%-])(?:" + names + r")(?:\.exe)?(?=[\s\"'`])"


@dataclass(frozen=True)
class _FlagUse:
    """Short flags that carry a password on the command line of the named commands (and only there:
    ``-p`` is a port of ``ssh`` and ``docker run``)."""

    commands: _Command
    flags: frozenset[str]
    spaced: bool = True  # -p SECRET
    glued: bool = False  # -pSECRET
    then: re.Pattern[str] | None = None  # a word after the command that makes it this use: docker ... login
    own_option: bool = False  # the flag comes before the command's first operand (sshpass -p X ssh -p 22)
    kind: str = "password"

    def runs(self, segment: str) -> bool:
        end = self.commands.last(segment)
        if end < 0:
            return False
        rest = segment[end:]
        if self.then is not None and self.then.search(rest) is None:
            return False
        return not self.own_option or _only_options(rest)


def _only_options(words: str) -> bool:
    """``words`` are options of sshpass (``-v``, ``-f file``, ``-P prompt``), no operand."""
    takes_value = False
    for word in words.split():
        if takes_value:
            takes_value = False
        elif not word.startswith("-"):
            return False
        else:
            takes_value = word in ("-f", "-d", "-P")
    return True


_LOGIN = re.compile(_command_word("login"))
_FLAG_USES: tuple[_FlagUse, ...] = (
    # mysql -pSECRET (glued: "mysql -u root -p shop" asks for the password; shop is the database)
    _FlagUse(
        _Command(
            r"mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mysqlshow|mysqlslap|mysqlpump|mysqlsh"
            r"|mysqlbinlog|mariadb|mariadb-dump|mariadb-admin|mariadb-import|mariadb-check|mariadb-show"
        ),
        frozenset({"-p"}),
        spaced=False,
        glued=True,
    ),
    _FlagUse(
        _Command(r"docker|podman|buildah|skopeo|nerdctl|oras|helm|crane"),
        frozenset({"-p"}),
        glued=True,
        then=_LOGIN,
    ),
    _FlagUse(_Command("sshpass"), frozenset({"-p"}), glued=True, own_option=True),
    _FlagUse(
        _Command(
            r"mongo|mongosh|mongodump|mongorestore|mongoexport|mongoimport|mongostat|mongotop|mongofiles"
        ),
        frozenset({"-p"}),
    ),
    _FlagUse(_Command(r"smbmap|crackmapexec|netexec|nxc|evil-winrm"), frozenset({"-p"})),
    _FlagUse(_Command("openssl"), frozenset({"-k"})),
    _FlagUse(_Command("openssl"), frozenset({"-K"}), kind="secret"),  # the key itself, in hex
    _FlagUse(_Command(r"redis-cli|keydb-cli|valkey-cli"), frozenset({"-a"})),
    _FlagUse(_Command(r"sqlcmd|bcp|osql"), frozenset({"-P"}), glued=True),
    _FlagUse(
        _Command(
            r"ldapsearch|ldapmodify|ldapadd|ldapdelete|ldapwhoami|ldappasswd|ldapcompare|ldapmodrdn|ldapexop"
        ),
        frozenset({"-w"}),
    ),
    _FlagUse(_Command("ldappasswd"), frozenset({"-a", "-s"})),  # the old and the new password
    _FlagUse(
        _Command("gh"),
        frozenset({"-b", "--body"}),
        glued=True,
        then=re.compile(_command_word(r"secret[ \t]{1,5}set")),
        kind="secret",
    ),
)
_FLAG_USES_BY_FLAG = {
    flag: tuple(u for u in _FLAG_USES if flag in u.flags) for flag in {f for u in _FLAG_USES for f in u.flags}
}
# a port or a port mapping after -p (ssh -p 22, docker run --name mysql -p 3306:3306): no password
_PORT = re.compile(r"[0-9][0-9.:-]{0,40}(?:/(?:tcp|udp|sctp))?")


def _command_flag(m: re.Match[str]) -> str | None:
    """A password after a short flag on a line that runs a command that reads it there
    (:data:`_FLAG_USES`): ``docker login -p X``, ``mysql -pX``, ``sshpass -p X``, ``redis-cli -a X``,
    ``gh secret set K --body X``."""
    flag, sp = m.group("flag"), m.group("sp")
    if sp == "=" and not flag.startswith("--"):
        return None
    found = _flag_value(m)
    if found is None:
        return None
    value, opening, closing, quoted = found
    glued = not sp
    segment = _segment(m.string, m.start())
    uses = _FLAG_USES_BY_FLAG.get(flag, ())
    use = next((u for u in uses if (u.glued if glued else u.spaced) and u.runs(segment)), None)
    if use is None:
        return None
    if flag == "-p" and _PORT.fullmatch(value) and (not glued or not value.isdigit()):
        return None  # -p 22, -p 8080:80, -p3306:3306: a port
    if not quoted and _plain_word(value) and value.lower() in _PROSE_AFTER_FLAG:
        return None  # "docker login -p is insecure"
    return f"{flag}{sp}{opening}[REDACTED:{use.kind}]{closing}"


def _smb_user(m: re.Match[str]) -> str | None:
    """``smbclient -U bob%hunter2``: Samba's user%password; the user stays. Only on a line that runs a
    Samba client (:data:`_SMB`)."""
    password = m.group("password").rstrip(".,;:)")
    trail = m.group("password")[len(password) :]
    if not password or password.startswith("[REDACTED") or _referenced(password):
        return None
    if _SMB.last(_segment(m.string, m.start())) < 0:
        return None
    return f"{m.group('flag')}{m.group('sp')}{m.group('q')}{m.group('user')}%[REDACTED:password]{trail}"


_SMB = _Command(r"smbclient|rpcclient|smbmap|smbcacls|smbget|smbtree|net|samba-tool")
# one argument of a command: a quoted string or a run of other characters
_ARGUMENT = re.compile(r"'[^'\n]{0,400}'|\"[^\"\n]{0,400}\"|[^\s'\"`]{1,400}")


def _htpasswd(m: re.Match[str]) -> str | None:
    """``htpasswd -b[c] FILE USER PASSWORD`` and ``htpasswd -nb USER PASSWORD``: in batch mode (-b) the
    password is the operand after the user name. Options come first; ``-C`` and ``-r`` take a value."""
    args = m.group("args")
    letters, takes_value = "", False
    operands: list[re.Match[str]] = []
    for argument in _ARGUMENT.finditer(args):
        word = argument.group(0)
        if takes_value:
            takes_value = False
        elif not operands and word.startswith("-") and len(word) > 1:
            letters += word[1:]
            takes_value = word[-1] in "Cr"
        else:
            operands.append(argument)
    where = 1 if "n" in letters else 2
    if "b" not in letters or len(operands) <= where:
        return None
    argument = operands[where]
    opening, value, closing = (
        _split_quoted(argument.group(0)) if argument.group(0)[0] in "'\"" else ("", argument.group(0), "")
    )
    if _no_secret(value):
        return None
    redacted = f"{opening}[REDACTED:password]{closing}"
    return f"{m.group('command')}{args[: argument.start()]}{redacted}{args[argument.end() :]}"


def _sql_password(m: re.Match[str]) -> str | None:
    """SQL: ``PASSWORD 'x'`` (CREATE / ALTER ROLE, ENCRYPTED PASSWORD, MySQL's PASSWORD('x'), SQL Server's
    PASSWORD = N'x'), ``IDENTIFIED BY 'x'`` (also IDENTIFIED WITH plugin BY 'x', and unquoted, as Oracle
    allows). A quoted literal after the word password is taken for a password in prose too."""
    keyword = m.group("keyword")
    found = _flag_value(m)
    if found is None:
        return None
    value, opening, closing, _ = found
    if not opening:
        if not keyword.upper().startswith("IDENTIFIED") or value.upper() in _SQL_WORDS:
            return None  # PASSWORD NULL, PASSWORD $1; IDENTIFIED BY RANDOM PASSWORD
        if _plain_word(value) and not keyword.isupper():
            return None  # "rows identified by id": prose
    return f"{keyword}{m.group('sp')}{m.group('literal') or ''}{opening}[REDACTED:password]{closing}"


_SQL_WORDS = frozenset({"RANDOM", "PASSWORD", "VALUES", "NULL"})


def _config_set(m: re.Match[str]) -> str | None:
    """``npm config set _authToken X``, ``git config --global github.token X``, ``aws configure set
    aws_secret_access_key X``: a secret-named key set by a config command, its value after a space. Between
    ``config`` and the key only ``set``, ``add`` and options (``--global``, ``--profile prod``); ``--get``,
    ``--unset`` and ``get`` read or remove the key instead."""
    name = m.group("name")
    segment = _segment(m.string, m.start())
    end = _CONFIG.last(segment)
    if end < 0 or not any(_secret_name(name, name[i:]) for i in _secret_tails(name)):
        return None
    after_option = False
    for word in segment[end:].split():
        if word.startswith("-"):
            if word.startswith(("--get", "--unset", "--remove", "--rename", "--list")):
                return None
            after_option = "=" not in word
        elif word in ("set", "add") or after_option:
            after_option = False
        else:
            return None
    found = _flag_value(m)
    if found is None:
        return None
    _, opening, closing, _ = found
    leaf = m.group("secret").lower()
    kind = "password" if leaf in _PASSWORD_NAMES else "secret"
    return f"{name}{m.group('sp')}{opening}[REDACTED:{kind}]{closing}"


_CONFIG = _Command(r"config|configure")
_SECRET_TAIL = re.compile(r"(?i)(?:" + _SECRET_NAMES + r")")


def _secret_tails(name: str) -> list[int]:
    """Where a secret name that ends ``name`` starts (``npmAuthToken``: at ``Auth`` and at ``Token``)."""
    return [i for i in range(len(name)) if _SECRET_TAIL.fullmatch(name, i)]


COMMAND_RULES: tuple[Rule, ...] = (
    Rule(
        "command_flag",
        _b(
            r"(?<![A-Za-z0-9_-])(?P<flag>-[pkKaPwsb]|--body)(?P<sp>=|[ \t]{0,5})(?:(?P<quoted>"
            + _QUOTED
            + r")|"
            + _UNTERMINATED
            + r"|(?P<value>[^\s\"'`;&|<>-][^\s\"'`;&|<>]{0,399}))"
        ),
        _command_flag,
        "a password after a short flag of a command that reads it there, on a line that runs the command: "
        "docker/podman/helm ... login -p X, mysql -pX, sshpass -p X, mongosh -p X, openssl -k X (-K: the "
        "key), redis-cli -a X, sqlcmd -P X, ldapsearch -w X, gh secret set K --body X (not a port: -p 22)",
    ),
    Rule(
        "smb_user",
        _b(
            r"(?<![A-Za-z0-9_-])(?P<flag>-U|--user(?:name)?)(?P<sp>[ \t]{1,5}|=)(?P<q>[\"']?)"
            r"(?P<user>[^\s\"'`%]{1,256})%(?P<password>[^\s\"'`]{1,512})"
        ),
        _smb_user,
        "smbclient / rpcclient / net -U user%password (the user name stays)",
    ),
    Rule(
        "htpasswd",
        _b(r"(?<![\w.:=@$%-])(?P<command>htpasswd(?:\.exe)?)(?P<args>[ \t][^\n;|&`]{1,400})"),
        _htpasswd,
        "htpasswd -b FILE USER PASSWORD, htpasswd -nb USER PASSWORD (batch mode: the password is an operand)",
    ),
    Rule(
        "sql_identified_by",
        _b(
            r"(?i)(?<![\w-])(?P<keyword>IDENTIFIED(?:[ \t]{1,5}WITH[ \t]{1,5}[^\s;]{1,64})?[ \t]{1,5}BY"
            r"(?:[ \t]{1,5}(?:PASSWORD|VALUES))?)(?P<sp>[ \t]{1,5})(?P<literal>[NE](?=[\"']))?(?:(?P<quoted>"
            + _QUOTED
            + r")|"
            + _UNTERMINATED
            + r"|(?P<value>[^\s\"'`;,()]{1,128}))"
        ),
        _sql_password,
        "SQL: IDENTIFIED BY 'x', IDENTIFIED WITH plugin BY 'x', IDENTIFIED BY x (Oracle)",
    ),
    Rule(
        "sql_password",
        _b(
            r"(?i)(?<![\w-])(?P<keyword>PASSWORD)(?P<sp>[ \t]{1,5}|[ \t]{0,5}[=(][ \t]{0,5})"
            r"(?P<literal>[NE](?=[\"']))?(?:(?P<quoted>" + _QUOTED + r")|" + _UNTERMINATED + r")"
        ),
        _sql_password,
        "a quoted literal after the word PASSWORD: CREATE ROLE app PASSWORD 'x', ENCRYPTED PASSWORD 'x', "
        "PASSWORD('x'), PASSWORD = N'x' (also in prose: the password 'x')",
    ),
    Rule(
        "config_set",
        _b(
            r"(?i)(?P<name>(?<![\w.:/@-])[\w.:/@-]{0,100}?(?P<secret>"
            + _SECRET_NAMES
            + r")(?![A-Za-z0-9]))(?P<sp>[ \t]{1,5})(?:(?P<quoted>"
            + _QUOTED
            + r")|"
            + _UNTERMINATED
            + r"|(?P<value>[^\s\"'`;&|<>-][^\s\"'`;&|<>]{0,399}))"
        ),
        _config_set,
        "a secret-named key set by a config command, the value after a space: npm config set _authToken X, "
        "git config --global github.token X, aws configure set aws_secret_access_key X",
    ),
)
