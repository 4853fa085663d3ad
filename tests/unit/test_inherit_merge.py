"""Effective policies of inherited AccessPolicies (README: Inherited), read as documentation.

The RFC 0009 examples (A1 … F2) are re-expressed with AccessRules: the "higher" policy
targets cluster ``c1``, the "lower" one the namespace ``c1/app``, and the table gives the
effective rules of ``c1/app`` as ``rule -> source:block``.
"""

from __future__ import annotations

from typing import Any

import pytest

from clearance_core.inherit import hierarchy
from clearance_core.inherit.hierarchy import FLEET
from clearance_core.inherit.merge import subjects_changed
from tests.unit.accesspolicies import access_policy, block, fleet_index, rule, sources

APP = hierarchy.namespace("c1", "app")
HI, LO = "platform/higher", "app/lower"

SRE = rule(groups=["sre"])
DEV = rule(groups=["dev"])
METRICS_OFF = rule(groups=["dev"], view=True, metrics=False)
METRICS_ON = rule(groups=["dev"], view=True, metrics=True)
METRICS_ON_PODS = rule(groups=["dev"], view=True, metrics=True,
                       resources=[{"type": "pods", "visibility": "filtered",
                                   "filters": {"namespaces": {"allowed": ["app"]}}}])
GUARD = "has(self.rules.metrics) && self.rules.metrics.permissions.viewMetrics == true"


def higher(**spec: Any) -> dict[str, Any]:
    return access_policy("higher", namespace="platform", target=("Cluster", "c1"), **spec)


def lower(**spec: Any) -> dict[str, Any]:
    return access_policy("lower", namespace="app", target=("Namespace", "c1", "app"), **spec)


RFC_EXAMPLES = [
    pytest.param(  # A1: a default policy replaced entirely by a lower one
        higher(defaults=block({"a": SRE, "b": DEV})), lower(rules={"c": DEV}),
        {"c": f"{LO}:rules"}, id="A1-atomic-default-replaced"),
    pytest.param(  # B1: default rules merged into the lower policy, without conflict
        higher(defaults=block({"a": SRE, "b": SRE}, "merge")), lower(rules={"c": DEV}),
        {"a": f"{HI}:defaults", "b": f"{HI}:defaults", "c": f"{LO}:rules"},
        id="B1-merge-default-no-conflict"),
    pytest.param(  # B2: with conflict, the lower rule of the same name wins
        higher(defaults=block({"a": SRE, "b": SRE}, "merge")),
        lower(rules={"a": DEV, "c": DEV}),
        {"a": f"{LO}:rules", "b": f"{HI}:defaults", "c": f"{LO}:rules"},
        id="B2-merge-default-conflict"),
    pytest.param(  # C1: an override replacing the lower policy entirely
        higher(overrides=block({"a": SRE})), lower(rules={"b": DEV, "c": DEV}),
        {"a": f"{HI}:overrides"}, id="C1-atomic-override"),
    pytest.param(  # D1: override rules merged into the lower policy, without conflict
        higher(overrides=block({"a": SRE}, "merge")), lower(rules={"b": DEV}),
        {"a": f"{HI}:overrides", "b": f"{LO}:rules"}, id="D1-merge-override-no-conflict"),
    pytest.param(  # D2: with conflict, the higher rule of the same name wins
        higher(overrides=block({"a": SRE}, "merge")), lower(rules={"a": DEV, "b": DEV}),
        {"a": f"{HI}:overrides", "b": f"{LO}:rules"}, id="D2-merge-override-conflict"),
    pytest.param(  # E1: a constraint the lower policy complies with: no override
        higher(overrides=block({"metrics": METRICS_OFF}, "merge", GUARD)),
        lower(rules={"metrics": METRICS_OFF}),
        {"metrics": f"{LO}:rules"}, id="E1-constraint-compliant"),
    pytest.param(  # E2: the lower policy violates the constraint: the override applies
        higher(overrides=block({"metrics": METRICS_OFF}, "merge", GUARD)),
        lower(rules={"metrics": METRICS_ON}),
        {"metrics": f"{HI}:overrides"}, id="E2-constraint-violated"),
    pytest.param(  # F1: a lower policy unsets one merged default
        higher(defaults=block({"a": SRE, "b": SRE}, "merge")),
        lower(rules={"c": DEV}, unset=["a"]),
        {"b": f"{HI}:defaults", "c": f"{LO}:rules"}, id="F1-unset-default"),
    pytest.param(  # F2: unsetting an override has no effect
        higher(overrides=block({"a": SRE, "b": SRE}, "merge")),
        lower(rules={"c": DEV}, unset=["a"]),
        {"a": f"{HI}:overrides", "b": f"{HI}:overrides", "c": f"{LO}:rules"},
        id="F2-unset-override-ignored"),
]


@pytest.mark.parametrize(("high", "low", "expected"), RFC_EXAMPLES)
def test_rfc_0009_examples(high: dict[str, Any], low: dict[str, Any],
                           expected: dict[str, str]) -> None:
    assert sources(fleet_index(high, low), APP) == expected


