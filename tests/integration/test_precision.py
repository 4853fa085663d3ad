"""A policy or Group change drops only the cached answers it can alter.

A MonitorAccessPolicy change drops its subjects' answers about the clusters where the
policy behaves differently, and of those only the answers the policy could now decide
(decided by no policy, or by one not before it in evaluation order). A Group membership
change drops the joining or leaving users' answers about the clusters the policies naming
the group select. Answers about clusters outside the inventory always go, and so do
cached explanations (their trace lists every candidate). docs/api/caching.md, \"Caching and
freshness\", has the table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import Servers
from tests.integration.harness import System, cluster, group, publish
from tests.support.accesspolicies import access_policy, rule
from tests.support.policies import policy

ALICE = {"username": "alice", "groups": ["devs"]}
CLUSTERS = ["c1", "c2", "c3"]
ASKED = [*CLUSTERS, "elsewhere"]  # the last one is in no inventory


def on(name: str, clusters: list[str], *, priority: int, effect: str = "Allow",
       groups: list[str] | None = None) -> dict[str, Any]:
    return policy(name, groups=groups or ["devs"], priority=priority, effect=effect,
                  rules=[{"selector": {"matchNames": clusters},
                          "permissions": {"view": True}}])


@pytest.fixture
async def system(clean_servers: Servers) -> AsyncIterator[System]:
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, None)
    await sys_.start("compiler", "cache-invalidator", "decision")
    for name in CLUSTERS:
        await publish(sys_, "managedcluster", cluster(name))
    await publish(sys_, "monitoraccesspolicy", on("first", ["c1"], priority=1))
    await publish(sys_, "monitoraccesspolicy", on("second", ["c2", "elsewhere"], priority=5))
    await publish(sys_, "monitoraccesspolicy", on("wide", ["c*"], priority=9))
    await sys_.settle()
    yield sys_
    await sys_.close()


async def answers(system: System, principal: dict[str, Any], revision: int,
                  explain: bool = False) -> dict[str, tuple[str, bool]]:
    """(decision, cached) for every cluster asked."""
    reply = await system.request("clearance.v1.check.batch", {
        "principal": principal, "min_revision": revision, "explain": explain,
        "checks": [{"action": "view", "resource": {"type": "cluster", "name": c}}
                   for c in ASKED]})
    return {c: (r["decision"], r["cached"]) for c, r in zip(ASKED, reply["results"],
                                                              strict=True)}


async def change(system: System, kind: str, obj: dict[str, Any]) -> int:
    await publish(system, kind, obj)
    return await system.settle()


async def test_a_policy_change_drops_only_the_answers_it_can_alter(system: System) -> None:
    revision = await system.settle()
    await answers(system, ALICE, revision)
    assert set((await answers(system, ALICE, revision)).values()) == {
        ("allow", True)}
    # "second" turns to Deny: only the answers about c2 (it decides there) and about
    # the cluster outside the inventory go; c1 (decided by "first", before it) and c3
    # (which it does not select) stay cached.
    revision = await change(system, "monitoraccesspolicy",
                            on("second", ["c2", "elsewhere"], priority=5, effect="Deny"))
    assert await answers(system, ALICE, revision) == {
        "c1": ("allow", True), "c2": ("deny", False), "c3": ("allow", True),
        "elsewhere": ("deny", False)}
    # A policy before "first" that selects c1: the answer about c1 can change, and does.
    revision = await change(system, "monitoraccesspolicy",
                            on("zero", ["c1"], priority=0, effect="Deny"))
    assert await answers(system, ALICE, revision) == {
        "c1": ("deny", False), "c2": ("deny", True), "c3": ("allow", True),
        "elsewhere": ("deny", False)}


async def test_a_changed_policy_that_still_decides_the_same_way_is_rechecked(
        system: System) -> None:
    """Equal order, new rules: the answers it decided are dropped (it may now decide
    differently), not kept because nothing before it moved."""
    revision = await system.settle()
    await answers(system, ALICE, revision)
    revision = await change(system, "monitoraccesspolicy", policy(
        "second", groups=["devs"], priority=5,
        rules=[{"selector": {"matchNames": ["c2", "elsewhere"]},
                "permissions": {"view": False, "viewMetrics": True}}]))
    found = await answers(system, ALICE, revision)
    assert found["c2"] == ("deny", False)  # it no longer grants view there
    assert found["c1"] == ("allow", True) and found["c3"] == ("allow", True)


async def test_explanations_always_follow_the_policies_they_list(system: System) -> None:
    """The trace of the answer about c1 lists "second" (not consulted): its effect
    changes, the answer about c1 stays cached, its explanation does not."""
    revision = await system.settle()
    first = await answers(system, ALICE, revision, explain=True)
    assert (await answers(system, ALICE, revision, explain=True))["c1"] == ("allow", True)
    assert first["c1"] == ("allow", False)
    revision = await change(system, "monitoraccesspolicy",
                            on("second", ["c2", "elsewhere"], priority=5, effect="Deny"))
    assert (await answers(system, ALICE, revision))["c1"] == ("allow", True)
    reply = await system.request("clearance.v1.check", {
        "principal": ALICE, "action": "view", "explain": True,
        "resource": {"type": "cluster", "name": "c1"}})
    assert reply["cached"] is False
    listed = {step["policy"]: step["effect"] for step in reply["trace"]}
    assert listed["ns/second"] == "Deny"


async def test_joining_a_group_drops_only_answers_about_what_its_policies_select(
        system: System) -> None:
    # bob is named (group devs) before he joins: an unnamed principal's answers carry a
    # warning, which every invalidation naming him drops (test_warnings).
    bob = {"username": "bob", "groups": ["devs"]}
    await publish(system, "monitoraccesspolicy",
                  on("ops-c3", ["c3"], priority=0, effect="Deny", groups=["ops"]))
    revision = await change(system, "group", group("ops", "carol"))
    await answers(system, bob, revision)
    assert await answers(system, bob, revision) == {
        "c1": ("allow", True), "c2": ("allow", True), "c3": ("allow", True),
        "elsewhere": ("allow", True)}
    revision = await change(system, "group", group("ops", "carol", "bob"))
    assert await answers(system, bob, revision) == {
        "c1": ("allow", True), "c2": ("allow", True), "c3": ("deny", False),
        "elsewhere": ("allow", False)}


async def test_a_namespace_target_drops_the_whole_type_answers_of_its_subjects(
        system: System) -> None:
    """A whole-type answer also reads the Namespace targets of its cluster: a new one
    that denies alice's group in c1/vault drops her cached answers (the whole type of
    pods in c1 turns partial, a pod named without its namespace is denied), while an
    answer of a principal it does not name stays cached."""
    other = {"username": "olga", "groups": ["ops"]}
    revision = await change(system, "monitoraccesspolicy",
                            on("ops", ["c*"], priority=9, groups=["ops"]))

    async def pods(principal: dict[str, Any]) -> list[tuple[str, bool]]:
        reply = await system.request("clearance.v1.check.batch", {
            "principal": principal, "min_revision": revision, "checks": [
                {"action": "view", "resource": {"type": "pods", "cluster": "c1"}},
                {"action": "view", "resource": {"type": "pod", "name": "web-0",
                                                "cluster": "c1"}}]})
        return [(r["decision"], r["cached"]) for r in reply["results"]]

    assert await pods(ALICE) == await pods(other) == [("allow", False)] * 2
    assert await pods(ALICE) == await pods(other) == [("allow", True)] * 2
    revision = await change(system, "accesspolicy", access_policy(
        "vault-guard", namespace="vault", target=("Namespace", "c1", "vault"),
        rules={"no-devs": rule(groups=["devs"], effect="Deny")}))
    assert await pods(ALICE) == [("partial", False), ("deny", False)]
    assert await pods(other) == [("allow", True)] * 2
