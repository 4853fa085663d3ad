"""Unknown names are said, not silently denied (docs/api/README.md: Warnings), through the real
decision service: a check about a misspelled cluster, type or principal gets the answer
it always got plus a warning, from the cache as without it, and the warning goes as soon
as the name exists — a cluster appears, a MetricSource declares the type, a policy
names the principal (even one selecting another cluster: a narrowed invalidation)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import Servers
from tests.integration.harness import System, cluster, publish
from tests.support.policies import policy

EAST = "prod-us-east"
NOT_EAST = 'cluster "prod-us-eas" is not in the inventory (did you mean "prod-us-east"?)'
NO_PDOS = ('type "pdos" is neither a built-in type nor declared by a MetricSource: its '
           'items are hidden (did you mean "pods"?)')


def unnamed(user: str) -> str:
    return (f'no policy names principal "{user}" or any of its groups: it is answered as '
            'anyone unnamed is ("others" in who-can-see)')


def metricsource(type_name: str) -> dict[str, Any]:
    return {"apiVersion": "clusterpulse.io/v1alpha1", "kind": "MetricSource",
            "metadata": {"name": f"{type_name}-source", "namespace": "monitoring"},
            "spec": {"rbac": {"resourceTypeName": type_name}}}


@pytest.fixture
async def system(clean_servers: Servers) -> AsyncIterator[System]:
    """The services that answer, fed straight through the stream."""
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, None)
    await sys_.start("compiler", "cache-invalidator", "decision")
    await publish(sys_, "managedcluster", cluster(EAST))
    await publish(sys_, "managedcluster", cluster("dev-1"))
    await publish(sys_, "monitoraccesspolicy", policy(
        "alice", users=["alice"], rules=[{"selector": {"matchNames": [EAST]},
                                          "permissions": {"view": True}}]))
    await sys_.settle()
    yield sys_
    await sys_.close()


async def check(system: System, user: str, resource: dict[str, Any],
                revision: int = 0) -> dict[str, Any]:
    return await system.request("clearance.v1.check", {
        "principal": {"username": user}, "action": "view", "resource": resource,
        "min_revision": revision})


async def twice(system: System, user: str, resource: dict[str, Any],
                revision: int = 0) -> dict[str, Any]:
    """The answer computed, then from the cache: the same but for ``cached``."""
    first = await check(system, user, resource, revision)
    again = await system.request("clearance.v1.check", {
        "principal": {"username": user}, "action": "view", "resource": resource})
    assert first["cached"] is False
    assert again["cached"] is True
    assert {**again, "cached": False} == first
    return first


async def test_a_misspelled_cluster_is_denied_as_before_and_said(system: System) -> None:
    misspelled = {"type": "cluster", "name": "prod-us-eas"}
    got = await twice(system, "alice", misspelled)
    assert got["decision"] == "deny" and got["allowed"] is False
    assert got["warnings"] == [NOT_EAST]
    # A known cluster: nothing to say, and the reply has no warnings member at all.
    right = await twice(system, "alice", {"type": "cluster", "name": EAST})
    assert right["decision"] == "allow" and "warnings" not in right
    # The cluster appears: the cached warning goes with it.
    revision = await publish(system, "managedcluster", cluster("prod-us-eas"))
    after = await check(system, "alice", misspelled, revision)
    assert after["cached"] is False and "warnings" not in after


async def test_a_suggestion_follows_the_inventory(system: System) -> None:
    """A cached suggestion is the inventory's of now: another cluster's appearing drops
    the answers that suggested one."""
    asked = {"type": "cluster", "name": "prod-us-eastt"}
    assert (await twice(system, "alice", asked))["warnings"] == [
        'cluster "prod-us-eastt" is not in the inventory (did you mean "prod-us-east"?)']
    revision = await publish(system, "managedcluster", cluster("prod-us-eastt2"))
    after = await check(system, "alice", asked, revision)
    assert after["cached"] is False
    assert after["warnings"] == [
        'cluster "prod-us-eastt" is not in the inventory (did you mean "prod-us-eastt2"?)']


async def test_an_undeclared_type_is_hidden_as_before_and_said(system: System) -> None:
    asked = {"type": "pdos", "cluster": EAST}
    got = await twice(system, "alice", asked)
    assert got["decision"] == "deny"
    assert got["warnings"] == [NO_PDOS]
    assert "warnings" not in await twice(system, "alice", {"type": "pods", "cluster": EAST})
    revision = await publish(system, "metricsource", metricsource("pdos"))
    after = await check(system, "alice", asked, revision)
    assert after["cached"] is False and "warnings" not in after
    assert after["decision"] == "deny"  # declared, but alice's rule does not list it


async def test_a_type_whose_metricsource_goes_is_warned_of_from_then_on(
        system: System) -> None:
    """The answer about a declared type was cached without a warning; its MetricSource
    deleted, the next answer warns (it is not served from the cache)."""
    revision = await publish(system, "metricsource", metricsource("widgets"))
    asked = {"type": "widgets", "cluster": EAST}
    assert "warnings" not in await twice(system, "alice", asked, revision)
    gone = await publish(system, "metricsource", metricsource("widgets"), deleted=True)
    after = await check(system, "alice", asked, gone)
    assert after["cached"] is False
    assert after["warnings"] == [
        'type "widgets" is neither a built-in type nor declared by a MetricSource: its '
        'items are hidden']


async def test_an_unknown_principal_is_answered_as_others_and_said(system: System) -> None:
    asked = {"type": "cluster", "name": EAST}
    got = await twice(system, "alcie", asked)
    assert got["decision"] == "deny" and got["warnings"] == [unnamed("alcie")]
    # A policy names alcie, selecting another cluster only: the invalidation is narrowed
    # to dev-1, yet the cached warning about prod-us-east goes (alcie is named now).
    revision = await publish(system, "monitoraccesspolicy", policy(
        "alcie", users=["alcie"], rules=[{"selector": {"matchNames": ["dev-1"]},
                                          "permissions": {"view": True}}]))
    after = await check(system, "alcie", asked, revision)
    assert after["cached"] is False and "warnings" not in after
    assert after["decision"] == "deny"


async def test_a_batch_warns_each_result_on_its_own(system: System) -> None:
    reply = await system.request("clearance.v1.check.batch", {
        "principal": {"username": "alice"},
        "checks": [{"action": "view", "resource": {"type": "cluster", "name": EAST}},
                   {"action": "view", "resource": {"type": "cluster", "name": "prod-us-eas"}},
                   {"action": "view", "resource": {"type": "pdos", "cluster": EAST}}]})
    first, second, third = reply["results"]
    assert first["decision"] == "allow" and "warnings" not in first
    assert second["warnings"] == [NOT_EAST]
    assert third["warnings"] == [NO_PDOS]


async def test_lists_and_views_warn_too(system: System) -> None:
    alcie = {"username": "alcie"}
    filtered = await system.request("clearance.v1.filter", {
        "principal": alcie, "cluster": "prod-us-eas", "type": "pdos",
        "items": [{"name": "a"}]})
    assert filtered["decision"] == "deny" and filtered["visible"] == 0
    assert filtered["warnings"] == [NOT_EAST, NO_PDOS, unnamed("alcie")]
    metrics = await system.request("clearance.v1.metrics", {
        "principal": {"username": "alice"}, "cluster": "prod-us-eas"})
    assert metrics["decision"] == "deny" and metrics["warnings"] == [NOT_EAST]
    types = await system.request("clearance.v1.custom-types", {"principal": alcie})
    assert types["types"] == [] and types["warnings"] == [unnamed("alcie")]
    permissions = await system.request("clearance.v1.permissions", {"principal": alcie})
    assert permissions["warnings"] == [unnamed("alcie")]
    assert "warnings" not in await system.request("clearance.v1.permissions",
                                                  {"principal": {"username": "alice"}})
