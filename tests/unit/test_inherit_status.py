"""RFC 0009 conditions of AccessPolicies: Accepted and Enforced, with who won and why."""

from __future__ import annotations

from typing import Any

import pytest

from clearance_api.wire import StatusCondition
from clearance_core.inherit.index import ClusterChanged, PolicyApplied
from clearance_core.inherit.status import invalid_conditions, status_of
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
    assert "a (not applied: its rules (atomic defaults) were replaced as a whole by the " \
        "rules of ops/c1)" in enforced.message


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
    assert enforced.message == "Policy is not in force on any target: a (not applied: " \
        "spec.overrides.when is false)"


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


# Each rule that is not in force names its real cause ------------------------------------

def on_mid(**spec: Any) -> dict[str, Any]:
    """A second Cluster policy, above on_c1 (which, without a timestamp, is newer)."""
    return access_policy("mid", namespace="mid", target=("Cluster", "c1"),
                         created="2030-01-01T00:00:00Z", **spec)


NEVER = "size(self.rules) > 5"
# (policy whose Enforced is read, its reason, what its message must say, what it must not)
CAUSES = [
    pytest.param(  # an override whose when is false, over a lower rule of the same name
        (on_c1(overrides=block({"a": SRE}, "merge", NEVER)), on_app(rules={"a": DEV})),
        "ops/c1", "Overridden",
        ["Policy is not in force on any target: a (not applied: spec.overrides.when is "
         "false)"],
        ["overridden by"], id="override-when-false-over-a-lower-rule"),
    pytest.param(  # the same on defaults: the lower rule did not win, the block never ran
        (on_c1(defaults=block({"a": SRE}, "merge", NEVER)), on_app(rules={"a": DEV})),
        "ops/c1", "Overridden", ["a (not applied: spec.defaults.when is false)"],
        ["overridden by"], id="defaults-when-false-over-a-lower-rule"),
    pytest.param(  # an atomic default block gives way whole, same-named rules included
        (on_c1(defaults=block({"a": SRE, "b": SRE})), on_app(rules={"a": DEV})),
        "ops/c1", "PartiallyEnforced",
        ["a, b (not applied: its atomic defaults were replaced as a whole by the rules of "
         "app/app)"], ["overridden"], id="atomic-defaults-not-applied"),
    pytest.param(  # bare rules are an atomic default block: said so
        (on_c1(rules={"a": SRE}), on_app(rules={"a": DEV, "c": DEV})),
        "ops/c1", "PartiallyEnforced",
        ["a (not applied: its rules (atomic defaults) were replaced as a whole by the rules "
         "of app/app)"], ["overridden"], id="bare-rules-not-applied"),
    pytest.param(  # its own atomic overrides replace its own defaults: never "by itself"
        (on_c1(defaults=block({"a": SRE}, "merge"), overrides=block({"b": SRE})),),
        "ops/c1", "PartiallyEnforced",
        ["a (replaced by its own atomic overrides)",
         "the following overrides have been applied by ops/c1: b"],
        ["overridden by ops/c1"], id="own-atomic-overrides"),
    pytest.param(  # ... and a lower rule its own default yielded to, then replaced too
        (on_c1(defaults=block({"a": SRE}, "merge"), overrides=block({"b": SRE})),
         on_app(rules={"a": DEV})),
        "ops/c1", "PartiallyEnforced", ["a (replaced by its own atomic overrides)"],
        ["overridden by ops/c1"], id="own-atomic-overrides-over-a-lower-rule"),
    pytest.param(  # the lower rule it replaced says who did
        (on_c1(defaults=block({"a": SRE}, "merge"), overrides=block({"b": SRE})),
         on_app(rules={"a": DEV})),
        "app/app", "Overridden", ["Policy has been overridden by ops/c1: a (overridden by "
                                  "ops/c1)"], [], id="lower-rule-under-atomic-overrides"),
    pytest.param(  # a default both lower policies unset: both named
        (fleet(defaults=block({"a": SRE, "b": SRE}, "merge")), on_c1(unset=["a"]),
         on_app(rules={"c": DEV}, unset=["a"])),
        "sec/fleet", "PartiallyEnforced", ["a (unset by app/app, ops/c1)"], [],
        id="unset-by-two"),
    pytest.param(  # an unset of a default a lower rule already replaces is the rule's doing
        (fleet(defaults=block({"a": SRE}, "merge")), on_c1(rules={"a": DEV}, unset=["a"])),
        "sec/fleet", "PartiallyEnforced", ["a (overridden by ops/c1)"], ["unset by"],
        id="unset-of-a-default-a-lower-rule-replaces"),
    pytest.param(  # an unset of a default an atomic block never adds changes nothing
        (fleet(defaults=block({"a": SRE, "b": SRE})), on_c1(rules={"c": DEV}, unset=["a"])),
        "sec/fleet", "PartiallyEnforced",
        ["a, b (not applied: its atomic defaults were replaced as a whole by the rules of "
         "ops/c1)"], ["unset by"], id="unset-under-atomic-defaults"),
    pytest.param(  # when false on one target, overridden on another: both said, and the
        # policy is not "overridden by" anyone as a whole
        (on_c1(overrides=block({"a": SRE}, "merge", "has(self.rules.c)")),
         on_mid(overrides=block({"a": DEV}, "merge")), on_app(rules={"c": DEV})),
        "ops/c1", "Overridden",
        ["Policy is not in force on any target: ",
         "a (not applied: spec.overrides.when is false)", "a (overridden by mid/mid)"],
        ["Policy has been overridden"], id="when-false-and-overridden"),
]


