"""The compiler's checkpoint record (``CLEARANCE_CHECKPOINTS``) is written in the
background: handing a record over never waits for NATS (a put lost in a leader election
held the compiler 5 s), the latest record handed over is the one that lands, and records
land in order."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client

from clearance_runtime.messaging import checkpoints
from clearance_runtime.messaging.checkpoints import Checkpoints
from tests.conftest import Servers

pytestmark = pytest.mark.integration


@pytest.fixture
async def nc(clean_servers: Servers) -> AsyncIterator[Client]:
    client = await nats.connect(clean_servers.nats_url)  # no record bucket: cleaned
    yield client
    await client.close()


async def test_records_land_in_the_background_the_latest_last(nc: Client) -> None:
    writer = Checkpoints(nc.jetstream())
    reader = Checkpoints(nc.jetstream())
    try:
        started = time.monotonic()
        for checkpoint in range(1, 201):
            writer.record(checkpoint, b"7:build")  # returns at once: nothing awaited
        assert time.monotonic() - started < 0.5
        landed: list[tuple[int, bytes] | None] = []

        async def latest() -> bool:
            landed.append(await reader.read())
            return landed[-1] == (200, b"7:build")

        deadline = asyncio.get_running_loop().time() + 10
        while not await latest():
            assert asyncio.get_running_loop().time() < deadline, landed[-1]
            await asyncio.sleep(0.02)
        # Only ever forward: the writer skips records superseded before their turn.
        seen = [record[0] for record in landed if record is not None]
        assert seen == sorted(seen)
        history = await (await nc.jetstream().key_value(checkpoints.BUCKET)).get(
            checkpoints.KEY)
        assert checkpoints.parse(history.value) == (200, b"7:build")
    finally:
        await writer.close()
