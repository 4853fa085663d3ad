"""Lists, aggregations, cluster metrics and custom types over NATS
(docs/guide/monitor-access-policies.md; docs/api/decisions.md)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.support.policies import policy


def metricsource(type_name: str = "pvc", *, filterable: list[str] | None = None,
                 recompute: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "clusterpulse.io/v1alpha1", "kind": "MetricSource",
        "metadata": {"name": f"{type_name}-source", "namespace": "monitoring"},
        "spec": {
            "rbac": {"resourceTypeName": type_name,
                     "filterableFields": filterable if filterable is not None else
                     ["storageClass", "phase"],
                     "filterAggregations": recompute},
            "aggregations": [
                {"name": "count", "function": "count"},
                {"name": "totalGi", "function": "sum", "field": "sizeGi"},
                {"name": "byClass", "function": "count", "groupBy": "storageClass"},
                {"name": "p90", "function": "percentile", "field": "sizeGi", "percentile": 90},
            ],
        },
    }


TEAM_RULE = {
    "selector": {"matchNames": ["prod-*"]},
    "permissions": {"view": True, "viewMetrics": True},
    "resources": [
        {"type": "namespaces", "visibility": "filtered",
         "filters": {"names": {"allowed": ["app-*"]}}},
        {"type": "nodes", "visibility": "filtered",
         "filters": {"labels": {"pool": "apps"}}},
        {"type": "pvc", "visibility": "filtered",
         "filters": {"fields": {"storageClass": {"denied": ["slow"]}}},
         "aggregations": {"exclude": ["p90"]}},
    ],
}


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.write("inventory.yaml", cluster("prod-east"), cluster("dev-1"), metricsource())
    sys_.write("policies.yaml",
               policy("team", users=["alice"], rules=[TEAM_RULE]),
               policy("viewer", users=["vic"], rules=[{**TEAM_RULE, "permissions": {}}]),
               policy("no-prod", users=["dan"], effect="Deny", priority=1,
                      rules=[{"selector": {"matchNames": ["prod-*"]}}]),
               policy("dan-dev", users=["dan"], default="all",
                      rules=[{"selector": {"matchNames": ["*"]},
                              "resources": [{"type": "pvc"}, {"type": "certs"}]}]))
    await sys_.start()
    await sys_.settle()
    yield sys_
    await sys_.close()


PVCS = [
    {"name": "a", "namespace": "app-1", "fields": {"storageClass": "gp3", "sizeGi": 10}},
    {"name": "b", "namespace": "app-1", "fields": {"storageClass": "slow", "sizeGi": 500}},
    {"name": "c", "namespace": "kube-system", "fields": {"storageClass": "gp3", "sizeGi": 5}},
    {"name": "d", "namespace": "app-2", "fields": {"storageClass": "io2", "sizeGi": 20}},
]


async def filter_(system: System, user: str, type_: str, items: list[dict[str, Any]],
                  cluster_: str = "prod-east", **extra: Any) -> dict[str, Any]:
    return await system.request("clearance.v1.filter", {
        "principal": {"username": user}, "cluster": cluster_, "type": type_, "items": items,
        **extra})


async def test_filter_keeps_input_order_and_recomputes_aggregations(system: System) -> None:
    reply = await filter_(system, "alice", "pvc", PVCS,
                          aggregations={"count": 4, "totalGi": 535})
    assert reply["decision"] == "partial"
    assert [i["name"] for i in reply["items"]] == ["a", "c", "d"]
    assert (reply["total"], reply["visible"]) == (4, 3)
    # Recomputed from the visible items only; p90 excluded by the policy.
    assert reply["aggregations"] == {"count": 3, "totalGi": 35,
                                     "byClass": {"gp3": 2, "io2": 1}}


async def test_without_view_metrics_aggregations_are_null(system: System) -> None:
    reply = await filter_(system, "vic", "pvc", PVCS)
    assert reply["visible"] == 3 and reply["aggregations"] is None


async def test_namespace_rule_hides_pods_in_hidden_namespaces(system: System) -> None:
    pods = [{"name": "p1", "namespace": "app-1"}, {"name": "p2", "namespace": "kube-system"},
            {"name": "p3", "namespace": "app-9"}]
    reply = await filter_(system, "alice", "pods", pods)
    assert [i["name"] for i in reply["items"]] == ["p1", "p3"]
    assert reply["aggregations"] is None
    alerts = [{"name": "NodeDown"}, {"name": "CrashLoop", "namespace": "kube-system"},
              {"name": "Slow", "namespace": "app-1"}]
    reply = await filter_(system, "alice", "alerts", alerts)
    assert [i["name"] for i in reply["items"]] == ["NodeDown", "Slow"]  # NodeDown: no namespace


async def test_deny_and_unlisted_types_show_nothing(system: System) -> None:
    assert (await filter_(system, "dan", "pvc", PVCS))["visible"] == 0  # Deny on prod
    dev = await filter_(system, "dan", "pvc", PVCS, cluster_="dev-1")
    assert dev["visible"] == 4
    assert (await filter_(system, "alice", "secrets", [{"name": "s"}]))["decision"] == "deny"
    assert (await filter_(system, "mallory", "pods", [{"name": "p"}]))["visible"] == 0


async def test_checks_on_items_and_types(system: System) -> None:
    async def check(resource: dict[str, Any]) -> dict[str, Any]:
        return await system.request("clearance.v1.check", {
            "principal": {"username": "alice"}, "action": "view",
            "resource": {"cluster": "prod-east", **resource}, "explain": True})

    whole = await check({"type": "pods"})
    assert (whole["decision"], whole["allowed"]) == ("partial", True)
    assert set(whole["filters"]) == {"namespaces"}
    inside = await check({"type": "pods", "namespace": "kube-system"})
    assert (inside["decision"], inside["allowed"]) == ("deny", False)
    assert (await check({"type": "pods", "namespace": "app-1"}))["decision"] == "partial"
    hidden = await check({"type": "pod", "name": "x", "namespace": "kube-system"})
    assert (hidden["decision"], hidden["trace"][-1]["hidden_by"]) == ("deny", "namespace")
    shown = await check({"type": "pvc", "name": "a", "namespace": "app-1",
                         "fields": {"storageClass": "gp3"}})
    assert shown["decision"] == "allow"


async def test_cluster_metrics_are_recomputed_from_visible_parts(system: System) -> None:
    body = {
        "principal": {"username": "alice"}, "cluster": "prod-east",
        "namespaces": [
            {"name": "app-1", "pods": 10, "pods_running": 9, "deployments": 3, "services": 2},
            {"name": "kube-system", "pods": 50, "pods_running": 50, "deployments": 9,
             "services": 9},
        ],
        "nodes": [
            {"name": "n1", "labels": {"pool": "apps"}, "ready": True, "cpu_capacity": 8,
             "memory_capacity": 32},
            {"name": "n2", "labels": {"pool": "infra"}, "ready": True, "cpu_capacity": 16,
             "memory_capacity": 64},
        ],
    }
    reply = await system.request("clearance.v1.metrics", body)
    assert reply["filtered"] is True and reply["decision"] == "partial"
    assert reply["metrics"] == {
        "namespaces": 1, "pods": 10, "pods_running": 9, "deployments": 3, "services": 2,
        "nodes": 1, "nodes_ready": 1, "cpu_capacity": 8, "memory_capacity": 32}
    viewer = await system.request("clearance.v1.metrics",
                                  {**body, "principal": {"username": "vic"}})
    assert (viewer["decision"], viewer["metrics"]) == ("deny", {})


async def test_custom_types_honour_deny_and_selectors(system: System) -> None:
    async def types(user: str, cluster_: str | None = None) -> list[str]:
        body: dict[str, Any] = {"principal": {"username": user}}
        if cluster_:
            body["cluster"] = cluster_
        return (await system.request("clearance.v1.custom-types", body))["types"]

    assert await types("alice") == ["pvc"]
    assert await types("alice", "dev-1") == []
    # certs is listed by dan-dev but no MetricSource declares it: unknown, so absent.
    assert await types("dan") == ["pvc"]  # on dev-1 only
    assert await types("dan", "prod-east") == []   # the Deny wins there


async def test_a_custom_type_exists_while_any_metricsource_declares_it(
        system: System) -> None:
    async def dan_sees_certs(revision: int) -> tuple[bool, str]:
        types = await system.request("clearance.v1.custom-types", {
            "principal": {"username": "dan"}, "min_revision": revision})
        check = await system.request("clearance.v1.check", {
            "principal": {"username": "dan"}, "action": "view", "min_revision": revision,
            "resource": {"type": "certs", "name": "c1", "cluster": "dev-1"}})
        return "certs" in types["types"], check["decision"]

    assert await dan_sees_certs(0) == (False, "deny")  # undeclared: hidden
    second = {**metricsource("certs"), "metadata": {"name": "certs-b", "namespace": "x"}}
    await system.apply("inventory.yaml", cluster("prod-east"), cluster("dev-1"), metricsource(),
                       metricsource("certs"), second)
    assert await dan_sees_certs(await system.settle()) == (True, "allow")
    # Two MetricSources declare certs: deleting either one keeps the type.
    await system.apply("inventory.yaml", cluster("prod-east"), cluster("dev-1"), metricsource(),
                       second)
    assert await dan_sees_certs(await system.settle()) == (True, "allow")
    await system.apply("inventory.yaml", cluster("prod-east"), cluster("dev-1"), metricsource())
    assert await dan_sees_certs(await system.settle()) == (False, "deny")


async def test_field_filter_on_a_non_filterable_field_invalidates_the_policy(
        system: System) -> None:
    assert (await filter_(system, "alice", "pvc", PVCS))["visible"] == 3
    await system.apply("inventory.yaml", cluster("prod-east"), cluster("dev-1"),
                       metricsource(filterable=["phase"]))
    revision = await system.settle()
    reply = await filter_(system, "alice", "pvc", PVCS, min_revision=revision)
    assert reply["visible"] == 0  # the policy is withdrawn whole
    explained = await system.request("clearance.v1.check", {
        "principal": {"username": "alice"}, "action": "view",
        "resource": {"type": "cluster", "name": "prod-east"}, "explain": True})
    assert "filterableFields" in explained["trace"][0]["reason"]
    await system.apply("inventory.yaml", cluster("prod-east"), cluster("dev-1"), metricsource())
    revision = await system.settle()
    assert (await filter_(system, "alice", "pvc", PVCS, min_revision=revision))["visible"] == 3


async def test_a_list_of_clusters_is_refused_not_shown(system: System) -> None:
    reply = await filter_(system, "alice", "clusters", [{"name": "prod-east"}, {"name": "x"}])
    assert reply["error"]["code"] == "bad_request"


@pytest.mark.parametrize("items", [
    [{"name": "x", "labels": {"a": 1}}],
    [{"name": 7}],
    [{"namespace": "no-name"}],
])
async def test_bad_items_are_bad_requests(system: System, items: list[Any]) -> None:
    reply = await filter_(system, "alice", "pods", items)
    assert reply["error"]["code"] == "bad_request"


async def test_nan_is_not_json(system: System) -> None:
    reply = await system.request(
        "clearance.v1.filter",
        b'{"principal": {"username": "alice"}, "cluster": "prod-east", "type": "pvc", '
        b'"items": [{"name": "a", "fields": {"sizeGi": NaN}}]}')
    assert reply["error"]["code"] == "bad_request"


async def test_a_hundred_thousand_items_in_one_request(system: System) -> None:
    items = [{"name": f"pod-{i}", "namespace": f"app-{i % 7}" if i % 3 else "kube-system",
              "labels": {"app": f"a{i % 11}"}} for i in range(100_000)]
    reply = await filter_(system, "alice", "pods", items)
    assert reply["total"] == 100_000
    assert reply["visible"] == sum(1 for i in range(100_000) if i % 3)
    assert not math.isnan(reply["visible"])


async def test_policy_status_reports_state_conditions_and_warnings(system: System) -> None:
    async def status(name: str, kind: str = "MonitorAccessPolicy") -> dict[str, Any]:
        return await system.request("clearance.v1.policy-status",
                                    {"kind": kind, "namespace": "ns", "name": name})

    team = await status("team")
    assert (team["state"], team["warnings"]) == ("Active", [])
    assert [(c["type"], c["status"]) for c in team["conditions"]] == [
        ("Compiled", "True"), ("Active", "True")]
    assert (await status("dan-dev"))["warnings"] == ["custom type 'certs' has no MetricSource"]
    assert (await status("nope"))["error"]["code"] == "not_found"
    # An AccessPolicy of that name does not exist; a kind without statuses is refused.
    assert (await status("team", kind="AccessPolicy"))["error"]["code"] == "not_found"
    assert (await status("team", kind="Pod"))["error"]["code"] == "bad_request"
    assert system.nc is not None
    sub = await system.nc.subscribe("clearance.status.monitoraccesspolicy.ns.team")
    system.write("inventory.yaml", cluster("prod-east"), cluster("dev-1"),
                 metricsource(filterable=["phase"]))
    event = msgspec.json.decode((await sub.next_msg(timeout=5)).data)
    await sub.unsubscribe()
    assert event["state"] == "Error" and "filterableFields" in event["message"]
    assert (await status("team"))["conditions"][0]["reason"] == "Invalid"
