"""A service whose NATS connection was closed for good is restarted, not left retrying."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from clearance_cli.services import ConnectionClosed, _closed_watch


class FakeConnection:
    is_closed = False


async def test_a_closed_connection_ends_the_run_so_the_supervisor_restarts_it() -> None:
    nc: Any = FakeConnection()
    work = asyncio.create_task(asyncio.sleep(30))
    watch = asyncio.create_task(_closed_watch(nc, work))
    await asyncio.sleep(0.05)
    assert not watch.done()
    nc.is_closed = True
    with pytest.raises(ConnectionClosed):
        await asyncio.wait_for(watch, 3)
    work.cancel()
