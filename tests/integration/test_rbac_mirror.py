"""Compiled RBAC in the store and the decision service's RBAC index following the change
records into its mirror, on a real Valkey: written by the compiler's own fold and
transaction, read by the decision service's own mirror."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from clearance_core.folding.folds import FoldEvent, rbac
from clearance_core.folding.kinds import ref_of
from clearance_core.folding.model import Model
from clearance_core.rbac.index import RbacIndex
from clearance_core.rbac.rules import ResourceAttributes, object_key
from clearance_runtime.process import metrics
from clearance_runtime.reading.mirror import StateMirror
from clearance_runtime.storage import keys
from clearance_runtime.storage.state import StateStore
from tests.conftest import Servers
from tests.support.rbac import cr, crb, rb, rule

GET_PODS = ResourceAttributes(verb="get", resource="pods", namespace="ns1")


class Compiler:
    """The compiler's write path, one event at a time."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self.store = StateStore(redis)
        self.model = Model()
        self.seq = 0

    async def fold(self, obj: dict[str, Any], kind: str = "ADDED") -> int:
        self.seq += 1
        async with self.store.transaction(self.seq) as tx:
            rbac.fold(self.model, tx, FoldEvent(self.seq, kind, obj, ref_of(obj), time.time()))
        return self.seq


class Follower:
    """What ``Reads.rbac_index`` does: the mirror brought current, then its index."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self.mirror = StateMirror(redis)

    async def index(self) -> RbacIndex:
        await self.mirror.current()
        return self.mirror.rbac.index()


@pytest.fixture
async def redis(clean_servers: Servers) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(clean_servers.redis_url)
    await StateStore(client).wipe(0)  # a built store, as the compiler leaves it
    yield client
    await client.aclose()


def updates(how: str) -> float:
    return float(metrics.RBAC_INDEX_UPDATES.labels(how=how)._value.get())


def reader(user: str) -> dict[str, Any]:
    return rb("ns1", f"rb-{user}", "ClusterRole:reader", f"User:{user}")


def scratch(model: Model) -> RbacIndex:
    return RbacIndex(model.rbac.roles.values(), model.rbac.bindings.values())


async def test_changes_are_applied_from_the_records_without_a_rebuild(
        redis: aioredis.Redis) -> None:
    compiler, follower = Compiler(redis), Follower(redis)
    await compiler.fold(cr("reader", rule("get", "", "pods")))
    await compiler.fold(reader("alice"))
    rebuilds = updates("rebuild")
    assert (await follower.index()).allowed(GET_PODS, "alice", ())[0]
    assert updates("rebuild") == rebuilds + 1  # the first use builds
    deltas = updates("delta")
    await compiler.fold(reader("bob"))
    await compiler.fold(reader("alice"), "DELETED")
    # Invalid: withdrawn, so the binding it replaces stops granting.
    await compiler.fold({**reader("bob"), "roleRef": {"kind": "Pod", "name": "x"}})
    await compiler.fold(cr("reader", rule("get", "", "pods"), labels={"a": "1"}))
    await compiler.fold(cr("agg", aggregate=[{"matchLabels": {"a": "1"}}]))
    await compiler.fold(crb("carol-agg", "agg", "User:carol"))
    index = await follower.index()
    assert updates("rebuild") == rebuilds + 1 and updates("delta") == deltas + 6
    for user, allowed in (("alice", False), ("bob", False), ("carol", True)):
        assert index.allowed(GET_PODS, user, ())[0] is allowed
    assert index.who_can(GET_PODS) == scratch(compiler.model).who_can(GET_PODS)
    assert await follower.index() is index  # nothing new: no read beyond the revision


async def test_the_store_holds_compiled_objects_and_a_restart_loads_them(
        redis: aioredis.Redis) -> None:
    compiler = Compiler(redis)
    await compiler.fold(cr("reader", rule("get", "", "pods")))
    await compiler.fold(reader("alice"))
    # A cluster-scoped object's stray namespace is not part of its key.
    stray = cr("stray")
    stray["metadata"]["namespace"] = "ns9"
    await compiler.fold(stray)
    stored = await redis.hkeys(keys.RBAC)
    assert sorted(k.decode() for k in stored) == sorted([
        object_key("ClusterRole", "", "reader"), object_key("ClusterRole", "", "stray"),
        object_key("RoleBinding", "ns1", "rb-alice")])
    assert object_key("RoleBinding", "a/b", "c") != object_key("RoleBinding", "a", "b/c")
    loaded = await compiler.store.load_model()
    assert loaded.rbac.roles == compiler.model.rbac.roles
    assert loaded.rbac.bindings == compiler.model.rbac.bindings


async def test_trimmed_records_or_a_wiped_store_make_the_mirror_rebuild(
        redis: aioredis.Redis) -> None:
    compiler, follower = Compiler(redis), Follower(redis)
    await compiler.fold(cr("reader", rule("get", "", "pods")))
    await compiler.fold(reader("alice"))
    await follower.index()
    await compiler.fold(reader("bob"))
    last = await compiler.fold(reader("erin"))
    # Records the mirror never saw are gone (as when it is far behind): bob's.
    await redis.xtrim(keys.CHANGES, minid=f"{last}-0", approximate=False)
    rebuilds = updates("rebuild")
    assert (await follower.index()).allowed(GET_PODS, "bob", ())[0]
    assert updates("rebuild") == rebuilds + 1 and follower.mirror.loads == 2
    # A store wiped and built again from other events, up to the same revision.
    await compiler.store.wipe(0)
    compiler.model, compiler.seq = Model(), 0
    await compiler.fold(cr("reader", rule("get", "", "pods")))
    await compiler.fold(reader("carol"))
    await compiler.fold(reader("dave"))
    index = await follower.index()
    assert updates("rebuild") == rebuilds + 2
    assert index.who_can(GET_PODS) == (["carol", "dave"], [])


async def test_an_index_is_never_older_than_the_revision_stored_when_asked(
        redis: aioredis.Redis) -> None:
    """Readers race a writer: whatever revision a reader saw before asking, the index it
    gets reflects it (the user bound at that revision is allowed)."""
    compiler, follower = Compiler(redis), Follower(redis)
    await compiler.fold(cr("reader", rule("get", "", "pods")))
    bound_at: dict[int, str] = {}
    done = asyncio.Event()

    async def write() -> None:
        for step in range(150):
            bound_at[await compiler.fold(reader(f"u{step}"))] = f"u{step}"
            if step % 10 == 0:
                await asyncio.sleep(0.001)
        done.set()

    async def read() -> int:
        checked = 0
        while not done.is_set():
            seen = int(await redis.get(keys.REV) or 0)
            index = await follower.index()
            if seen in bound_at:
                assert index.allowed(GET_PODS, bound_at[seen], ())[0], seen
                checked += 1
        return checked

    results = await asyncio.gather(write(), *(read() for _ in range(8)))
    assert sum(results[1:]) > 0
    assert (await follower.index()).who_can(GET_PODS) == scratch(compiler.model).who_can(
        GET_PODS)


async def test_a_store_written_with_rbac_as_json_is_rebuilt(redis: aioredis.Redis) -> None:
    store = StateStore(redis)
    assert (await store.position())[1]
    await redis.hset(keys.RBAC_JSON, "rolebinding/ns1/b", "{}")
    assert not (await store.position())[1]
