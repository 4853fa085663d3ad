"""RFC 0009 conditions of AccessPolicies: Accepted and Enforced, with who won and why."""

from __future__ import annotations

from typing import Any

from clearance_core.inherit_index import ClusterChanged, PolicyApplied
from clearance_core.inherit_status import invalid_conditions, status_of
from clearance_core.wire import StatusCondition
from tests.unit.accesspolicies import access_policy, block, compiled, fleet_index, rule

SRE = rule(groups=["sre"])
DEV = rule(groups=["dev"])


def conditions(*objs: dict[str, Any], key: str, **kw: Any) -> dict[str, StatusCondition]:
    found = status_of(fleet_index(*objs, **kw), key)
    assert found is not None
    return {c.type: c for c in found}


def fleet(**spec: Any) -> dict[str, Any]:
    return access_policy("fleet", namespace="sec", target="Fleet", **spec)


def on_c1(**spec: Any) -> dict[str, Any]:
    return access_policy("c1", namespace="ops", target=("Cluster", "c1"), **spec)


def on_app(**spec: Any) -> dict[str, Any]:
    return access_policy("app", namespace="app", target=("Namespace", "c1", "app"), **spec)


def test_a_sole_policy_is_accepted_and_enforced_listing_its_defaults() -> None:
    found = conditions(fleet(rules={"a": SRE, "b": DEV}), key="sec/fleet")
    assert (found["Accepted"].status, found["Accepted"].reason) == ("True", "Accepted")
    enforced = found["Enforced"]
    assert (enforced.status, enforced.reason) == ("True", "Enforced")
    assert enforced.message == ("Policy has been successfully enforced. The following "
                                "defaults have been added by sec/fleet: a, b")


def test_some_rules_overridden_somewhere_is_partially_enforced_naming_the_winner() -> None:
    # c1's rule b beats the Fleet's default b on c1 only; c2 keeps the Fleet's rules.
    objs = (fleet(defaults=block({"a": SRE, "b": SRE}, "merge")),
            on_c1(rules={"b": DEV}))
    found = conditions(*objs, key="sec/fleet", clusters={"c1": None, "c2": None})
    enforced = found["Enforced"]
    assert (enforced.status, enforced.reason) == ("True", "PartiallyEnforced")
    assert "b (overridden by ops/c1)" in enforced.message
    assert "defaults have been added by sec/fleet: a, b" in enforced.message


def test_every_rule_overridden_everywhere_is_overridden_false() -> None:
    objs = (on_c1(rules={"a": SRE}),
            fleet(overrides=block({"x": DEV})))
    found = conditions(*objs, key="ops/c1")
    enforced = found["Enforced"]
    assert (enforced.status, enforced.reason) == ("False", "Overridden")
    assert enforced.message.startswith("Policy has been overridden by sec/fleet")


def test_an_atomic_default_not_applied_names_the_lower_policies() -> None:
    objs = (fleet(rules={"a": SRE}), on_c1(rules={"b": DEV}))
    found = conditions(*objs, key="sec/fleet", clusters={"c1": None})
    # The Fleet itself holds a; c1 does not: partial, with the lower policy named.
    enforced = found["Enforced"]
    assert enforced.reason == "PartiallyEnforced"
    assert "a (not applied: lower policies set rules (ops/c1))" in enforced.message


def test_a_when_runtime_error_makes_enforced_unknown() -> None:
    objs = (on_c1(overrides=block({"a": SRE}, "merge", "self.rules.nope.effect == 'Deny'")),)
    found = conditions(*objs, key="ops/c1")
    enforced = found["Enforced"]
    assert (enforced.status, enforced.reason) == ("Unknown", "Unknown")
    assert "Cluster c1" in enforced.message and "nope" in enforced.message


def test_a_when_that_is_false_everywhere_overrides_nothing_and_says_why() -> None:
    objs = (on_c1(overrides=block({"a": SRE}, "merge", "size(self.rules) > 5")),)
    enforced = conditions(*objs, key="ops/c1")["Enforced"]
    assert enforced.reason == "Overridden"
    assert "not applied because its when condition is false" in enforced.message