def test_e3_an_override_replaces_the_whole_rule_so_lower_resource_filters_are_lost() -> None:
    # RFC E3, the "merge granularity problem": the rule is the unit, so the lower rule's
    # pod filter goes with the viewMetrics it violated.
    index = fleet_index(higher(overrides=block({"metrics": METRICS_OFF}, "merge", GUARD)),
                        lower(rules={"metrics": METRICS_ON_PODS}))
    eff = index.effective_of(APP)
    assert eff is not None
    assert eff.rules["metrics"].rule.raw == METRICS_OFF
    assert eff.rules["metrics"].rule.filters == ()


def test_without_a_lower_policy_the_higher_defaults_apply_below() -> None:
    index = fleet_index(higher(defaults=block({"a": SRE, "b": DEV})))
    assert sources(index, APP) == {"a": f"{HI}:defaults", "b": f"{HI}:defaults"}
    assert sources(index, hierarchy.cluster("c1")) == sources(index, APP)
    assert sources(index, FLEET) == {}


# Same level: the older policy is higher; a missing timestamp is newest; then ns/name.

OLD, NEW = "2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z"


def at_c1(name: str, created: str | None, **spec: Any) -> dict[str, Any]:
    return access_policy(name, namespace="t", target=("Cluster", "c1"), created=created, **spec)


@pytest.mark.parametrize(("first", "second", "expected"), [
    pytest.param(at_c1("old", OLD, rules={"a": SRE}), at_c1("new", NEW, rules={"b": DEV}),
                 {"b": "t/new:rules"}, id="bare-rules-newer-wins-entirely"),
    pytest.param(at_c1("old", OLD, overrides=block({"a": SRE})),
                 at_c1("new", NEW, overrides=block({"b": DEV})),
                 {"a": "t/old:overrides"}, id="atomic-overrides-older-wins-entirely"),
    pytest.param(at_c1("old", OLD, overrides=block({"a": SRE}, "merge")),
                 at_c1("new", NEW, overrides=block({"a": DEV, "b": DEV}, "merge")),
                 {"a": "t/old:overrides", "b": "t/new:overrides"},
                 id="merge-overrides-older-wins-per-rule"),
    pytest.param(at_c1("stamped", OLD, rules={"a": SRE}), at_c1("unstamped", None,
                                                                 rules={"b": DEV}),
                 {"b": "t/unstamped:rules"}, id="missing-timestamp-is-newest"),
    pytest.param(at_c1("x", OLD, overrides=block({"a": SRE})),
                 at_c1("y", OLD, overrides=block({"a": DEV})),
                 {"a": "t/x:overrides"}, id="equal-timestamps-ns-name-ascending-is-higher"),
    # The older policy's block decides how the two combine: an older atomic default over a
    # newer merge override changes nothing (the override's rules are already there) ...
    pytest.param(at_c1("old", OLD, rules={"a": SRE}),
                 at_c1("new", NEW, overrides=block({"b": DEV}, "merge")),
                 {"b": "t/new:overrides"}, id="older-bare-newer-merge-override"),
    # ... while in the other creation order the older override merges into the default.
    pytest.param(at_c1("old", OLD, overrides=block({"b": DEV}, "merge")),
                 at_c1("new", NEW, rules={"a": SRE}),
                 {"a": "t/new:rules", "b": "t/old:overrides"},
                 id="older-merge-override-newer-bare"),
])
def test_same_level_order(first: dict[str, Any], second: dict[str, Any],
                          expected: dict[str, str]) -> None:
    assert sources(fleet_index(first, second), hierarchy.cluster("c1")) == expected
    assert sources(fleet_index(second, first), hierarchy.cluster("c1")) == expected


def test_a_chain_fleet_override_over_clusterset_merge_default_over_namespace_intent() -> None:
    index = fleet_index(
        access_policy("audit", namespace="sec", target="Fleet",
                      overrides=block({"audit": rule(users=["auditor"])}, "merge")),
        access_policy("prod", namespace="ops", target=("ClusterSet", "prod"),
                      defaults=block({"sre": SRE, "team": rule(groups=["nobody"])}, "merge")),
        access_policy("pay", namespace="pay", target=("Namespace", "c1", "payments"),
                      rules={"team": rule(groups=["payments"])}),
        clusters={"c1": "prod", "c2": None}, sets=("prod",))
    assert sources(index, hierarchy.namespace("c1", "payments")) == {
        "audit": "sec/audit:overrides", "sre": "ops/prod:defaults", "team": "pay/pay:rules"}
    # The cluster itself (and every namespace no policy names) has the set's defaults.
    assert sources(index, hierarchy.cluster("c1")) == {
        "audit": "sec/audit:overrides", "sre": "ops/prod:defaults",
        "team": "ops/prod:defaults"}
    assert sources(index, hierarchy.namespace("c1", "other")) == sources(
        index, hierarchy.cluster("c1"))
    # A cluster outside the set only gets the Fleet's override.
    assert sources(index, hierarchy.cluster("c2")) == {"audit": "sec/audit:overrides"}
    eff = index.effective_of(hierarchy.namespace("c1", "payments"))
    assert eff is not None
    assert eff.policies == ("sec/audit", "ops/prod", "pay/pay")  # highest first
    assert eff.affected_by == ["sec/audit", "ops/prod", "pay/pay"]


