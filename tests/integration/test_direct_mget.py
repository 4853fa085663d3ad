"""The decision cache's lookup on a kept connection (clearance_runtime.storage.direct):
the same values as the client's MGET, concurrent lookups each with their own, and a
connection the server dropped (a restart, a failover, CLIENT KILL) costs no lookup its
answer — it goes the client's way (reconnecting) and the next takes a fresh connection;
a lookup cancelled half way leaves no reply behind for the next to read."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from clearance_runtime.storage.direct import DirectMget
from tests.conftest import Servers


async def test_values_and_concurrent_lookups(clean_servers: Servers) -> None:
    r = aioredis.Redis.from_url(clean_servers.redis_url)
    try:
        await r.mset({"a": b"1", "b": b"\x00two"})
        direct = DirectMget(r)
        assert await direct.mget(["a", "missing", "b"]) == [b"1", None, b"\x00two"]
        together = await asyncio.gather(*(direct.mget(["b", "a"][: 1 + n % 2])
                                          for n in range(20)))
        assert together == [[b"\x00two", b"1"][: 1 + n % 2] for n in range(20)]
    finally:
        await r.aclose()


async def test_a_connection_the_server_dropped_costs_no_lookup(clean_servers: Servers) -> None:
    r = aioredis.Redis.from_url(clean_servers.redis_url)
    admin = aioredis.Redis.from_url(clean_servers.redis_url)
    try:
        await admin.mset({"a": b"1"})
        direct = DirectMget(r)
        assert await direct.mget(["a"]) == [b"1"]  # the kept connection: the pool's only
        me = await admin.client_id()
        for client in await admin.client_list():  # a restart, a failover, CLIENT KILL
            if int(client["id"]) != me:
                await admin.client_kill_filter(_id=client["id"])
        await admin.set("a", b"after")
        assert await direct.mget(["a"]) == [b"after"]  # the client's way, reconnected
        assert await direct.mget(["a", "b"]) == [b"after", None]  # a fresh kept one
    finally:
        await r.aclose()
        await admin.aclose()


async def test_a_cancelled_lookup_leaves_no_reply_behind(clean_servers: Servers) -> None:
    r = aioredis.Redis.from_url(clean_servers.redis_url)
    try:
        await r.mset({"x": b"1", "y": b"2"})
        direct = DirectMget(r)
        await direct.mget(["x"])
        task = asyncio.ensure_future(direct.mget(["x"]))
        await asyncio.sleep(0)  # sent, not yet read
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert await direct.mget(["y"]) == [b"2"]  # not the cancelled lookup's reply
    finally:
        await r.aclose()
