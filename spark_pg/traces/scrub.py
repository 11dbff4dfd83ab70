"""Remove secrets and personal data from text before it is stored or embedded. Pure: no I/O, no state.

:func:`scrub` replaces each finding with a typed placeholder and keeps the text around it readable::

    >>> scrub("psql postgres://shop:hunter2@db.internal:5432/shop as alice@example.com")
    'psql postgres://[REDACTED]@db.internal:5432/shop as [EMAIL]'

Secrets become ``[REDACTED:<type>]``; a URL's credentials become ``[REDACTED]`` (scheme, host, port and path
stay); personal data becomes ``[EMAIL]``, ``[PHONE]`` or ``[IP]``. A named assignment keeps its name
(``DB_PASSWORD=[REDACTED:password]``). The rules run in the order of :data:`RULES`, most specific first, so
a token inside a URL or after ``Bearer`` is named by its vendor when it has one.

A key name's value may be quoted with escaped quotes (``{\\"password\\": \\"...\\"}``), follow a YAML
block indicator (``password: |`` and the value on the next line), or open a quote never closed (the value
runs to the next space); a match declined as prose is searched again from just after its name, so
``secret: password: hunter2x9`` is caught.

What is left alone on purpose (each a test case): git SHAs and other hex digests, UUIDs, file paths, version
strings (``v2.31.0``, ``react@18.2.0``), ordinary words after a key name in prose (``the password: field``)
or after a flag (``the --token flag``), language keywords (``token = await getToken()``), references
(``${ANY}``, ``$ALL_CAPS``, ``%ALL_CAPS%``, ``<your-password>``, ``%s``), ``max_tokens=512``,
``git@github.com:org/repo.git`` (an SSH remote, not a person), private, loopback and link-local IP addresses,
and Stripe **publishable** keys (``pk_live_...``: public by design, shipped in every checkout page). Not
detected: credit-card numbers (test cards such as 4242... are common in code), IPv6 addresses, secrets with
no recognisable shape and no key name in front of them.

Command lines: a password after a short flag counts only on the command line (back to the start of the line
or a ``;``, ``|`` or ``&``, at most 300 characters) of a command that reads it there (:data:`_FLAG_USES`):
``docker login -p X``, ``mysql -pX`` (glued: ``mysql -u root -p shop`` asks for it), ``sshpass -p X``,
``openssl -k X``, ``redis-cli -a X``, ``sqlcmd -P X``, ``ldapsearch -w X``, ``gh secret set K --body X``;
``ssh -p 22``, ``docker run -p 8080:80``, ``mkdir -p``, ``ls -a`` stay, and so does a port after ``-p``.
Also detected: ``htpasswd -b``'s password operand, Samba's ``-U user%password``, a secret-named key set by a
config command (``npm config set _authToken X``), SQL ``PASSWORD 'x'`` (in prose too: ``the password
'x'``) and ``IDENTIFIED BY 'x'``, keytool's ``-storepass X``, and a long flag ending in a secret's name
after a prefix (``--db-password X``) unless the prefix makes it a switch (``psql --no-password mydb``).
openssl's ``-pass env:NAME`` (``file:``, ``fd:``, ``stdin``) says where the password is, and stays.

Performance: every pattern is a flat sequence of bounded character-class repetitions (no nested
quantifiers, no backreferences), and the few heuristics that need more than a regex (the shape of an AWS
secret key, a bearer token, a phone number, the command a short flag belongs to, htpasswd's operands) run in
Python on the bounded match and at most 300 characters before it. Input longer than
:data:`MAX_INPUT` characters is refused: callers cut their fields first.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_INPUT = 100_000  # characters; scrub() refuses more (callers bound their fields well below this)

# an unquoted value after a key name: up to whitespace, a quote, or a list / query-string separator
_VALUE = r"[^\s\"'`,;&]{1,400}"
# a quoted one: up to the closing quote (on the same line), a backslash-escaped quote inside it being part of
# the value ("ab\"cd"); the quotes may be escaped themselves, as in a JSON string inside a JSON string or a
# log line ({\"password\": \"hunter2\"}, one or more backslashes)
_QUOTED = (
    r"\"(?:[^\"\\\r\n]|\\[^\r\n]){1,400}\"|'(?:[^'\\\r\n]|\\[^\r\n]){1,400}'"
    r"|\\{1,4}\"[^\"\r\n]{1,400}?\\{1,4}\"|\\{1,4}'[^'\r\n]{1,400}?\\{1,4}'"
)
# an opening quote never closed on its line (a cut text, a multi-line or very long string): the value runs
# to the next whitespace
_UNTERMINATED = r"(?P<open>\\{0,4}[\"'])(?P<bare>[^\s\"'`]{1,400})"
# a YAML block-scalar indicator (| > |- >- |+ >+, with an indentation digit; / is what the descriptor writes
# for |) between a key name and its value, the value on the next line or after the space
_BLOCK = r"(?P<block>[|>/][1-9]?[-+]?[1-9]?(?:[ \t]{0,5}\r?\n[ \t]{0,40}|[ \t]{1,5}))"
_BLOCK_ONLY = re.compile(r"[|>/][1-9]?[-+]?[1-9]?")
# key names whose value is a secret; matched as the last part of a name (DB_PASSWORD, x-api-key, aws.token)
_SECRET_NAMES = (
    r"api[_-]?key|apikey|api[_-]?secret|api[_-]?token|access[_-]?key(?:[_-]?id)?|secret[_-]?access[_-]?key"
    r"|secret[_-]?key|client[_-]?secret|private[_-]?key|secret|token|access[_-]?token|refresh[_-]?token"
    r"|auth[_-]?token|id[_-]?token|session[_-]?token|bearer[_-]?token|credentials?|passwd|password"
    r"|passphrase|pwd|pass"
)
_PASSWORD_NAMES = frozenset({"passwd", "password", "passphrase", "pwd", "pass"})
# values after a key name that are empties, masks or language keywords (token = await getToken()), not secrets
_NOT_SECRET = re.compile(
    r"(?i)^(?:none|null|nil|nullptr|true|false|undefined|redacted|await|async|new|yield|self|this|lambda"
    r"|function|return|typeof|void|\*+|x+|\.\.\.)$"
)
# values that name where the secret comes from (matched whole, case-sensitive): ${NAME} (any name in the
# braces, ${{ secrets.X }}), $(command), $NAME and %NAME% (ALL_CAPS: $ecretP4ss and %Ab12cd are secrets),
# <your-password> (closed), {{ template }}, {name}, %s and %(name)s
_REFERENCE = re.compile(
    r"\$\{[^{}\s]{1,200}\}|\$\{\{.*|\$\(.*|\$[A-Z_][A-Z0-9_]*|%[A-Z_][A-Z0-9_]*%|<[^<>]{1,200}>|\{\{.*"
    r"|\{[A-Za-z_][A-Za-z0-9_.]{0,100}\}|%(?:\([A-Za-z_][A-Za-z0-9_]{0,100}\))?[sdr]"
)
# <your password>: a placeholder in angle brackets that the value (cut at the space) only begins
_ANGLE = re.compile(r"<[^<>\r\n]{1,100}>")
# words that follow a flag's name in prose ("the --password flag", "--password is required")
_PROSE_AFTER_FLAG = frozenset(
    re.findall(
        r"\w+",
        "flag flags option options argument arguments arg args parameter parameters param switch value "
        "values is was are were and or to in on for with the a an from instead only must should can will has "
        "not when if but as at by of so then than that this it its you your here there also now first",
    )
)

# words in the prefix of a flag ending in password / token / secret that make it a switch taking no value
# (psql --no-password mydb: mydb is the database; gh auth login --with-token < file)
_BOOLEAN_FLAG_WORDS = frozenset(
    re.findall(
        r"\w+",
        "no ask prompt skip allow require required show print generate random reset with without empty hide "
        "mask save remember forget disable enable expire insecure stdin",
    )
)


@dataclass(frozen=True)
class Rule:
    """One detector: a compiled pattern and what replaces a match (None from ``replace``: keep the match)."""

    name: str  # the placeholder type, e.g. aws_access_key
    pattern: re.Pattern[str]
    replace: Callable[[re.Match[str]], str | None]
    doc: str = ""
    # a declined match: the search resumes at the end of this group (not after the whole match), so that
    # "secret: password: hunter2" looks at "password: hunter2" after declining "secret: password:"
    resume: str | None = None


@dataclass(frozen=True)
class Scrubbed:
    """A scrubbed text and how many findings of each type were replaced."""

    text: str
    found: dict[str, int] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not self.found


def _fixed(placeholder: str) -> Callable[[re.Match[str]], str | None]:
    return lambda m: placeholder


def _mixed(value: str, *, digits: int = 1) -> bool:
    """Looks random: upper and lower case letters and at least ``digits`` digits (words and hex do not)."""
    return (
        any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and sum(c.isdigit() for c in value) >= digits
    )


def _token_like(value: str) -> bool:
    """A credential-shaped string: long enough and not a word (has a digit, or both cases)."""
    letters = [c for c in value if c.isalpha()]
    upper = any(c.isupper() for c in letters)
    lower = any(c.islower() for c in letters)
    return len(value) >= 16 and (any(c.isdigit() for c in value) or (upper and lower and len(letters) > 1))


def _vendor(
    prefix_check: Callable[[str], bool] | None, placeholder: str
) -> Callable[[re.Match[str]], str | None]:
    def replace(m: re.Match[str]) -> str | None:
        if prefix_check is not None and not prefix_check(m.group(0)):
            return None
        return placeholder

    return replace


def _url_credentials(m: re.Match[str]) -> str | None:
    return f"{m.group('scheme')}[REDACTED]@"


def _bearer(m: re.Match[str]) -> str | None:
    value = m.group("value")
    if value.startswith("[") or not _token_like(value):
        return None
    return f"{m.group('scheme')}{m.group('sp')}[REDACTED:bearer_token]"


def _basic(m: re.Match[str]) -> str | None:
    import base64
    import binascii

    try:
        decoded = base64.b64decode(m.group("value"), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    # user:password, printable, no space in the user name (a random word after "Basic " decodes to bytes
    # that hold a ':' about once in 25, but almost never to printable UTF-8 of that shape)
    user, colon, password = decoded.partition(":")
    if not colon or not password or not decoded.isprintable() or any(c.isspace() for c in user):
        return None
    return f"{m.group('scheme')}{m.group('sp')}[REDACTED:basic_auth]"


def _split_quoted(quoted: str) -> tuple[str, str, str]:
    """A quoted value as (opening quote, value, closing quote); escaped quotes (``\\"``) keep their
    backslashes in the quotes."""
    escapes = len(quoted) - len(quoted.lstrip("\\"))
    end = len(quoted) - 1
    if escapes:
        while end > escapes + 1 and quoted[end - 1] == "\\":
            end -= 1
    return quoted[: escapes + 1], quoted[escapes + 1 : end], quoted[end:]


def _no_secret(value: str) -> bool:
    """A quoted or element value that is no secret: empty, redacted, a mask, a keyword, a reference."""
    return not value or value.startswith("[REDACTED") or bool(_NOT_SECRET.match(value)) or _referenced(value)


def _plain_word(value: str) -> bool:
    """A word of prose (``field``, ``Field``), not a secret's shape."""
    return value.isalpha() and (value.islower() or value[1:].islower())


def _referenced(value: str, text: str = "", start: int = -1) -> bool:
    """A reference to a secret, not the secret: ``${API_KEY}``, ``$API_KEY``, ``%API_KEY%``,
    ``<your-password>`` (also ``<your password>``, whose first word is ``value`` at ``text[start:]``)."""
    if _REFERENCE.fullmatch(value):
        return True
    return value.startswith("<") and start >= 0 and _ANGLE.match(text, start) is not None


def _reference(value: str) -> bool:
    """Code reading a secret, not the secret: ``os.environ["K"]``, ``settings.API_KEY``, ``get_token()``."""
    cut = min((i for i in (value.find("("), value.find("[")) if i >= 0), default=-1)
    head = value[:cut] if cut >= 0 else value
    parts = head.split(".")
    names = all(p.isidentifier() and not any(c.isdigit() for c in p) for p in parts)  # not Pa55.w0rd
    return names and (len(parts) > 1 or cut > 0)


def _secret_name(name: str, secret: str) -> bool:
    """Whether ``name`` (ending in the secret word ``secret``) names a secret: the word stands alone or
    after a separator (``DB_PASSWORD``, ``aws.token``), ends an ENV_STYLE name (``PGPASSWORD``), starts a
    camelCase part (``dbPassword``, ``githubToken``), or is a long word glued on (``adminpassword``,
    ``appsecret``); ``bypass`` and ``compass`` are words, not names of a pass."""
    prefix = name[: len(name) - len(secret)]
    if not prefix.strip("-") or prefix[-1] in "_.-:":
        return True
    if name.isupper():
        return True
    if secret[0].isupper() and secret[1:].islower():
        return True
    return secret.islower() and len(secret) >= 6


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


def _flag_value(m: re.Match[str]) -> tuple[str, str, str, bool] | None:
    """The value of a flag match as (value, opening quote, closing quote, quoted), or None when it is no
    secret: empty, already redacted, a keyword or mask, a reference (``$DB_PASSWORD``, ``<value>``), or a
    shell operator (``--token < file``)."""
    quoted, opening, closing = m.group("quoted"), m.group("open") or "", ""
    group = "quoted" if quoted else "bare" if opening else "value"
    if quoted:
        opening, value, closing = _split_quoted(quoted)
        value = value.strip()
    else:
        value = m.group(group)
    if not value or value.startswith("[REDACTED") or _NOT_SECRET.match(value):
        return None
    if _referenced(value, m.string, m.start(group)) or not value.strip("<>|&;"):
        return None
    return value, opening, closing, bool(quoted)


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


def _email(m: re.Match[str]) -> str | None:
    return None if m.group("local").lower() == "git" else "[EMAIL]"  # git@host:org/repo is an SSH remote


def _phone(m: re.Match[str]) -> str | None:
    digits = sum(c.isdigit() for c in m.group(0))
    return "[PHONE]" if 8 <= digits <= 15 else None


def _ip(m: re.Match[str]) -> str | None:
    try:
        address = ipaddress.IPv4Address(m.group(0))
    except ValueError:
        return None
    return "[IP]" if address.is_global else None  # private, loopback, link-local, reserved: infrastructure


def _b(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags)


_AWS_KEY_ID = (
    r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA|ASCA)[A-Z0-9]{16}(?![A-Z0-9])"
)