def test_an_atomic_fleet_override_wipes_every_lower_rule() -> None:
    index = fleet_index(
        access_policy("lockdown", namespace="sec", overrides=block({"only": SRE})),
        access_policy("prod", namespace="ops", target=("ClusterSet", "prod"),
                      defaults=block({"sre": SRE}, "merge")),
        access_policy("pay", namespace="pay", target=("Namespace", "c1", "payments"),
                      rules={"team": DEV}),
        clusters={"c1": "prod"}, sets=("prod",))
    for target in index.targets():
        assert sources(index, target) == {"only": "sec/lockdown:overrides"}


def test_both_blocks_in_one_policy_defaults_first_then_overrides() -> None:
    index = fleet_index(
        higher(defaults=block({"a": SRE, "b": SRE}, "merge"),
               overrides=block({"c": SRE, "d": SRE}, "merge")),
        lower(rules={"a": DEV, "c": DEV, "e": DEV}))
    assert sources(index, APP) == {
        "a": f"{LO}:rules", "b": f"{HI}:defaults", "c": f"{HI}:overrides",
        "d": f"{HI}:overrides", "e": f"{LO}:rules"}


def test_a_policy_overriding_its_own_default_holds_the_override() -> None:
    index = fleet_index(higher(defaults=block({"a": DEV}), overrides=block({"a": SRE},
                                                                            "merge")))
    eff = index.effective_of(APP)
    assert eff is not None
    assert eff.rules["a"].rule.raw == SRE and eff.rules["a"].block == "overrides"


def test_unset_accumulates_across_lower_policies_and_never_drops_an_override() -> None:
    index = fleet_index(
        access_policy("fleet", namespace="sec", target="Fleet",
                      defaults=block({"a": SRE, "b": SRE, "c": SRE}, "merge"),
                      overrides=block({"o": SRE}, "merge")),
        access_policy("cluster", namespace="ops", target=("Cluster", "c1"),
                      defaults=block({"x": DEV}, "merge"), unset=["a", "o"]),
        lower(rules={"y": DEV}, unset=["b"]))
    assert sources(index, APP) == {"c": "sec/fleet:defaults", "o": "sec/fleet:overrides",
                                   "x": "ops/cluster:defaults", "y": f"{LO}:rules"}
    eff = index.effective_of(APP)
    assert eff is not None and eff.unset == ("b", "a", "o")


def test_unset_forbidden_system_wide_is_ignored() -> None:
    high = higher(defaults=block({"a": SRE, "b": SRE}, "merge"))
    low = lower(rules={"c": DEV}, unset=["a"])
    index = fleet_index(high, low, allow_unset=False)
    assert sources(index, APP) == {"a": f"{HI}:defaults", "b": f"{HI}:defaults",
                                   "c": f"{LO}:rules"}
    eff = index.effective_of(APP)
    assert eff is not None and eff.unset_ignored == (LO,)


def test_when_sees_the_accumulated_policy_including_unset() -> None:
    index = fleet_index(
        higher(overrides=block({"guard": SRE}, "merge", "'guard' in self.unset")),
        lower(rules={"c": DEV}, unset=["guard"]))
    # The override applies because the lower policy tried to unset it.
    assert sources(index, APP) == {"c": f"{LO}:rules", "guard": f"{HI}:overrides"}


def test_a_when_runtime_error_counts_as_false_and_is_recorded() -> None:
    index = fleet_index(higher(overrides=block({"a": SRE}, "merge",
                                               "self.rules.missing.effect == 'Deny'")),
                        lower(rules={"b": DEV}))
    assert sources(index, APP) == {"b": f"{LO}:rules"}
    eff = index.effective_of(APP)
    assert eff is not None
    assert HI in eff.errors and "missing" in eff.errors[HI]


def test_effective_reply_shape() -> None:
    index = fleet_index(higher(defaults=block({"a": SRE})))
    eff = index.effective_of(APP)
    assert eff is not None
    assert eff.wire() == {
        "target": {"kind": "Namespace", "name": "app", "cluster": "c1"},
        "rules": {"a": {"rule": SRE, "source": HI, "block": "defaults"}},
        "policies": [HI], "affected_by": [HI]}
    assert index.effective_of(hierarchy.cluster("nowhere")) is None


def test_subjects_changed_names_only_the_subjects_of_rules_that_differ() -> None:
    before = fleet_index(higher(rules={"a": SRE, "b": rule(users=["bob"])}))
    after = fleet_index(higher(rules={"a": SRE, "c": rule(
        users=["carol"], groups=["qa"])}))
    users, groups = subjects_changed(before.effective_of(APP), after.effective_of(APP))
    assert (users, groups) == ({"bob", "carol"}, {"qa"})
    assert subjects_changed(None, after.effective_of(APP)) == ({"carol"}, {"sre", "qa"})
    assert subjects_changed(before.effective_of(APP), before.effective_of(APP)) == (set(),
                                                                                     set())