@pytest.mark.parametrize(("objs", "key", "reason", "says", "never"), CAUSES)
def test_each_rule_not_in_force_names_its_real_cause(
        objs: tuple[dict[str, Any], ...], key: str, reason: str, says: list[str],
        never: list[str]) -> None:
    enforced = conditions(*objs, key=key)["Enforced"]
    assert enforced.reason == reason, enforced.message
    for text in says:
        assert text in enforced.message
    for text in never:
        assert text not in enforced.message


def test_a_rule_only_when_false_is_not_in_force_there_and_says_so() -> None:
    """RFC 0009's E2 on two namespaces: the constraint applies where a lower policy breaks
    it and is not applied on the cluster itself: partially enforced, with the cause."""
    guard = "has(self.rules.m) && self.rules.m.permissions.viewMetrics == true"
    objs = (on_c1(overrides=block({"m": DEV}, "merge", guard)),
            on_app(rules={"m": rule(groups=["dev"], metrics=True)}))
    enforced = conditions(*objs, key="ops/c1")["Enforced"]
    assert (enforced.status, enforced.reason) == ("True", "PartiallyEnforced")
    assert enforced.message == (
        "Policy has been partially enforced. Rules not in force everywhere: m (not applied: "
        "spec.overrides.when is false); the following overrides have been applied by "
        "ops/c1: m")


IDLE = "has no effect: without it, no higher policy's defaults would add that rule on " \
    "any target"
