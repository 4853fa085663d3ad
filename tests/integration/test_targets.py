"""Every subject answers as ``check`` does on the item where it lives (its target).

A Namespace AccessPolicy on ``c1/vault`` denies group ``met`` everything there, while a
MonitorAccessPolicy shows ``met`` everything in c1. Whatever the subject — a whole-type
check, a pod named without its namespace, a filtered list, metrics, custom types — an
item of vault stays hidden from ``met``, and a grant given in one namespace only shows
in that namespace. Real services on real NATS and Valkey.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from clearance_core.monitor.filters import Item, RuleView, compile_filter
from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.unit.accesspolicies import access_policy, rule
from tests.unit.policies import policy

pytestmark = pytest.mark.integration


def metricsource(type_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "clusterpulse.io/v1alpha1", "kind": "MetricSource",
        "metadata": {"name": f"{type_name}-source", "namespace": "monitoring"},
        "spec": {"rbac": {"resourceTypeName": type_name, "filterableFields": ["tier"],
                          "filterAggregations": True},
                 "aggregations": [{"name": "count", "function": "count"},
                                  {"name": "costEstimate", "function": "sum",
                                   "field": "cost"}]},
    }


#: met sees everything in c1 (a MonitorAccessPolicy decides the cluster).
MET_ALL = policy("met-all", groups=["met"], rules=[{
    "selector": {"matchNames": ["*"]}, "permissions": {"view": True, "viewMetrics": True},
    "resources": [{"type": "pvc"}, {"type": "certs"}]}])
#: ... except in vault, whose own AccessPolicy denies met everything.
VAULT_DENY = access_policy("vault-guard", namespace="vault",
                           target=("Namespace", "c1", "vault"),
                           rules={"no-met": rule(groups=["met"], effect="Deny")})
#: ana sees pvcs with metrics in c1 (an AccessPolicy of the cluster), but in lab only the
#: pvcs, without their metrics (lab's rule of the same name replaces the cluster's).
ANA_CLUSTER = access_policy("ana-c1", namespace="c1", target=("Cluster", "c1"),
                            rules={"ana-pvc": rule(users=["ana"], view=True, metrics=True,
                                                   resources=[{"type": "pvc"}])})
ANA_LAB = access_policy("ana-lab", namespace="lab", target=("Namespace", "c1", "lab"),
                        rules={"ana-pvc": rule(users=["ana"], view=True, metrics=False,
                                               resources=[{"type": "pvc"}])})
#: bob is granted nothing on c1, but pods and certs in shop.
BOB_SHOP = access_policy("bob-shop", namespace="shop", target=("Namespace", "c1", "shop"),
                         rules={"bob": rule(users=["bob"], view=True, metrics=True,
                                            resources=[{"type": "certs"}])})


@pytest.fixture(params=[True, False], ids=["mirror", "snapshot-script"])
async def system(clean_servers: Servers, tmp_path: Path,
                 request: pytest.FixtureRequest) -> AsyncIterator[System]:
    """Both read paths of the decision service: its mirror (the Namespace targets
    indexed in memory) and the snapshot script (all of a cluster's read per question)."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.settings = msgspec.structs.replace(sys_.settings, decision_mirror=request.param)
    sys_.write("inventory.yaml", cluster("c1"), metricsource("pvc"), metricsource("certs"))
    sys_.write("policies.yaml", MET_ALL)
    sys_.write("inherited.yaml", VAULT_DENY, ANA_CLUSTER, ANA_LAB, BOB_SHOP)
    await sys_.start()
    await sys_.settle()
    yield sys_
    await sys_.close()


def _principal(user: str) -> dict[str, Any]:
    return {"username": user, "groups": ["met"] if user == "mia" else []}


async def _check(system: System, user: str, resource: dict[str, Any],
                 action: str = "view", **extra: Any) -> dict[str, Any]:
    return await system.request("clearance.v1.check", {
        "principal": _principal(user), "action": action,
        "resource": {"cluster": "c1", **resource}, **extra})


async def _filter(system: System, user: str, type_: str,
                  items: list[dict[str, Any]]) -> dict[str, Any]:
    return await system.request("clearance.v1.filter", {
        "principal": _principal(user), "cluster": "c1", "type": type_, "items": items})


def _shows(filters: dict[str, Any], type_: str, item: dict[str, Any]) -> bool:
    """What a client applying a whole-type answer's ``filters`` shows."""
    view = RuleView.of(compile_filter(raw) for raw in filters.values())
    return view.item_visible(type_, Item(**item))[0]


async def test_a_whole_type_is_partial_while_a_namespace_hides_it(system: System) -> None:
    reply = await _check(system, "mia", {"type": "pods"}, explain=True)
    assert reply["decision"] == "partial", reply
    assert reply["allowed"] is True
    filters = reply["filters"]
    assert not _shows(filters, "pods", {"name": "p", "namespace": "vault"})
    assert _shows(filters, "pods", {"name": "p", "namespace": "web"})
    assert "vault" in reply["reason"]
    assert any("Namespace c1/vault" in step["reason"] for step in reply["trace"]), reply
    # ... and the same type asked inside vault, or elsewhere, is what its target says.
    inside = await _check(system, "mia", {"type": "pods", "namespace": "vault"})
    web = await _check(system, "mia", {"type": "pods", "namespace": "web"})
    assert (inside["decision"], web["decision"]) == ("deny", "allow")


async def test_an_item_named_without_its_namespace_is_asked_for_it(system: System) -> None:
    bare = await _check(system, "mia", {"type": "pods", "name": "web-0"})
    assert bare["decision"] == "deny", bare
    assert "namespace" in bare["reason"] and "vault" in bare["reason"]
    placed = [(await _check(system, "mia", {"type": "pods", "name": "web-0",
                                            "namespace": ns}))["decision"]
              for ns in ("vault", "web")]
    assert placed == ["deny", "allow"]
    batch = await system.request("clearance.v1.check.batch", {
        "principal": _principal("mia"), "checks": [
            {"action": "view", "resource": {"type": "pods", "cluster": "c1"}},
            {"action": "view", "resource": {"type": "pods", "cluster": "c1",
                                            "name": "web-0"}}]})
    assert [r["decision"] for r in batch["results"]] == ["partial", "deny"]


async def test_filter_and_metrics_hide_the_namespace_check_denies(system: System) -> None:
    spaces = await _filter(system, "mia", "namespaces", [{"name": "vault"}, {"name": "web"}])
    assert [i["name"] for i in spaces["items"]] == ["web"], spaces
    assert spaces["decision"] == "partial"
    metrics = await system.request("clearance.v1.metrics", {
        "principal": _principal("mia"), "cluster": "c1", "nodes": [],
        "namespaces": [{"name": n, "pods": 3, "pods_running": 3, "deployments": 1,
                        "services": 1} for n in ("vault", "web")]})
    assert (metrics["metrics"]["namespaces"], metrics["metrics"]["pods"]) == (1, 3), metrics
    pods = await _filter(system, "mia", "pods", [
        {"name": "a", "namespace": "vault"}, {"name": "b", "namespace": "web"},
        {"name": "c"}])
    assert [i["name"] for i in pods["items"]] == ["b"], pods


async def test_operators_are_judged_where_they_are_available(system: System) -> None:
    reply = await _filter(system, "mia", "operators", [
        {"name": "only-vault", "namespaces": ["vault"]},
        {"name": "vault-and-web", "namespaces": ["vault", "web"]},
        {"name": "everywhere", "namespaces": ["*"]},
        {"name": "named-vault", "namespace": "vault"}])
    assert [i["name"] for i in reply["items"]] == ["vault-and-web", "everywhere"], reply


async def test_aggregations_count_only_items_whose_target_grants_metrics(
        system: System) -> None:
    reply = await _filter(system, "ana", "pvc", [
        {"name": "a", "namespace": "web", "fields": {"cost": 1}},
        {"name": "b", "namespace": "lab", "fields": {"cost": 999}}])
    assert [i["name"] for i in reply["items"]] == ["a", "b"], reply
    assert reply["aggregations"] == {"count": 1, "costEstimate": 1}, reply
    denied = await _check(system, "ana", {"type": "pvc", "name": "b", "namespace": "lab"},
                          action="view_metrics")
    assert denied["decision"] == "deny"


async def test_a_namespace_grant_shows_where_it_is_given(system: System) -> None:
    """bob: nothing on c1, certs in shop. Every subject says so alike."""
    whole = await _check(system, "bob", {"type": "certs"})
    assert whole["decision"] == "partial", whole
    assert _shows(whole["filters"], "certs", {"name": "x", "namespace": "shop"})
    assert not _shows(whole["filters"], "certs", {"name": "x", "namespace": "web"})
    assert not _shows(whole["filters"], "certs", {"name": "x"})
    types = await system.request("clearance.v1.custom-types",
                                 {"principal": _principal("bob"), "cluster": "c1"})
    assert types["types"] == ["certs"], types
    everywhere = await system.request("clearance.v1.custom-types",
                                      {"principal": _principal("bob")})
    assert everywhere["types"] == ["certs"], everywhere
    listed = await _filter(system, "bob", "certs", [
        {"name": "a", "namespace": "shop"}, {"name": "b", "namespace": "web"}])
    assert [i["name"] for i in listed["items"]] == ["a"], listed
    cluster_ = await _check(system, "bob", {"type": "cluster", "name": "c1"})
    assert cluster_["decision"] == "deny"
    permissions = await system.request("clearance.v1.permissions",
                                       {"principal": _principal("bob")})
    assert permissions["clusters"]["c1"]["decision"] == "deny"
