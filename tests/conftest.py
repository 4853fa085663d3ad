"""Test harness: real servers on free ports.

One nats-server (JetStream) and one valkey-server per test session, from the wheels the
project installs. Tests that need isolation get a fresh stream and a flushed database
(``clean_servers``); nothing here is a fake.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
import redis.asyncio as aioredis
from nats.js.errors import NotFoundError

from clearance_api.wire import EVENTS_STREAM
from clearance_runtime import servers


class Servers:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.nats, self.nats_url = servers.nats_server(root / "nats")
        self.valkey, self.redis_url = servers.valkey_server(root / "valkey", persist=False)

    def start(self) -> None:
        self.nats.start()
        self.valkey.start()

    def stop(self) -> None:
        self.nats.stop()
        self.valkey.stop()


@pytest.fixture(scope="session")
def real_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    srv = Servers(tmp_path_factory.mktemp("servers"))
    srv.start()
    os.environ["CLEARANCE_NATS_URL"] = srv.nats_url
    os.environ["CLEARANCE_REDIS_URL"] = srv.redis_url
    yield srv
    srv.stop()


@pytest.fixture
async def clean_servers(real_servers: Servers) -> AsyncIterator[Servers]:
    """Empty stream and empty Redis before each test that asks for it."""
    nc = await nats.connect(real_servers.nats_url)
    js = nc.jetstream()
    with contextlib.suppress(NotFoundError):
        await js.delete_stream(EVENTS_STREAM)
    with contextlib.suppress(NotFoundError):  # no lease left over from a killed process
        await js.delete_stream("KV_CLEARANCE_LEASES")
    await nc.close()
    r = aioredis.from_url(real_servers.redis_url)
    await r.flushall()
    await r.aclose()
    yield real_servers
