"""NATS server lists: ``CLEARANCE_NATS_URL`` (and ``--server``) name one server or a
cluster's several, separated by commas and/or whitespace (docs/operations.md: Configuration).

Each URL is checked here, once, so a typo is one clear line at start rather than an
outage retried for ever: nats-py reads a comma-joined string as one URL whose port does
not parse, and reports it only as "invalid connect url option".
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

#: What a Clearance process speaks to NATS (WebSocket is for browsers, not the services).
SCHEMES = ("nats", "tls")
_SEPARATORS = re.compile(r"[\s,]+")


def split(text: str) -> list[str]:
    """The items of a comma- and/or whitespace-separated list, unchecked, in order."""
    return [item for item in _SEPARATORS.split(text.strip()) if item]


def parse(text: str | list[str], *, schemes: tuple[str, ...] = SCHEMES) -> list[str]:
    """The server URLs ``text`` names (duplicates dropped, order kept); ValueError naming
    the first that is not a ``<scheme>://host[:port]`` URL, or for an empty list."""
    items = split(text) if isinstance(text, str) else [i.strip() for i in text if i.strip()]
    if not items:
        raise ValueError("no NATS server URL given")
    for item in items:
        check(item, schemes=schemes)
    return list(dict.fromkeys(items))


def check(url: str, *, schemes: tuple[str, ...] = SCHEMES) -> None:
    """ValueError unless ``url`` is one server: a known scheme, a host, a valid port."""
    shown = redacted(url)
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError for a port out of range or not a number
    except ValueError as exc:
        raise ValueError(f"{shown!r} is not a NATS URL ({exc})") from None
    if parts.scheme not in schemes:
        expected = " or ".join(f"{s}://" for s in schemes)
        raise ValueError(f"{shown!r} is not a NATS URL: expected {expected}host[:port]")
    if not parts.hostname:
        raise ValueError(f"{shown!r} names no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"{shown!r}: a NATS URL has no path, query or fragment")
    del port


def redacted(url: str) -> str:
    """Scheme, host and port of one URL, for messages and logs: credentials may ride in
    it (a user's password, or a token)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        # Not parseable: show no more than the part before any credentials.
        return url.rsplit("@", 1)[-1]
    if not parts.scheme or parts.hostname is None:
        return url.rsplit("@", 1)[-1]
    return f"{parts.scheme}://{parts.hostname}" + (f":{port}" if port else "")


def redacted_list(urls: str | list[str]) -> str:
    """A list of URLs, each :func:`redacted`, comma-separated."""
    items = split(urls) if isinstance(urls, str) else urls
    return ",".join(redacted(url) for url in items)


def first(text: str) -> str:
    """The first URL of a list (its user names the inbox prefix), or ``""``."""
    items = split(text)
    return items[0] if items else ""