RULES: tuple[Rule, ...] = (
    Rule(
        "credentials",
        _b(
            r"(?P<scheme>(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{1,30}://)[^\s/@:\[\]]{0,256}:[^\s/@]{1,512}@"
        ),
        _url_credentials,
        "user:password@ in any URL (postgres, mysql, mongodb+srv, redis, amqp, https, ...); scheme and host "
        "stay",
    ),
    Rule(
        "slack_webhook",
        _b(r"https://hooks\.slack\.com/services/[A-Za-z0-9]{6,16}/[A-Za-z0-9]{6,16}/[A-Za-z0-9]{16,40}"),
        _fixed("https://hooks.slack.com/services/[REDACTED:slack_webhook]"),
        "Slack incoming-webhook URL",
    ),
    Rule(
        "discord_webhook",
        _b(r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/[0-9]{5,25}/[A-Za-z0-9_-]{30,100}"),
        _fixed("https://discord.com/api/webhooks/[REDACTED:discord_webhook]"),
        "Discord webhook URL",
    ),
    Rule(
        "jwt",
        _b(
            r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,4000}\.eyJ[A-Za-z0-9_-]{8,8000}(?:\.[A-Za-z0-9_-]{0,4000})?"
        ),
        _fixed("[REDACTED:jwt]"),
        "JSON Web Token: eyJ<header>.eyJ<payload>.<signature> (also cut before its signature)",
    ),
    Rule(
        "anthropic_key",
        _b(r"(?<![A-Za-z0-9_-])sk-ant-[A-Za-z0-9_-]{20,300}"),
        _fixed("[REDACTED:anthropic_key]"),
        "Anthropic API / admin key: sk-ant-...",
    ),
    Rule(
        "openai_key",
        _b(r"(?<![A-Za-z0-9_-])sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,300}"),
        _vendor(lambda s: _mixed(s), "[REDACTED:openai_key]"),
        "OpenAI key: sk-..., sk-proj-... (random-looking: both cases and a digit)",
    ),
    Rule(
        "github_token",
        _b(
            r"(?<![A-Za-z0-9_])(?:(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{22,255})"
        ),
        _fixed("[REDACTED:github_token]"),
        "GitHub tokens: ghp_, gho_, ghu_, ghs_, ghr_, github_pat_",
    ),
    Rule(
        "gitlab_token",
        _b(r"(?<![A-Za-z0-9_-])gl(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_-]{20,64}"),
        _fixed("[REDACTED:gitlab_token]"),
        "GitLab tokens: glpat-, gldt-, glrt-, glptt-, glcbt-, gloas-",
    ),
    Rule(
        "slack_token",
        _b(r"(?<![A-Za-z0-9_-])(?:xox[abposrecd]-[A-Za-z0-9%-]{10,250}|xapp-[0-9]-[A-Za-z0-9-]{10,250})"),
        _fixed("[REDACTED:slack_token]"),
        "Slack tokens: xoxb-, xoxp-, xoxa-, xoxo-, xoxs-, xoxr-, xoxe-, xapp-, and the browser session's "
        "xoxc- token and xoxd- cookie",
    ),
    Rule(
        "stripe_key",
        _b(r"(?<![A-Za-z0-9_])(?:(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,247}|whsec_[A-Za-z0-9]{24,128})"),
        _fixed("[REDACTED:stripe_key]"),
        "Stripe secret and restricted keys (sk_live_, sk_test_, rk_live_, rk_test_) and webhook secrets "
        "(whsec_); publishable keys (pk_) stay",
    ),
    Rule(
        "google_api_key",
        _b(r"(?<![A-Za-z0-9_-])(?:AIza[0-9A-Za-z_-]{35}|GOCSPX-[A-Za-z0-9_-]{28})(?![A-Za-z0-9_-])"),
        _fixed("[REDACTED:google_api_key]"),
        "Google API key (AIza...) and OAuth client secret (GOCSPX-...)",
    ),
    Rule(
        "google_oauth_token",
        _b(r"(?<![A-Za-z0-9_-])ya29\.[A-Za-z0-9_-]{20,2048}"),
        _fixed("[REDACTED:google_oauth_token]"),
        "Google OAuth access token: ya29.",
    ),
    Rule(
        "aws_access_key",
        _b(_AWS_KEY_ID),
        _fixed("[REDACTED:aws_access_key]"),
        "AWS access key id: AKIA/ASIA/AROA/... + 16 upper-case letters or digits",
    ),
    Rule(
        "npm_token",
        _b(r"(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])"),
        _fixed("[REDACTED:npm_token]"),
        "npm access token: npm_ + 36",
    ),
    Rule(
        "pypi_token",
        _b(r"(?<![A-Za-z0-9_-])pypi-AgE[A-Za-z0-9_-]{50,400}"),
        _fixed("[REDACTED:pypi_token]"),
        "PyPI API token: pypi-AgE...",
    ),
    Rule(
        "huggingface_token",
        _b(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,40}(?![A-Za-z0-9])"),
        _vendor(lambda s: _mixed(s[3:], digits=0), "[REDACTED:huggingface_token]"),
        "Hugging Face token: hf_ + 30-40 letters (both cases)",
    ),
    Rule(
        "sendgrid_key",
        _b(r"(?<![A-Za-z0-9_-])SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])"),
        _fixed("[REDACTED:sendgrid_key]"),
        "SendGrid API key: SG.<22>.<43>",
    ),
    Rule(
        "azure_key",
        _b(r"(?<![A-Za-z0-9])(?P<name>AccountKey|SharedAccessKey)=[A-Za-z0-9+/]{20,200}={0,2}"),
        lambda m: f"{m.group('name')}=[REDACTED:azure_key]",
        "Azure storage / Service Bus connection-string keys: AccountKey=..., SharedAccessKey=...",
    ),
    Rule(
        "bearer_token",
        _b(r"(?i)(?<![A-Za-z0-9])(?P<scheme>bearer)(?P<sp>\s{1,5})(?P<value>[A-Za-z0-9._~+/-]{16,4096}=*)"),
        _bearer,
        "Authorization: Bearer <token> (the token must look random: at least 16 characters with a digit, or "
        "both cases)",
    ),
    Rule(
        "basic_auth",
        _b(r"(?i)(?<![A-Za-z0-9])(?P<scheme>basic)(?P<sp>\s{1,5})(?P<value>[A-Za-z0-9+/]{8,1000}={0,2})"),
        _basic,
        "Authorization: Basic <base64 of user:password>",
    ),
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
    Rule(
        "email",
        _b(
            r"(?<![A-Za-z0-9._%+-])(?<!//)(?P<local>[A-Za-z0-9._%+-]{1,64})@[A-Za-z0-9.-]{1,253}\.[A-Za-z]{2,24}"
            r"(?![A-Za-z0-9-])"
        ),
        _email,
        "e-mail addresses (not git@host, an SSH remote, nor a URL's user name: scheme://user@host)",
    ),
    Rule(
        "phone",
        _b(
            r"(?<![A-Za-z0-9+])\+[0-9][0-9 ().-]{6,18}[0-9](?![A-Za-z0-9])"
            r"|(?<![A-Za-z0-9.-])(?:\([0-9]{3}\)[ ]?|[0-9]{3}[.-])[0-9]{3}[.-][0-9]{4}(?![A-Za-z0-9.-])"
        ),
        _phone,
        "phone numbers: international (+ and 8-15 digits) and North American (415-555-0132, (415) 555-0132)",
    ),
    Rule(
        "ip",
        _b(r"(?<![A-Za-z0-9.])[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}(?![A-Za-z0-9])(?!\.[0-9])"),
        _ip,
        "public IPv4 addresses (private, loopback, link-local and reserved ranges stay)",
    ),
)

