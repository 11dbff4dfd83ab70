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
or a ``;``, ``|`` or ``&``, at most 300 characters) of a command that reads it there
(:data:`.scrub_commands._FLAG_USES`): ``docker login -p X``, ``mysql -pX`` (glued: ``mysql -u root -p shop``
asks for it), ``sshpass -p X``, ``openssl -k X``, ``redis-cli -a X``, ``sqlcmd -P X``, ``ldapsearch -w X``,
``gh secret set K --body X``; ``ssh -p 22``, ``docker run -p 8080:80``, ``mkdir -p``, ``ls -a`` stay, and so
does a port after ``-p``.
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

The code is in four modules: this one holds the public API, the vendor-key and personal-data rules and
the order of :data:`RULES`; :mod:`.scrub_keys` the rules for a secret after a key name, an XML element or a
flag; :mod:`.scrub_commands` the command-line and SQL rules; :mod:`.scrub_values` the pieces they share (a
value's shape, the secret names, the values that are no secret) and the :class:`Rule` type.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from spark_pg.traces.scrub_commands import COMMAND_RULES
from spark_pg.traces.scrub_keys import KEY_RULES
from spark_pg.traces.scrub_values import Rule as Rule
from spark_pg.traces.scrub_values import _b, _mixed, _token_like

MAX_INPUT = 100_000  # characters; scrub() refuses more (callers bound their fields well below this)


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
    *KEY_RULES,  # a secret after its key name, XML element or flag (scrub_keys)
    *COMMAND_RULES,  # command lines and SQL (scrub_commands)
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
