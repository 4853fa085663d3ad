"""The compiler's commits are fenced on its checkpoint: a flushed Valkey mid-burst, or a
second writer, is detected at the next commit and the state is rebuilt, never patched."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
import redis.asyncio as aioredis

from clearance_api.errors import LostSync
from clearance_runtime.storage import keys
from clearance_runtime.storage.state import StateStore
from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.support.policies import policy


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.write("inventory.yaml", cluster("prod-east"))
    await sys_.start()
    await sys_.settle()
    yield sys_
    await sys_.close()


async def test_a_flush_during_a_burst_is_detected_and_rebuilt(
        system: System, clean_servers: Servers) -> None:
    assert system.nc is not None
    js = system.nc.jetstream()
    deny = policy("deny-mallory", users=["mallory"], effect="Deny", priority=0,
                  default="all")
    await js.publish("clearance.events.monitoraccesspolicy.deny",
                     msgspec.json.encode({"type": "ADDED", "object": deny}))
    await system.settle()
    r = aioredis.from_url(clean_servers.redis_url)
    try:
        async def burst() -> None:
            for n in range(400):
                await js.publish(f"clearance.events.monitoraccesspolicy.p{n}",
                                 msgspec.json.encode({"type": "ADDED", "object": policy(
                                     f"p{n}", users=["mallory", f"u{n}"], default="all")}))

        publishing = asyncio.create_task(burst())
        while int(await r.get(keys.REV) or 0) < 100:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        await r.flushall()  # mid-burst
        await publishing
        await system.settle(timeout=30)
        assert await r.hlen(keys.POLICIES) == 401  # nothing lost, nothing half-built
        reply = await system.check("mallory", "prod-east")
        assert (reply["decision"], reply["policy"]) == ("deny", "ns/deny-mallory")
    finally:
        await r.aclose()


async def test_a_second_writer_behind_the_checkpoint_writes_nothing(
        clean_servers: Servers) -> None:
    r = aioredis.from_url(clean_servers.redis_url)
    try:
        first, second = StateStore(r), StateStore(r)
        first.expect(0)
        second.expect(0)
        async with first.transaction(1) as tx:
            tx.put_cluster("a", {"x": "1"})
        with pytest.raises(LostSync):
            async with second.transaction(1) as tx:
                tx.put_cluster("b", {"y": "2"})
        assert await r.hkeys(keys.CLUSTERS) == [b"a"]
        assert int(await r.get(keys.REV) or 0) == 1
        async with first.transaction(2) as tx:  # the fence moved with the commit
            tx.put_cluster("c", {})
        assert int(await r.get(keys.REV) or 0) == 2
    finally:
        await r.aclose()
