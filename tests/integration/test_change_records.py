"""A change names two audiences: whom to announce, and which cached decisions to drop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from clearance_runtime.messaging import bus
from clearance_runtime.storage import keys
from clearance_runtime.storage.changes import ChangeRecord
from clearance_runtime.storage.state import StateStore
from tests.conftest import Servers
from tests.integration.harness import System, cluster, group, publish_object
from tests.support.policies import policy
from tests.support.waiting import until

RBAC = "rbac.authorization.k8s.io/v1"


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.write("inventory.yaml", cluster("prod-east"))
    sys_.write("policies.yaml", policy("alice", users=["alice"], default="all"))
    await sys_.start()
    await sys_.settle()
    yield sys_
    await sys_.close()


def binding(user: str) -> dict[str, Any]:
    return {"apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": "view"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "name": user}]}


async def test_a_binding_change_is_announced_but_keeps_cached_checks(system: System) -> None:
    assert system.nc is not None
    heard: list[dict[str, Any]] = []

    async def hear(msg: Any) -> None:
        heard.append(msgspec.json.decode(msg.data))

    sub = await system.nc.subscribe("clearance.decisions.changed", cb=hear)
    await system.check("alice", "prod-east")
    assert (await system.check("alice", "prod-east"))["cached"] is True
    await system.apply("rbac.yaml", {"apiVersion": RBAC, "kind": "ClusterRole",
                                     "metadata": {"name": "view"},
                                     "rules": [{"apiGroups": [""], "resources": ["pods"],
                                                "verbs": ["get"]}]}, binding("alice"))
    revision = await system.settle()
    reply = await system.check("alice", "prod-east", min_revision=revision)
    assert (reply["decision"], reply["cached"]) == ("allow", True)  # checks never read RBAC
    # Reviews did change: the announcement names alice.
    await until(lambda: any("alice" in m["principals"]["users"] for m in heard))
    # A policy change, by contrast, drops alice's cached check.
    await system.apply("policies.yaml", policy("alice", users=["alice"], effect="Deny",
                                               default="all"))
    revision = await system.settle()
    reply = await system.check("alice", "prod-east", min_revision=revision)
    assert (reply["decision"], reply["cached"]) == ("deny", False)
    await sub.unsubscribe()


async def test_a_cluster_label_change_drops_only_answers_it_can_change(
        system: System) -> None:
    """Only principals of policies selecting by labels lose their cached checks about the
    cluster, and only when that policy's match of it moves."""
    system.write("policies.yaml", policy("alice", users=["alice"], default="all"),
                 policy("tiered", users=["lee"], rules=[
                     {"selector": {"matchLabels": {"tier": "gold"}}}]))
    await system.settle()
    assert (await system.check("alice", "prod-east"))["decision"] == "allow"
    assert (await system.check("lee", "prod-east"))["decision"] == "deny"
    await system.apply("inventory.yaml", cluster("prod-east", owner="team-a"))
    revision = await system.settle()
    # No policy's match moved: both answers stay cached.
    assert (await system.check("alice", "prod-east", min_revision=revision))["cached"]
    assert (await system.check("lee", "prod-east", min_revision=revision))["cached"]
    await system.apply("inventory.yaml", cluster("prod-east", owner="team-a", tier="gold"))
    revision = await system.settle()
    alice = await system.check("alice", "prod-east", min_revision=revision)
    lee = await system.check("lee", "prod-east", min_revision=revision)
    assert alice["cached"] is True
    assert (lee["decision"], lee["cached"]) == ("allow", False)


async def test_a_cluster_label_change_keeps_answers_about_other_clusters(
        system: System) -> None:
    """A principal whose policy's match of one cluster moves keeps its cached answers
    about every other cluster: a cluster's labels decide nothing elsewhere."""
    system.write("inventory.yaml", cluster("prod-east", tier="gold"),
                 cluster("prod-west", tier="gold"))
    system.write("policies.yaml", policy("tiered", users=["lee"], rules=[
        {"selector": {"matchLabels": {"tier": "gold"}}}]))
    await system.settle()
    for name in ("prod-east", "prod-west"):
        assert (await system.check("lee", name))["decision"] == "allow"
    system.write("inventory.yaml", cluster("prod-east", tier="silver"),
                 cluster("prod-west", tier="gold"))
    revision = await system.settle()
    east = await system.check("lee", "prod-east", min_revision=revision)
    west = await system.check("lee", "prod-west", min_revision=revision)
    assert (east["decision"], east["cached"]) == ("deny", False)
    assert (west["decision"], west["cached"]) == ("allow", True)


