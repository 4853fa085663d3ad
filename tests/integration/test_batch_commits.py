"""Batch commits (clearance_runtime.storage.commits): a batch of events is applied whole or not
at all, fenced on the checkpoint like a single event, and a compiler stopped mid-batch
resumes without applying any event twice or losing one."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
import nats
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client
from nats.aio.msg import Msg
from redis import exceptions as redis_exceptions

from clearance_compiler.app import Compiler
from clearance_runtime.messaging import bus
from clearance_runtime.storage import keys
from clearance_runtime.storage.commits import Batch, LostSync
from clearance_runtime.storage.state import StateStore
from tests.conftest import Servers
from tests.integration.harness import cluster, group, stop_task
from tests.support.policies import policy


@pytest.fixture
async def redis(clean_servers: Servers) -> AsyncIterator[aioredis.Redis]:
    r = aioredis.from_url(clean_servers.redis_url)
    await StateStore(r).wipe(0)  # a built, empty store at checkpoint 0
    yield r
    await r.aclose()


async def _records(r: aioredis.Redis) -> dict[bytes, Any]:
    """The change records by id, in order."""
    rows: Any = await r.xrange(keys.CHANGES)
    return {entry_id: msgspec.json.decode(fields[b"r"]) for entry_id, fields in rows}


async def _change_ids(r: aioredis.Redis) -> list[bytes]:
    return list(await _records(r))


async def _json_field(r: aioredis.Redis, key: str, field: str) -> Any:
    raw: Any = await r.hget(key, field)
    return msgspec.json.decode(raw)


async def test_a_batch_is_invisible_until_committed_then_visible_whole(
        redis: aioredis.Redis) -> None:
    store = StateStore(redis)
    store.expect(0)
    batch = Batch()
    with batch.event(1, kind="managedcluster") as tx:
        tx.put_cluster("a", {"env": "prod"})
    with batch.event(2, kind="group") as tx:
        tx.put_group("team", None, ["alice", "bob"])
        tx.invalidate.users.update({"alice", "bob"})  # what the fold would say
    with batch.event(3):  # a malformed event: no writes, a record all the same
        pass
    with batch.event(4, kind="managedcluster") as tx:
        tx.put_cluster("a", None)
        tx.put_cluster("b", {"n": "12345678901234567890"})
        tx.invalidate.clusters.update({"a", "b"})
    assert (len(batch), batch.last) == (4, 4)
    # Folded, not committed: nothing is written.
    assert await redis.get(keys.REV) is None
    assert await redis.hlen(keys.CLUSTERS) == 0
    assert await _change_ids(redis) == []

    await store.commit(batch)
    assert int(await redis.get(keys.REV) or 0) == 4
    assert await redis.hgetall(keys.CLUSTERS) == {b"b": b'{"n":"12345678901234567890"}'}
    assert await _json_field(redis, keys.GROUPS, "team") == ["alice", "bob"]
    # The Group's value travels in its record, to the mirrors; no membership sets.
    rows: Any = await redis.xrange(keys.CHANGES, min="2-0", max="2-0")
    assert msgspec.msgpack.decode(rows[0][1][b"v"]) == [[keys.GROUPS, "team",
                                                          '["alice","bob"]']]
    assert await redis.keys("clr:memb:*") == []
    # One change record per event, in order, each with what it changed.
    assert await _change_ids(redis) == [b"1-0", b"2-0", b"3-0", b"4-0"]
    records = await _records(redis)
    assert records[b"2-0"]["invalidate"]["users"] == ["alice", "bob"]
    assert records[b"4-0"]["invalidate"]["clusters"] == ["a", "b"]
    assert records[b"3-0"]["kind"] == ""


async def test_a_blob_survives_the_commit_byte_for_byte(redis: aioredis.Redis) -> None:
    """Compiled values are msgpack: every byte value must reach Redis as it was (the
    script decodes the batch with Lua's cmsgpack, which has no bin type)."""
    store = StateStore(redis)
    store.expect(0)
    blob = bytes(range(256)) * 300  # 76,800 bytes: a msgpack str32
    batch = Batch()
    with batch.event(1, kind="clusterrole") as tx:
        tx._pipe.hset(keys.RBAC, "ClusterRole//x", blob)
    await store.commit(batch)
    assert await redis.hget(keys.RBAC, "ClusterRole//x") == blob


async def test_a_batch_straddling_a_fencing_change_is_rejected_whole(
        redis: aioredis.Redis) -> None:
    first, second = StateStore(redis), StateStore(redis)
    first.expect(0)
    async with first.transaction(1) as tx:
        tx.put_cluster("a", {})
    # A second writer takes over at checkpoint 1 while the first folds events 2..4.
    second.expect(1)
    batch = Batch()
    for seq in (2, 3, 4):
        with batch.event(seq) as tx:
            tx.put_cluster(f"first-{seq}", {})
    async with second.transaction(2) as tx:
        tx.put_cluster("second-2", {})
    with pytest.raises(LostSync):
        await first.commit(batch)
    # None of the refused batch's writes, records or checkpoint.
    assert sorted(await redis.hkeys(keys.CLUSTERS)) == [b"a", b"second-2"]
    assert int(await redis.get(keys.REV) or 0) == 2
    assert await _change_ids(redis) == [b"1-0", b"2-0"]
    # The fence did not move for the refused writer.
    batch = Batch()
    with batch.event(3) as tx:
        tx.put_cluster("first-3", {})
    with pytest.raises(LostSync):
        await first.commit(batch)


async def test_a_block_that_raises_leaves_nothing_in_the_batch(
        redis: aioredis.Redis) -> None:
    store = StateStore(redis)
    store.expect(0)
    batch = Batch()
    with batch.event(1) as tx:
        tx.put_cluster("a", {})
    with contextlib.suppress(RuntimeError), batch.event(2) as tx:
        tx.put_cluster("half", {})
        raise RuntimeError("a fold failing half way")
    # Events record into the batch's own lists: the next one follows the first whole.
    with batch.event(3) as tx:
        tx.put_cluster("b", {})
    assert (len(batch), batch.last) == (2, 3)
    await store.commit(batch)
    assert sorted(await redis.hkeys(keys.CLUSTERS)) == [b"a", b"b"]
    assert int(await redis.get(keys.REV) or 0) == 3
    assert [entry_id for entry_id, _ in await redis.xrange(keys.CHANGES)] == [b"1-0", b"3-0"]


# -- a compiler stopped mid-batch ---------------------------------------------------------
def _events(n: int) -> list[dict[str, Any]]:
    """Versions of a few objects, the last one of each known: a lost or doubly applied
    event leaves an object in the wrong version (or an XADD out of order)."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        if i % 3 == 0:
            out.append(cluster(f"c{i % 7}", version=str(i)))
        elif i % 3 == 1:
            out.append(group(f"g{i % 5}", f"user-{i}", f"user-{i + 1}"))
        else:
            out.append(policy(f"p{i % 4}", users=[f"user-{i}"], default="all"))
    return out


async def _assert_last_versions(r: aioredis.Redis, events: list[dict[str, Any]], *,
                                withdrawn: str = "") -> None:
    """Each object of ``events`` stored in its last version (but policy ``withdrawn``)."""
    last: dict[str, dict[str, Any]] = {}
    for obj in events:
        last[f"{obj['kind']}/{obj['metadata']['name']}"] = obj
    for name, obj in last.items():
        kind, _, short = name.partition("/")
        if kind == "ManagedCluster":
            assert await _json_field(r, keys.CLUSTERS, short) == obj["metadata"]["labels"], name
        elif kind == "Group":
            assert await _json_field(r, keys.GROUPS, short) == sorted(obj["users"]), name
        elif short != withdrawn:
            stored = await _json_field(r, keys.POLICY_OBJECTS, f"ns/{short}")
            assert stored["spec"] == obj["spec"], name


async def _compile_until(compiler: Compiler, r: aioredis.Redis, revision: int,
                         then: Callable[[], bool] = lambda: True) -> None:
    """Run ``compiler`` until the store's checkpoint reaches ``revision`` and ``then``
    holds (30 s at most), then stop it. A batch's statuses are published once its commit
    has landed, a moment after the checkpoint moved: a test that counts them waits for
    them with ``then`` rather than stopping the compiler in between."""
    running = asyncio.create_task(compiler.run())
    try:
        async with asyncio.timeout(30):
            while int(await r.get(keys.REV) or 0) < revision or not then():  # noqa: ASYNC110
                await asyncio.sleep(0.02)
    finally:
        await stop_task(running)


class Stall:
    """Wraps StateStore.commit: the ``nth`` call hangs for ever, ``before`` or after
    reaching Redis (a compiler frozen, then killed, at that point of a batch)."""

    def __init__(self, commit: Callable[[Batch], Awaitable[None]], nth: int, *,
                 before: bool) -> None:
        self._commit, self._nth, self._before = commit, nth, before
        self.calls = 0
        self.stalled = asyncio.Event()
        self.sizes: list[int] = []

    async def __call__(self, batch: Batch) -> None:
        self.calls += 1
        self.sizes.append(len(batch))
        if self.calls == self._nth and self._before:
            self.stalled.set()
            await asyncio.Event().wait()
        await self._commit(batch)
        if self.calls == self._nth:
            self.stalled.set()
            await asyncio.Event().wait()


async def _publish(nc: Client, events: list[dict[str, Any]]) -> None:
    """The events on the stream, in order, as a producer publishes additions."""
    js = nc.jetstream()
    await bus.ensure_stream(js)
    for n, obj in enumerate(events):
        await js.publish(f"clearance.events.{obj['kind'].lower()}.o{n}",
                         msgspec.json.encode({"type": "ADDED", "object": obj}))


async def _statuses(nc: Client) -> Counter[tuple[str, int]]:
    seen: Counter[tuple[str, int]] = Counter()

    async def on(msg: Msg) -> None:
        seen[msg.subject, msgspec.json.decode(msg.data)["revision"]] += 1

    await nc.subscribe("clearance.status.monitoraccesspolicy.>", cb=on)
    return seen


@pytest.mark.parametrize("before", [True, False], ids=["before-commit", "after-commit"])
async def test_a_compiler_stopped_mid_batch_resumes_without_double_apply(
        clean_servers: Servers, before: bool) -> None:
    events = _events(1500)
    nc = await nats.connect(clean_servers.nats_url)
    r = aioredis.from_url(clean_servers.redis_url)
    try:
        statuses = await _statuses(nc)
        await _publish(nc, events)
        first = Compiler(nc, r)
        stall = Stall(first._store.commit, 2, before=before)
        first._store.commit = stall  # type: ignore[method-assign]
        running = asyncio.create_task(first.run())
        try:
            await asyncio.wait_for(stall.stalled.wait(), 30)
            checkpoint = int(await r.get(keys.REV) or 0)
        finally:
            await stop_task(running)
        assert stall.sizes[-1] > 1, stall.sizes  # a backlog is folded in batches
        # Before its commit, none of the batch is there; after it, all of it.
        assert checkpoint == (sum(stall.sizes[:-1]) if before else sum(stall.sizes)), stall.sizes

        await _compile_until(Compiler(nc, r), r, len(events))
        await nc.flush()
        # Every event once: one change record per revision, nothing after the last.
        ids = await _change_ids(r)
        assert ids == [f"{seq}-0".encode() for seq in range(1, len(events) + 1)]
        await _assert_last_versions(r, events)
        # A policy's status is published once per revision at most (never folded twice).
        assert statuses and max(statuses.values()) == 1, statuses.most_common(3)
    finally:
        await nc.close()
        await r.aclose()


# -- a batch the store refuses ------------------------------------------------------------
class Refuse:
    """Wraps StateStore.commit: the first batch of more than one event that holds event
    ``alone`` is refused (a store error that is not an outage), and so is the first
    commit of ``alone`` on its own — an object the store cannot take even alone. (Which
    batch holds it depends on how the stream's messages arrive: the compiler folds what
    has come, so the first batch of a backlog may be only its first few events.)"""

    def __init__(self, commit: Callable[[Batch], Awaitable[None]], alone: int) -> None:
        self._commit, self._alone = commit, alone
        self.refused: list[int] = []

    async def __call__(self, batch: Batch) -> None:
        assert batch.last is not None
        holds = batch.last - len(batch) < self._alone <= batch.last
        if len(batch) > 1 and holds and not self.refused:
            self.refused.append(len(batch))
            raise redis_exceptions.ResponseError("simulated: batch refused")
        if len(batch) == 1 and batch.last == self._alone and len(self.refused) == 1:
            self.refused.append(1)
            raise redis_exceptions.ResponseError("simulated: object refused")
        await self._commit(batch)


async def test_a_refused_batch_is_folded_again_one_event_per_commit(
        clean_servers: Servers) -> None:
    """Every event of the refused batch is applied once, in order, with its own change
    record; the one object the store refuses alone is withdrawn, and its status says why;
    the compiler goes on to the end of the stream."""
    events = _events(60)
    # The last version of policy p1 (seq = index + 1) is the object refused alone.
    alone = max(n for n, obj in enumerate(events)
                if obj["kind"] == "MonitorAccessPolicy" and obj["metadata"]["name"] == "p1") + 1
    nc = await nats.connect(clean_servers.nats_url)
    r = aioredis.from_url(clean_servers.redis_url)
    bodies: list[dict[str, Any]] = []

    async def on(msg: Msg) -> None:
        bodies.append(msgspec.json.decode(msg.data))

    try:
        statuses = await _statuses(nc)
        await nc.subscribe("clearance.status.monitoraccesspolicy.ns.p1", cb=on)
        await _publish(nc, events)
        compiler = Compiler(nc, r)
        refuse = Refuse(compiler._store.commit, alone)
        compiler._store.commit = refuse  # type: ignore[method-assign]
        await _compile_until(compiler, r, len(events))
        await nc.flush()
        assert refuse.refused[0] > 1 and refuse.refused[1:] == [1], refuse.refused
        assert await _change_ids(r) == [f"{seq}-0".encode() for seq in range(1, 61)]
        await _assert_last_versions(r, events, withdrawn="p1")
        # p1 is withdrawn: its last status is the failure, with the store's reason.
        assert bodies and bodies[-1]["revision"] == alone, bodies[-1:]
        assert "could not be compiled or stored" in bodies[-1]["message"], bodies[-1]
        assert "object refused" in bodies[-1]["message"], bodies[-1]
        assert statuses and max(statuses.values()) == 1, statuses.most_common(3)
    finally:
        await nc.close()
        await r.aclose()


class RefuseLate:
    """Wraps StateStore.commit: the first batch of more than one event that holds event
    ``target`` is refused after a while: long enough for the compiler to fold the next
    batch read meanwhile (a backlog's batches are committed in the background)."""

    def __init__(self, commit: Callable[[Batch], Awaitable[None]], target: int,
                 folder: Any) -> None:
        self._commit, self._target, self._folder = commit, target, folder
        #: How many events were folded after the refused batch when it was refused.
        self.folded_since: int | None = None

    async def __call__(self, batch: Batch) -> None:
        assert batch.last is not None
        if self.folded_since is None and len(batch) > 1 \
                and batch.last - len(batch) < self._target <= batch.last:
            await asyncio.sleep(0.5)
            self.folded_since = len(self._folder._messages)
            raise redis_exceptions.ResponseError("simulated: batch refused")
        await self._commit(batch)


async def test_a_batch_refused_while_the_next_was_folded_loses_and_doubles_nothing(
        clean_servers: Servers) -> None:
    """The events folded after a batch whose commit was then refused rest on a state that
    was never written: the refused batch is folded again one event per commit, then the
    events since, and every event is applied once, in order, its status published once."""
    events = _events(1500)
    nc = await nats.connect(clean_servers.nats_url)
    r = aioredis.from_url(clean_servers.redis_url)
    try:
        statuses = await _statuses(nc)
        await _publish(nc, events)
        compiler = Compiler(nc, r)
        refuse = RefuseLate(compiler._store.commit, 700, compiler._folder)
        compiler._store.commit = refuse  # type: ignore[method-assign]
        policy_revisions = {n + 1 for n, obj in enumerate(events)
                            if obj["kind"] == "MonitorAccessPolicy"}
        await _compile_until(compiler, r, len(events), then=lambda: {
            revision for _, revision in statuses} >= policy_revisions)
        await nc.flush()
        assert refuse.folded_since, refuse.folded_since  # the next batch was folded
        assert await _change_ids(r) == [f"{seq}-0".encode() for seq in range(1, 1501)]
        await _assert_last_versions(r, events)
        assert statuses and max(statuses.values()) == 1, statuses.most_common(3)
        # Every policy revision's status came, once.
        assert {revision for _, revision in statuses} == policy_revisions
    finally:
        await nc.close()
        await r.aclose()