_PRIVATE_KEY_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PRIVATE_KEY_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_AWS_CONTEXT = re.compile(r"(?i)aws|amazon|" + _AWS_KEY_ID)
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")


def _private_keys(text: str, found: Counter[str]) -> str:
    """PEM / OpenSSH / PGP private key blocks, BEGIN to END (or to the end of a truncated text)."""
    out: list[str] = []
    pos = 0
    while True:
        begin = _PRIVATE_KEY_BEGIN.search(text, pos)
        if begin is None:
            break
        end = _PRIVATE_KEY_END.search(text, begin.end())
        out.append(text[pos : begin.start()])
        out.append("[REDACTED:private_key]")
        found["private_key"] += 1
        if end is None:
            pos = len(text)
            break
        pos = end.end()
    out.append(text[pos:])
    return "".join(out)


def _aws_secrets(text: str, found: Counter[str]) -> str:
    """A standalone 40-character AWS secret access key, looked for only in a text that mentions AWS (or
    holds an access key id): without that context a 40-character string is too often something else."""
    if not _AWS_CONTEXT.search(text):
        return text

    def replace(m: re.Match[str]) -> str:
        value = m.group(0)
        if not _mixed(value, digits=1) or value.count("/") > 3:
            return value
        found["aws_secret_key"] += 1
        return "[REDACTED:aws_secret_key]"

    return _AWS_SECRET.sub(replace, text)


