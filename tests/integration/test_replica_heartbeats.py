"""Decision replicas beat apart: each process its own key under its own id, the status
shows the service while any replica beats, and a replica gone for good is forgotten."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from clearance_cli.services import run_service
from clearance_runtime.process import health
from clearance_runtime.storage import keys
from tests.conftest import Servers
from tests.integration.harness import System, cluster, stop_task

pytestmark = pytest.mark.integration


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.write("inventory.yaml", cluster("prod-east"))
    await sys_.start()
    yield sys_
    await sys_.close()


async def replicas(r: aioredis.Redis, count: int) -> list[str]:
    deadline = time.monotonic() + 15
    while True:
        found = sorted(m.decode() for m in await r.smembers(keys.service_replicas("decision")))
        if len(found) == count:
            return found
        assert time.monotonic() < deadline, found
        await asyncio.sleep(0.1)


async def test_each_decision_replica_beats_under_its_own_key(
        system: System, clean_servers: Servers) -> None:
    second = asyncio.create_task(run_service("decision", system.settings))
    r = aioredis.from_url(clean_servers.redis_url)
    try:
        await system.settle(timeout=30)
        both = await replicas(r, 2)
        for replica in both:
            assert await r.hget(keys.service_replica("decision", replica), "heartbeat")
        assert not await r.exists(keys.service("decision"))  # no shared key to hide one
        await stop_task(second)
        status = await system.status()
        assert status["services"]["decision"]["healthy"] is True  # one replica answers

        # A replica silent for longer than FORGET_AFTER_MS: removed with its key.
        old = int(time.time() * 1000) - health.FORGET_AFTER_MS - 1000
        await r.hset(keys.service_replica("decision", "gone-1"),
                     mapping={"revision": 1, "heartbeat": old, "lag": 0})
        await r.sadd(keys.service_replicas("decision"), "gone-1")
        await system.status()
        assert not await r.sismember(keys.service_replicas("decision"), "gone-1")
        assert not await r.exists(keys.service_replica("decision", "gone-1"))
    finally:
        if not second.done():
            await stop_task(second)
        await r.aclose()
