"""Inherited AccessPolicies end to end (docs/guide/inherited.md): from manifests through the
compiler to effective policies, conditions, dry runs and decisions, on real NATS and Valkey."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.support.accesspolicies import CLUSTERSET_LABEL, access_policy, block, rule
from tests.support.policies import policy


def cluster_set(name: str) -> dict[str, Any]:
    return {"apiVersion": "cluster.open-cluster-management.io/v1beta2",
            "kind": "ManagedClusterSet", "metadata": {"name": name}}


FLEET_DEFAULT = access_policy(
    "fleet-default", namespace="platform", created="2026-01-01T00:00:00Z",
    defaults=block({"sre-view": rule(groups=["sre"], view=True, metrics=True)},
                   strategy="merge"))
PROD_OVERRIDE = access_policy(
    "prod-override", namespace="platform", target=("ClusterSet", "prod"),
    created="2026-01-02T00:00:00Z",
    overrides=block({"auditors": rule(groups=["auditors"], resources=[
        {"type": "namespaces", "visibility": "filtered",
         "filters": {"names": {"allowed": ["audit-*"]}}}])}, strategy="merge"))
TEAM_INTENT = access_policy(
    "team-intent", namespace="team-a", target=("Namespace", "east", "shop"),
    created="2026-01-03T00:00:00Z",
    rules={"sre-view": rule(users=["carol"], view=True),
           "blocked": rule(users=["mallory"], effect="Deny")})


MERGE_ADMINS = "platform,team-a,team-b,team-c,team-n,team-w"


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    # These tests are about merging and deciding end to end: every namespace they write
    # policies in is an admin namespace (authority has its own: test_authority.py).
    sys_.settings = msgspec.structs.replace(sys_.settings, admin_namespaces=MERGE_ADMINS)
    sys_.write("inventory.yaml", cluster("east", **{CLUSTERSET_LABEL: "prod"}),
               cluster("west"), cluster_set("prod"))
    sys_.write("inherited.yaml", FLEET_DEFAULT, PROD_OVERRIDE, TEAM_INTENT)
    sys_.write("policies.yaml",
               policy("bob-west", users=["bob"], rules=[{"selector": {"matchNames": ["west"]}}]),
               policy("mallory-all", users=["mallory"],
                      rules=[{"selector": {"matchNames": ["*"]}}]))
    await sys_.start()
    await sys_.settle()
    yield sys_
    await sys_.close()


async def effective(system: System, **target: str) -> dict[str, Any]:
    return await system.request("clearance.v1.effective", {"target": target})


async def check(system: System, user: str, cluster_: str, *, groups: list[str] | None = None,
                type_: str = "cluster", name: str | None = None,
                namespace: str | None = None, **extra: Any) -> dict[str, Any]:
    resource: dict[str, Any] = {"type": type_, "name": name or cluster_, "cluster": cluster_}
    if namespace is not None:
        resource["namespace"] = namespace
    return await system.request("clearance.v1.check", {
        "principal": {"username": user, "groups": groups or []}, "action": "view",
        "resource": resource, **extra})


async def test_effective_policies_carry_each_rules_source_and_block(system: System) -> None:
    """The Fleet's merge default reaches every cluster; the cluster-set override only its
    members; the namespace intent's rule of the same name replaces the Fleet default
    there (a default yields to a lower policy), never the override."""
    fleet = await effective(system, kind="Fleet", name="fleet")
    assert fleet["rules"]["sre-view"]["source"] == "platform/fleet-default"
    assert fleet["rules"]["sre-view"]["block"] == "defaults"
    east = await effective(system, kind="Cluster", name="east")
    assert sorted(east["rules"]) == ["auditors", "sre-view"]
    assert east["rules"]["auditors"]["block"] == "overrides"
    assert east["policies"] == ["platform/fleet-default", "platform/prod-override"]
    west = await effective(system, kind="Cluster", name="west")
    assert sorted(west["rules"]) == ["sre-view"]
    shop = await effective(system, kind="Namespace", cluster="east", name="shop")
    assert shop["rules"]["sre-view"]["source"] == "team-a/team-intent"
    assert shop["rules"]["sre-view"]["rule"]["subjects"]["users"] == ["carol"]
    assert shop["rules"]["auditors"]["source"] == "platform/prod-override"
    assert shop["policies"] == ["platform/fleet-default", "platform/prod-override",
                                "team-a/team-intent"]
    assert shop["affected_by"] == ["platform/prod-override", "team-a/team-intent"]
    other = await effective(system, kind="Namespace", cluster="east", name="other")
    assert other["target"] == {"kind": "Namespace", "cluster": "east", "name": "other"}
    assert other["rules"].keys() == east["rules"].keys()


async def test_unknown_targets_are_not_found_and_odd_ones_bad_requests(system: System) -> None:
    missing = await effective(system, kind="Cluster", name="nowhere")
    assert missing["error"]["code"] == "not_found"
    assert (await effective(system, kind="ClusterSet", name="staging"))["error"]["code"] == \
        "not_found"
    bad = await system.request("clearance.v1.effective",
                               {"target": {"kind": "Namespace", "name": "shop"}})
    assert bad["error"]["code"] == "bad_request"
    bad = await system.request("clearance.v1.effective", {"target": {"kind": "Planet",
                                                                     "name": "x"}})
    assert bad["error"]["code"] == "bad_request"


async def test_decisions_follow_deny_then_monitor_policy_then_inherited_allows(
        system: System) -> None:
    """docs/guide/inherited.md, Decisions: an inherited Deny beats every MonitorAccessPolicy;
    otherwise the first matching MonitorAccessPolicy decides; otherwise the inherited Allows
    decide."""
    sre = await check(system, "sam", "west", groups=["sre"], explain=True)
    assert sre["decision"] == "allow" and sre["policy"] == "platform/fleet-default"
    assert any("sre-view" in step["reason"] for step in sre["trace"])
    assert (await check(system, "sam", "west"))["decision"] == "deny"
    assert (await check(system, "bob", "west"))["decision"] == "allow"
    # mallory's MonitorAccessPolicy allows everything, but the namespace's Deny rule wins.
    denied = await check(system, "mallory", "east", type_="pods", name="*", namespace="shop")
    assert denied["decision"] == "deny" and denied["policy"] == "team-a/team-intent"
    elsewhere = await check(system, "mallory", "east", type_="pods", name="*",
                            namespace="payments")
    assert elsewhere["decision"] == "allow"
    audit = await check(system, "ann", "east", groups=["auditors"], type_="namespace",
                        name="audit-1")
    assert audit["decision"] == "allow"
    hidden = await check(system, "ann", "east", groups=["auditors"], type_="namespace",
                         name="kube-system")
    assert hidden["decision"] == "deny"


async def test_a_policy_change_reaches_cached_decisions_at_once(system: System) -> None:
    """A cached allow from a Fleet default goes the moment the default goes."""
    first = await check(system, "sam", "west", groups=["sre"])
    assert first["decision"] == "allow"
    assert (await check(system, "sam", "west", groups=["sre"]))["cached"] is True
    await system.apply("inherited.yaml", PROD_OVERRIDE, TEAM_INTENT)
    revision = await system.settle()
    after = await check(system, "sam", "west", groups=["sre"], min_revision=revision)
    assert after["decision"] == "deny"


async def test_a_cached_answer_equals_a_fresh_one_after_another_principals_policy(
        system: System) -> None:
    """A policy at a cluster for someone else changes none of sam's rules there, so his
    cached answer stays — and must still be the answer a fresh evaluation gives, down to
    the target its reason names (the cluster, whether or not a policy of its own is
    stored for it)."""
    cached = await check(system, "sam", "west", groups=["sre"], explain=True)
    assert cached["reason"].endswith("at Cluster west")
    system.write("west.yaml", access_policy(
        "west-only", namespace="team-w", target=("Cluster", "west"),
        rules={"zed": rule(users=["zed"])}))
    revision = await system.settle()
    again = await check(system, "sam", "west", groups=["sre"], explain=True,
                        min_revision=revision)
    # The same question, missing the cache (``fields`` is part of its key, not its answer).
    fresh = await system.request("clearance.v1.check", {
        "principal": {"username": "sam", "groups": ["sre"]}, "action": "view",
        "resource": {"type": "cluster", "name": "west", "fields": {"nonce": 1}},
        "explain": True, "min_revision": revision})
    assert again["cached"] is True and fresh["cached"] is False
    assert {k: v for k, v in again.items() if k not in ("cached", "revision")} == \
        {k: v for k, v in fresh.items() if k not in ("cached", "revision")}


async def test_a_cluster_label_moves_it_between_cluster_sets(system: System) -> None:
    assert "auditors" not in (await effective(system, kind="Cluster", name="west"))["rules"]
    system.write("inventory.yaml", cluster("east", **{CLUSTERSET_LABEL: "prod"}),
                 cluster("west", **{CLUSTERSET_LABEL: "prod"}), cluster_set("prod"))
    await system.settle()
    assert "auditors" in (await effective(system, kind="Cluster", name="west"))["rules"]
    reach = await system.request("clearance.v1.effective.reach", {
        "kind": "AccessPolicy", "namespace": "platform", "name": "prod-override"})
    assert {(t["kind"], t["name"]) for t in reach["targets"]} == {
        ("ClusterSet", "prod"), ("Cluster", "east"), ("Cluster", "west"),
        ("Namespace", "shop")}


async def test_policy_status_reports_rfc_0009_conditions(system: System) -> None:
    status = await system.request("clearance.v1.policy-status", {
        "kind": "AccessPolicy", "namespace": "team-a", "name": "team-intent"})
    assert {c["type"]: c["reason"] for c in status["conditions"]} == {
        "Accepted": "Accepted", "Enforced": "Enforced"}
    assert "state" not in status
    fleet = await system.request("clearance.v1.policy-status", {
        "kind": "AccessPolicy", "namespace": "platform", "name": "fleet-default"})
    conditions = {c["type"]: c for c in fleet["conditions"]}
    assert conditions["Accepted"]["status"] == "True"
    assert conditions["Enforced"]["reason"] == "PartiallyEnforced"
    assert "team-a/team-intent" in conditions["Enforced"]["message"]
    missing = await system.request("clearance.v1.policy-status", {
        "kind": "AccessPolicy", "namespace": "x", "name": "y"})
    assert missing["error"]["code"] == "not_found"


async def test_policy_status_names_each_rules_real_cause(system: System) -> None:
    """Over NATS, as the compiler computed and stored it: a constraint whose ``when`` is
    false everywhere is "not in force", not "overridden by" the lower rule it lets stand,
    and an ``unset`` that keeps nothing out says so."""
    guard = "has(self.rules.metrics) && self.rules.metrics.permissions.viewMetrics == true"
    system.write("causes.yaml", access_policy(
        "no-metrics", namespace="team-c", target=("Cluster", "east"),
        created="2026-01-04T00:00:00Z",
        overrides=block({"metrics": rule(groups=["dev"], view=True, metrics=False)},
                        strategy="merge", when=guard)),
        access_policy("complies", namespace="team-n", target=("Namespace", "east", "shop"),
                      created="2026-01-05T00:00:00Z",
                      rules={"metrics": rule(groups=["dev"], view=True, metrics=False)},
                      unset=["nothing-above"]))
    await system.settle()

    async def enforced(namespace: str, name: str) -> dict[str, Any]:
        status = await system.request("clearance.v1.policy-status", {
            "kind": "AccessPolicy", "namespace": namespace, "name": name})
        found: dict[str, Any] = next(c for c in status["conditions"]
                                     if c["type"] == "Enforced")
        return found

    constraint = await enforced("team-c", "no-metrics")
    assert (constraint["status"], constraint["reason"]) == ("False", "Overridden")
    assert constraint["message"] == ("Policy is not in force on any target: metrics (not "
                                     "applied: spec.overrides.when is false)")
    intent = await enforced("team-n", "complies")
    assert intent["reason"] == "Enforced"
    assert intent["message"].endswith(
        "unset of nothing-above has no effect: without it, no higher policy's defaults "
        "would add that rule on any target")


async def test_an_invalid_policy_is_reported_and_withdrawn_whole(system: System) -> None:
    assert system.nc is not None
    received: list[dict[str, Any]] = []

    async def collect(msg: Any) -> None:
        received.append(json.loads(msg.data))

    sub = await system.nc.subscribe(
        "clearance.status.accesspolicy.platform.fleet-default", cb=collect)
    broken = access_policy("fleet-default", namespace="platform",
                           rules={"a": rule(groups=["sre"])},
                           defaults=block({"b": rule(groups=["sre"])}))
    await system.apply("inherited.yaml", broken, PROD_OVERRIDE, TEAM_INTENT)
    await system.settle()
    status = await system.request("clearance.v1.policy-status", {
        "kind": "AccessPolicy", "namespace": "platform", "name": "fleet-default"})
    assert status["conditions"][0]["reason"] == "Invalid"
    fleet = await effective(system, kind="Fleet", name="fleet")
    assert fleet["rules"] == {} and fleet["policies"] == []
    for _ in range(50):
        if received:
            break
        await asyncio.sleep(0.05)
    await sub.unsubscribe()
    assert received and received[-1]["conditions"][0]["reason"] == "Invalid"


async def test_simulate_reports_diffs_without_applying(system: System) -> None:
    change = access_policy(
        "fleet-default", namespace="platform", created="2026-01-01T00:00:00Z",
        defaults=block({"sre-view": rule(groups=["sre"], view=True),
                        "dev-view": rule(groups=["dev"])}, strategy="merge"))
    reply = await system.request("clearance.v1.effective.simulate",
                                 {"policy": change, "operation": "apply"})
    by_target = {(t["target"]["kind"], t["target"]["name"]): t for t in reply["targets"]}
    assert "dev-view" in by_target[("Cluster", "west")]["added"]
    assert "sre-view" in by_target[("Cluster", "west")]["changed"]
    assert "platform/fleet-default" in reply["status"]
    # Nothing was applied.
    assert "dev-view" not in (await effective(system, kind="Fleet", name="fleet"))["rules"]
    deleted = await system.request("clearance.v1.effective.simulate",
                                   {"policy": FLEET_DEFAULT, "operation": "delete"})
    west = next(t for t in deleted["targets"] if t["target"]["name"] == "west")
    assert west["removed"] == ["sre-view"]
    wrong = await system.request("clearance.v1.effective.simulate",
                                 {"policy": {"kind": "Pod", "metadata": {"name": "x"}}})
    assert wrong["error"]["code"] == "bad_request"


async def test_lists_use_the_namespace_targets_own_rules(system: System) -> None:
    """In shop, its own intent decides: mallory is denied there whatever her
    MonitorAccessPolicy says, carol sees it, and the Fleet's sre-view does not reach it."""
    pods = [{"name": "p1", "namespace": "shop"}, {"name": "p2", "namespace": "payments"}]

    async def visible(user: str, *groups: str) -> list[str]:
        reply = await system.request("clearance.v1.filter", {
            "principal": {"username": user, "groups": list(groups)}, "cluster": "east",
            "type": "pods", "items": pods})
        return [item["name"] for item in reply["items"]]

    assert await visible("mallory") == ["p2"]
    assert await visible("carol") == ["p1"]
    assert await visible("sam", "sre") == ["p2"]
    assert await visible("nobody") == []
    perms = await system.request("clearance.v1.permissions",
                                 {"principal": {"username": "sam", "groups": ["sre"]}})
    assert perms["clusters"]["west"] == {"decision": "allow",
                                         "permissions": ["view", "view_metrics"]}
    types = await system.request("clearance.v1.custom-types",
                                 {"principal": {"username": "sam", "groups": ["sre"]}})
    assert types["types"] == []