def _apply(rule: Rule, text: str, found: Counter[str]) -> str:
    def replace(m: re.Match[str]) -> str:
        new = rule.replace(m)
        if new is None:
            return m.group(0)
        found[rule.name] += 1
        return new

    if rule.resume is None:
        return rule.pattern.sub(replace, text)
    out: list[str] = []
    pos = at = 0
    while (m := rule.pattern.search(text, at)) is not None:
        new = rule.replace(m)
        if new is None:
            at = m.end(rule.resume)  # the rest of a declined match is looked at again
            continue
        found[rule.name] += 1
        out += [text[pos : m.start()], new]
        pos = at = m.end()
    out.append(text[pos:])
    return "".join(out)


def scrub_report(text: str) -> Scrubbed:
    """Scrub ``text`` and say what was found (placeholder type -> count)."""
    if len(text) > MAX_INPUT:
        raise ValueError(f"scrub takes at most {MAX_INPUT} characters, got {len(text)}; cut the text first")
    found: Counter[str] = Counter()
    out = _private_keys(text, found)
    for rule in RULES:
        out = _apply(rule, out, found)
        if rule.name == "sendgrid_key":
            # after the vendor keys, before the generic rules: a bare AWS secret access key
            out = _aws_secrets(out, found)
    return Scrubbed(out, dict(found))


