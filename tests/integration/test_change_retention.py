"""The change stream is bounded by its writer, the compiler, and a reader that falls
behind the records it keeps recovers: a decision service's mirror reloads, the
cache-invalidator drops every cached answer (it cannot know whose changed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from clearance_runtime.messaging import bus
from clearance_runtime.reading.mirror import StateMirror
from clearance_runtime.storage import changes, keys
from clearance_runtime.storage.commits import Batch
from clearance_runtime.storage.state import StateStore
from tests.conftest import Servers
from tests.integration.harness import System, cluster, publish_object
from tests.support.policies import policy

pytestmark = pytest.mark.integration


@pytest.fixture
async def redis(clean_servers: Servers) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(clean_servers.redis_url)
    await StateStore(client).wipe(0)  # a built store, as the compiler leaves it
    yield client
    await client.aclose()


async def trimmed(redis: aioredis.Redis) -> int:
    return changes.trimmed_past(await redis.xinfo_stream(keys.CHANGES))


async def test_the_compiler_bounds_the_stream_and_a_mirror_behind_it_reloads(
        redis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(changes, "CHANGES_KEPT", 20)
    store, mirror = StateStore(redis), StateMirror(redis)
    store.expect(0)

    async def clusters(first: int, last: int) -> None:
        batch = Batch()
        for seq in range(first, last + 1):
            with batch.event(seq, kind="managedcluster") as tx:
                tx.put_cluster(f"c{seq}", {"n": str(seq)})
        await store.commit(batch)

    await clusters(1, 10)
    await mirror.current()
    assert (mirror.loads, len(mirror.labels)) == (1, 10)
    for first in range(11, 611, 50):
        await clusters(first, first + 49)
    # Whole nodes go (Valkey's stream-node-max-entries: 100): about the last 20 stay.
    assert 20 <= await redis.xlen(keys.CHANGES) <= 20 + 200
    assert await trimmed(redis) > 10
    await mirror.current()
    assert (mirror.loads, len(mirror.labels)) == (2, 610)
    # Within the kept records again: followed, not reloaded.
    await clusters(611, 615)
    await mirror.current()
    assert (mirror.loads, len(mirror.labels)) == (2, 615)


async def test_an_invalidator_behind_the_kept_records_drops_every_cached_answer(
        clean_servers: Servers, monkeypatch: pytest.MonkeyPatch) -> None:
    """alice's cached allow must not outlive the Deny whose record was trimmed before
    the invalidator read it."""
    system = System(clean_servers.nats_url, clean_servers.redis_url, None)
    redis = aioredis.Redis.from_url(clean_servers.redis_url)
    try:
        await system.start("compiler", "cache-invalidator", "decision")
        assert system.nc is not None
        await bus.ensure_stream(system.nc.jetstream())
        await publish_object(system, cluster("east"))
        await publish_object(system, policy("p", users=["alice"], default="all"))
        await system.settle()
        for _ in range(2):  # computed, then from the cache
            assert (await system.check("alice", "east"))["decision"] == "allow"
        await system.stop("cache-invalidator")
        monkeypatch.setattr(changes, "CHANGES_KEPT", 5)
        await publish_object(system, policy("p", users=["alice"], default="all", effect="Deny"))
        for n in range(300):
            await publish_object(system, cluster(f"other-{n}"))
        last = await system.stream_last_seq()
        while int(await redis.get(keys.REV) or 0) < last:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        applied = int(await redis.get(keys.INVALIDATED_REV) or 0)
        assert await trimmed(redis) > applied + 1  # the Deny's record is gone unapplied
        await system.start("cache-invalidator")
        revision = await system.settle()
        reply = await system.check("alice", "east", min_revision=revision)
        assert reply["decision"] == "deny", reply
    finally:
        await system.close()
        await redis.aclose()
