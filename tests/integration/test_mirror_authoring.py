"""The authoring views (``effective``, ``reach``, ``simulate``, an AccessPolicy's status)
answer from the decision service's mirror exactly what the store holds.

Random AccessPolicies at every level and from every kind of namespace (the admin one, a
team's, a cluster's: some take no part), invalid ones, cluster sets, their bindings and
labelled clusters go through the real compiler; after each burst, a mirror that followed
the change records and one loaded from scratch must both give, for every target, the
effective policy and the excluded policies an oracle reads from the store's hashes, and
for every policy its conditions and whether it is known; the simulation index built from
each must reach the same targets for every policy.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis

from clearance_api.wire import ExcludedPolicy
from clearance_core.inherit import hierarchy
from clearance_core.inherit.authority import Authority, parse_namespaces
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.index import InheritanceIndex
from clearance_core.inherit.merge import EffectivePolicy
from clearance_runtime.messaging import bus
from clearance_runtime.reading.inherit_reads import InheritReads
from clearance_runtime.reading.mirror import StateMirror
from clearance_runtime.storage import keys
from clearance_runtime.storage.families import decode_labels
from clearance_runtime.storage.inherit_store import (
    decode_conditions,
    decode_effective,
    decode_excluded,
    excluded_key,
    location,
    stored,
)
from tests.conftest import Servers
from tests.integration.harness import System, cluster, publish_object
from tests.support.accesspolicies import CLUSTERSET_LABEL, access_policy, block, rule

OCM = "cluster.open-cluster-management.io"
CLUSTERS = ["east", "west", "c:1"]
SETS = ["prod", "dev", "gone"]
NAMESPACES = ["shop", "billing"]
#: The admin namespace, a team's, and one named like a cluster (it governs that cluster).
WRITERS = ["clearance-system", "team-a", "east"]


@pytest.fixture
async def system(clean_servers: Servers) -> AsyncIterator[System]:
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, None)
    await sys_.start("compiler", "cache-invalidator", "decision")
    assert sys_.nc is not None
    await bus.ensure_stream(sys_.nc.jetstream())
    yield sys_
    await sys_.close()


def random_object(rng: random.Random) -> dict[str, Any]:
    pick = rng.randrange(5)
    if pick == 0:
        return {"apiVersion": f"{OCM}/v1beta2", "kind": "ManagedClusterSet",
                "metadata": {"name": rng.choice(SETS)}}
    if pick == 1:
        return {"apiVersion": f"{OCM}/v1beta2", "kind": "ManagedClusterSetBinding",
                "metadata": {"name": rng.choice(SETS), "namespace": rng.choice(WRITERS)},
                "spec": {"clusterSet": rng.choice(SETS)}}
    if pick == 2:
        labels = {CLUSTERSET_LABEL: rng.choice(SETS)} if rng.random() < 0.7 else {}
        return cluster(rng.choice(CLUSTERS), **labels)
    target = rng.choice(TARGETS)
    rules = {f"r{rng.randrange(3)}": rule(groups=[rng.choice(["sre", "dev"])],
                                          effect=rng.choice([None, "Deny"]))}
    made = access_policy(f"ap{rng.randrange(4)}", namespace=rng.choice(WRITERS),
                         target=target, **{rng.choice(["rules", "defaults", "overrides"]):
                                           rules if rng.random() < 0.5 else block(rules)})
    if rng.random() < 0.1:
        made["spec"]["rules"] = {"bad": {"subjects": "not a list"}}  # invalid
    return made


TARGETS: list[str | tuple[str, ...]] = [
    "Fleet", *(("ClusterSet", s) for s in SETS), *(("Cluster", c) for c in CLUSTERS),
    *(("Namespace", c, n) for c in CLUSTERS for n in NAMESPACES)]


def every_target() -> list[Target]:
    found = [hierarchy.FLEET]
    found += [hierarchy.cluster_set(s) for s in [*SETS, "nowhere"]]
    found += [hierarchy.cluster(c) for c in [*CLUSTERS, "nowhere"]]
    found += [Target(kind="Namespace", cluster=c, name=n) for c in [*CLUSTERS, "nowhere"]
              for n in [*NAMESPACES, "other"]]
    return found


async def store_effective(redis: aioredis.Redis, target: Target) -> EffectivePolicy | None:
    """``effective`` as read from the store's hashes (the oracle)."""
    if target.kind == "ClusterSet":
        exists = bool(await redis.hexists(keys.CLUSTER_SETS, target.name))
    else:
        name = target.name if target.kind == "Cluster" else target.cluster
        exists = target.kind == "Fleet" or bool(await redis.hexists(keys.CLUSTERS, name or ""))
    if not exists:
        return None
    for step in (target, hierarchy.derived_from(target), hierarchy.FLEET):
        if step is None:
            continue
        found = await redis.hget(*location(step))
        if found is not None:
            effective = decode_effective(found)
            return msgspec.structs.replace(effective, target=target)
    return EffectivePolicy(target=target)


