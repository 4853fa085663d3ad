"""Losing the compiled state under a running system (a FLUSHALL, Valkey restarted empty):
it is noticed even after folds wrote a checkpoint onto the emptied store, rebuilt whole
from the stream, and meanwhile no decision is answered from what is left of it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
import redis.asyncio as aioredis

from clearance_invalidator.app import Invalidator
from clearance_runtime.process import health
from clearance_runtime.storage import keys
from clearance_runtime.storage.cache import DecisionCache, Entry
from clearance_runtime.storage.changes import ChangeRecord
from clearance_runtime.storage.state import StateStore
from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.support.policies import policy


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.write("all.yaml", cluster("prod-east"), policy("p", users=["alice"], default="all"))
    await sys_.start()
    await sys_.settle()
    yield sys_
    await sys_.close()


async def _eventually_allowed(system: System, revision: int) -> dict[str, Any]:
    for _ in range(100):
        reply = await system.check("alice", "prod-east")
        if reply.get("decision") == "allow":
            return reply
        # Never the empty or partial state's deny: unavailable until rebuilt.
        assert reply.get("error", {}).get("code") == "unavailable", reply
        await asyncio.sleep(0.1)
    raise AssertionError(f"not rebuilt: {await system.status()} (revision {revision})")


async def test_a_flush_under_running_folds_is_noticed_and_rebuilt(system: System) -> None:
    revision = await system.settle()
    r = aioredis.from_url(system.settings.redis_url)
    try:
        # What a fold in flight at the flush leaves: the checkpoint the compiler expects,
        # written onto an otherwise empty store (atomically, so the compiler cannot look
        # in between).
        async with r.pipeline(transaction=True) as pipe:
            pipe.flushall()
            pipe.set(keys.REV, revision)
            await pipe.execute()
    finally:
        await r.aclose()
    reply = await _eventually_allowed(system, revision)
    assert reply["revision"] >= revision
    assert (await system.status())["policies"] == 1


async def test_decisions_are_unavailable_until_the_lost_state_is_rebuilt(
        system: System) -> None:
    before = await system.check("alice", "prod-east")
    assert (before["decision"], before["revision"]) == ("allow", await system.settle())
    await system.stop("compiler")
    r = aioredis.from_url(system.settings.redis_url)
    try:
        await r.flushall()
        for _ in range(2):  # cached or not: nothing is answered from an empty store
            reply = await system.check("alice", "prod-east")
            assert reply["error"]["code"] == "unavailable", reply
        await system.start("compiler")
        after = await _eventually_allowed(system, before["revision"])
        assert after["revision"] >= before["revision"]
    finally:
        await r.aclose()


async def test_a_change_record_read_before_a_rebuild_neither_announces_nor_trims_it(
        clean_servers: Servers) -> None:
    """The invalidator read a record, then the compiler wiped the store and folded events
    1..3 again: that stale record must not announce its revision, and trimming must not
    drop the new records 1..3 before they are applied."""
    r = aioredis.from_url(clean_servers.redis_url)
    nc = await nats.connect(clean_servers.nats_url)
    encode = msgspec.json.Encoder().encode
    try:
        await r.set(keys.REV, 950)
        await r.set(keys.BUILT, 0)
        await r.xadd(keys.CHANGES, {"r": encode(ChangeRecord(revision=950))}, id="950-0")
        invalidator = Invalidator(nc, r)
        real_xread = r.xread

        async def read_then_rebuild(*args: Any, **kwargs: Any) -> Any:
            found = await real_xread(*args, **kwargs)
            await r.flushall()
            await r.set(keys.BUILT, 3)
            for seq in (1, 2, 3):
                await r.xadd(keys.CHANGES, {"r": encode(ChangeRecord(revision=seq))},
                             id=f"{seq}-0")
            await r.set(keys.REV, 3)
            return found

        r.xread = read_then_rebuild  # type: ignore[method-assign]
        await invalidator._step()
        r.xread = real_xread  # type: ignore[method-assign]
        assert await health.revision(r) == 0
        assert await r.xlen(keys.CHANGES) == 3
        await invalidator._step()
        assert await health.revision(r) == 3
    finally:
        await nc.close()
        await r.aclose()


@pytest.mark.parametrize(("subject", "body"), [
    ("clearance.v1.review.subject", {"apiVersion": "authorization.k8s.io/v1",
                                     "kind": "SubjectAccessReview",
                                     "spec": {"user": "alice", "resourceAttributes": {
                                         "verb": "get", "resource": "pods"}}}),
    ("clearance.v1.review.rules", {"spec": {"namespace": "ns"}, "user": "alice"}),
    ("clearance.v1.search.plan", {"principal": {"username": "alice"}}),
    ("clearance.v1.policy-status", {"kind": "MonitorAccessPolicy", "namespace": "ns",
                                    "name": "p"}),
    ("clearance.v1.check.batch", {"principal": {"username": "alice"}, "checks": []}),
])
async def test_reviews_search_and_status_also_wait_for_a_whole_state(
        system: System, clean_servers: Servers, subject: str, body: dict[str, Any]) -> None:
    """Every subject that reads compiled state answers ``unavailable`` mid-rebuild."""
    r = aioredis.from_url(clean_servers.redis_url)
    try:
        revision = int(await r.get(keys.INVALIDATED_REV) or 0)
        await r.set(keys.BUILT, revision + 1000)  # a rebuild that has far to go
        reply = await system.request(subject, body)
        assert reply["error"]["code"] == "unavailable"
        await r.set(keys.BUILT, revision)  # caught up
        reply = await system.request(subject, body)
        assert "error" not in reply or reply["error"]["code"] == "not_found"
    finally:
        await r.aclose()


async def test_an_answer_from_before_a_rebuild_is_not_cached_into_it(
        clean_servers: Servers) -> None:
    """The cache's write fence names the build too: a rebuild that passes the revision an
    answer was computed at again (a different state: the stream keeps only the latest
    version of each object) refuses that answer."""
    r = aioredis.from_url(clean_servers.redis_url)
    cache = DecisionCache(r, ttl_seconds=60)
    entry = Entry(key=keys.cache_entry("d"), blob=b"x", ttl_ms=60_000, indexes=())
    await r.mset({keys.REV: 7, keys.BUILT: 5})
    assert await cache.store("7@5", [entry]) == 1
    await r.mset({keys.BUILT: 9})  # flushed and rebuilt, back at revision 7
    assert await cache.store("7@5", [entry]) == 0
    await r.aclose()


async def test_two_builds_to_the_same_target_are_told_apart(clean_servers: Servers) -> None:
    """A rebuild may replay a stream that changed since the last build to the same end
    (only the latest message per object is kept), so equal revisions need not be equal
    states: each build has its own id, which the cache fence and mirrors compare."""
    r = aioredis.Redis.from_url(clean_servers.redis_url)
    try:
        store = StateStore(r)
        await store.wipe(5)
        first = await r.get(keys.BUILT)
        await store.wipe(5)
        second = await r.get(keys.BUILT)
        assert first is not None and second is not None and first != second
        assert health.build_target(first) == health.build_target(second) == 5
        assert health.rebuilding(4, second) is not None
        assert health.rebuilding(5, second) is None
    finally:
        await r.aclose()
