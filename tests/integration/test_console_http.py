"""The ops console's HTTP guard on a real console (its aiohttp server and NATS
connection, on the session's servers): it answers only requests addressed to it, from
its own page or a client that is not a browser, JSON writes only, with the token when
one is set; pasted YAML is parsed without alias expansion."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import msgspec
import pytest

from clearance_console import app as console_app
from clearance_console.guard import COOKIE
from clearance_runtime.process import servers
from clearance_runtime.process.settings import Settings
from tests.conftest import Servers
from tests.integration.harness import stop_task

TOKEN = "s3cret-console-token-0123456789"
#: A few hundred bytes of YAML aliases, each level nine of the one before: 9^9 strings.
ALIAS_BOMB = "".join(
    ['a: &a ["lol"' + ', "lol"' * 8 + "]\n"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n"
       for i in range(8)])

Console = Callable[..., Any]


@pytest.fixture
async def console(real_servers: Servers) -> AsyncIterator[Console]:
    """Start a console with some settings; its base URL."""
    tasks: list[asyncio.Task[None]] = []

    async def start(**settings: Any) -> str:
        port = servers.free_port()
        started = asyncio.Event()
        task = asyncio.create_task(console_app.run(
            real_servers.nats_url, port=port, started=started,
            settings=Settings(nats_url=real_servers.nats_url, **settings)))
        tasks.append(task)
        await asyncio.wait_for(started.wait(), 10)
        return f"http://127.0.0.1:{port}"

    yield start
    for task in tasks:  # cancelled again if a client's wait_for swallowed it (3.11)
        await stop_task(task)


async def ask(method: str, url: str, *, body: Any = None, json_body: bool = True,
              **headers: str) -> tuple[int, Any, aiohttp.ClientResponse]:
    data = msgspec.json.encode(body) if body is not None else None
    if data is not None and json_body:
        headers.setdefault("Content-Type", "application/json")
    async with aiohttp.ClientSession() as http, http.request(
            method, url, data=data, headers=headers, allow_redirects=False) as resp:
        text = await resp.text()
        try:
            doc: Any = msgspec.json.decode(text)
        except msgspec.DecodeError:
            doc = text
        return resp.status, doc, resp


async def test_it_answers_its_own_names_only(console: Console) -> None:
    base = await console(console_hosts="console.example.com")
    port = base.rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"console.example.com:{port}",
                 f"LOCALHOST:{port}"):
        assert (await ask("GET", base + "/api/live", Host=host))[0] == 200, host
    # DNS rebinding: the attacker's name, resolving to 127.0.0.1, reaches the port.
    for host in (f"evil.example:{port}", "localhost:1", "127.0.0.1", "localhost", ""):
        for path in ("/", "/api/live", "/static/console.js"):
            status, reply, _ = await ask("GET", base + path, Host=host)
            assert status == 403, (host, path)
            assert "does not answer for host" in reply["error"]["message"]


async def test_cross_site_requests_are_refused(console: Console) -> None:
    base = await console()
    explain = {"username": "alice", "cluster": "c1"}
    for headers in ({"Origin": "http://evil.example"}, {"Origin": "null"},
                    {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
                    {"Origin": f"http://localhost:{base.rsplit(':', 1)[1]}"}):
        status, reply, _ = await ask("POST", base + "/api/play/explain", body=explain,
                                     **headers)
        assert status == 403, headers
        assert "refused" in reply["error"]["message"]
        assert (await ask("GET", base + "/api/live", **headers))[0] == 403
    # Its own page's calls (and clients that are not browsers) pass.
    same = {"Origin": base, "Sec-Fetch-Site": "same-origin"}
    assert (await ask("GET", base + "/api/live", **same))[0] == 200
    status, reply, _ = await ask("POST", base + "/api/play/effective",
                                 body={"target": "nonsense"}, **same)
    assert status == 400 and "target 'nonsense'" in reply["error"]["message"]


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", None])
async def test_a_write_must_be_json(console: Console, content_type: str | None) -> None:
    base = await console()
    headers = {"Content-Type": content_type} if content_type else {}
    status, reply, _ = await ask("POST", base + "/api/play/simulate", json_body=False,
                                 body={"policy": "kind: AccessPolicy"}, **headers)
    assert status == 415 and "application/json" in reply["error"]["message"]


async def test_with_a_token_nothing_is_answered_without_it(console: Console) -> None:
    base = await console(console_token=TOKEN)
    status, _, resp = await ask("GET", base + "/")
    assert status == 303 and resp.headers["Location"] == "/login"
    for method, path in (("GET", "/api/live"), ("GET", "/api/stream"),
                         ("POST", "/api/play/explain")):
        status, reply, _ = await ask(method, base + path, body={} if method == "POST" else None)
        assert status == 401 and "log in" in reply["error"]["message"], path
    assert (await ask("GET", base + "/api/live", Authorization="Bearer wrong"))[0] == 401
    # The login page and its files need no token (they hold no data).
    assert (await ask("GET", base + "/login"))[0] == 200
    assert (await ask("GET", base + "/static/login.js"))[0] == 200
    # The token as a bearer header, or the cookie /login sets for it.
    assert (await ask("GET", base + "/api/live", Authorization=f"Bearer {TOKEN}"))[0] == 200
    assert (await ask("POST", base + "/login", body={"token": "guess"}))[0] == 401
    status, _, resp = await ask("POST", base + "/login", body={"token": TOKEN})
    assert status == 200
    cookie = resp.cookies[COOKIE]
    assert cookie.value and TOKEN not in cookie.value
    assert cookie["httponly"] and cookie["samesite"] == "Strict"
    live = await ask("GET", base + "/api/live", Cookie=f"{COOKIE}={cookie.value}")
    assert live[0] == 200 and "revision" in live[1]
    assert (await ask("GET", base + "/api/live", Cookie=f"{COOKIE}=forged"))[0] == 401
    # A cross-site login is refused like any cross-site call.
    assert (await ask("POST", base + "/login", body={"token": TOKEN},
                      Origin="http://evil.example"))[0] == 403


async def test_an_alias_bomb_is_refused_at_once(console: Console) -> None:
    base = await console()
    assert len(ALIAS_BOMB) < 1000
    started = time.perf_counter()
    status, reply, _ = await ask("POST", base + "/api/play/simulate",
                                 body={"policy": ALIAS_BOMB})
    assert time.perf_counter() - started < 1.0
    assert status == 400 and "refused" in reply["error"]["message"]
    recursive = "a: &a [*a]\n"
    status, reply, _ = await ask("POST", base + "/api/play/simulate", body={"policy": recursive})
    assert status == 400 and "contains it" in reply["error"]["message"]


async def test_bodies_are_bounded(console: Console) -> None:
    base = await console()
    status, reply, _ = await ask("POST", base + "/api/play/simulate",
                                 body={"policy": "x" * (2 << 20)})
    assert status == 413 and "exceeds" in reply["error"]["message"]


async def test_a_dead_bus_is_shown_dead(tmp_path: Any) -> None:
    """NATS dies under a running console: its live view says so (bus down, every
    service's health unknown) instead of staying green with the last status heard."""
    server, nats_url = servers.nats_server(tmp_path / "nats")
    server.start()
    port = servers.free_port()
    started = asyncio.Event()
    task = asyncio.create_task(console_app.run(nats_url, port=port, started=started,
                                               settings=Settings(nats_url=nats_url)))
    try:
        await asyncio.wait_for(started.wait(), 10)
        server.stop()
        deadline = time.monotonic() + 10
        while True:
            _, live, _ = await ask("GET", f"http://127.0.0.1:{port}/api/live")
            if not live["bus"]["connected"]:
                break
            assert time.monotonic() < deadline, live["bus"]
            await asyncio.sleep(0.1)
        assert all(row["healthy"] is None for row in live["services"])
    finally:
        await stop_task(task)
        server.stop()
