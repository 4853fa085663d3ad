"""``/healthz``, ``/readyz`` and ``/metrics`` on each process's metrics port.

Liveness and readiness answer different questions, and a Kubernetes pod acts on each
differently (a failed liveness probe restarts the container, a failed readiness probe only
takes the pod out of its Service), so they follow different things:

* ``/healthz`` (liveness, also ``/livez``): is *this process* working? It follows the
  process's own loops only, in memory — never Valkey or NATS, so that an outage of either
  (a Valkey failover) does not restart every pod in the middle of it. It fails when the
  event loop has not ticked within ``STALE_AFTER`` (something blocks it; the server runs
  on the services' own loop, so a loop blocked right now does not answer at all), or when
  a service's main loop has not turned within ``LOOP_STALE_AFTER`` (``START_GRACE`` before
  its first turn). A loop waiting out an outage turns: every retry of the retry policy
  counts (``retries``), as do the service loops' periodic turns whatever their I/O gave.
* ``/readyz`` (readiness): can this process do its work *now*? Live, and each service is
  connected to NATS, reaches Valkey (a write within ``STALE_AFTER``, else a ``PING``
  answered within ``PING_TIMEOUT``; the gateway uses no store), is not held by its own
  condition (the decision service: the store is not behind its high-water mark,
  :mod:`.highwater`) and is caught up: no more than ``max_lag`` events behind.
* ``/metrics``: Prometheus text format. Any other path is 404 (a probe on a wrong path
  must fail, not pass).

Each answer is a small JSON object saying, per service, what is missing.

The server listens on 127.0.0.1 unless ``CLEARANCE_METRICS_HOST`` says otherwise (in a pod,
Prometheus and the kubelet's probes come to the pod's address: ``deploy/`` sets
0.0.0.0). A client gets ``HEAD_SECONDS`` to send its request's head and is then
disconnected; beyond ``MAX_CONNECTIONS`` at once, a connection is closed unanswered.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import msgspec
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

#: The event loop's ticker and a store write are current this long.
STALE_AFTER = 5.0
#: A main loop is live while it turned this recently: longer than any one wait on a
#: server (a fetch, a blocking read, a Sentinel query) that does not count as a turn.
LOOP_STALE_AFTER = 30.0
START_GRACE = 30.0
#: How often the event loop's ticker ticks; how long ``/readyz`` waits for a PING.
TICK = 0.5
PING_TIMEOUT = 1.0
#: Seconds a client has to send its request's head; connections served at once.
HEAD_SECONDS = 5.0
MAX_CONNECTIONS = 64
_json = msgspec.json.Encoder()


@dataclass
class Loop:
    """What one service of this process last reported."""

    started: float = field(default_factory=time.monotonic)
    #: monotonic time of the main loop's last turn (in memory, whatever its I/O gave)
    turned: float | None = None
    #: monotonic time of the last heartbeat written to the store (proves it reachable)
    beat: float | None = None
    revision: int = 0
    lag: int = 0
    connected: Callable[[], bool] = lambda: True
    #: A PING of the store (None: the service uses no store, as the gateway).
    ping: Callable[[], Awaitable[object]] | None = None
    #: Why the service holds itself not ready (None: it does not).
    held: str | None = None


LOOPS: dict[str, Loop] = {}
#: The service whose task (and the tasks it starts) this is: retries turn its loop.
SERVICE: contextvars.ContextVar[str | None] = contextvars.ContextVar("service", default=None)
#: monotonic time of the event loop's last tick (None: no ticker runs, as in a test
#: that serves no probes).
_ticked: list[float | None] = [None]


def register(service: str, connected: Callable[[], bool],
             ping: Callable[[], Awaitable[object]] | None = None) -> None:
    """Follow ``service`` from here on (and mark the current task's context as its)."""
    LOOPS[service] = Loop(connected=connected, ping=ping)
    SERVICE.set(service)


def unregister(service: str) -> None:
    LOOPS.pop(service, None)


def turn(service: str | None = None) -> None:
    """The service's main loop went round (``service`` None: the current context's);
    in memory only — liveness."""
    name = service if service is not None else SERVICE.get()
    if name is None:
        return
    loop = LOOPS.get(name)
    if loop is not None:
        loop.turned = time.monotonic()


def beat(service: str, revision: int, lag: int) -> None:
    """A heartbeat written to the store: the loop turned and the store is reachable."""
    loop = LOOPS.setdefault(service, Loop())
    loop.turned = loop.beat = time.monotonic()
    loop.revision, loop.lag = revision, lag


def hold(service: str, why: str | None) -> None:
    """Hold ``service`` not ready for ``why`` (None: release it)."""
    loop = LOOPS.get(service)
    if loop is not None:
        loop.held = why


def heartbeat_ages() -> dict[str, float]:
    """service -> seconds since its last heartbeat (since it started, before the first)."""
    now = time.monotonic()
    return {name: now - (loop.beat if loop.beat is not None else loop.started)
            for name, loop in sorted(LOOPS.items())}


def connections() -> dict[str, bool]:
    """target -> whether every service of this process reaches it (nothing: no service).
    A heartbeat is a store write, so a recent one proves the store reachable."""
    if not LOOPS:
        return {}
    now = time.monotonic()
    return {
        "nats": all(loop.connected() for loop in LOOPS.values()),
        "redis": all(loop.beat is not None and now - loop.beat <= STALE_AFTER
                     for loop in LOOPS.values() if loop.ping is not None),
    }


def liveness() -> dict[str, str]:
    """service -> problem, for every service whose loop is not alive (``event-loop``:
    the process's event loop itself)."""
    now = time.monotonic()
    problems = {}
    ticked = _ticked[0]
    if ticked is not None and now - ticked > STALE_AFTER:
        problems["event-loop"] = f"the event loop has not ticked for {now - ticked:.1f} s"
    for name, loop in LOOPS.items():
        last = loop.turned if loop.turned is not None else loop.started
        allowed = LOOP_STALE_AFTER if loop.turned is not None else START_GRACE
        if now - last > allowed:
            problems[name] = f"its loop has not turned for {now - last:.1f} s"
    return problems


async def readiness(max_lag: int) -> dict[str, str]:
    problems = liveness()
    now = time.monotonic()
    for name, loop in list(LOOPS.items()):
        if name in problems:
            continue
        if not loop.connected():
            problems[name] = "not connected to NATS"
        elif loop.ping is not None and (loop.beat is None or now - loop.beat > STALE_AFTER) \
                and (unreachable := await _ping(loop)) is not None:
            problems[name] = f"Valkey unreachable: {unreachable}"
        elif loop.held is not None:
            problems[name] = loop.held
        elif loop.lag > max_lag:
            problems[name] = f"{loop.lag} events behind (bound {max_lag})"
    return problems


async def _ping(loop: Loop) -> str | None:
    """None if the store answers a PING in time, else what went wrong."""
    assert loop.ping is not None
    try:
        async with asyncio.timeout(PING_TIMEOUT):
            await loop.ping()
    except TimeoutError:
        return f"no answer to PING within {PING_TIMEOUT} s"
    except Exception as exc:  # any failure of the store's client is "not reachable"
        return f"{type(exc).__name__}: {exc}"[:200]
    return None


async def _tick() -> None:
    """The event loop's own heartbeat: a sleep that wakes late (or never) means the loop
    was blocked."""
    while True:
        _ticked[0] = time.monotonic()
        await asyncio.sleep(TICK)


async def serve(port: int, *, max_lag: int, host: str = "127.0.0.1") -> None:
    """Serve the probes on ``host:port`` until cancelled (port 0: nothing)."""
    if not port:
        return
    open_connections = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if open_connections[0] >= MAX_CONNECTIONS:
            writer.transport.abort()
            return
        open_connections[0] += 1
        try:
            await _handle(reader, writer, max_lag)
        finally:
            open_connections[0] -= 1

    ticker = asyncio.create_task(_tick(), name="probes-ticker")
    try:
        server = await asyncio.start_server(handle, host=host, port=port)
        async with server:
            await server.serve_forever()
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
        _ticked[0] = None


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  max_lag: int) -> None:
    try:
        async with asyncio.timeout(HEAD_SECONDS):
            head = await reader.readuntil(b"\r\n\r\n")
        parts = head.split(b" ", 2)
        path = parts[1].split(b"?", 1)[0].decode("latin-1") if len(parts) > 1 else ""
        status, ctype, body = await _answer(path, max_lag)
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n".encode() + body)
        await writer.drain()
    except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def _answer(path: str, max_lag: int) -> tuple[str, str, bytes]:
    if path == "/metrics":
        return "200 OK", CONTENT_TYPE_LATEST, generate_latest(REGISTRY)
    if path in ("/healthz", "/livez"):
        problems = liveness()
    elif path == "/readyz":
        problems = await readiness(max_lag)
    else:
        return "404 Not Found", "text/plain", b"not found: use /metrics, /healthz or /readyz\n"
    body = _json.encode({
        "ok": not problems, "problems": problems,
        "services": {n: {"revision": loop.revision, "lag": loop.lag}
                     for n, loop in sorted(LOOPS.items())}})
    return ("200 OK" if not problems else "503 Service Unavailable",
            "application/json", body)
