"""``clearance console``: the ops console as a process of its own — one NATS connection,
one HTTP server; it meets the other services only on NATS."""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from clearance_console.bus import Bus
from clearance_console.live import Live
from clearance_console.web import application
from clearance_runtime import bus as nats_bus
from clearance_runtime import logs

log = logs.get(__name__)


def url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host  # noqa: S104
    return f"http://{shown}:{port}/"


async def run(nats_url: str, *, host: str = "127.0.0.1", port: int = 8080,
              started: asyncio.Event | None = None, inbox_prefix: str | None = None) -> None:
    """Serve until cancelled (connecting to NATS first, retrying until it answers).
    ``inbox_prefix``: where replies arrive (unset: from the URL's user, see bus.connect)."""
    buses: list[Bus] = []

    async def on_error(exc: Exception) -> None:
        for bus in buses:  # none yet while connecting
            await bus.on_error(exc)

    nc = await nats_bus.connect(nats_url, name="clearance-console", error_cb=on_error,
                                inbox_prefix=inbox_prefix)
    bus = Bus(nc, Live())
    buses.append(bus)
    app_runner = web.AppRunner(application(bus), shutdown_timeout=1.0, access_log=None)
    await app_runner.setup()
    try:
        await web.TCPSite(app_runner, host, port).start()
        await bus.subscribe()
        log.info("console_started", url=url(host, port))
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
