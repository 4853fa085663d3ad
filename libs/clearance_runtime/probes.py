"""``/healthz``, ``/readyz`` and ``/metrics`` on each process's metrics port.

* ``/healthz`` (liveness): every service of this process has completed a loop iteration
  (its heartbeat) within ``STALE_AFTER`` — or is still starting. The server runs on the
  services' own event loop, so a loop blocked by anything also fails the probe.
* ``/readyz`` (readiness): live, and each service is connected to NATS, has written to
  Redis within ``STALE_AFTER`` (its heartbeat is a Redis write) and is caught up: no more
  than ``max_lag`` events behind.
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
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

STALE_AFTER = 5.0
START_GRACE = 30.0
#: Seconds a client has to send its request's head; connections served at once.
HEAD_SECONDS = 5.0
MAX_CONNECTIONS = 64
_json = msgspec.json.Encoder()


@dataclass
class Loop:
    """What one service of this process last reported."""

    started: float = field(default_factory=time.monotonic)
    beat: float | None = None  # monotonic time of the last heartbeat written to Redis
    revision: int = 0
    lag: int = 0
    connected: Callable[[], bool] = lambda: True


LOOPS: dict[str, Loop] = {}


def register(service: str, connected: Callable[[], bool]) -> None:
    LOOPS[service] = Loop(connected=connected)


def unregister(service: str) -> None:
    LOOPS.pop(service, None)


def beat(service: str, revision: int, lag: int) -> None:
    loop = LOOPS.setdefault(service, Loop())
    loop.beat, loop.revision, loop.lag = time.monotonic(), revision, lag


def heartbeat_ages() -> dict[str, float]:
    """service -> seconds since its last heartbeat (since it started, before the first)."""
    now = time.monotonic()
    return {name: now - (loop.beat if loop.beat is not None else loop.started)
            for name, loop in sorted(LOOPS.items())}


def connections() -> dict[str, bool]:
    """target -> whether every service of this process reaches it (nothing: no service).
    A heartbeat is a Redis write, so a recent one proves Redis reachable."""
    if not LOOPS:
        return {}
    now = time.monotonic()
    return {
        "nats": all(loop.connected() for loop in LOOPS.values()),
        "redis": all(loop.beat is not None and now - loop.beat <= STALE_AFTER
                     for loop in LOOPS.values()),
    }


def liveness() -> dict[str, str]:
    """service -> problem, for every service whose loop is not alive."""
    now = time.monotonic()
    problems = {}
    for name, loop in LOOPS.items():
        last = loop.beat if loop.beat is not None else loop.started
        allowed = STALE_AFTER if loop.beat is not None else START_GRACE
        if now - last > allowed:
            problems[name] = f"no heartbeat for {now - last:.1f} s"
    return problems


def readiness(max_lag: int) -> dict[str, str]:
    problems = liveness()
    now = time.monotonic()
    for name, loop in LOOPS.items():
        if name in problems:
            continue
        if not loop.connected():
            problems[name] = "not connected to NATS"
        elif loop.beat is None or now - loop.beat > STALE_AFTER:
            problems[name] = "no Redis write yet" if loop.beat is None else "Redis unreachable"
        elif loop.lag > max_lag:
            problems[name] = f"{loop.lag} events behind (bound {max_lag})"
    return problems


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

    server = await asyncio.start_server(handle, host=host, port=port)
    async with server:
        await server.serve_forever()


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  max_lag: int) -> None:
    try:
        async with asyncio.timeout(HEAD_SECONDS):
            head = await reader.readuntil(b"\r\n\r\n")
        parts = head.split(b" ", 2)
        path = parts[1].split(b"?", 1)[0].decode("latin-1") if len(parts) > 1 else ""
        status, ctype, body = _answer(path, max_lag)
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


def _answer(path: str, max_lag: int) -> tuple[str, str, bytes]:
    if path == "/metrics":
        return "200 OK", CONTENT_TYPE_LATEST, generate_latest(REGISTRY)
    if path in ("/healthz", "/livez"):
        problems = liveness()
    elif path == "/readyz":
        problems = readiness(max_lag)
    else:
        return "404 Not Found", "text/plain", b"not found: use /metrics, /healthz or /readyz\n"
    body = _json.encode({
        "ok": not problems, "problems": problems,
        "services": {n: {"revision": loop.revision, "lag": loop.lag}
                     for n, loop in sorted(LOOPS.items())}})
    return ("200 OK" if not problems else "503 Service Unavailable",
            "application/json", body)
