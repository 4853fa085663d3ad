"""The decision service's mirror of the compiled state answers exactly as the store does.

Random events of every kind a check reads (policies, Groups, clusters and their labels,
AccessPolicies at every level, MetricSources), with names of odd characters, go through
the real compiler; after each burst, a mirror that followed the change records and a
mirror loaded from scratch must both give, for every principal, the snapshot an oracle
computes by brute force from the store's hashes (:func:`store_snapshot`: every policy
looked at, no index).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis

from clearance_api.errors import Unavailable
from clearance_core.inherit import hierarchy
from clearance_runtime.messaging import bus
from clearance_runtime.process import health
from clearance_runtime.reading.mirror import StateMirror
from clearance_runtime.reading.snapshot import Snapshot
from clearance_runtime.storage import changes, keys
from clearance_runtime.storage.families import decode_policy
from clearance_runtime.storage.inherit_store import decode_effective, location
from tests.conftest import Servers
from tests.integration.harness import System, cluster, group, publish_object
from tests.support.accesspolicies import access_policy, block, rule
from tests.support.policies import policy

USERS = ["alice", "bob", "a*b", "o'neil", "zoë", "with space", "x:y,z", "back\\slash",
         "system:serviceaccount:team:bot"]
GROUPS = ["sre", "dev", "g[1]", "g?", "ops,eu", "équipe"]
CLUSTERS = ["east", "west", "c:1", "prod-eu"]
NAMESPACES = ["shop", "billing", "kube-system"]
#: The admin namespace (the default): its AccessPolicies take part wherever they aim.
ADMIN = "clearance-system"


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, None)
    await sys_.start("compiler", "cache-invalidator", "decision")
    assert sys_.nc is not None
    await bus.ensure_stream(sys_.nc.jetstream())
    yield sys_
    await sys_.close()


@pytest.fixture
async def alice_on_east(system: System, clean_servers: Servers
                        ) -> AsyncIterator[tuple[aioredis.Redis, StateMirror]]:
    """A store holding cluster ``east`` and a policy giving alice all clusters, and a
    mirror of it (not yet loaded), with its client."""
    redis = aioredis.Redis.from_url(clean_servers.redis_url)
    try:
        await publish_object(system, cluster("east"))
        await publish_object(system, policy("p", users=["alice"], default="all"))
        await system.settle()
        yield redis, StateMirror(redis)
    finally:
        await redis.aclose()


def random_object(rng: random.Random) -> dict[str, Any]:
    pick = rng.randrange(6)
    users, groups = rng.sample(USERS, rng.randint(0, 2)), rng.sample(GROUPS, rng.randint(0, 2))
    if pick == 0:
        return policy(f"p{rng.randrange(8)}", users=users, groups=groups,
                      effect=rng.choice(["Allow", "Deny"]), default=rng.choice(["all", "none"]),
                      priority=rng.randrange(3) * 10)
    if pick == 1:
        return group(rng.choice(GROUPS), *rng.sample(USERS, rng.randint(0, 3)))
    if pick == 2:
        labels = {"env": rng.choice(["prod", "dev"])} if rng.random() < 0.7 else {}
        return cluster(rng.choice(CLUSTERS), **labels)
    if pick == 3:
        targets: list[str | tuple[str, ...]] = [
            "Fleet", ("Cluster", rng.choice(CLUSTERS)),
            ("Namespace", rng.choice(CLUSTERS), rng.choice(NAMESPACES))]
        target = rng.choice(targets)
        rules = {f"r{rng.randrange(3)}": rule(users=users or None, groups=groups or None,
                                              effect=rng.choice([None, "Deny"]))}
        if target == "Fleet" and rng.random() < 0.5:
            return access_policy(f"ap{rng.randrange(4)}", namespace=ADMIN, target=target,
                                 defaults=block(rules))
        return access_policy(f"ap{rng.randrange(4)}", namespace=ADMIN, target=target,
                             rules=rules)
    if pick == 4:
        return metric_source(rng.choice(["widget", "gadget"]), f"ms{rng.randrange(2)}")
    return policy(f"p{rng.randrange(8)}", users=users, service_accounts=[
        {"name": "bot", "namespace": "team"}] if rng.random() < 0.5 else None)


def metric_source(type_name: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "clusterpulse.io/v1alpha1", "kind": "MetricSource",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"rbac": {"resourceTypeName": type_name}}}


def comparable(snapshot: Snapshot) -> dict[str, Any]:
    return {
        "compiled_revision": snapshot.compiled_revision,
        "revision": snapshot.revision,
        "member_of": sorted(snapshot.member_of),
        "policies": sorted(msgspec.json.encode(p) for p in snapshot.policies),
        "labels": snapshot.labels,
        "known": sorted(snapshot.known_clusters),
        "fleet": msgspec.json.encode(snapshot.fleet),
        "clusters": {c: msgspec.json.encode(e) for c, e in snapshot.cluster_effective.items()},
        "namespaces": {c: {n: msgspec.json.encode(e) for n, e in t.items()}
                       for c, t in snapshot.namespace_effective.items()},
        "declared": sorted(snapshot.declared) if snapshot.fleet is not None else None,
    }


def _s(value: bytes) -> str:
    return value.decode()


async def store_snapshot(redis: aioredis.Redis, *, username: str, groups: list[str],
                         clusters: list[str] | None, namespaces: list[str] | None
                         ) -> dict[str, Any]:
    """What a check of ``username`` reads, as :func:`comparable` shows it, computed from
    the store's hashes read whole in one transaction."""
    effns_keys = [k async for k in redis.scan_iter(match=f"{keys.prefix(keys.effective_in)}*")]
    async with redis.pipeline(transaction=True) as pipe:
        for key in (keys.REV, keys.BUILT, keys.INVALIDATED_REV):
            pipe.get(key)
        for key in (keys.POLICIES, keys.GROUPS, keys.CLUSTERS, keys.EFFECTIVE, keys.SOURCES):
            pipe.hgetall(key)
        pipe.exists(keys.ACCESS_POLICIES)
        for key in effns_keys:
            pipe.hgetall(key)
        rev, built, irev, pol, grp, mc, eff, ms, access, *effns = await pipe.execute()
    member = sorted(_s(g) for g, users in grp.items()
                    if username in msgspec.json.decode(users))
    all_groups = {*groups, *member}
    policies = [decode_policy(blob) for blob in pol.values()]
    candidates = [p for p in policies if username in p.users or username in
                  p.service_accounts or all_groups & set(p.groups)]
    inventory = {_s(c): msgspec.json.decode(v) for c, v in mc.items()}
    wanted = list(inventory) if clusters is None else clusters
    labels = {c: inventory[c] for c in wanted if c in inventory}
    held = {_s(k)[len(keys.prefix(keys.effective_in)):]: {_s(n): v for n, v in t.items()}
            for k, t in zip(effns_keys, effns, strict=True)}

    def effective(blob: bytes | None) -> bytes:
        return msgspec.json.encode(None if blob is None else decode_effective(blob))

    fleet = eff.get(location(hierarchy.FLEET)[1].encode()) if access else None
    cluster_field = location(hierarchy.cluster(""))[1]
    ceff, neff = {}, {}
    if access:
        for c in wanted:
            blob = eff.get(f"{cluster_field}{c}".encode())
            if blob is not None:
                ceff[c] = effective(blob)
            targets = held.get(c, {})
            chosen = {n: effective(b) for n, b in targets.items()
                      if namespaces is None or n in namespaces}
            if chosen:
                neff[c] = chosen
    return {
        "compiled_revision": f"{_s(rev or b'0')}@{_s(built)}",
        "revision": int(irev or 0),
        "member_of": member,
        "policies": sorted(msgspec.json.encode(p) for p in candidates),
        "labels": labels,
        "known": sorted(labels),
        "fleet": effective(fleet),
        "clusters": ceff,
        "namespaces": neff,
        "declared": sorted(_s(t) for t in ms) if fleet is not None else None,
    }


