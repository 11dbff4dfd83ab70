"""The scrubber's shared pieces (:mod:`spark_pg.traces.scrub`): what a value after a key name or a flag
looks like, which names are a secret's, which values are no secret (masks, keywords, references), and the
:class:`Rule` type that every rule module builds its entries with. Pure: no I/O, no state. Imports nothing
from the other scrub modules.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

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


def _b(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """A rule's pattern, compiled."""
    return re.compile(pattern, flags)


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