def scrub(text: str) -> str:
    """``text`` with secrets and personal data replaced by typed placeholders."""
    return scrub_report(text).text


# every placeholder scrub() writes (a URL keeps its scheme and host around [REDACTED])
PLACEHOLDERS: tuple[str, ...] = (
    "[REDACTED:private_key]",
    "[REDACTED]",
    "https://hooks.slack.com/services/[REDACTED:slack_webhook]",
    "https://discord.com/api/webhooks/[REDACTED:discord_webhook]",
    "[REDACTED:jwt]",
    "[REDACTED:anthropic_key]",
    "[REDACTED:openai_key]",
    "[REDACTED:github_token]",
    "[REDACTED:gitlab_token]",
    "[REDACTED:slack_token]",
    "[REDACTED:stripe_key]",
    "[REDACTED:google_api_key]",
    "[REDACTED:google_oauth_token]",
    "[REDACTED:aws_access_key]",
    "[REDACTED:npm_token]",
    "[REDACTED:pypi_token]",
    "[REDACTED:huggingface_token]",
    "[REDACTED:sendgrid_key]",
    "[REDACTED:azure_key]",
    "[REDACTED:aws_secret_key]",
    "[REDACTED:bearer_token]",
    "[REDACTED:basic_auth]",
    "[REDACTED:password]",
    "[REDACTED:secret]",
    "[EMAIL]",
    "[PHONE]",
    "[IP]",
)
