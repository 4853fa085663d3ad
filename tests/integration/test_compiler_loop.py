"""The compiler's consumer loop when nothing comes."""

from __future__ import annotations

import asyncio
import contextlib

import nats
import redis.asyncio as aioredis

from clearance_compiler.app import Compiler
from clearance_runtime.messaging import bus
from clearance_runtime.storage import keys
from clearance_runtime.storage.state import StateStore
from tests.conftest import Servers


async def test_an_idle_stream_keeps_the_loop_consuming(clean_servers: Servers) -> None:
    """Waits that end with nothing (the reader's one-second waits, its requests expiring)
    are empty batches, not a reason to rebuild the consumer."""
    nc = await nats.connect(clean_servers.nats_url)
    r = aioredis.from_url(clean_servers.redis_url)
    try:
        await bus.ensure_stream(nc.jetstream())
        await StateStore(r).wipe(0)  # a built, empty state at position 0
        compiler = Compiler(nc, r)
        puller = await compiler._subscribe(0)
        loop = asyncio.create_task(compiler._consume(puller))
        await asyncio.sleep(1.2)
        first = await r.hget(keys.service("compiler"), "heartbeat")
        await asyncio.sleep(1.4)  # more waits, and expiries of its request
        # Still consuming (no restart, no rebuilt consumer), and still beating.
        assert not loop.done(), loop.exception()
        assert first is not None
        assert int(await r.hget(keys.service("compiler"), "heartbeat")) > int(first)
        loop.cancel()
        # Awaited before the connections close: a loop left running into the teardown
        # can hang it on a Redis call (seen once on a loaded machine).
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(loop, 5)
        await puller.stop()
    finally:
        await nc.close()
        await r.aclose()
