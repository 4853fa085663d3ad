"""NATS connection and the event stream.

The stream is created at start if missing and left alone when it exists (operators may
have tuned it). It keeps the last messages of every object subject for ever, so replaying
it from the start rebuilds the complete current state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from clearance_api import inboxes
from clearance_api.wire import EVENTS_STREAM, EVENTS_SUBJECTS
from clearance_runtime import logs, retries

log = logs.get(__name__)

#: History kept per object subject. Older versions of an object are not needed to rebuild
#: state (every event carries the whole object); the latest is never discarded.
HISTORY_PER_OBJECT = 16
DUPLICATE_WINDOW_SECONDS = 120.0


def redacted(url: str) -> str:
    """The URL without its password, for logs (credentials may ride in the URL)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


async def connect(url: str, *, name: str, inbox_prefix: str | None = None,
                  error_cb: Callable[[Exception], Awaitable[None]] | None = None) -> Client:
    """Connect, retrying until the server answers; reconnect for ever afterwards.
    ``error_cb`` hears the asynchronous errors (a refused subscription is only reported
    there) instead of the default, which logs them.

    Replies (and JetStream's answers and deliveries) arrive under ``inbox_prefix``;
    unset: ``_INBOX.<user>`` for the URL's user, the only inboxes that user may read
    (``deploy/nats/accounts.conf``), else ``_INBOX``."""
    prefix = inbox_prefix or inboxes.prefix_for(url)

    async def _error(exc: Exception) -> None:
        log.warning("nats_error", error=str(exc))

    async def _disconnected() -> None:
        log.warning("nats_disconnected")

    async def _reconnected() -> None:
        log.info("nats_reconnected")

    async def _connect() -> Client:
        return await nats.connect(
            url,
            name=name,
            inbox_prefix=prefix,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            connect_timeout=2,
            allow_reconnect=True,
            error_cb=error_cb or _error,
            disconnected_cb=_disconnected,
            reconnected_cb=_reconnected,
        )

    return await retries.forever("nats connect", _connect, url=redacted(url))


def stream_config() -> StreamConfig:
    return StreamConfig(
        name=EVENTS_STREAM,
        subjects=[EVENTS_SUBJECTS],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        max_msgs_per_subject=HISTORY_PER_OBJECT,
        duplicate_window=DUPLICATE_WINDOW_SECONDS,
    )


async def ensure_stream(js: JetStreamContext) -> None:
    """Create ``CLEARANCE_EVENTS`` if it does not exist (racing creators are fine)."""
    with contextlib.suppress(NotFoundError):
        await js.stream_info(EVENTS_STREAM)
        return
    try:
        await js.add_stream(stream_config())
        log.info("stream_created", stream=EVENTS_STREAM)
    except nats.js.errors.BadRequestError as exc:
        # Another service created it between our two calls.
        if "already in use" not in str(exc):
            raise


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
