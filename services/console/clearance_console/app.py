"""``clearance console``: the ops console as a process of its own — one NATS connection,
one HTTP server; it meets the other services only on NATS. The server listens on
127.0.0.1 unless given another address, answers only what its guard lets through
(``guard.py``) and keeps the bounds of ``clearance_runtime.edges.httpserve``."""

from __future__ import annotations

import asyncio
import contextlib

from clearance_console.bus import Bus
from clearance_console.guard import Guard
from clearance_console.live import Live
from clearance_console.web import MOST_BODY, application
from clearance_runtime.edges import httpserve
from clearance_runtime.messaging import bus as nats_bus
from clearance_runtime.process import logs
from clearance_runtime.process.settings import Settings

log = logs.get(__name__)


def url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host  # noqa: S104
    return f"http://{shown}:{port}/"


def guard_and_bounds(settings: Settings, host: str,
                     port: int) -> tuple[Guard, httpserve.Bounds]:
    """The console's guard and bounds from its settings (``CLEARANCE_CONSOLE_*``)."""
    guard = Guard(bind=host, port=port, token=settings.console_token,
                  extra_hosts=settings.console_hosts.split(","))
    bounds = httpserve.Bounds(max_body=MOST_BODY,
                              max_connections=settings.console_max_connections,
                              header_timeout=settings.http_header_timeout,
                              body_timeout=settings.http_body_timeout)
    return guard, bounds


async def run(nats_url: str, *, host: str = "127.0.0.1", port: int = 8080,
              started: asyncio.Event | None = None, inbox_prefix: str | None = None,
              settings: Settings | None = None) -> None:
    """Serve until cancelled (connecting to NATS first, retrying until it answers).
    ``inbox_prefix``: where replies arrive (unset: from the URL's user, see bus.connect)."""
    guard, bounds = guard_and_bounds(settings or Settings(), host, port)
    buses: list[Bus] = []

    async def on_error(exc: Exception) -> None:
        for bus in buses:  # none yet while connecting
            await bus.on_error(exc)

    nc = await nats_bus.connect(nats_url, name="clearance-console", error_cb=on_error,
                                inbox_prefix=inbox_prefix)
    bus = Bus(nc, Live())
    buses.append(bus)
    app_runner = httpserve.runner(application(bus, guard, bounds), bounds)
    await app_runner.setup()
    try:
        await httpserve.BoundedSite(app_runner, host, port, bounds).start()
        await bus.subscribe()
        log.info("console_started", url=url(host, port), token=guard.needs_token,
                 hosts=sorted(guard.hosts))
        if started is not None:
            started.set()
        async with asyncio.TaskGroup() as group:
            group.create_task(bus.poll())
            group.create_task(bus.refresh())
    finally:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.5):
                await app_runner.cleanup()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                await nc.close()
