"""Questions that name no namespace, from a principal many Namespace targets concern.

A whole type, or an item asked without its namespace, is weighed against every Namespace
target of its cluster that concerns the principal — and a caller chooses the groups it
asserts, so it can make hundreds of targets concern it. One request may weigh at most
``CLEARANCE_NAMESPACE_TARGET_BUDGET`` (question, target) pairs: a batch of whole types or
a list of items without their namespaces beyond it is a ``bad_request`` answered at once,
never a stall, and everyone else is answered meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.support.accesspolicies import access_policy, rule
from tests.support.policies import policy

pytestmark = [pytest.mark.integration, pytest.mark.attack]

TARGETS = 300
BUDGET = 1000
#: Asserting every team's group makes every Namespace target concern the caller.
GREEDY = {"username": "greedy", "groups": [f"team-{i}" for i in range(TARGETS)]}


def team_policy(i: int) -> dict[str, Any]:
    return access_policy(f"team-{i}", namespace="clearance-system",
                         target=("Namespace", "c1", f"ns{i}"),
                         rules={f"team-{i}": rule(groups=[f"team-{i}"], resources=[
                             {"type": "pods", "visibility": "filtered",
                              "filters": {"labels": {"team": str(i)}}}])})


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.settings = msgspec.structs.replace(sys_.settings, namespace_target_budget=BUDGET)
    sys_.write("fleet.yaml", cluster("c1"),
               policy("viewers", users=["ann"], rules=[{"selector": {"matchNames": ["*"]}}]),
               *(team_policy(i) for i in range(TARGETS)))
    await sys_.start()
    await sys_.settle(timeout=60)
    last = {"principal": GREEDY, "action": "view", "resource": {
        "type": "pods", "cluster": "c1", "name": "p", "namespace": f"ns{TARGETS - 1}",
        "labels": {"team": str(TARGETS - 1)}}}
    deadline = asyncio.get_running_loop().time() + 60
    while (await sys_.request("clearance.v1.check", last))["decision"] != "allow":
        assert asyncio.get_running_loop().time() < deadline, "the fleet never compiled"
        await asyncio.sleep(0.1)
    yield sys_
    await sys_.close()


async def _whole(system: System, principal: dict[str, Any], type_: str = "pods"
                 ) -> dict[str, Any]:
    return await system.request("clearance.v1.check", {
        "principal": principal, "action": "view",
        "resource": {"type": type_, "cluster": "c1"}})


async def test_one_whole_type_within_the_budget_is_answered(system: System) -> None:
    reply = await _whole(system, GREEDY)
    assert reply["decision"] == "partial", reply
    allowed = reply["filters"]["pods"]["filters"]["namespaces"]["allowed"]
    assert len(allowed) == 1  # the first namespace's filters, and only there


async def test_a_batch_of_whole_types_beyond_the_budget_is_refused_at_once(
        system: System) -> None:
    body = {"principal": GREEDY, "checks": [
        {"action": "view", "resource": {"type": f"t{k}", "cluster": "c1"}}
        for k in range(BUDGET)]}
    started = time.perf_counter()
    reply = await system.request("clearance.v1.check.batch", body, timeout=10)
    assert reply["error"]["code"] == "bad_request", reply
    assert "CLEARANCE_NAMESPACE_TARGET_BUDGET" in reply["error"]["message"]
    assert time.perf_counter() - started < 5


async def test_a_list_of_items_without_namespaces_beyond_it_is_refused(
        system: System) -> None:
    reply = await system.request("clearance.v1.filter", {
        "principal": GREEDY, "cluster": "c1", "type": "pods",
        "items": [{"name": f"p{k}"} for k in range(10)]})
    assert reply["error"]["code"] == "bad_request", reply
    placed = await system.request("clearance.v1.filter", {
        "principal": GREEDY, "cluster": "c1", "type": "pods",
        "items": [{"name": f"p{k}", "namespace": f"ns{k}", "labels": {"team": str(k)}}
                  for k in range(TARGETS)]})
    assert placed["visible"] == TARGETS, placed  # named: each judged where it lives


async def test_others_are_answered_during_a_flood_of_refused_batches(
        system: System) -> None:
    body = {"principal": GREEDY, "checks": [
        {"action": "view", "resource": {"type": "pods", "cluster": "c1", "name": f"p{k}"}}
        for k in range(50)]}
    flood = [asyncio.create_task(system.request("clearance.v1.check.batch", body,
                                                timeout=20)) for _ in range(20)]
    started = time.perf_counter()
    ann = await system.check("ann", "c1")
    assert ann["decision"] == "allow" and time.perf_counter() - started < 5, ann
    for reply in await asyncio.gather(*flood):
        assert reply["error"]["code"] == "bad_request", reply
