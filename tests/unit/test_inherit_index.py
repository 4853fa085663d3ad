"""The incremental index: which targets an event touches, targets appearing and vanishing,
``reach`` and ``simulate``."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from clearance_api.errors import BadRequest
from clearance_core.inherit import hierarchy
from clearance_core.inherit.accesspolicy import CompiledAccessPolicy
from clearance_core.inherit.hierarchy import FLEET
from clearance_core.inherit.index import (
    ClusterChanged,
    ClusterSetChanged,
    InheritanceIndex,
    PolicyApplied,
    PolicyRemoved,
)
from clearance_core.inherit.merge import EffectivePolicy
from clearance_core.questions.simulate import simulate
from tests.unit.accesspolicies import (
    CLUSTERSET_LABEL,
    access_policy,
    block,
    compiled,
    fleet_index,
    rule,
    sources,
)

SRE = rule(groups=["sre"])
DEV = rule(groups=["dev"])
C1, C2, C3 = (hierarchy.cluster(n) for n in ("c1", "c2", "c3"))
PROD = hierarchy.cluster_set("prod")
C1_APP, C1_WEB, C2_APP = (hierarchy.namespace("c1", "app"), hierarchy.namespace("c1", "web"),
                          hierarchy.namespace("c2", "app"))


def pol(name: str, target: Any, **spec: Any) -> dict[str, Any]:
    return access_policy(name, namespace="t", target=target, **spec)


def applied(obj: dict[str, Any]) -> PolicyApplied:
    return PolicyApplied(compiled(obj)[0])


@pytest.fixture
def index() -> InheritanceIndex:
    return fleet_index(
        pol("c1app", ("Namespace", "c1", "app"), rules={"a": DEV}),
        pol("c1web", ("Namespace", "c1", "web"), rules={"w": DEV}),
        pol("c2app", ("Namespace", "c2", "app"), rules={"a": DEV}),
        clusters={"c1": "prod", "c2": "prod", "c3": None}, sets=("prod",))


def test_materialised_targets_are_the_fleet_sets_clusters_and_named_namespaces(
        index: InheritanceIndex) -> None:
    assert index.targets() == [FLEET, PROD, C1, C2, C3, C1_APP, C1_WEB, C2_APP]


@pytest.mark.parametrize(("target", "expected"), [
    ("Fleet", {FLEET, PROD, C1, C2, C3, C1_APP, C1_WEB, C2_APP}),
    (("ClusterSet", "prod"), {PROD, C1, C2, C1_APP, C1_WEB, C2_APP}),
    (("Cluster", "c1"), {C1, C1_APP, C1_WEB}),
    (("Namespace", "c1", "app"), {C1_APP}),
    (("Namespace", "c3", "new"), {hierarchy.namespace("c3", "new")}),  # appears
    (("Namespace", "gone", "x"), set()),  # its cluster does not exist
])
def test_a_policy_change_touches_exactly_the_targets_below_its_target(
        index: InheritanceIndex, target: Any, expected: set[Any]) -> None:
    event = applied(pol("new", target, rules={"x": SRE}))
    assert index.affected(event) == expected
    change = index.apply(event)
    assert set(change.effective) | change.removed == expected


def test_deleting_the_last_policy_of_a_namespace_removes_the_target(
        index: InheritanceIndex) -> None:
    change = index.apply(PolicyRemoved("t/c1web"))
    assert change.removed == {C1_WEB} and change.effective == {}
    assert C1_WEB not in index.targets()
    # It still exists (its cluster does): it now reads its cluster's policy.
    assert sources(index, C1_WEB) == sources(index, C1) == {}
    assert "t/c1web" in change.policies


def test_a_cluster_label_change_moves_it_between_cluster_sets() -> None:
    index = fleet_index(pol("prod", ("ClusterSet", "prod"), defaults=block({"p": SRE}, "merge")),
                        pol("dev", ("ClusterSet", "dev"), defaults=block({"d": DEV}, "merge")),
                        pol("c1app", ("Namespace", "c1", "app"), rules={"a": DEV}),
                        clusters={"c1": "prod"}, sets=("prod", "dev"))
    assert sources(index, C1_APP) == {"a": "t/c1app:rules", "p": "t/prod:defaults"}
    event = ClusterChanged("c1", {CLUSTERSET_LABEL: "dev", "env": "x"})
    assert index.affected(event) == {C1, C1_APP}
    change = index.apply(event)
    assert sources(index, C1_APP) == {"a": "t/c1app:rules", "d": "t/dev:defaults"}
    assert {"t/prod", "t/dev", "t/c1app"} <= change.policies
    # Other labels changing moves nothing.
    assert index.affected(ClusterChanged("c1", {CLUSTERSET_LABEL: "dev", "env": "y"})) == \
        set()


def test_a_cluster_set_appearing_and_vanishing_recomputes_its_members() -> None:
    index = fleet_index(pol("prod", ("ClusterSet", "prod"), defaults=block({"p": SRE}, "merge")),
                        pol("c1app", ("Namespace", "c1", "app"), rules={"a": DEV}),
                        clusters={"c1": "prod", "c2": None})
    assert sources(index, C1) == {}
    change = index.apply(ClusterSetChanged("prod", present=True))
    assert set(change.effective) == {PROD, C1, C1_APP}
    assert sources(index, C1) == {"p": "t/prod:defaults"}
    assert sources(index, C1_APP) == {"a": "t/c1app:rules", "p": "t/prod:defaults"}
    change = index.apply(ClusterSetChanged("prod", present=False))
    assert change.removed == {PROD} and set(change.effective) == {C1, C1_APP}
    assert sources(index, C1) == {}
    assert sources(index, C1_APP) == {"a": "t/c1app:rules"}
    assert index.effective_of(PROD) is None


def test_a_cluster_vanishing_takes_its_namespace_targets_and_returns_them(
        index: InheritanceIndex) -> None:
    change = index.apply(ClusterChanged("c1", None))
    assert change.removed == {C1, C1_APP, C1_WEB}
    assert index.effective_of(C1_APP) is None  # a namespace exists iff its cluster does
    assert "t/c1app" in change.policies
    change = index.apply(ClusterChanged("c1", {}))
    assert set(change.effective) == {C1, C1_APP, C1_WEB}
    assert sources(index, C1_APP) == {"a": "t/c1app:rules"}


def test_a_policy_moving_its_target_recomputes_both_places(index: InheritanceIndex) -> None:
    change = index.apply(applied(pol("c1app", ("Namespace", "c3", "app"), rules={"a": DEV})))
    assert change.removed == {C1_APP}
    assert set(change.effective) == {hierarchy.namespace("c3", "app")}


def test_reach_lists_every_target_holding_the_policys_rules() -> None:
    index = fleet_index(
        pol("fleet", "Fleet", defaults=block({"a": SRE, "b": SRE}, "merge")),
        pol("c1", ("Cluster", "c1"), rules={"a": DEV}),
        clusters={"c1": None, "c2": None})
    assert index.reach("t/fleet") == [FLEET, C1, C2]
    assert index.reach("t/fleet", "a") == [FLEET, C2]
    assert index.reach("t/c1", "a") == [C1]
    assert index.reach("t/nobody") == []


def test_simulate_apply_reports_diffs_and_status_without_mutating() -> None:
    index = fleet_index(pol("fleet", "Fleet", defaults=block({"a": SRE}, "merge")),
                        clusters={"c1": None, "c2": None})
    before = {t: index.effective_of(t) for t in index.targets()}
    result = simulate(index, pol("c1", ("Cluster", "c1"),
                                 overrides=block({"a": DEV, "b": DEV}, "merge")), "apply")
    assert {t: index.effective_of(t) for t in index.targets()} == before
    assert [d.target for d in result.targets] == [C1]
    diff = result.targets[0]
    assert diff.added == {"b": {"rule": DEV, "source": "t/c1", "block": "overrides"}}
    assert diff.changed == {"a": {"rule": DEV, "source": "t/c1", "block": "overrides"}}
    assert diff.removed == []
    assert result.status["t/c1"].before == []
    assert [c.reason for c in result.status["t/c1"].after] == ["Accepted", "Enforced"]
    fleet = result.status["t/fleet"]
    assert (fleet.before[1].reason, fleet.after[1].reason) == ("Enforced",
                                                              "PartiallyEnforced")


def test_simulate_delete_and_apply_of_an_invalid_policy_withdraw_it() -> None:
    index = fleet_index(pol("c1", ("Cluster", "c1"), rules={"a": DEV}))
    deleted = simulate(index, pol("c1", ("Cluster", "c1")), "delete")
    assert [(d.target, d.removed) for d in deleted.targets] == [(C1, ["a"])]
    broken = pol("c1", ("Cluster", "c1"), defaults=block({"a": DEV}, when="self.rules +"))
    invalid = simulate(index, broken, "apply")
    assert [(d.target, d.removed) for d in invalid.targets] == [(C1, ["a"])]
    after = invalid.status["t/c1"].after
    assert after[0].reason == "Invalid" and "does not compile" in after[0].message
    with pytest.raises(BadRequest):
        simulate(index, {"metadata": {}}, "apply")


def test_compiled_policies_and_effective_policies_survive_the_store(
        index: InheritanceIndex) -> None:
    # The compiler stores both msgpack-encoded and the decision service reads them back.
    for policy in index.policies.values():
        stored = msgspec.msgpack.encode(policy)
        assert msgspec.msgpack.decode(stored, type=CompiledAccessPolicy) == policy
    for eff in index.effective.values():
        stored = msgspec.msgpack.encode(eff)
        assert msgspec.msgpack.decode(stored, type=EffectivePolicy) == eff