async def test_forbidding_unset_rebuilds_and_reports_the_ignored_unset(system: System) -> None:
    """CLEARANCE_ALLOW_UNSET=false: a compiler started with it rebuilds the state it did
    not build with that setting; the unset stops working and the status says so."""
    system.write("unset.yaml", access_policy(
        "drop-sre", namespace="team-b", target=("Cluster", "west"), unset=["sre-view"]))
    await system.settle()
    assert "sre-view" not in (await effective(system, kind="Cluster", name="west"))["rules"]
    await system.stop("compiler")
    system.settings = msgspec.structs.replace(system.settings, allow_unset=False)
    await system.start("compiler")
    for _ in range(100):
        west = await effective(system, kind="Cluster", name="west")
        if "rules" in west and "sre-view" in west["rules"]:
            break
        await asyncio.sleep(0.1)
    assert "sre-view" in west["rules"]
    status = await system.request("clearance.v1.policy-status", {
        "kind": "AccessPolicy", "namespace": "team-b", "name": "drop-sre"})
    enforced = next(c for c in status["conditions"] if c["type"] == "Enforced")
    assert "CLEARANCE_ALLOW_UNSET=false" in enforced["message"]
    simulated = await system.request("clearance.v1.effective.simulate", {
        "policy": access_policy("drop-sre", namespace="team-b", target=("Cluster", "west"),
                                unset=["sre-view"]), "operation": "delete"})
    assert simulated["targets"] == []  # with unset ignored, deleting it changes no rule


