"""Requests that try to widen their own answer by naming a namespace.

A principal granted something in one namespace only (a Namespace-level AccessPolicy)
names that namespace on a question about a cluster-scoped thing — the cluster object,
its nodes, another namespace — hoping the decision reads that namespace's rules. Every
answer must be what the item's own place says: the cluster's rules for the cluster and
its nodes, the namespace's own rules for a namespace item, and ``bad_request`` for a
namespace item named inside another namespace. The other way round, leaving the
namespace out of a question about a pod (or any namespaced item, or a whole type) must
not escape a namespace's Deny: the answer weighs every Namespace target that concerns
the principal.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.support.accesspolicies import access_policy, rule
from tests.support.policies import policy

pytestmark = [pytest.mark.integration, pytest.mark.attack]

#: eve may see pods in c1/shop, and nothing else anywhere (no MonitorAccessPolicy names
#: her, and no other AccessPolicy does).
SHOP_ONLY = access_policy(
    "shop-pods", namespace="shop", target=("Namespace", "c1", "shop"),
    rules={"eve-pods": rule(users=["eve"], view=True, metrics=True, resources=[
        {"type": "pods", "visibility": "all"}])})


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.write("fleet.yaml", cluster("c1"), SHOP_ONLY)
    await sys_.start()
    await sys_.settle()
    yield sys_
    await sys_.close()


async def _check(system: System, resource: dict[str, Any],
                 action: str = "view") -> dict[str, Any]:
    return await system.request("clearance.v1.check", {
        "principal": {"username": "eve"}, "action": action,
        "resource": {"cluster": "c1", **resource}})


async def test_the_grant_holds_where_it_was_given(system: System) -> None:
    """The baseline the attacks below start from: eve sees pods in shop."""
    reply = await _check(system, {"type": "pods", "name": "web-0", "namespace": "shop"})
    assert reply["decision"] == "allow", reply


@pytest.mark.parametrize("resource", [
    {"type": "cluster", "name": "c1", "namespace": "shop"},
    {"type": "clusters", "name": "c1", "namespace": "shop"},
    {"type": "nodes", "namespace": "shop"},
    {"type": "node", "name": "worker-1", "namespace": "shop"},
    {"type": "namespaces", "namespace": "shop", "name": "payments"},
], ids=["cluster", "clusters", "nodes", "node", "other-namespace"])
async def test_naming_a_granted_namespace_does_not_widen(
        system: System, resource: dict[str, Any]) -> None:
    for action in ("view", "view_metrics"):
        reply = await _check(system, resource, action)
        if resource["type"] == "namespaces":
            assert reply["error"]["code"] == "bad_request", reply
            assert "payments" in reply["error"]["message"]
        else:
            assert reply["decision"] == "deny", (resource, action, reply)
            assert reply["allowed"] is False


async def test_a_namespace_item_is_judged_by_its_own_target(system: System) -> None:
    shop = await _check(system, {"type": "namespaces", "name": "shop"})
    payments = await _check(system, {"type": "namespaces", "name": "payments"})
    same = await _check(system, {"type": "namespace", "name": "shop", "namespace": "shop"})
    assert (shop["decision"], payments["decision"], same["decision"]) == (
        "allow", "deny", "allow")


async def test_a_batch_with_a_widening_item_is_refused_whole(system: System) -> None:
    reply = await system.request("clearance.v1.check.batch", {
        "principal": {"username": "eve"}, "checks": [
            {"action": "view", "resource": {"type": "pods", "cluster": "c1",
                                            "namespace": "shop"}},
            {"action": "view", "resource": {"type": "namespaces", "cluster": "c1",
                                            "name": "payments", "namespace": "shop"}}]})
    assert reply["error"]["code"] == "bad_request"
    assert reply["error"]["message"].startswith("checks[1]:")
    nodes = await system.request("clearance.v1.check.batch", {
        "principal": {"username": "eve"}, "checks": [
            {"action": "view", "resource": {"type": "nodes", "cluster": "c1",
                                            "namespace": "shop"}}]})
    assert [r["decision"] for r in nodes["results"]] == ["deny"]


async def test_filter_items_live_where_they_are(system: System) -> None:
    """Nodes carrying ``namespace: shop`` stay hidden; of the namespaces only shop shows,
    whatever namespace an item claims; a namespace item inside another is refused."""
    def filter_(type_: str, items: list[dict[str, Any]]) -> dict[str, Any]:
        return {"principal": {"username": "eve"}, "cluster": "c1", "type": type_,
                "items": items}

    nodes = await system.request("clearance.v1.filter", filter_(
        "nodes", [{"name": "worker-1", "namespace": "shop"}, {"name": "worker-2"}]))
    assert (nodes["decision"], nodes["items"]) == ("deny", []), nodes
    spaces = await system.request("clearance.v1.filter", filter_(
        "namespaces", [{"name": "shop"}, {"name": "payments"},
                       {"name": "kube-system", "namespace": "kube-system"}]))
    assert [i["name"] for i in spaces["items"]] == ["shop"], spaces
    refused = await system.request("clearance.v1.filter", filter_(
        "namespaces", [{"name": "shop"}, {"name": "payments", "namespace": "shop"}]))
    assert refused["error"]["code"] == "bad_request", refused
    assert refused["error"]["message"].startswith("items[1]:")


# Leaving the namespace out ---------------------------------------------------------------

#: mia (group met) sees everything in c2 by a MonitorAccessPolicy, except in c2/vault,
#: whose own AccessPolicy denies met everything.
MET_ALL = policy("met-all", groups=["met"], rules=[{"selector": {"matchNames": ["c2"]},
                                                   "resources": [{"type": "widgets"}]}])
WIDGETS = {"apiVersion": "clusterpulse.io/v1alpha1", "kind": "MetricSource",
           "metadata": {"name": "widgets", "namespace": "monitoring"},
           "spec": {"rbac": {"resourceTypeName": "widgets"}}}
VAULT_DENY = access_policy("vault-guard", namespace="vault",
                           target=("Namespace", "c2", "vault"),
                           rules={"no-met": rule(groups=["met"], effect="Deny")})


@pytest.fixture
async def vault(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.write("fleet.yaml", cluster("c2"), MET_ALL, VAULT_DENY, WIDGETS)
    await sys_.start()
    await sys_.settle()
    # Every object compiled (the watcher may publish the file's objects slowly on a
    # loaded machine): the grant holds in web, the Deny in vault.
    deadline = asyncio.get_running_loop().time() + 15
    while [(await _mia(sys_, {"type": "widgets", "name": "w", "namespace": ns}))["decision"]
           for ns in ("web", "vault")] != ["allow", "deny"]:
        assert asyncio.get_running_loop().time() < deadline, "the fleet never compiled"
        await asyncio.sleep(0.05)
    yield sys_
    await sys_.close()


async def _mia(system: System, resource: dict[str, Any], subject: str = "clearance.v1.check",
               ) -> dict[str, Any]:
    return await system.request(subject, {
        "principal": {"username": "mia", "groups": ["met"]}, "action": "view",
        "resource": {"cluster": "c2", **resource}})


@pytest.mark.parametrize("resource", [
    {"type": "pods", "name": "secret-0"}, {"type": "operators", "name": "vault-op"},
    {"type": "events", "name": "e1"}, {"type": "widgets", "name": "w1"},
], ids=["pod", "operator", "event", "custom"])
async def test_leaving_the_namespace_out_does_not_escape_a_namespace_deny(
        vault: System, resource: dict[str, Any]) -> None:
    inside = await _mia(vault, {**resource, "namespace": "vault"})
    bare = await _mia(vault, resource)
    assert (inside["decision"], bare["decision"]) == ("deny", "deny"), (inside, bare)
    assert "namespace" in bare["reason"] and "vault" in bare["reason"]


async def test_a_whole_type_without_a_namespace_excludes_the_denied_one(
        vault: System) -> None:
    whole = await _mia(vault, {"type": "pods"})
    assert whole["decision"] == "partial", whole
    assert "vault" in whole["filters"]["pods"]["filters"]["namespaces"]["denied"]
    listed = await vault.request("clearance.v1.filter", {
        "principal": {"username": "mia", "groups": ["met"]}, "cluster": "c2",
        "type": "operators", "items": [{"name": "op", "namespaces": ["vault"]},
                                       {"name": "bare"}, {"name": "web", "namespace": "web"}]})
    assert [i["name"] for i in listed["items"]] == ["web"], listed
