"""NATS connection and the event stream.

The stream is created at start if missing and left alone when it exists (operators may
have tuned it). It keeps the last messages of every object subject for ever, so replaying
it from the start rebuilds the complete current state. In a region that mirrors another
region's stream (``CLEARANCE_STREAM_MIRROR``, docs/regions.md) it is created as that
mirror instead, and an existing stream must be one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    ExternalStream,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamSource,
)
from nats.js.errors import NotFoundError

from clearance_api import inboxes, nats_urls
from clearance_api.wire import EVENTS_SUBJECTS
from clearance_runtime.messaging import jetstream
from clearance_runtime.messaging.jetstream import Topology
from clearance_runtime.process import logs, retries

log = logs.get(__name__)
DEFAULT = jetstream.DEFAULT

#: History kept per object subject. Older versions of an object are not needed to rebuild
#: state (every event carries the whole object); the latest is never discarded.
HISTORY_PER_OBJECT = 16
DUPLICATE_WINDOW_SECONDS = 120.0


def redacted(url: str) -> str:
    """The URL (or each of a list's) without its password, for logs (credentials may ride
    in the URL)."""
    items = nats_urls.split(url)
    if len(items) > 1:
        return ",".join(redacted(item) for item in items)
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return nats_urls.redacted(url)
    if password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


#: How a connection finds its way in a cluster, with nats-py's options
#: (docs/operations.md: Configuration).
#: Seconds between two attempts at the same server. With several, a node that is down is
#: skipped for the next one at once: only a whole cluster down waits this per round.
RECONNECT_WAIT = 0.5
#: A server that does not answer within this is given up for the next one.
CONNECT_TIMEOUT = 2.0
#: A node lost without closing its sockets (a machine gone, a partition) is noticed only
#: by pings: nats-py's default (every 120 s, two missed) would leave a service talking to
#: nothing for four minutes. Every 1.5 s, two missed: noticed within 3-4.5 s, before a
#: JetStream election (4-9 s) is over, so the service is on another node when the new
#: leader is (every 3 s noticed it only after 6-9 s: after the election, on top of it).
PING_INTERVAL = 1.5
MAX_OUTSTANDING_PINGS = 2


async def connect(url: str, *, name: str, inbox_prefix: str | None = None,
                  error_cb: Callable[[Exception], Awaitable[None]] | None = None) -> Client:
    """Connect, retrying until a server answers; reconnect for ever afterwards.
    ``url`` is one NATS URL or a cluster's several (comma- or space-separated: every
    one is checked, ValueError for one that is no NATS URL). ``error_cb`` hears the
    asynchronous errors (a refused subscription is only reported there) instead of the
    default, which logs them.

    Replies (and JetStream's answers and deliveries) arrive under ``inbox_prefix``;
    unset: ``_INBOX.<user>`` for the (first) URL's user, the only inboxes that user may
    read (``deploy/nats/accounts.conf``), else ``_INBOX``."""
    servers = nats_urls.parse(url)
    prefix = inbox_prefix or inboxes.prefix_for(url)

    async def _error(exc: Exception) -> None:
        log.warning("nats_error", error=str(exc))

    async def _disconnected() -> None:
        log.warning("nats_disconnected")

    async def _reconnected() -> None:
        log.info("nats_reconnected", server=_connected_to(box[-1]) if box else "")

    box: list[Client] = []

    async def _connect() -> Client:
        nc = await nats.connect(
            servers,
            name=name,
            inbox_prefix=prefix,
            # Never give up: a service outlives any outage of the bus (its probes say so).
            max_reconnect_attempts=-1,
            reconnect_time_wait=RECONNECT_WAIT,
            connect_timeout=CONNECT_TIMEOUT,
            ping_interval=PING_INTERVAL,
            max_outstanding_pings=MAX_OUTSTANDING_PINGS,
            allow_reconnect=True,
            # Random order (nats-py's default, kept on purpose): the replicas of a service
            # spread over the nodes instead of all landing on the first one listed.
            dont_randomize=False,
            error_cb=error_cb or _error,
            disconnected_cb=_disconnected,
            reconnected_cb=_reconnected,
        )
        box.append(nc)
        return nc

    connected = await retries.forever("nats connect", _connect, url=redacted(url))
    log.info("nats_connected", server=_connected_to(connected), servers=len(servers))
    return connected


def _connected_to(nc: Client) -> str:
    current = nc.connected_url
    return nats_urls.redacted(current.geturl()) if current is not None else ""


def stream_config(topology: Topology = DEFAULT) -> StreamConfig:
    if topology.mirror:
        # A mirror has no subjects (it takes no publishes) and no duplicate window (it
        # copies what its source accepted, sequence numbers included); it keeps the
        # same history per object, and as many copies as this region's setting says.
        return StreamConfig(
            name=topology.stream,
            mirror=StreamSource(name=topology.stream,
                                external=ExternalStream(api=topology.mirror_api)),
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            discard=DiscardPolicy.OLD,
            max_msgs_per_subject=HISTORY_PER_OBJECT,
            num_replicas=topology.replicas,
        )
    return StreamConfig(
        name=topology.stream,
        subjects=[EVENTS_SUBJECTS],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        max_msgs_per_subject=HISTORY_PER_OBJECT,
        duplicate_window=DUPLICATE_WINDOW_SECONDS,
        num_replicas=topology.replicas,
    )


async def ensure_stream(js: JetStreamContext, topology: Topology = DEFAULT, *,
                        reconcile: bool = True) -> None:
    """Create the event stream if it does not exist (racing creators are fine), with
    ``topology``'s replicas — as a mirror of its domain's stream when it names one; an
    existing one is brought to that count (``reconcile``; else a difference is only
    logged) and otherwise left as it is (clearance_runtime.messaging.jetstream).
    :class:`~clearance_runtime.messaging.jetstream.StreamMismatch` when the existing
    stream is a mirror and ``topology`` a source, or the other way round."""
    try:
        config = await jetstream.reconcile(js, topology.stream, replicas=topology.replicas,
                                           update=reconcile)
    except NotFoundError:
        pass
    else:
        check_kind(config, topology)
        return
    try:
        await js.add_stream(stream_config(topology))
        log.info("stream_created", stream=topology.stream, replicas=topology.replicas,
                 mirror_of=topology.mirror or None)
    except nats.js.errors.BadRequestError as exc:
        # Another service created it between our two calls.
        if "already in use" not in str(exc):
            raise
        check_kind((await js.stream_info(topology.stream)).config, topology)


def check_kind(config: StreamConfig, topology: Topology) -> None:
    """StreamMismatch unless the stream is the mirror (or the source) ``topology`` says."""
    mirror = config.mirror
    api = mirror.external.api if mirror is not None and mirror.external is not None else None
    if topology.mirror:
        if mirror is None or mirror.name != topology.stream or api != topology.mirror_api:
            found = "a stream with subjects" if mirror is None else \
                f"a mirror of {mirror.name} through {api or 'this domain'}"
            raise jetstream.StreamMismatch(
                f"stream {topology.stream} is {found}, not a mirror of {topology.stream} "
                f"in domain {topology.mirror} (CLEARANCE_STREAM_MIRROR={topology.mirror}): "
                f"delete it to have it created as the mirror, or fix the setting")
    elif mirror is not None:
        raise jetstream.StreamMismatch(
            f"stream {topology.stream} is a mirror of {mirror.name} (through "
            f"{api or 'this domain'}) and takes no publishes: set CLEARANCE_STREAM_MIRROR "
            f"to its source's domain in this region, and run no watcher here")


class Position(NamedTuple):
    """Where a JetStream message sits, from its reply subject: its stream sequence, when
    it was stored (milliseconds since the epoch), how many messages follow it, and its
    consumer's delivery sequence (one more for every delivery the consumer makes)."""

    stream_seq: int
    stored_ms: int
    pending: int
    consumer_seq: int


def position(msg: Any) -> Position:
    """The message's :class:`Position`, read straight from its ack subject.

    nats-py's ``Msg.metadata`` builds a dataclass and a timezone-aware datetime per
    message: about 9% of the compiler's time on a backlog, for three integers. Both
    forms of the subject are read (``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.
    <cseq>.<ns>.<pending>``, and the one with a domain and an account hash in front);
    anything else is not a JetStream message (ValueError)."""
    tokens = (msg.reply or "").split(".")
    if len(tokens) == 9 and tokens[0] == "$JS" and tokens[1] == "ACK":
        return Position(int(tokens[5]), int(tokens[7]) // 1_000_000, int(tokens[8]),
                        int(tokens[6]))
    if len(tokens) >= 12 and tokens[0] == "$JS" and tokens[1] == "ACK":
        return Position(int(tokens[7]), int(tokens[9]) // 1_000_000, int(tokens[10]),
                        int(tokens[8]))
    raise ValueError(f"not a JetStream message (reply subject {msg.reply!r})")


def connection_of(js: JetStreamContext) -> Client:
    """The connection a JetStream context speaks over. nats-py keeps it in ``_nc`` and
    offers no accessor (pinned version; ``tests/unit/test_bus_position.py`` checks it)."""
    conn: Client = js._nc
    return conn


def header(msg: Any, name: str) -> str | None:
    headers = getattr(msg, "headers", None) or {}
    value = headers.get(name)
    return value if isinstance(value, str) else None
