"""A batch that missed the cache whole is cached as one entry, and any change that can
alter one of its answers drops it: the next ask answers every check afresh.

(A batch of many checks of one principal shares every index set but its clusters': one
entry is one write instead of one per answer — bench/peers/README.md.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from clearance_decision.decider import WHOLE_BATCH
from tests.conftest import Servers
from tests.integration.harness import System, cluster, group, publish
from tests.support.policies import policy

CLUSTERS = [f"c{i}" for i in range(WHOLE_BATCH + 4)]
ALICE = {"username": "alice"}


def sees(name: str, selector: dict[str, Any], *, group_name: str = "devs",
         effect: str = "Allow", priority: int = 50) -> dict[str, Any]:
    return policy(name, groups=[group_name], priority=priority, effect=effect,
                  rules=[{"selector": selector, "permissions": {"view": True}}])


@pytest.fixture
async def system(clean_servers: Servers) -> AsyncIterator[System]:
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, None)
    await sys_.start("compiler", "cache-invalidator", "decision")
    for i, name in enumerate(CLUSTERS):
        obj = cluster(name)
        obj["metadata"]["labels"] = {"env": "prod" if i % 2 else "dev"}
        await publish(sys_, "managedcluster", obj)
    await publish(sys_, "group", group("devs", "alice", "bob"))
    await publish(sys_, "monitoraccesspolicy", sees("devs", {"matchNames": ["c*"]}))
    await sys_.settle()
    yield sys_
    await sys_.close()


async def answers(system: System, revision: int, principal: dict[str, Any] = ALICE,
                  asked: list[str] = CLUSTERS) -> list[tuple[str, bool]]:
    reply = await system.request("clearance.v1.check.batch", {
        "principal": principal, "min_revision": revision,
        "checks": [{"action": "view", "resource": {"type": "cluster", "name": c}}
                   for c in asked]})
    return [(r["decision"], r["cached"]) for r in reply["results"]]



async def change(system: System, kind: str, obj: dict[str, Any]) -> int:
    await publish(system, kind, obj)
    return await system.settle()


async def test_a_batch_that_missed_is_one_entry_and_answers_again_from_it(
        system: System) -> None:
    revision = await system.settle()
    assert await answers(system, revision) == [("allow", False)] * len(CLUSTERS)
    assert await system.cache_entries() == 1
    assert await answers(system, revision) == [("allow", True)] * len(CLUSTERS)
    # Another order is another batch; a small batch is cached answer by answer.
    assert await answers(system, revision, asked=CLUSTERS[::-1]) == [
        ("allow", False)] * len(CLUSTERS)
    assert await answers(system, revision, asked=CLUSTERS[:2]) == [("allow", False)] * 2
    assert await system.cache_entries() == 2 + 2


async def test_a_policy_change_about_one_cluster_drops_the_whole_batch(
        system: System) -> None:
    revision = await system.settle()
    await answers(system, revision)
    revision = await change(system, "monitoraccesspolicy",
                            sees("no-c3", {"matchNames": ["c3"]}, effect="Deny", priority=1))
    got = await answers(system, revision)
    assert got[3] == ("deny", False)
    assert set(got[:3] + got[4:]) == {("allow", False)}
    assert set(await answers(system, revision)) == {("allow", True), ("deny", True)}


async def test_a_label_change_and_a_group_change_reach_the_batch(system: System) -> None:
    revision = await change(system, "monitoraccesspolicy",
                            sees("no-prod", {"matchLabels": {"env": "prod"}}, effect="Deny",
                                 priority=1))
    before = await answers(system, revision)
    assert [d for d, _ in before] == ["allow" if i % 2 == 0 else "deny"
                                      for i in range(len(CLUSTERS))]
    bob = await answers(system, revision, {"username": "bob"})
    assert [d for d, _ in bob] == [d for d, _ in before]
    # c0 becomes prod: alice's batch about it goes, bob's too (every cluster index).
    relabelled = cluster("c0")
    relabelled["metadata"]["labels"] = {"env": "prod"}
    revision = await change(system, "managedcluster", relabelled)
    assert (await answers(system, revision))[0] == ("deny", False)
    # alice leaves the group: none of her answers allow any more; bob's stay cached.
    revision = await change(system, "group", group("devs", "bob"))
    assert {d for d, _ in await answers(system, revision)} == {"deny"}
    assert (await answers(system, revision, {"username": "bob"}))[0] == ("deny", False)
    assert set(await answers(system, revision, {"username": "bob"})) == {
        ("allow", True), ("deny", True)}