UNSET_NOTES = [
    pytest.param(  # nothing higher sets the name anywhere
        (fleet(defaults=block({"a": SRE}, "merge")), on_app(rules={"c": DEV}, unset=["z"])),
        True, f"unset of z {IDLE}", id="names-no-default"),
    pytest.param(  # a higher default of that name exists, but a lower rule holds the name
        (fleet(defaults=block({"a": SRE}, "merge")), on_c1(rules={"a": DEV}, unset=["a"])),
        True, f"unset of a {IDLE}", id="a-lower-rule-holds-it"),
    pytest.param(  # the higher default's block is atomic and gives way anyway
        (fleet(defaults=block({"a": SRE, "b": SRE})), on_c1(rules={"c": DEV}, unset=["a"])),
        True, f"unset of a {IDLE}", id="under-atomic-defaults"),
    pytest.param(  # the higher default's when is false
        (fleet(defaults=block({"a": SRE}, "merge", NEVER)), on_c1(rules={"c": DEV},
                                                                   unset=["a"])),
        True, f"unset of a {IDLE}", id="under-a-false-when"),
    pytest.param(  # several names: one note
        (fleet(defaults=block({"a": SRE}, "merge")),
         on_c1(rules={"c": DEV}, unset=["y", "a", "x"])),
        True, "unset of x, y has no effect: without it, no higher policy's defaults would "
        "add those rules on any target", id="several"),
    pytest.param(  # ignored: unset is disabled on this system
        (fleet(defaults=block({"a": SRE}, "merge")), on_c1(rules={"c": DEV}, unset=["a"])),
        False, "spec.unset is ignored: unset is disabled on this system "
        "(CLEARANCE_ALLOW_UNSET=false)", id="forbidden"),
    pytest.param(  # a policy that only unsets, ignored
        (fleet(defaults=block({"a": SRE}, "merge")), on_c1(unset=["a"])),
        False, "Policy has been successfully enforced (it sets no rules). spec.unset is "
        "ignored: unset is disabled on this system (CLEARANCE_ALLOW_UNSET=false)",
        id="forbidden-unset-only"),
    pytest.param(  # an override of a higher policy (and of no default)
        (fleet(overrides=block({"a": SRE}, "merge")), on_c1(rules={"c": DEV}, unset=["a"])),
        True, "unset of a has no effect: it is an override of sec/fleet", id="override"),
]


@pytest.mark.parametrize(("objs", "allow", "note"), UNSET_NOTES)
def test_an_unset_that_does_nothing_says_why(objs: tuple[dict[str, Any], ...], allow: bool,
                                             note: str) -> None:
    """The note ends the message, and nothing else in it speaks of unset."""
    key = next(f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in objs
               if o["spec"].get("unset"))
    enforced = conditions(*objs, key=key, allow_unset=allow)["Enforced"]
    assert enforced.reason == "Enforced", enforced.message
    assert enforced.message.endswith(note), enforced.message
    assert "unset" not in enforced.message[:-len(note)]


def test_an_unset_that_drops_a_default_somewhere_gets_no_note() -> None:
    # On Cluster c1 the unset keeps the Fleet's merged default a out: it does something.
    objs = (fleet(defaults=block({"a": SRE}, "merge")),
            on_c1(rules={"c": DEV}, unset=["a"]))
    enforced = conditions(*objs, key="ops/c1")["Enforced"]
    assert enforced.message == ("Policy has been successfully enforced. The following "
                                "defaults have been added by ops/c1: c")


def test_an_unset_effective_on_one_target_and_of_an_override_on_another_says_where() -> None:
    # On Cluster c1 the unset keeps the Fleet's default a out; on c1/app mid's override
    # (its when true there only) holds a, which no unset removes.
    objs = (fleet(defaults=block({"a": SRE}, "merge")),
            on_mid(overrides=block({"a": DEV}, "merge", "has(self.rules.x)")),
            on_c1(defaults=block({"c": DEV}, "merge"), unset=["a"]),
            on_app(rules={"x": DEV}))
    enforced = conditions(*objs, key="ops/c1")["Enforced"]
    assert "unset of a has no effect where it is an override of mid/mid" in enforced.message


def test_two_policies_that_unset_one_default_are_both_credited() -> None:
    """Either alone would keep the Fleet's default out: neither is said to do nothing."""
    objs = (fleet(defaults=block({"a": SRE, "b": SRE}, "merge")), on_c1(unset=["a"]),
            on_app(rules={"c": DEV}, unset=["a"]))
    for key in ("ops/c1", "app/app"):
        assert "unset" not in conditions(*objs, key=key)["Enforced"].message
