"""Policy authority end to end (real NATS and Valkey, the services in-process): which
namespaces' AccessPolicies take part, what the others report, and how a
ManagedClusterSetBinding grants and revokes — through decisions, statuses, ``effective``
and a compiler restart."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest
import redis.asyncio as aioredis

from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.support.accesspolicies import CLUSTERSET_LABEL, access_policy, block, rule

T = TypeVar("T")

OCM = "cluster.open-cluster-management.io"
BASELINE = access_policy("baseline", namespace="clearance-system",
                         defaults=block({"sre": rule(groups=["sre"])}, "merge"))
#: A team's attempt at a Fleet-wide override: mallory everywhere, the platform team out.
GRAB = access_policy("grab", namespace="team-a", overrides=block({
    "grab": rule(users=["mallory"], view=True, metrics=True),
    "lockout": rule(groups=["platform-team"], effect="Deny")}, "merge"))
PROD_OPS = access_policy("prod-ops", namespace="team-a", target=("ClusterSet", "prod"),
                         overrides=block({"ops": rule(groups=["ops"])}, "merge"))


def cluster_set(name: str) -> dict[str, Any]:
    return {"apiVersion": f"{OCM}/v1beta2", "kind": "ManagedClusterSet",
            "metadata": {"name": name}}


def binding(name: str, namespace: str, cluster_set_name: str | None = None) -> dict[str, Any]:
    return {"apiVersion": f"{OCM}/v1beta2", "kind": "ManagedClusterSetBinding",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterSet": cluster_set_name or name}}


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.write("inventory.yaml", cluster("east", **{CLUSTERSET_LABEL: "prod"}),
               cluster("west"), cluster_set("prod"))
    sys_.write("policies.yaml", BASELINE, GRAB, PROD_OPS)
    await sys_.start()
    await sys_.settle()
    yield sys_
    await sys_.close()


async def conditions(system: System, namespace: str, name: str) -> dict[str, dict[str, str]]:
    """By type; none while the decision service is unavailable (a rebuild)."""
    status = await system.request("clearance.v1.policy-status", {
        "kind": "AccessPolicy", "namespace": namespace, "name": name})
    return {c["type"]: c for c in status.get("conditions", [])}


async def effective(system: System, **target: str) -> dict[str, Any]:
    return await system.request("clearance.v1.effective", {"target": target})


async def decision(system: System, user: str, cluster_: str, groups: list[str],
                   revision: int) -> tuple[str, bool]:
    reply = await system.check(user, cluster_, groups=groups, min_revision=revision)
    return reply["decision"], reply["cached"]


async def eventually(read: Callable[[], Awaitable[T]], ok: Callable[[T], bool],
                     within: float = 10.0) -> T:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        found = await read()
        if ok(found) or asyncio.get_running_loop().time() > deadline:
            return found
        await asyncio.sleep(0.05)


async def test_a_team_fleet_override_takes_no_part_and_is_reported_unauthorized(
        system: System) -> None:
    revision = await system.settle()
    # Mallory gets nothing, the platform team is not locked out (the SRE default holds).
    assert await decision(system, "mallory", "east", [], revision) == ("deny", False)
    assert (await decision(system, "alice", "west", ["platform-team", "sre"], revision))[0] \
        == "allow"
    accepted = (await conditions(system, "team-a", "grab"))["Accepted"]
    assert (accepted["status"], accepted["reason"]) == ("False", "Unauthorized")
    assert "only the admin namespaces (clearance-system) may write" in accepted["message"]
    # effective shows who takes part, and who is aimed there but does not, and why.
    fleet = await effective(system, kind="Fleet", name="fleet")
    assert fleet["policies"] == ["clearance-system/baseline"]
    assert fleet["excluded"] == [{"policy": "team-a/grab", "reason": "Unauthorized",
                                  "message": accepted["message"]}]
    shop = await effective(system, kind="Namespace", cluster="east", name="shop")
    assert [e["policy"] for e in shop["excluded"]] == ["team-a/grab", "team-a/prod-ops"]


async def test_a_binding_grants_a_cluster_set_policy_and_its_deletion_revokes_it(
        system: System) -> None:
    assert system.nc is not None
    published: list[dict[str, Any]] = []

    async def collect(msg: Any) -> None:
        published.append(json.loads(msg.data))

    sub = await system.nc.subscribe("clearance.status.accesspolicy.team-a.prod-ops",
                                    cb=collect)
    revision = await system.settle()
    assert await decision(system, "olga", "east", ["ops"], revision) == ("deny", False)
    assert await decision(system, "olga", "east", ["ops"], revision) == ("deny", True)

    await system.apply("binding.yaml", binding("prod", "team-a"))
    revision = await system.settle()
    # The cached deny went with the binding's event: the next check is a fresh allow.
    assert await decision(system, "olga", "east", ["ops"], revision) == ("allow", False)
    assert await decision(system, "olga", "west", ["ops"], revision) == ("deny", False)
    assert (await conditions(system, "team-a", "prod-ops"))["Accepted"]["reason"] == \
        "Accepted"
    assert (await decision(system, "olga", "east", ["ops"], revision))[1] is True  # cached

    system.remove("binding.yaml")
    after = await system.settle()
    assert after == revision + 1  # one event: the binding's deletion
    assert await decision(system, "olga", "east", ["ops"], after) == ("deny", False)
    assert (await conditions(system, "team-a", "prod-ops"))["Accepted"]["reason"] == \
        "Unauthorized"
    east = await effective(system, kind="Cluster", name="east")
    assert "team-a/prod-ops" not in east["policies"]
    await eventually(lambda: asyncio.sleep(0, published), lambda p: len(p) >= 2)
    await sub.unsubscribe()
    assert [p["conditions"][0]["reason"] for p in published][-2:] == [
        "Accepted", "Unauthorized"]


async def test_a_binding_named_otherwise_than_its_set_grants_nothing(system: System) -> None:
    await system.apply("binding.yaml", binding("prod-binding", "team-a", "prod"))
    revision = await system.settle()
    assert await decision(system, "olga", "east", ["ops"], revision) == ("deny", False)
    accepted = (await conditions(system, "team-a", "prod-ops"))["Accepted"]
    assert accepted["reason"] == "Unauthorized"
    assert "ManagedClusterSetBinding team-a/prod-binding binds nothing" in accepted["message"]


async def test_a_cluster_leaving_the_bound_set_loses_its_bound_policies(
        system: System) -> None:
    await system.apply("binding.yaml", binding("prod", "team-a"))
    revision = await system.settle()
    assert await decision(system, "olga", "east", ["ops"], revision) == ("allow", False)
    await system.apply("inventory.yaml", cluster("east"), cluster("west"), cluster_set("prod"))
    revision = await system.settle()
    assert await decision(system, "olga", "east", ["ops"], revision) == ("deny", False)


async def test_bindings_are_reloaded_by_a_restarted_compiler_and_rebuilt_from_the_stream(
        system: System) -> None:
    """The compiler rebuilds its model from the store: the binding must come back with
    it, or the next policy change would fold as if the namespace were unbound."""
    await system.apply("binding.yaml", binding("prod", "team-a"))
    await system.settle()
    await system.stop("compiler")
    await system.start("compiler")
    more = access_policy("prod-more", namespace="team-a", target=("ClusterSet", "prod"),
                         overrides=block({"more": rule(groups=["more"])}, "merge"))
    await system.apply("more.yaml", more)
    revision = await system.settle()
    assert await decision(system, "olga", "east", ["more"], revision) == ("allow", False)
    # A store lost whole is rebuilt from the stream, bindings and all.
    client = aioredis.from_url(system.settings.redis_url)
    await client.flushall()
    await client.aclose()
    rebuilt = await eventually(
        lambda: conditions(system, "team-a", "prod-more"),
        lambda c: c.get("Accepted", {}).get("reason") == "Accepted", within=20)
    assert rebuilt["Accepted"]["reason"] == "Accepted"
    assert (await conditions(system, "team-a", "grab"))["Accepted"]["reason"] == \
        "Unauthorized"


async def test_other_admin_namespaces_rebuild_the_state_with_them(system: System) -> None:
    """CLEARANCE_ADMIN_NAMESPACES: a compiler started with other namespaces does not
    fold onto a state built with the old ones; it rebuilds, and team-a's override is in."""
    await system.stop("compiler")
    system.settings = msgspec.structs.replace(system.settings,
                                              admin_namespaces="clearance-system, team-a")
    await system.start("compiler")
    found = await eventually(lambda: conditions(system, "team-a", "grab"),
                             lambda c: c.get("Accepted", {}).get("reason") == "Accepted",
                             within=20)
    assert found["Accepted"]["reason"] == "Accepted"
    revision = await system.settle()
    assert await decision(system, "mallory", "east", [], revision) == ("allow", False)
    simulated = await system.request("clearance.v1.effective.simulate", {
        "policy": access_policy("grab2", namespace="team-a", rules={"x": rule(users=["x"])})})
    assert simulated["status"]["team-a/grab2"]["after"][0]["reason"] == "Accepted"
