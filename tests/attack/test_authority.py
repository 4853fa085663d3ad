"""Attacks on policy authority: a hostile author in a team namespace writes AccessPolicies
for targets it may not govern — the Fleet, a cluster set, another cluster, another
namespace — with Allow rules (to grant itself) and Deny rules (to lock the platform team
out), or forges the ManagedClusterSetBinding that would let it. On real NATS and Valkey
with the services running: none of it grants, locks out, stalls or crashes anything, and
each attempt is reported on the attacker's own policy."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.support.accesspolicies import CLUSTERSET_LABEL, access_policy, block, rule

pytestmark = [pytest.mark.integration, pytest.mark.attack]

OCM = "cluster.open-cluster-management.io"
#: The platform team's Fleet default (written where it may be) that an attacker would
#: like to lock out; mallory is the attacker.
BASELINE = access_policy("baseline", namespace="clearance-system",
                         defaults=block({"platform": rule(groups=["platform-team"])}, "merge"))
ALLOW = {"grab": rule(users=["mallory"], view=True, metrics=True)}
DENY = {"lockout": rule(groups=["platform-team"], effect="Deny")}


def binding(name: str, namespace: str | None, cluster_set: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": f"{OCM}/v1beta2", "kind": "ManagedClusterSetBinding",
            "metadata": metadata, "spec": {"clusterSet": cluster_set}}


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.write("inventory.yaml", cluster("east", **{CLUSTERSET_LABEL: "prod"}),
               cluster("west"),
               {"apiVersion": f"{OCM}/v1beta2", "kind": "ManagedClusterSet",
                "metadata": {"name": "prod"}})
    sys_.write("baseline.yaml", BASELINE)
    await sys_.start()
    await sys_.settle()
    yield sys_
    await sys_.close()


async def decide(system: System, user: str, groups: list[str], cluster_: str,
                 namespace: str | None, revision: int) -> str:
    resource: dict[str, Any] = {"type": "pods" if namespace else "cluster",
                                "name": "api-0" if namespace else cluster_,
                                "cluster": cluster_}
    if namespace:
        resource["namespace"] = namespace
    reply = await system.request("clearance.v1.check", {
        "principal": {"username": user, "groups": groups}, "action": "view",
        "resource": resource, "min_revision": revision})
    return str(reply["decision"])


async def nothing_moved(system: System, revision: int, namespaces: tuple[str | None, ...] = (
        None, "payments", "shop")) -> None:
    """The attacker sees nothing anywhere; the platform team still sees everything."""
    for cluster_ in ("east", "west"):
        for namespace in namespaces:
            assert await decide(system, "mallory", [], cluster_, namespace, revision) == \
                "deny", (cluster_, namespace)
            assert await decide(system, "alice", ["platform-team"], cluster_, namespace,
                                revision) == "allow", (cluster_, namespace)


async def accepted(system: System, namespace: str, name: str) -> dict[str, str]:
    status = await system.request("clearance.v1.policy-status", {
        "kind": "AccessPolicy", "namespace": namespace, "name": name})
    return next(c for c in status["conditions"] if c["type"] == "Accepted")


#: (namespace the attacker writes in, target it aims at)
AIMS = [
    pytest.param("team-a", "Fleet", id="team-fleet"),
    pytest.param("team-a", ("ClusterSet", "prod"), id="team-unbound-clusterset"),
    pytest.param("west", ("Cluster", "east"), id="other-clusters-namespace"),
    pytest.param("team-a", ("Cluster", "east"), id="team-cluster"),
    pytest.param("shop", ("Namespace", "east", "payments"), id="other-namespace"),
    pytest.param("shop", ("Cluster", "east"), id="namespace-to-its-cluster"),
    pytest.param("Clearance-System", "Fleet", id="admin-lookalike-case"),
    pytest.param("clearance-system ", "Fleet", id="admin-lookalike-space"),
    pytest.param("", "Fleet", id="no-namespace"),
]


@pytest.mark.parametrize(("namespace", "target"), AIMS)
@pytest.mark.parametrize("rules", [ALLOW, DENY], ids=["allow", "deny"])
async def test_an_override_from_a_namespace_that_may_not_write_it_does_nothing(
        system: System, namespace: str, target: Any, rules: dict[str, Any]) -> None:
    attack = access_policy("attack", namespace=namespace, target=target,
                           overrides=block(rules, "merge"))
    if not namespace:
        del attack["metadata"]["namespace"]
    await system.apply("attack.yaml", attack)
    revision = await system.settle()
    await nothing_moved(system, revision)
    found = await accepted(system, namespace, "attack")
    assert (found["status"], found["reason"]) == ("False", "Unauthorized")


async def test_a_binding_named_otherwise_than_its_set_lets_nothing_through(
        system: System) -> None:
    system.write("attack.yaml", binding("grab", "team-a", "prod"),
                 access_policy("attack", namespace="team-a", target=("ClusterSet", "prod"),
                               overrides=block(ALLOW | DENY, "merge")))
    revision = await system.settle()
    await nothing_moved(system, revision)
    found = await accepted(system, "team-a", "attack")
    assert found["reason"] == "Unauthorized" and "binds nothing" in found["message"]


async def test_a_binding_without_a_namespace_binds_no_policy_without_one(
        system: System) -> None:
    """A manifest can leave out namespaces; that is no namespace, never every one."""
    attack = access_policy("attack", target=("ClusterSet", "prod"),
                           overrides=block(ALLOW | DENY, "merge"))
    del attack["metadata"]["namespace"]
    await system.apply("attack.yaml", binding("prod", None, "prod"), attack)
    revision = await system.settle()
    await nothing_moved(system, revision)
    assert (await accepted(system, "", "attack"))["reason"] == "Unauthorized"


async def test_a_binding_to_a_set_the_clusters_are_not_in_reaches_none_of_them(
        system: System) -> None:
    system.write("attack.yaml", binding("ghost", "team-a", "ghost"),
                 access_policy("attack", namespace="team-a", target=("ClusterSet", "ghost"),
                               overrides=block(ALLOW | DENY, "merge")),
                 access_policy("attack2", namespace="team-a", target=("Cluster", "east"),
                               overrides=block(ALLOW | DENY, "merge")))
    revision = await system.settle()
    await nothing_moved(system, revision)
    assert (await accepted(system, "team-a", "attack"))["reason"] == "TargetNotFound"
    assert (await accepted(system, "team-a", "attack2"))["reason"] == "Unauthorized"


async def test_a_policy_named_as_the_admins_in_another_namespace_replaces_nothing(
        system: System) -> None:
    system.write("attack.yaml", access_policy(
        "baseline", namespace="team-a", overrides=block(ALLOW | DENY)))
    revision = await system.settle()
    await nothing_moved(system, revision)
    assert (await accepted(system, "clearance-system", "baseline"))["reason"] == "Accepted"


async def test_a_flood_of_unauthorized_overrides_neither_stalls_nor_grants(
        system: System) -> None:
    before = await system.stream_last_seq()
    system.write("attack.yaml", *(
        access_policy(f"attack-{i}", namespace=f"team-{i % 7}",
                      target=["Fleet", ("ClusterSet", "prod"), ("Cluster", "east")][i % 3],
                      overrides=block(ALLOW | DENY)) for i in range(300)))
    deadline = asyncio.get_running_loop().time() + 30
    while await system.stream_last_seq() < before + 300:  # all 300 published (a busy
        assert asyncio.get_running_loop().time() < deadline  # watcher pauses between)
        await asyncio.sleep(0.05)
    revision = await system.settle(timeout=30)
    await nothing_moved(system, revision, namespaces=(None,))
    fleet = await system.request("clearance.v1.effective",
                                 {"target": {"kind": "Fleet", "name": "fleet"}})
    assert fleet["policies"] == ["clearance-system/baseline"]
    assert len(fleet["excluded"]) == 100