def test_an_unset_of_an_override_is_reported_as_having_no_effect() -> None:
    objs = (fleet(overrides=block({"a": SRE}, "merge")), on_app(rules={"c": DEV},
                                                                unset=["a"]))
    enforced = conditions(*objs, key="app/app")["Enforced"]
    assert enforced.reason == "Enforced"
    assert "unset of a has no effect: it is an override of sec/fleet" in enforced.message


def test_an_unset_default_is_overridden_by_the_policy_that_unset_it() -> None:
    objs = (fleet(defaults=block({"a": SRE, "b": SRE}, "merge")),
            on_app(rules={"c": DEV}, unset=["a"]))
    enforced = conditions(*objs, key="sec/fleet")["Enforced"]
    assert enforced.reason == "PartiallyEnforced"
    assert "a (unset by app/app)" in enforced.message


def test_unset_forbidden_is_said_in_the_status() -> None:
    objs = (fleet(defaults=block({"a": SRE}, "merge")), on_app(rules={"c": DEV},
                                                               unset=["a"]))
    enforced = conditions(*objs, key="app/app", allow_unset=False)["Enforced"]
    assert "spec.unset is ignored" in enforced.message
    assert "CLEARANCE_ALLOW_UNSET=false" in enforced.message
    assert conditions(*objs, key="sec/fleet", allow_unset=False)["Enforced"].reason == \
        "Enforced"


def test_a_policy_whose_target_does_not_exist_is_not_accepted_and_takes_no_part() -> None:
    index = fleet_index(on_app(rules={"c": DEV}), clusters={"c2": None})
    found = status_of(index, "app/app")
    assert found == [StatusCondition(
        type="Accepted", status="False", reason="TargetNotFound",
        message="Policy target Namespace c1/app was not found")]
    assert index.reach("app/app") == []
    # The cluster appears: the policy is accepted and its rules take effect.
    index.apply(ClusterChanged("c1", {}))
    found = status_of(index, "app/app")
    assert found is not None and found[0].reason == "Accepted"
    assert [str(t) for t in index.reach("app/app")] == ["Namespace c1/app"]


def test_an_invalid_policy_is_not_accepted_with_the_reason() -> None:
    assert invalid_conditions("spec.defaults.when: does not compile") == [StatusCondition(
        type="Accepted", status="False", reason="Invalid",
        message="Policy is invalid: spec.defaults.when: does not compile")]


def test_messages_stay_bounded_over_many_rules() -> None:
    rules = {f"r{i:03}": SRE for i in range(300)}
    index = fleet_index(fleet(defaults=block(rules, "merge")), on_c1(rules={"x": DEV}))
    index.apply(PolicyApplied(compiled(on_c1(rules={f"r{i:03}": DEV for i in range(300)}))[0]))
    found = status_of(index, "sec/fleet")
    assert found is not None
    assert "and 280 more" in found[1].message
    assert len(found[1].message) < 2000


def test_messages_stay_bounded_over_many_winners() -> None:
    """A Fleet default that 300 namespace intents replace: the first 20 causes (in order)
    and how many more, the first 20 winners and how many more — never all 300."""
    intents = [access_policy(f"n{i:03}", namespace="teams", target=("Namespace", "c1", f"n{i}"),
                             rules={"a": DEV}) for i in range(300)]
    found = conditions(fleet(defaults=block({"a": SRE, "b": SRE}, "merge")), *intents,
                       key="sec/fleet")["Enforced"]
    assert (found.status, found.reason) == ("True", "PartiallyEnforced")
    assert found.message.startswith(
        "Policy has been partially enforced. Rules not in force everywhere: "
        "a (overridden by teams/n000); a (overridden by teams/n001); ")
    assert "a (overridden by teams/n019) and 280 more; the following defaults" in \
        found.message
    assert len(found.message) < 2000
