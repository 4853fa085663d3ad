"""The agreement property through the real decision service: random fleets
(``tests/unit/fleets.py``) written as manifests, and every subject asked over NATS —
``filter``, ``metrics``, ``custom-types``, ``permissions`` and whole-type checks — must
agree with ``check`` (also asked over NATS) on each item where it lives.

The fleets are the first drawn (derandomized) in which some Namespace target changes a
principal's whole-type answer, so a service that skipped them would be caught.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, Phase, given, settings

from clearance_api.wire import NamespaceMetrics, NodeMetrics, Resource
from clearance_core.monitor.filters import Item
from clearance_core.questions import answers
from tests.conftest import Servers
from tests.integration.harness import System, cluster, group
from tests.unit.fleets import (
    CLUSTERS,
    ITEMS,
    NOW,
    Answer,
    Fleet,
    Listing,
    compare,
    filtered_somewhere,
    fleets,
)

pytestmark = pytest.mark.integration

FLEETS = 3
PRINCIPALS = (("u1", []), ("u2", ["g1"]), ("u3", ["g2"]))
_builtins = msgspec.to_builtins


def _spread_matters(fleet: Fleet) -> bool:
    """Whether some whole-type answer of the fleet (in memory) differs from what the
    cluster's target alone answers: then a service that skipped the Namespace targets
    would disagree with its own check."""
    for username, groups in PRINCIPALS:
        identity = fleet.identity(username, groups)
        state = fleet.state(identity)
        for cluster_ in CLUSTERS:
            for kind in ITEMS:
                resource = Resource(type=kind, cluster=cluster_)
                whole = answers.check(state, identity, "view", resource, cluster=cluster_,
                                      now=NOW, explain=False)
                here = answers.at_target(state, identity, "view", resource,
                                         cluster=cluster_, namespace=None, now=NOW,
                                         explain=False)
                if (whole.decision, whole.filters) != (here.decision, here.filters):
                    return True
    return False


@functools.cache
def _drawn(count: int) -> list[Fleet]:
    """The first ``count`` fleets where a Namespace target changes a whole-type answer
    of a principal."""
    found: list[Fleet] = []

    @settings(max_examples=100, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(fleets())
    def draw(fleet: Fleet) -> None:
        if len(found) < count and _spread_matters(fleet):
            found.append(fleet)

    draw()
    assert len(found) == count, "too few fleets where a Namespace target matters"
    return found


def metricsource() -> dict[str, Any]:
    return {"apiVersion": "clusterpulse.io/v1alpha1", "kind": "MetricSource",
            "metadata": {"name": "pvc-source", "namespace": "monitoring"},
            "spec": {"rbac": {"resourceTypeName": "pvc", "filterableFields": ["tier"]},
                     "aggregations": [{"name": "count", "function": "count"}]}}


def _item(raw: dict[str, Any]) -> Item:
    return msgspec.convert(raw, Item)


class Live:
    """The subjects of the running service for one principal: a first pass records
    every question (answering ``deny``, and showing every item of a list so that what is
    asked about shown items is recorded too), :meth:`fetch` asks them all, and a second
    pass answers from the replies."""

    def __init__(self, system: System, username: str, groups: list[str]) -> None:
        self.system = system
        self.principal = {"username": username, "groups": groups}
        self.asked: dict[str, tuple[str, dict[str, Any]]] = {}
        self.replies: dict[str, Any] = {}
        self.recording = True

    def _ask(self, subject: str, body: dict[str, Any]) -> Any:
        key = msgspec.json.encode([subject, body], order="sorted").decode()
        if self.recording:
            self.asked[key] = (subject, body)
            return None
        return self.replies[key]

    async def fetch(self) -> None:
        checks = [(k, body) for k, (s, body) in self.asked.items()
                  if s == "clearance.v1.check"]
        for start in range(0, len(checks), 5000):
            chunk = checks[start:start + 5000]
            reply = await self.system.request("clearance.v1.check.batch", {
                "principal": self.principal, "checks": [body for _, body in chunk]},
                timeout=30)
            assert "results" in reply, reply
            for (key, _), result in zip(chunk, reply["results"], strict=True):
                self.replies[key] = result
        for key, (subject, body) in self.asked.items():
            if subject != "clearance.v1.check":
                reply = await self.system.request(
                    subject, {"principal": self.principal, **body}, timeout=30)
                assert "error" not in reply, (subject, body, reply)
                self.replies[key] = reply
        self.recording = False

    def check(self, action: str, resource: Resource) -> Answer:
        found = self._ask("clearance.v1.check", {
            "action": action, "resource": _builtins(resource)})
        return Answer("deny") if found is None else Answer(found["decision"],
                                                           found["filters"])

    def filtered(self, cluster_: str, kind: str, items: list[Item]) -> Listing:
        found = self._ask("clearance.v1.filter", {
            "cluster": cluster_, "type": kind, "items": _builtins(items)})
        if found is None:  # recording: every item may be shown (and asked about)
            return Listing("deny", list(items), None)
        counted = None if found["aggregations"] is None else found["aggregations"]["count"]
        return Listing(found["decision"], [_item(i) for i in found["items"]], counted)

    def metrics(self, cluster_: str, spaces: list[NamespaceMetrics],
                nodes: list[NodeMetrics]) -> tuple[str, int, int]:
        found = self._ask("clearance.v1.metrics", {
            "cluster": cluster_, "namespaces": _builtins(spaces), "nodes": _builtins(nodes)})
        if found is None:
            return "deny", 0, 0
        values = found["metrics"]
        return found["decision"], values.get("namespaces", 0), values.get("nodes", 0)

    def custom_types(self, cluster_: str | None) -> set[str]:
        found = self._ask("clearance.v1.custom-types",
                          {} if cluster_ is None else {"cluster": cluster_})
        return set() if found is None else set(found["types"])

    def permissions(self) -> dict[str, tuple[str, list[str]]]:
        found = self._ask("clearance.v1.permissions", {})
        if found is None:
            return {c: ("deny", []) for c in CLUSTERS}
        return {c: (p["decision"], p["permissions"])
                for c, p in found["clusters"].items()}


def _manifests(fleet: Fleet) -> list[dict[str, Any]]:
    sets = [{"apiVersion": "cluster.open-cluster-management.io/v1beta2",
             "kind": "ManagedClusterSet", "metadata": {"name": name}}
            for name in fleet.cluster_sets]
    return [*(cluster(name, **labels) for name, labels in fleet.clusters.items()), *sets,
            *(group(name, *users) for name, users in fleet.groups.items()),
            metricsource()]


@pytest.mark.parametrize("index", range(FLEETS))
async def test_every_subject_of_the_service_agrees_with_its_check(
        clean_servers: Servers, tmp_path: Path, index: int) -> None:
    fleet = _drawn(FLEETS)[index]
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    system = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    # The fleets' AccessPolicies are written in "ns": an admin namespace here, so every
    # target is theirs to govern (authority has its own tests).
    system.settings = msgspec.structs.replace(system.settings, admin_namespaces="ns")
    system.write("inventory.yaml", *_manifests(fleet))
    if fleet.monitor:
        system.write("monitor.yaml", *fleet.monitor)
    system.write("inherited.yaml", *fleet.inherited)
    await system.start()
    try:
        await system.settle()
        exact: Callable[[str], bool] = lambda kind: not filtered_somewhere(  # noqa: E731
            fleet.monitor, fleet.inherited, kind)
        found: list[str] = []
        for username, groups in PRINCIPALS:
            live = Live(system, username, list(groups))
            compare(live, exact, username)  # records the questions
            await live.fetch()
            found += compare(live, exact, f"{username} {groups}")
        assert not found, "\n".join([repr(fleet), *found[:8]])
    finally:
        await system.close()
