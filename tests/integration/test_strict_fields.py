"""Strict field checking through the real pipeline (manifests -> watcher -> compiler ->
decision): a misspelled field makes a policy invalid with its path and a suggestion in its
status, a misspelled Deny takes no part at all, and fixing the typo puts it in force."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Servers
from tests.integration.harness import System, cluster, group
from tests.support.accesspolicies import access_policy, rule
from tests.support.policies import policy


def deny_production(*, typo: bool) -> dict[str, Any]:
    """Contractors are denied production — with ``typo``, its selector is misspelled."""
    obj = policy("no-prod", effect="Deny", priority=10, groups=["contractors"],
                 rules=[{"selector": {"matchLabels": {"env": "prod"}}}])
    if typo:
        selector = obj["spec"]["scope"]["clusters"]["rules"][0]["selector"]
        selector["matchLabel"] = selector.pop("matchLabels")
        obj["spec"]["identity"]["priorty"] = obj["spec"]["identity"].pop("priority")
    return obj


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.write("inventory.yaml", cluster("prod-east", env="prod"),
               group("developers", "dave"), group("contractors", "dave"))
    sys_.write("grant.yaml", policy("developers", groups=["developers"], default="all"))
    sys_.write("deny.yaml", deny_production(typo=False))
    await sys_.start()
    await sys_.settle()
    yield sys_
    await sys_.close()


async def eventually(ask: Callable[[], Awaitable[dict[str, Any]]],
                     done: Callable[[dict[str, Any]], bool], within: float = 20.0
                     ) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        found = await ask()
        if done(found):
            return found
        assert time.monotonic() < deadline, f"still {found}"
        await asyncio.sleep(0.1)


async def test_a_misspelled_deny_is_an_error_with_its_paths_and_takes_no_part(
        system: System) -> None:
    assert (await system.check("dave", "prod-east"))["decision"] == "deny"
    system.write("deny.yaml", deny_production(typo=True))

    def status() -> Awaitable[dict[str, Any]]:
        return system.request("clearance.v1.policy-status", {
            "kind": "MonitorAccessPolicy", "namespace": "ns", "name": "no-prod"})

    found = await eventually(status, lambda s: s.get("state") == "Error")
    assert found["message"] == (
        'spec.identity.priorty: unknown field (did you mean "priority"?); '
        'spec.scope.clusters.rules[0].selector.matchLabel: unknown field '
        '(did you mean "matchLabels"?)')
    compiled = {c["type"]: c for c in found["conditions"]}["Compiled"]
    assert (compiled["status"], compiled["reason"]) == ("False", "Invalid")
    # Invalid, it takes no part: its previous valid version is withdrawn too, and the
    # developer grant decides. Loud in its status, not silent.
    revision = await system.settle()
    reply = await system.check("dave", "prod-east", min_revision=revision, explain=True)
    assert (reply["decision"], reply["policy"]) == ("allow", "ns/developers")
    skipped = [step for step in reply["trace"] if step["policy"] == "ns/no-prod"]
    assert skipped and skipped[0]["outcome"] == "skipped"
    assert "unknown field" in skipped[0]["reason"]
    # Fixed, it is in force again.
    system.write("deny.yaml", deny_production(typo=False))
    await eventually(status, lambda s: s.get("state") == "Active")
    revision = await system.settle()
    assert (await system.check("dave", "prod-east", min_revision=revision))["decision"] == \
        "deny"


async def test_a_misspelled_access_policy_is_not_accepted_and_simulate_says_why(
        system: System) -> None:
    spelled = access_policy("ops", namespace="clearance-system",
                            rules={"ops": {"subjects": {"grups": ["contractors"]}}})
    simulated = await system.request("clearance.v1.effective.simulate", {"policy": spelled})
    [accepted] = simulated["status"]["clearance-system/ops"]["after"]
    assert (accepted["status"], accepted["reason"]) == ("False", "Invalid")
    assert accepted["message"] == ('Policy is invalid: spec.rules.ops.subjects.grups: unknown '
                                   'field (did you mean "groups"?)')
    assert simulated["targets"] == []
    system.write("ap.yaml", spelled)

    def conditions() -> Awaitable[dict[str, Any]]:
        return system.request("clearance.v1.policy-status", {
            "kind": "AccessPolicy", "namespace": "clearance-system", "name": "ops"})

    found = await eventually(conditions, lambda s: bool(s.get("conditions")))
    assert found["conditions"] == [accepted]
    system.write("ap.yaml", access_policy("ops", namespace="clearance-system",
                                          rules={"ops": rule(groups=["contractors"])}))
    await eventually(conditions, lambda s: s["conditions"][0]["reason"] == "Accepted")
