"""Valkey at its memory limit: decision cache entries are evicted, compiled state never
is, invalidation stays exact, and the index sets are swept of what eviction left."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from clearance_decision.decider import WHOLE_BATCH
from clearance_runtime.process import servers
from clearance_runtime.storage import invalidation, keys
from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.support.policies import policy


@pytest.fixture
async def small(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[tuple[System, str]]:
    valkey, redis_url = servers.valkey_server(tmp_path / "small", persist=False,
                                              maxmemory="4mb")
    valkey.start()
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    # Every answer stored: the flood below is a scan, whose answers would otherwise go
    # unstored (clearance_decision.admission) and never reach the limit.
    system = System(clean_servers.nats_url, redis_url, manifests, decision_scan_misses=0)
    system.write("inventory.yaml", cluster("prod-east"))
    system.write("policies.yaml", *[
        policy(f"p{i}", users=[f"user-{i}"], default="all") for i in range(50)],
        policy("alice", users=["alice"], default="all"))
    await system.start()
    await system.settle()
    yield system, redis_url
    await system.close()
    valkey.stop()


#: Checks per batch: fewer than a batch cached whole, so each answer is an entry of its own.
PER_BATCH = WHOLE_BATCH - 1


def pod_checks(start: int) -> list[dict[str, Any]]:
    return [{"action": "view", "resource": {"type": "pods", "name": f"pod-{start + i}-" +
                                            "x" * 200, "namespace": "ns",
                                            "cluster": "prod-east"}} for i in range(PER_BATCH)]


async def test_at_the_memory_limit_only_cache_is_evicted(small: tuple[System, str]) -> None:
    system, redis_url = small
    r = aioredis.from_url(redis_url)
    try:
        # ~2 kB per cached answer: 6,000 answers are three times the 4 MB limit.
        for n in range(6000 // PER_BATCH):
            reply = await system.request("clearance.v1.check.batch", {
                "principal": {"username": "alice"}, "checks": pod_checks(n * PER_BATCH)})
            assert all(res["decision"] == "allow" for res in reply["results"])
        info = await r.info("stats")
        assert int(info["evicted_keys"]) > 0  # the limit was reached and cache gave way
        assert await r.hlen(keys.POLICIES) == 51  # compiled state is all there
        assert int(await r.get(keys.REV) or 0) == await system.stream_last_seq()

        # Invalidation is still exact: the revoked allow is gone, cached or evicted.
        system.write("policies.yaml", *[
            policy(f"p{i}", users=[f"user-{i}"], default="all") for i in range(50)],
            policy("alice", users=["alice"], effect="Deny", default="all"))
        revision = await system.settle()
        reply = await system.request("clearance.v1.check.batch", {
            "principal": {"username": "alice"}, "checks": pod_checks(5900),
            "min_revision": revision})
        assert {res["decision"] for res in reply["results"]} == {"deny"}

        # Evicted entries left dangling index members; the sweep removes exactly those.
        assert await invalidation.sweep(r) > 0
        async for index in r.scan_iter(match="clr:dci:[ugcp]:*"):
            for member in await r.smembers(index):
                assert await r.exists(member)
    finally:
        await r.aclose()
