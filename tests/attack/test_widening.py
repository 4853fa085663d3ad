"""Requests that try to widen their own answer by naming a namespace.

A principal granted something in one namespace only (a Namespace-level AccessPolicy)
names that namespace on a question about a cluster-scoped thing — the cluster object,
its nodes, another namespace — hoping the decision reads that namespace's rules. Every
answer must be what the item's own place says: the cluster's rules for the cluster and
its nodes, the namespace's own rules for a namespace item, and ``bad_request`` for a
namespace item named inside another namespace.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.unit.accesspolicies import access_policy, rule

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
