"""Policy statuses from the tallies the index keeps equal statuses from their whole scope."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_core.inherit.accesspolicy import compile_access_policy
from clearance_core.inherit.index import Event, InheritanceIndex, PolicyApplied
from clearance_core.inherit.status import policy_conditions, status_of
from tests.unit.accesspolicies import access_policy, block, fleet_index, rule
from tests.unit.test_inherit_properties import AUTHORITY, events


def scanned(index: InheritanceIndex) -> dict[str, Any]:
    """Every policy's conditions, summed over the effective policies of its scope now."""
    return {key: policy_conditions(policy, index.in_scope(policy),
                                   target_found=index.inventory.exists(policy.target),
                                   unauthorized=index.unauthorized(key))
            for key, policy in index.policies.items()}


def kept(index: InheritanceIndex) -> dict[str, Any]:
    return {key: status_of(index, key) for key in index.policies}


@settings(max_examples=200, deadline=None)
@given(history=st.lists(events, min_size=4, max_size=40), fork=st.integers(0, 40),
       allow_unset=st.booleans())
def test_statuses_kept_event_by_event_equal_statuses_from_the_whole_scope(
        history: list[Event], fork: int, allow_unset: bool) -> None:
    """After every event (and only the policies the change names may move); and an
    index and its copy (what a simulation changes), each
    changed after the copy, never change each other's tallies."""
    index = InheritanceIndex(allow_unset=allow_unset, authority=AUTHORITY)
    copy: InheritanceIndex | None = None
    expected: dict[str, Any] = {}
    for n, event in enumerate(history):
        if n == fork:
            copy = index.copy()
            expected = scanned(copy)
        before = kept(index)
        change = index.apply(event)
        after = kept(index)
        assert after == scanned(index)
        # Only the policies the change names are recomputed by the compiler.
        assert {key for key in {*before, *after} if before.get(key) != after.get(key)} <= \
            change.moved <= change.policies
    if copy is None:
        return
    assert kept(copy) == expected
    final = kept(index)
    for event in reversed(history[fork:]):
        copy.apply(event)
        assert kept(copy) == scanned(copy)
    assert kept(index) == scanned(index) == final


def test_a_fate_that_moves_while_every_rule_keeps_its_source_moves_the_status() -> None:
    """A lower rule's content decides a higher ``when``: the higher atomic default then
    meets another fate on that target (no longer "when false" but "not applied") while
    every rule there keeps its source."""
    low = {"c": rule(users=["u"], effect="Allow")}
    index = fleet_index(
        access_policy("high", namespace="t", defaults=block(
            {"x": rule(groups=["g"])},
            when="has(self.rules.c) && self.rules.c.effect == 'Deny'")),
        access_policy("low", namespace="t", target=("Namespace", "c1", "n1"), rules=low))
    before = status_of(index, "t/high")
    denied = {"c": rule(users=["u"], effect="Deny")}
    change = index.apply(PolicyApplied(compile_access_policy(access_policy(
        "low", namespace="t", target=("Namespace", "c1", "n1"), rules=denied))))
    assert "t/high" in change.moved
    after = status_of(index, "t/high")
    assert after == scanned(index)["t/high"] != before
    assert after is not None and "x (not applied: its atomic defaults were replaced as a " \
        "whole by the rules of t/low)" in after[1].message
