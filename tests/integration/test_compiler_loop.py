"""The compiler's consumer loop on a loaded machine."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import nats
import pytest
import redis.asyncio as aioredis

from clearance_compiler.app import Compiler
from clearance_runtime.state import StateStore
from tests.conftest import Servers

pytestmark = pytest.mark.integration


class SlowPull:
    """What nats-py's fetch does when its deadline runs out between the no-wait probe and
    the lingering pull request: a bare asyncio TimeoutError, not nats' own."""

    def __init__(self) -> None:
        self.calls = 0

    async def fetch(self, batch: int, timeout: float) -> list[Any]:
        self.calls += 1
        await asyncio.sleep(0.01)
        raise TimeoutError


async def test_a_fetch_timing_out_between_its_pull_requests_is_an_empty_batch(
        clean_servers: Servers) -> None:
    nc = await nats.connect(clean_servers.nats_url)
    r = aioredis.from_url(clean_servers.redis_url)
    try:
        await StateStore(r).wipe(0)  # a built, empty state at position 0
        pull = SlowPull()
        loop = asyncio.create_task(Compiler(nc, r)._consume(pull))  # type: ignore[arg-type]
        await asyncio.sleep(0.5)
        # Still consuming (no restart, no rebuilt consumer), and still asking.
        assert not loop.done(), loop.exception()
        assert pull.calls >= 5
        loop.cancel()
        # Awaited before the connections close: a loop left running into the teardown
        # can hang it on a Redis call (seen once on a loaded machine).
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(loop, 5)
    finally:
        await nc.close()
        await r.aclose()