async def store_excluded(redis: aioredis.Redis, target: Target) -> list[ExcludedPolicy]:
    steps = [hierarchy.FLEET]
    if target.kind == "ClusterSet":
        steps.append(target)
    elif target.kind != "Fleet":
        name = (target.name if target.kind == "Cluster" else target.cluster) or ""
        raw = await redis.hget(keys.CLUSTERS, name)
        set_name = hierarchy.labels_set(decode_labels(raw)) if raw else None
        if set_name is not None:
            steps.append(hierarchy.cluster_set(set_name))
        steps.append(hierarchy.cluster(name))
        if target.kind == "Namespace":
            steps.append(target)
    found = []
    for step in steps:
        entries = await redis.hgetall(excluded_key(step))
        found += [decode_excluded(value) for _, value in sorted(entries.items())]
    return found


async def agree(redis: aioredis.Redis, *mirrors: StateMirror) -> int:
    """Every view of every mirror equals the store's; returns how many policies took no
    part somewhere (the test's fleet must exercise that)."""
    policies = {k.decode() for k in await redis.hkeys(keys.ACCESS_POLICIES)}
    invalid = {k.decode() for k in await redis.hkeys(keys.ACCESS_INVALID)}
    excluded = 0
    for mirror in mirrors:
        views = InheritReads(mirror)
        for target in every_target():
            assert await views.effective(target) == await store_effective(redis, target), \
                target
            expected = await store_excluded(redis, target)
            assert await views.excluded(target) == expected, target
            excluded += len(expected)
        for key in sorted(policies | invalid | {"clearance-system/none"}):
            raw = await redis.hget(keys.ACCESS_STATUS, key)
            assert await views.conditions(key) == (None if raw is None
                                                   else decode_conditions(raw))
            assert await views.known(key) == (key in policies or key in invalid)
        simulation = await views.simulation()
        assert simulation.invalid == {k.decode(): v.decode() for k, v in
                                      (await redis.hgetall(keys.ACCESS_INVALID)).items()}
        oracle = await store_index(redis)
        for key in policies:
            assert simulation.index.reach(key) == oracle.reach(key), key
            assert simulation.index.unauthorized(key) == oracle.unauthorized(key), key
        assert simulation.index.targets() == oracle.targets()
    return excluded


async def store_index(redis: aioredis.Redis) -> InheritanceIndex:
    """The simulation index built from the store's hashes (the oracle)."""
    async with redis.pipeline(transaction=True) as pipe:
        for hash_key in (keys.ACCESS_POLICIES, keys.ACCESS_INVALID, keys.CLUSTERS,
                         keys.CLUSTER_SETS, keys.BINDINGS):
            pipe.hgetall(hash_key)
        pipe.get(keys.ADMIN_NAMESPACES)
        policies, invalid, clusters, sets, bindings, admins = await pipe.execute()
    state = stored(policies, invalid, {}, bindings)
    return InheritanceIndex.build(
        state.policies.values(), {k.decode(): decode_labels(v) for k, v in clusters.items()},
        {s.decode() for s in sets}, bindings=state.bindings,
        authority=Authority.of(parse_namespaces(admins.decode())))


async def test_the_authoring_views_a_mirror_answers_are_the_stores(
        system: System, clean_servers: Servers) -> None:
    redis = aioredis.Redis.from_url(clean_servers.redis_url)
    following = StateMirror(redis)
    rng = random.Random(11)
    excluded = 0
    try:
        for _ in range(5):
            for _ in range(30):
                await publish_object(system, random_object(rng), deleted=rng.random() < 0.15)
            await system.settle()
            excluded += await agree(redis, following, StateMirror(redis))
        assert following.loads == 1 and following.catch_ups >= 4  # followed, not reloaded
        assert excluded > 0  # some policy was shown as taking no part
    finally:
        await redis.aclose()


async def test_a_simulation_index_is_rebuilt_only_when_what_it_holds_moves(
        system: System, clean_servers: Servers) -> None:
    redis = aioredis.Redis.from_url(clean_servers.redis_url)
    views = InheritReads(StateMirror(redis))
    try:
        await publish_object(system, cluster("east"))
        await publish_object(system, access_policy("a", namespace="clearance-system",
                                            rules={"r": rule(groups=["sre"])}))
        await system.settle()
        first = await views.simulation()
        assert await views.simulation() is first  # nothing moved: the same index
        assert [t.kind for t in first.index.reach("clearance-system/a")] == ["Fleet",
                                                                             "Cluster"]
        await publish_object(system, cluster("west", **{CLUSTERSET_LABEL: "prod"}))
        await system.settle()
        second = await views.simulation()
        assert second is not first  # the inventory moved
        assert second.index.inventory.clusters.keys() == {"east", "west"}
    finally:
        await redis.aclose()
