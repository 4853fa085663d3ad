"""A stop must end every service loop, even when a client swallowed the cancellation.

On Python 3.11 ``asyncio.wait_for`` inside redis-py or nats-py can lose a cancellation
that arrives together with its reply. A loop inside a TaskGroup (the watcher's heartbeat)
then ran on while the group waited for it, and ``clearance run`` never stopped; every
service loop beats, and the beat now honours a cancellation its task still carries.
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from clearance_runtime import health
from tests.conftest import Servers


async def test_a_loop_that_swallowed_its_cancellation_stops_at_its_next_beat(
        real_servers: Servers) -> None:
    r = aioredis.from_url(real_servers.redis_url)
    beats = 0
    beating = asyncio.Event()

    async def heartbeat() -> None:
        nonlocal beats
        swallowed = False
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed = True  # what a client's wait_for can do on 3.11
            await health.beat(r, "stopping-test", 1)
            beats += 1
            if beats >= 3:
                beating.set()

    async def service() -> None:  # the watcher's shape: its loops in one TaskGroup
        async with asyncio.TaskGroup() as group:
            group.create_task(heartbeat())

    task = asyncio.create_task(service())
    try:
        await asyncio.wait_for(beating.wait(), 5.0)
        task.cancel()  # the group cancels its loop once, and the loop swallows it
        done, _ = await asyncio.wait({task}, timeout=3.0)
        assert task in done, "the service ignored its stop"
        assert task.cancelled()
    finally:
        task.cancel()
        await r.delete("clr:svc:stopping-test")
        await r.aclose()