async def agree(redis: aioredis.Redis, *mirrors: StateMirror) -> None:
    for username in USERS:
        for asserted in ([], ["dev"], GROUPS):
            for clusters, namespaces in ((None, None), (CLUSTERS[:2], ["shop"]),
                                         (["nowhere"], [])):
                expected = await store_snapshot(
                    redis, username=username, groups=asserted, clusters=clusters,
                    namespaces=namespaces)
                for mirror in mirrors:
                    revision = await mirror.current()
                    found = comparable(mirror.snapshot(
                        revision=revision, username=username, email=None, groups=asserted,
                        clusters=clusters, namespaces=namespaces))
                    assert found == expected, (username, asserted, clusters)


async def test_a_mirror_following_the_records_reads_what_the_store_holds(
        system: System, clean_servers: Servers) -> None:
    redis = aioredis.Redis.from_url(clean_servers.redis_url)
    following = StateMirror(redis)
    rng = random.Random(7)
    try:
        for _ in range(6):
            for _ in range(25):
                obj = random_object(rng)
                await publish_object(system, obj, deleted=rng.random() < 0.2)
            await system.settle()
            await agree(redis, following, StateMirror(redis))
        # Followed, not reloaded: one load at the start, then catch-ups only.
        assert following.loads == 1
        assert following.catch_ups >= 5
    finally:
        await redis.aclose()


