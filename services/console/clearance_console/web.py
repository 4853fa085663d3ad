"""The HTTP side: the page (static files shipped in the package), a small JSON API and a
Server-Sent Events stream of the live snapshot.

    GET  /                       the page
    GET  /api/live               the live snapshot (JSON)
    GET  /api/stream             the same, pushed every second (text/event-stream)
    POST /api/play/<action>      a playground question (JSON in, JSON out)
    GET  /login, POST /login     the token's page, and the session cookie it sets

It binds to 127.0.0.1 unless told otherwise; every request passes the guard (``guard.py``:
its Host, same-origin API calls, JSON writes, the optional token) and the bounds of
``clearance_runtime.edges.httpserve``; what it can do is what its NATS user may do
(docs/guide/console.md,
\"Ops console\").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

from aiohttp import web

from clearance_api.errors import Refused
from clearance_console import playground
from clearance_console.bus import POLL_SECONDS, Bus
from clearance_console.guard import Guard
from clearance_runtime.edges import httpserve

STATIC = Path(str(resources.files("clearance_console") / "static"))
BUS: web.AppKey[Bus] = web.AppKey("bus", Bus)
CLOSING: web.AppKey[asyncio.Event] = web.AppKey("closing", asyncio.Event)
GUARD: web.AppKey[Guard] = web.AppKey("guard", Guard)
BOUNDS: web.AppKey[httpserve.Bounds] = web.AppKey("bounds", httpserve.Bounds)
#: Largest playground request body (a pasted policy), bytes.
MOST_BODY = 1 << 20


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, default=str))


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})


async def live(request: web.Request) -> web.Response:
    bus = request.app[BUS]
    return _json(bus.snapshot())


async def stream(request: web.Request) -> web.StreamResponse:
    """One snapshot per poll, until the page goes away or the console stops."""
    bus, closing = request.app[BUS], request.app[CLOSING]
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-store"})
    await response.prepare(request)
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        while not closing.is_set():
            data = json.dumps(bus.snapshot(), default=str)
            await response.write(f"data: {data}\n\n".encode())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(closing.wait(), POLL_SECONDS)
    return response


async def _json_body(request: web.Request) -> object:
    """The request's JSON, read within the bounds; None for what is not JSON."""
    data = await httpserve.read_body(request, request.app[BOUNDS])
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


async def play(request: web.Request) -> web.Response:
    action = playground.ACTIONS.get(request.match_info["action"])
    if action is None:
        return _json({"error": {"code": "not_found", "message": "no such action"}}, 404)
    try:
        body = await _json_body(request)
    except Refused as exc:
        return _json({"error": {"code": "bad_request", "message": exc.message}}, exc.status)
    if not isinstance(body, dict):
        return _json({"error": {"code": "bad_request", "message": "send a JSON object"}}, 400)
    try:
        return _json(await action(request.app[BUS], body))
    except playground.PlaygroundError as exc:
        return _json({"error": {"code": "bad_request", "message": str(exc)}}, 400)


async def login_page(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "login.html", headers={"Cache-Control": "no-store"})


async def login(request: web.Request) -> web.Response:
    """``{"token"}`` in; the session cookie out if it is the console's token."""
    guard = request.app[GUARD]
    try:
        body = await _json_body(request)
    except Refused as exc:
        return _json({"error": {"code": "bad_request", "message": exc.message}}, exc.status)
    token = body.get("token") if isinstance(body, dict) else None
    if not isinstance(token, str) or not guard.accepts(token):
        message = "wrong token" if guard.needs_token else "this console asks for no token"
        return _json({"error": {"code": "bad_request", "message": message}},
                     401 if guard.needs_token else 400)
    response = _json({"ok": True})
    guard.login_cookie(response)
    return response


def application(bus: Bus, guard: Guard | None = None,
                bounds: httpserve.Bounds | None = None) -> web.Application:
    """The console's app: ``guard`` and ``bounds`` default to a console on loopback
    without a token (port 8080) and the default bounds."""
    guard = guard or Guard(bind="127.0.0.1", port=8080)
    bounds = bounds or httpserve.Bounds(max_body=MOST_BODY, max_connections=64)
    app = web.Application(client_max_size=bounds.max_body, middlewares=[
        httpserve.closing, guard.middleware()])
    app[BUS] = bus
    app[CLOSING] = asyncio.Event()
    app[GUARD] = guard
    app[BOUNDS] = bounds

    async def closing(app: web.Application) -> None:
        app[CLOSING].set()  # open event streams end now, not at the shutdown timeout

    app.on_shutdown.append(closing)
    app.router.add_get("/", index)
    app.router.add_get("/api/live", live)
    app.router.add_get("/api/stream", stream)
    app.router.add_post("/api/play/{action}", play)
    app.router.add_get("/login", login_page)
    app.router.add_post("/login", login)
    app.router.add_static("/static/", STATIC)
    return app
