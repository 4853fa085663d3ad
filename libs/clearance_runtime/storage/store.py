"""The one place a client of the state store (Valkey/Redis) is made.

``CLEARANCE_REDIS_URL`` takes any of:

- ``redis://[[user]:password@]host:port[/db]``, ``rediss://…`` (TLS),
  ``unix://[[user]:password@]/path/to/socket[?db=N]``: one server, as redis-py reads them;
- ``redis+sentinel://[[user]:password@]host:port[,host:port…]/service_name[/db]``
  (``rediss+sentinel://`` for TLS to the data nodes): the primary of ``service_name`` as
  the Sentinels name it. The password (and user) are the data nodes'; the Sentinels'
  own, if they have one, is the query parameter ``sentinel_password`` (and
  ``sentinel_username``). ``socket_timeout`` (seconds) bounds each Sentinel query.

A Sentinel client asks the Sentinels for the primary before each new connection, and
drops its connections when one fails or when the server it reaches answers ``READONLY``
(a primary that was demoted): the next command goes to the primary Sentinel names then.
So a failover costs the commands in flight (an outage, retried: ``outages``), never a
service restart, and no command is ever written to a replica.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

if TYPE_CHECKING:  # imported when a client is made: Settings checks URLs without redis
    import redis.asyncio as aioredis

SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
DEFAULT_SENTINEL_PORT = 26379
#: Seconds for one question to one Sentinel: a Sentinel that does not answer is skipped
#: for the next one, so this bounds how long a dead Sentinel delays finding the primary.
SENTINEL_TIMEOUT = 0.5


@dataclass(frozen=True)
class SentinelTarget:
    """What a ``redis+sentinel://`` URL names."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None
    tls: bool = False
    sentinel_timeout: float = SENTINEL_TIMEOUT


def is_sentinel(url: str) -> bool:
    return url.partition("://")[0].lower() in SENTINEL_SCHEMES


def parse_sentinel(url: str) -> SentinelTarget:
    """The Sentinels, the service and the credentials a ``redis+sentinel://`` URL names
    (``ValueError`` naming what is wrong: ``Settings`` checks the URL when it is read, so
    a URL that cannot be read stops the start with a reason instead of restarting the
    service for ever)."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in SENTINEL_SCHEMES:
        raise ValueError(f"not a Sentinel URL (redis+sentinel://…): {_redacted(url)}")
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if not at:
        userinfo, hosts = "", parts.netloc
    username, _, password = userinfo.partition(":")
    sentinels = tuple(_host_port(h, url) for h in hosts.split(",") if h)
    if not sentinels:
        raise ValueError(f"a Sentinel URL names no Sentinel (host:port): {_redacted(url)}")
    path = [unquote(p) for p in parts.path.split("/") if p]
    if not path or len(path) > 2:
        raise ValueError("a Sentinel URL's path is /service_name[/db]: "
                         f"{_redacted(url)}")
    db = 0
    if len(path) == 2:
        if not path[1].isdigit():
            raise ValueError(f"a Sentinel URL's database is a number: {_redacted(url)}")
        db = int(path[1])
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    unknown = set(query) - {"sentinel_password", "sentinel_username", "socket_timeout"}
    if unknown:
        raise ValueError(f"a Sentinel URL takes no parameter {sorted(unknown)}: "
                         f"{_redacted(url)}")
    try:
        timeout = float(query.get("socket_timeout", SENTINEL_TIMEOUT))
    except ValueError:
        raise ValueError(f"socket_timeout is a number of seconds: {_redacted(url)}") from None
    return SentinelTarget(
        sentinels=sentinels, service=path[0], db=db,
        username=unquote(username) or None, password=unquote(password) or None,
        sentinel_username=query.get("sentinel_username") or None,
        sentinel_password=query.get("sentinel_password") or None,
        tls=parts.scheme.lower() == "rediss+sentinel", sentinel_timeout=timeout)


def connect(url: str, **options: Any) -> aioredis.Redis:
    """A client of the store at ``url`` (any form the module's docstring lists);
    ``options`` are redis-py's connection options (pool size, health checks…). No I/O
    happens until the first command."""
    import redis.asyncio as aioredis  # noqa: PLC0415 - see the imports
    from redis.asyncio.sentinel import (  # noqa: PLC0415 - see the imports
        Sentinel,
        SentinelManagedSSLConnection,
    )

    if not is_sentinel(url):
        return aioredis.from_url(url, **options)
    target = parse_sentinel(url)
    sentinel_options: dict[str, Any] = {"socket_timeout": target.sentinel_timeout,
                                        "socket_connect_timeout": target.sentinel_timeout}
    if target.sentinel_password is not None:
        sentinel_options["password"] = target.sentinel_password
    if target.sentinel_username is not None:
        sentinel_options["username"] = target.sentinel_username
    data: dict[str, Any] = {"db": target.db, **options}
    if target.password is not None:
        data["password"] = target.password
    if target.username is not None:
        data["username"] = target.username
    if target.tls:
        data["connection_class"] = SentinelManagedSSLConnection
    sentinel = Sentinel(list(target.sentinels),  # type: ignore[no-untyped-call]
                        sentinel_kwargs=sentinel_options)
    client: aioredis.Redis = sentinel.master_for(target.service, **data)
    return client


def _host_port(text: str, url: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon:
        return text, DEFAULT_SENTINEL_PORT
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or not port.isdigit():
        raise ValueError(f"a Sentinel is host:port, not {text!r}: {_redacted(url)}")
    return host, int(port)


def _redacted(url: str) -> str:
    """The URL without its password (error messages are logged)."""
    parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if not at:
        return url.split("?", 1)[0]
    user = userinfo.partition(":")[0]
    return f"{parts.scheme}://{user}:***@{hosts}{parts.path}"