async def test_a_mirror_reloads_when_it_cannot_follow(
        system: System, alice_on_east: tuple[aioredis.Redis, StateMirror]) -> None:
    redis, mirror = alice_on_east
    await agree(redis, mirror)
    assert mirror.loads == 1
    # Records trimmed past the mirror's checkpoint: it cannot know what changed.
    await publish_object(system, group("sre", "alice"))
    await system.settle()
    await redis.xtrim(keys.CHANGES, minid=f"{int(await redis.get(keys.REV) or 0) + 1}-0")
    await publish_object(system, policy("q", groups=["sre"], default="all"))
    await system.settle()
    await agree(redis, mirror)
    assert mirror.loads == 2
    # A record that does not list its writes (written by an older compiler).
    revision = int(await redis.get(keys.REV) or 0) + 1
    await redis.xadd(keys.CHANGES, {"r": b"{}"}, id=f"{revision}-0")
    await redis.set(keys.REV, revision)
    await agree(redis, mirror)
    assert mirror.loads == 3


async def test_a_record_too_large_to_carry_its_values_makes_a_mirror_reload(
        system: System, alice_on_east: tuple[aioredis.Redis, StateMirror],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A Group too large for one record: the mirror cannot apply it, and reads it whole;
    smaller changes after it are followed again."""
    redis, mirror = alice_on_east
    await agree(redis, mirror)
    monkeypatch.setattr(changes, "VALUES_MAX_BYTES", 400)
    await publish_object(system, group("sre", "alice", *(f"member-{i}" for i in range(50))))
    await system.settle()
    await agree(redis, mirror)
    assert mirror.loads == 2
    assert mirror.snapshot(revision=0, username="member-7", email=None, groups=[],
                           clusters=None, namespaces=()).member_of == ["sre"]
    await publish_object(system, group("dev", "bob"))
    await system.settle()
    await agree(redis, mirror)
    assert mirror.loads == 2 and mirror.catch_ups >= 1


async def test_checks_follow_a_change_at_once(system: System) -> None:
    """Through the decision service: the first check after a change sees it."""
    await publish_object(system, cluster("east"))
    await publish_object(system, policy("p", users=["alice"], default="all"))
    await system.settle()
    assert (await system.check("alice", "east"))["decision"] == "allow"
    for round_ in range(5):
        await publish_object(system, policy("p", users=["alice"], default="all",
                                     effect="Deny" if round_ % 2 == 0 else "Allow"))
        revision = await system.settle()
        reply = await system.check("alice", "east", min_revision=revision)
        assert reply["decision"] == ("deny" if round_ % 2 == 0 else "allow"), reply


async def test_a_request_probed_before_a_rebuild_gets_the_rebuilt_state_or_unavailable(
        alice_on_east: tuple[aioredis.Redis, StateMirror]) -> None:
    """A probe read before the store was wiped names a build the mirror will never hold
    again: the request is answered from the rebuilt state once it is whole, and is
    ``unavailable`` until then — never from part of it, and it never waits for ever."""
    redis, mirror = alice_on_east
    await mirror.current()
    old = health.Probe.of(*await redis.mget([keys.REV, keys.BUILT, keys.INVALIDATED_REV]))
    ahead = old._replace(rev=str(int(old.rev) + 1))  # one the mirror has not reached
    try:
        # A rebuild under way (its target not reached): first a whole load, then a
        # catch-up within that build; both must refuse.
        await redis.set(keys.BUILT, f"{old.revision + 1000}:rebuilding")
        for _ in range(2):
            with pytest.raises(Unavailable):
                await asyncio.wait_for(mirror.current(ahead), 5)
        assert mirror.loads == 2 and mirror.catch_ups >= 1
        # The rebuild done: answered from it.
        await redis.set(keys.BUILT, f"{old.revision}:rebuilt")
        revision = await asyncio.wait_for(mirror.current(ahead), 5)
        assert revision == old.revision and mirror.built == f"{old.revision}:rebuilt".encode()
        await agree(redis, mirror)
    finally:
        assert old.built is not None
        await redis.set(keys.BUILT, old.built)