async def test_custom_types_in_inherited_rules_need_a_metric_source(system: System) -> None:
    """docs/api/README.md's Principals holds for AccessPolicy rules too: a custom type no
    MetricSource declares is hidden and not listed, until one declares it (which reaches cached
    answers)."""
    system.write("certs.yaml", access_policy(
        "certs", namespace="team-c", target=("Cluster", "west"),
        rules={"cert-view": rule(users=["cora"], resources=[{"type": "certs"}])}))
    await system.settle()

    async def certs(**extra: Any) -> dict[str, Any]:
        return await check(system, "cora", "west", type_="certs", name="*", **extra)

    assert (await certs())["decision"] == "deny"
    types = await system.request("clearance.v1.custom-types",
                                 {"principal": {"username": "cora"}})
    assert types["types"] == []
    system.write("source.yaml", {
        "apiVersion": "clusterpulse.io/v1alpha1", "kind": "MetricSource",
        "metadata": {"name": "certs", "namespace": "monitoring"},
        "spec": {"rbac": {"resourceTypeName": "certs"}}})
    revision = await system.settle()
    assert (await certs(min_revision=revision))["decision"] == "allow"
    types = await system.request("clearance.v1.custom-types",
                                 {"principal": {"username": "cora"}})
    assert types["types"] == ["certs"]


async def test_a_cluster_that_appears_drops_what_was_cached_about_it(system: System) -> None:
    """Answers about a cluster outside the inventory read the Fleet's rules; when it
    appears with a Cluster-targeted policy already waiting for it, the Fleet rule's
    subjects (named by no rule it gains) must not keep their cached answers."""
    system.write("north.yaml", access_policy(
        "north-only", namespace="team-n", target=("Cluster", "north"),
        rules={"sre-view": rule(users=["zed"], view=True)}))
    await system.settle()
    before = await check(system, "sam", "north", groups=["sre"])
    assert before["decision"] == "allow"  # the Fleet default: north is not there yet
    assert (await check(system, "sam", "north", groups=["sre"]))["cached"] is True
    await system.apply("north-cluster.yaml", cluster("north"))
    revision = await system.settle()
    after = await check(system, "sam", "north", groups=["sre"], min_revision=revision)
    # At north its own policy's sre-view (zed's) replaces the Fleet default's.
    assert (after["decision"], after["cached"]) == ("deny", False)
    assert (await check(system, "zed", "north", min_revision=revision))["decision"] == "allow"
