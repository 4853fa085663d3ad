"""Serving HTTP with the bounds every Clearance web surface shares (the gateway, the
console): aiohttp parses and routes; this module bounds what one client may hold or cause.

* **Connections**: at most ``max_connections`` at once, counting those still in their
  TLS handshake. One more is answered ``503`` and closed at once (after its handshake,
  which is itself bounded), so a flood cannot exhaust the process's descriptors or memory.
* **Request heads**: aiohttp's keep-alive timer fires while the server waits for the next
  request's head — whether nothing or a part of it has come — and closes the connection.
  Set to ``header_timeout``, it is the header read timeout: a client that has not sent a
  complete head within it of connecting, or of its previous answer, is disconnected
  (slowloris). The TLS handshake gets the same bound; a TLS close, ``TLS_SHUTDOWN``.
* **Bodies**: :func:`read_body` reads a body within ``body_timeout`` (else ``408``) and
  ``max_body`` bytes (a larger ``Content-Length`` is refused before a byte is read:
  ``413``); :func:`closing` closes the connection after either, once aiohttp has
  discarded what is left for at most ``LINGER`` seconds.
* A handler whose client went away is cancelled (``handler_cancellation``): its work
  stops with it.

Heads are also bounded in size by aiohttp's parser (8 KiB a line or a field, 128 fields).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from ssl import SSLContext

from aiohttp import web
from aiohttp.typedefs import Middleware
from aiohttp.web_protocol import RequestHandler

from clearance_api.errors import Refused

__all__ = ["Admission", "BoundedSite", "Bounds", "Handler", "Middleware", "closing",
           "read_body", "runner"]

#: Seconds aiohttp goes on reading (and discarding) a body the answer did not need,
#: before it closes the connection: enough for a client to read a 413 it caused.
LINGER = 1.0
#: Seconds a TLS close may wait for the peer's close_notify before the socket goes.
TLS_SHUTDOWN = 2.0
#: Seconds in-flight requests get to finish when a server stops.
SHUTDOWN_SECONDS = 1.0
_BUSY_BODY = b"too many connections; try again\n"
BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"
        b"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
        % (len(_BUSY_BODY), _BUSY_BODY))


@dataclass(frozen=True)
class Bounds:
    max_body: int
    max_connections: int
    header_timeout: float = 10.0
    body_timeout: float = 10.0


class _Busy(asyncio.Protocol):
    """A connection over the limit: one 503, then closed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(BUSY)
        transport.close()


class Admission:
    """The protocol factory: aiohttp's request handler while connections are under the
    limit, else :class:`_Busy`. A connection counts from its accept: established ones
    are aiohttp's; one still in its TLS handshake is counted until it is established
    or the handshake's bound has passed (a failed handshake leaves no other trace)."""

    def __init__(self, server: web.Server, bounds: Bounds) -> None:
        self._server = server
        self._limit = bounds.max_connections
        self._handshake = bounds.header_timeout + 1.0
        self._pending: dict[RequestHandler, float] = {}
        self.refused = 0  # connections answered 503, for tests and logs

    def __call__(self) -> asyncio.Protocol:
        now = time.monotonic()
        live = set(self._server.connections)
        self._pending = {handler: since for handler, since in self._pending.items()
                         if handler not in live and now - since < self._handshake}
        if len(live) + len(self._pending) >= self._limit:
            self.refused += 1
            return _Busy()
        handler = self._server()
        self._pending[handler] = now
        return handler


class BoundedSite(web.TCPSite):
    """A TCP site whose connections go through :class:`Admission`, with the TLS
    handshake and shutdown bounded."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, bounds: Bounds, *,
                 ssl_context: SSLContext | None = None) -> None:
        super().__init__(runner, host, port, ssl_context=ssl_context)
        self._bounds = bounds
        self.admission: Admission | None = None

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        self.admission = Admission(server, self._bounds)
        tls = self._ssl_context is not None
        self._server = await asyncio.get_running_loop().create_server(
            self.admission, self._host, self._port, ssl=self._ssl_context,
            backlog=self._backlog,
            ssl_handshake_timeout=self._bounds.header_timeout if tls else None,
            ssl_shutdown_timeout=TLS_SHUTDOWN if tls else None)

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """Where it listens: (address, port) of each socket."""
        # asyncio's Server or uvloop's: both have ``sockets``, AbstractServer does not.
        sockets = getattr(self._server, "sockets", None) or ()
        return [sock.getsockname()[:2] for sock in sockets]


def runner(app: web.Application, bounds: Bounds) -> web.AppRunner:
    """An AppRunner whose connections keep the bounds (see the module's docstring)."""
    return web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_SECONDS,
                         keepalive_timeout=bounds.header_timeout, lingering_time=LINGER,
                         handler_cancellation=True)


async def read_body(request: web.Request, bounds: Bounds) -> bytes:
    """The request's body, read within the bounds; :class:`Refused` (408, 413) if not."""
    length = request.content_length
    if length is not None and length > bounds.max_body:
        raise Refused(413, f"request body exceeds {bounds.max_body} bytes")
    try:
        async with asyncio.timeout(bounds.body_timeout):
            return await request.read()
    except TimeoutError:
        raise Refused(408, f"request body not received within "
                           f"{bounds.body_timeout:g} s") from None
    except web.HTTPRequestEntityTooLarge:
        raise Refused(413, f"request body exceeds {bounds.max_body} bytes") from None


#: Statuses after which the connection is not reused: what is left of the body may be
#: any amount, arriving at any pace.
_CLOSE_AFTER = frozenset({408, 413})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def closing(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Any :class:`Refused` a handler lets through becomes its status with the message;
    after a 408 or 413 the connection closes."""
    try:
        response = await handler(request)
    except Refused as exc:
        response = web.Response(status=exc.status, text=exc.message + "\n")
    if response.status in _CLOSE_AFTER:
        response.force_close()
    return response
