"""The HTTP side: the page (static files shipped in the package), a small JSON API and a
Server-Sent Events stream of the live snapshot.

    GET  /                       the page
    GET  /api/live               the live snapshot (JSON)
    GET  /api/stream             the same, pushed every second (text/event-stream)
    POST /api/play/<action>      a playground question (JSON in, JSON out)

No authentication of its own: it binds to 127.0.0.1 unless told otherwise, and what it can
do is what its NATS user may do (README "Ops console").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

from aiohttp import web

from clearance_console import playground
from clearance_console.bus import POLL_SECONDS, Bus

STATIC = Path(str(resources.files("clearance_console") / "static"))
BUS: web.AppKey[Bus] = web.AppKey("bus", Bus)
CLOSING: web.AppKey[asyncio.Event] = web.AppKey("closing", asyncio.Event)
#: Largest playground request body (a pasted policy), bytes.
MOST_BODY = 1 << 20


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, default=str))


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})


async def live(request: web.Request) -> web.Response:
    bus = request.app[BUS]
    return _json(bus.live.snapshot(bus.now()))


async def stream(request: web.Request) -> web.StreamResponse:
    """One snapshot per poll, until the page goes away or the console stops."""
    bus, closing = request.app[BUS], request.app[CLOSING]
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-store"})
    await response.prepare(request)
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        while not closing.is_set():
            data = json.dumps(bus.live.snapshot(bus.now()), default=str)
            await response.write(f"data: {data}\n\n".encode())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(closing.wait(), POLL_SECONDS)
    return response


async def play(request: web.Request) -> web.Response:
    action = playground.ACTIONS.get(request.match_info["action"])
    if action is None:
        return _json({"error": {"code": "not_found", "message": "no such action"}}, 404)
    try:
        body = await request.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return _json({"error": {"code": "bad_request", "message": "send a JSON object"}}, 400)
    try:
        return _json(await action(request.app[BUS], body))
    except playground.PlaygroundError as exc:
        return _json({"error": {"code": "bad_request", "message": str(exc)}}, 400)


def application(bus: Bus) -> web.Application:
    app = web.Application(client_max_size=MOST_BODY)
    app[BUS] = bus
    app[CLOSING] = asyncio.Event()

    async def closing(app: web.Application) -> None:
        app[CLOSING].set()  # open event streams end now, not at the shutdown timeout

    app.on_shutdown.append(closing)
    app.router.add_get("/", index)
    app.router.add_get("/api/live", live)
    app.router.add_get("/api/stream", stream)
    app.router.add_post("/api/play/{action}", play)
    app.router.add_static("/static/", STATIC)
    return app
