"""Inboxes: where a caller receives its replies, and which reply subjects a service answers.

A requester names its reply subject; the service publishes its answer there. Answering
whatever subject a request names would let any caller make the service publish onto the
event stream, a lease key or a status subject with the service's rights. So a service
answers only *inbox* subjects: those under an accepted inbox prefix.

Each NATS user has its own prefix, ``_INBOX.<user>`` (or, NATS's other custom spelling,
``_INBOX_<user>``), and may subscribe only below it (``deploy/nats/accounts.conf``), so
no role reads another's replies. A prefix is one or more subject tokens without
wildcards; the inboxes under it are ``<prefix>.<token>...`` (nats-py makes
``<prefix>.<nuid>`` and ``<prefix>.<nuid>.<token>``). An *accepted* prefix may end in
``_*``: a family of prefixes, each extending its last token (``_INBOX_*`` accepts
``_INBOX_client`` and ``_INBOX_gateway``), the way callers name their own prefixes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from urllib.parse import unquote, urlsplit

#: nats-py's (and every NATS client's) inbox prefix when none is configured.
DEFAULT_PREFIX = "_INBOX"
#: What a service answers unless configured: the default inboxes, and the custom
#: prefixes NATS users name ``_INBOX_<name>``.
DEFAULT_ACCEPTED = (DEFAULT_PREFIX, f"{DEFAULT_PREFIX}_*")
_FAMILY = "_*"
#: A subject token a prefix may hold: printable ASCII but the wildcards and the dot.
_TOKEN = re.compile(r"[!-)+-\-/-=?-~]+")


def valid_prefix(prefix: str) -> bool:
    """Dot-separated tokens, none empty and none a wildcard (``*``, ``>``)."""
    return bool(prefix) and all(_TOKEN.fullmatch(token) for token in prefix.split("."))


def prefix_for_user(user: str | None) -> str:
    """``_INBOX.<user>`` for a NATS user name, ``_INBOX`` without one. ValueError for a
    user name that is not one subject token (it could not name an inbox of its own:
    set the prefix explicitly)."""
    if not user:
        return DEFAULT_PREFIX
    if _TOKEN.fullmatch(user) is None:
        raise ValueError(f"the NATS user name {user!r} is not a subject token; set the "
                         f"inbox prefix explicitly")
    return f"{DEFAULT_PREFIX}.{user}"


def user_of(url: str) -> str | None:
    """The user name a NATS URL carries (``nats://user:password@host``), if any (the first
    URL of a comma-separated list). A URL with one credential and no password carries a
    token, which is never a user name (nor put in a subject)."""
    first = url.split(",", 1)[0].strip()
    try:
        parts = urlsplit(first)
        name, password = parts.username, parts.password
    except ValueError:
        return None
    return unquote(name) if name and password is not None else None


def prefix_for(url: str, *, user: str | None = None, explicit: str | None = None) -> str:
    """The inbox prefix a caller connecting to ``url`` uses: ``explicit`` if given (checked),
    else derived from ``user`` (credentials given apart from the URL), else from the URL's
    user name, else ``_INBOX``."""
    if explicit:
        prefix = explicit.rstrip(".")
        if not valid_prefix(prefix):
            raise ValueError(f"inbox prefix {explicit!r}: subject tokens without wildcards "
                             f"expected")
        return prefix
    return prefix_for_user(user or user_of(url))


def valid_accepted(prefix: str) -> bool:
    """A prefix, or a family of them (``P_*``: see the module's docstring)."""
    if prefix.endswith(_FAMILY):
        return valid_prefix(prefix.removesuffix("*") + "x")
    return valid_prefix(prefix)


def parse_prefixes(text: str | Iterable[str]) -> tuple[str, ...]:
    """Accepted reply prefixes from a comma-separated list (or a list): each normalized
    without its trailing dot; ValueError for an empty list or an invalid prefix."""
    items = text.split(",") if isinstance(text, str) else list(text)
    prefixes = tuple(dict.fromkeys(item.strip().rstrip(".") for item in items if item.strip()))
    if not prefixes:
        raise ValueError("at least one reply prefix is needed")
    for prefix in prefixes:
        if not valid_accepted(prefix):
            raise ValueError(f"reply prefix {prefix!r}: subject tokens without wildcards "
                             f"(or ending in _*) expected")
    return prefixes


def is_inbox(reply: str, prefixes: tuple[str, ...]) -> bool:
    """Whether ``reply`` is an inbox under one of ``prefixes``: the prefix, a dot, and at
    least one more token; every token non-empty, none a wildcard."""
    return inbox_matcher(prefixes)(reply)


@functools.cache
def inbox_matcher(prefixes: tuple[str, ...]) -> Callable[[str], bool]:
    """:func:`is_inbox` for fixed ``prefixes``, as one compiled expression (it runs on
    every request a service answers)."""
    for prefix in prefixes:
        if not valid_accepted(prefix):
            raise ValueError(f"reply prefix {prefix!r}: subject tokens without wildcards "
                             f"(or ending in _*) expected")
    token = _TOKEN.pattern
    under = "|".join(re.escape(prefix.removesuffix("*")) + token
                     if prefix.endswith(_FAMILY) else re.escape(prefix)
                     for prefix in prefixes)
    fullmatch = re.compile(rf"(?:{under})(?:\.{token})+").fullmatch
    return lambda reply: fullmatch(reply) is not None