async def test_joining_a_group_no_policy_names_keeps_cached_answers(system: System) -> None:
    """Membership of a group matters only if a policy names it."""
    system.write("policies.yaml", policy("alice", users=["alice"], default="all"),
                 policy("ops", groups=["ops"], default="all", effect="Deny", priority=0))
    await system.settle()
    assert (await system.check("alice", "prod-east"))["decision"] == "allow"
    await system.apply("groups.yaml", group("book-club", "alice"))
    revision = await system.settle()
    assert (await system.check("alice", "prod-east", min_revision=revision))["cached"]
    await system.apply("groups.yaml", group("book-club", "alice"), group("ops", "alice"))
    revision = await system.settle()
    reply = await system.check("alice", "prod-east", min_revision=revision)
    assert (reply["decision"], reply["cached"]) == ("deny", False)


async def test_invalidations_and_event_to_effect_are_measured_by_kind(system: System) -> None:
    """``clearance_event_to_effect_seconds{kind}`` observes each event once its entries are
    gone; ``clearance_cache_invalidated_total{kind}`` counts what it removed."""
    def samples(name: str, kind: str) -> float:
        # The services of these tests run in this process: read its registry.
        return sum(s.value for m in REGISTRY.collect() if m.name == name
                   for s in m.samples if s.labels.get("kind") == kind
                   and s.name in (f"{name}_count", f"{name}_total"))

    before = samples("clearance_event_to_effect_seconds", "monitoraccesspolicy")
    removed = samples("clearance_cache_invalidated", "monitoraccesspolicy")
    await system.check("alice", "prod-east")
    system.write("policies.yaml", policy("alice", users=["alice"], effect="Deny",
                                         default="all"))
    await system.settle()
    assert samples("clearance_event_to_effect_seconds", "monitoraccesspolicy") > before
    assert samples("clearance_cache_invalidated", "monitoraccesspolicy") >= removed + 1


async def test_a_build_invalidates_a_named_group_without_listing_its_members(
        clean_servers: Servers) -> None:
    """While a build folds the events the stream held when it began, no decision is
    answered, so nothing is cached: a policy naming a group invalidates the group, and
    its members are not listed one by one (what a rebuild of a fleet paid for). Once the
    build is over they are, and answers are right either way. The build here is one a
    compiler left half way (its marker set, nothing folded), as a restart finds it."""
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, None)
    r = aioredis.from_url(clean_servers.redis_url)
    try:
        await sys_.start("decision")
        assert sys_.nc is not None
        await bus.ensure_stream(sys_.nc.jetstream())
        await publish_object(sys_, cluster("prod-east"))
        await publish_object(sys_, group("ops", "alice", "bob"))
        built = await publish_object(sys_, policy("ops", groups=["ops"], default="all"))
        await StateStore(r).wipe(built)
        await sys_.start("compiler", "cache-invalidator")
        await sys_.settle()
        assert (await sys_.check("alice", "prod-east"))["decision"] == "allow"
        during = await record(r, built)
        assert (during.invalidate.groups, during.invalidate.users) == ({"ops"}, set())
        after = await publish_object(sys_, policy("ops-deny", groups=["ops"], default="all",
                                                  effect="Deny", priority=0))
        await sys_.settle()
        assert (await record(r, after)).invalidate.users == {"alice", "bob"}
        reply = await sys_.check("bob", "prod-east", min_revision=after)
        assert (reply["decision"], reply["cached"]) == ("deny", False)
    finally:
        await r.aclose()
        await sys_.close()


async def record(r: aioredis.Redis, revision: int) -> ChangeRecord:
    [(_, fields)] = await r.xrange(keys.CHANGES, f"{revision}-0", f"{revision}-0")
    return msgspec.json.decode(fields[b"r"], type=ChangeRecord)
