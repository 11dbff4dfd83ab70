"""A database URL or conninfo as messages and listings may show it: its password as ``***``."""

from __future__ import annotations

NOT_SHOWN = "(not shown: it may hold a password)"


def redact_url(url: str) -> str:
    """``url`` with its password shown as ***, in any form libpq takes: ``user:pw@host``, ``?password=``,
    or ``key=value`` pairs; :data:`NOT_SHOWN` for a URL that cannot be split (an unclosed ``[`` of an IPv6
    host), where the password cannot be found."""
    from urllib.parse import urlsplit, urlunsplit

    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        parts = urlsplit(url)
    except ValueError:
        return NOT_SHOWN
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        url = urlunsplit(parts._replace(netloc=netloc))
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:  # not a conninfo libpq can parse: shown as given (minus a user:pw@)
        return url
    if "password" not in params:
        return url
    if "://" in url:  # a URL: its query string, rebuilt without the password's value
        split = urlsplit(url)
        query = "&".join(
            "password=***" if pair.split("=", 1)[0] == "password" else pair for pair in split.query.split("&")
        )
        return urlunsplit(split._replace(query=query))
    return make_conninfo("", **(params | {"password": "***"}))
