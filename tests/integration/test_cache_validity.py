"""No cached answer outlives the next validity boundary, however long its batch took.

An answer is evaluated as of the moment its evaluation started; its entry's TTL is cut at
the next notBefore/notAfter of the policies it read, as of the moment it is stored, and
the boundary is stored with it and checked on every read. These tests make the two
races happen on purpose: a batch whose evaluation straddles a policy's ``notAfter``, and
an entry that Redis keeps past it (as it does when the write reaches it late: Redis
counts the TTL from then, by its own clock).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

import clearance_decision.decider as decider
from clearance_runtime.storage import keys
from tests.conftest import Servers
from tests.freshness.world import stamp
from tests.integration.harness import System, cluster, publish
from tests.support.policies import policy

ALICE = {"username": "alice"}
CHECKS = [{"action": "view", "resource": resource} for resource in (
    {"type": "cluster", "name": "c1"}, {"type": "cluster", "name": "c2"},
    {"type": "pods", "cluster": "c1"}, {"type": "pod", "cluster": "c2", "name": "web"})]


@pytest.fixture
async def system(clean_servers: Servers) -> AsyncIterator[System]:
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, None)
    await sys_.start("compiler", "cache-invalidator", "decision")
    for name in ("c1", "c2"):
        await publish(sys_, "managedcluster", cluster(name))
    await sys_.settle()
    yield sys_
    await sys_.close()


async def allow_until(system: System, seconds: float) -> tuple[int, float]:
    """An Allow for alice on every cluster, in force for ``seconds`` from now; returns
    (its revision, its notAfter)."""
    not_after = time.time() + seconds
    revision = await publish(system, "monitoraccesspolicy", policy(
        "brief", users=["alice"], default="all", not_after=stamp(not_after)))
    return revision, not_after


async def batch(system: System, revision: int) -> list[dict[str, Any]]:
    reply = await system.request("clearance.v1.check.batch", {
        "principal": ALICE, "checks": CHECKS, "min_revision": revision,
        "timeout_ms": 10_000}, timeout=15.0)
    return list(reply["results"])


async def cached_entries(system: System) -> int:
    redis = aioredis.from_url(system.settings.redis_url)
    try:
        return len([key async for key in redis.scan_iter(match=f"{keys.ENTRY_PREFIX}*")])
    finally:
        await redis.aclose()


async def sleep_until(moment: float) -> None:
    await asyncio.sleep(max(moment - time.time(), 0))


async def test_a_batch_straddling_a_not_after_caches_nothing_past_it(
        system: System, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch starts before notAfter and reads its snapshot; its evaluation ends after
    it. Its answers are those of its start (allow), and none of them is cached: the next
    batch, after notAfter, is evaluated afresh and denied."""
    revision, not_after = await allow_until(system, 1.0)
    snapshot = decider.principal_snapshot

    async def slow_snapshot(*args: Any, **kwargs: Any) -> Any:
        found = await snapshot(*args, **kwargs)
        await sleep_until(not_after + 0.1)  # the read is done; the boundary passes
        return found

    monkeypatch.setattr(decider, "principal_snapshot", slow_snapshot)
    started = time.time()
    first = await batch(system, revision)
    assert started < not_after < time.time()
    assert [r["decision"] for r in first] == ["allow"] * len(CHECKS)
    assert await cached_entries(system) == 0
    monkeypatch.setattr(decider, "principal_snapshot", snapshot)
    after = await batch(system, revision)
    assert [(r["decision"], r["cached"]) for r in after] == [("deny", False)] * len(CHECKS)


async def test_an_entry_redis_keeps_past_its_not_after_is_not_served(
        system: System, monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries stored with their whole TTL (as if Redis expired them late) are still
    refused once the boundary passed, by batches and single checks alike."""
    monkeypatch.setattr(decider, "_bounded", lambda entry, _now: entry)
    revision, not_after = await allow_until(system, 1.0)
    await batch(system, revision)
    again = await batch(system, revision)
    assert [(r["decision"], r["cached"]) for r in again] == [("allow", True)] * len(CHECKS)
    await sleep_until(not_after + 0.05)
    assert await cached_entries(system) == len(CHECKS)  # still in Redis
    single = await system.request("clearance.v1.check", {"principal": ALICE, **CHECKS[0]})
    assert (single["decision"], single["cached"]) == ("deny", False)
    after = await batch(system, revision)  # the first: what the single check cached
    assert [(r["decision"], r["cached"]) for r in after] == [("deny", True)] + [
        ("deny", False)] * (len(CHECKS) - 1)
