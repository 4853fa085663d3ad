"""The causes AccessPolicy statuses give are true, over random fleets.

A rule's fate is decided where its policy merges (its own blocks) or where a higher
policy removes it: so each fate is checked against the merge of the policies up to that
policy (``before`` it, and ``with`` it), against the blocks and ``unset`` lists that it
names, and — for a ``when`` and an ``unset`` said to have no effect — against the merge
without that ``when`` or that ``unset``.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_core.inherit.accesspolicy import CompiledAccessPolicy, compile_access_policy
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.index import InheritanceIndex
from clearance_core.inherit.merge import EffectivePolicy, Fate, effective_policy
from clearance_core.inherit.status import status_of
from tests.unit.accesspolicies import ANYONE, access_policy
from tests.unit.test_inherit_properties import (
    CLUSTERS,
    RULE_NAMES,
    STAMPS,
    blocks,
    fleets,
    labels,
    policies,
    rule_sets,
)

NAMES = tuple(f"p{i}" for i in range(8))
NAMESPACES = ("t", "u", "v")
#: One path, so that every policy meets every other: the Fleet, s1, c1 (in s1), c1/n1.
ONE_PATH: list[Any] = ["Fleet", ("ClusterSet", "s1"), ("Cluster", "c1"),
                       ("Namespace", "c1", "n1")]


@st.composite
def stacked(draw: st.DrawFn) -> dict[str, Any]:
    """A policy on that one path: the shapes of ``policies``, denser in what meets."""
    shape = draw(st.sampled_from(["rules", "defaults", "overrides", "both"]))
    spec: dict[str, Any] = {}
    if shape == "rules":
        spec["rules"] = draw(rule_sets)
    if shape in ("defaults", "both"):
        spec["defaults"] = draw(blocks(conditions=True))
    if shape in ("overrides", "both"):
        spec["overrides"] = draw(blocks(conditions=True))
    unset = draw(st.lists(st.sampled_from(RULE_NAMES), max_size=2))
    return access_policy(draw(st.sampled_from(NAMES)), namespace=draw(st.sampled_from(NAMESPACES)),
                         target=draw(st.sampled_from(ONE_PATH)),
                         created=draw(st.sampled_from(STAMPS)), unset=unset or None, **spec)


def _compiled(objs: list[dict[str, Any]]) -> list[CompiledAccessPolicy]:
    return list({p.key: p for p in map(compile_access_policy, objs)}.values())


def _index(found: list[CompiledAccessPolicy], cluster_sets: list[str | None],
           existing_sets: list[str], *, allow_unset: bool = True) -> InheritanceIndex:
    inventory = {name: labels(set_name) for name, set_name in zip(CLUSTERS, cluster_sets,
                                                                  strict=True)}
    return InheritanceIndex.build(found, inventory, existing_sets, allow_unset=allow_unset,
                                  authority=ANYONE)


def _lower(path: list[CompiledAccessPolicy], policy: CompiledAccessPolicy) -> list[
        CompiledAccessPolicy]:
    return [p for p in path if p.precedence() > policy.precedence()]


def _without_when(policy: CompiledAccessPolicy, kind: str) -> CompiledAccessPolicy:
    blocks = tuple(msgspec.structs.replace(b, when=None) if b.kind == kind else b
                   for b in policy.blocks)
    return msgspec.structs.replace(policy, blocks=blocks)


def _check_fate(target: Target, path: list[CompiledAccessPolicy],
                policy: CompiledAccessPolicy, name: str, fate: Fate, *,
                allow_unset: bool) -> None:
    where = (str(target), policy.key, name, fate)
    rank = {p.key: p.precedence() for p in path}
    by_key = {p.key: p for p in path}
    assert policy.key not in fate.by, where  # never "by itself"
    assert all(key in rank for key in fate.by), where
    lower = _lower(path, policy)
    before = effective_policy(target, lower, allow_unset=allow_unset)
    with_it = effective_policy(target, [*lower, policy], allow_unset=allow_unset)
    blocks = [b for b in policy.blocks if name in b.rules]
    if with_it.holds(policy.key, name):
        # In force once its policy merged: only a higher policy can have removed it.
        assert fate.kind == "overridden" and fate.by, where
        (winner,) = fate.by
        assert rank[winner] < policy.precedence(), where
        assert any(b.kind == "overrides" and (name in b.rules or b.strategy == "atomic")
                   for b in by_key[winner].blocks), where
        return
    # Out since its own merge: the cause is that merge's, never a higher policy's.
    assert with_it.fate(policy.key, name) == fate, where
    if fate.kind in ("when_false", "when_error"):
        assert any(b.kind == fate.block and b.when is not None for b in blocks), where
        # Without that when, the block applies: the cause is no longer that when.
        unguarded = effective_policy(target, [*lower, _without_when(policy, fate.block or "")],
                                     allow_unset=allow_unset)
        after = unguarded.fate(policy.key, name)
        assert after is None or after.kind not in ("when_false", "when_error") or \
            after.block != fate.block, where
    elif fate.kind == "not_applied":
        assert any(b.kind == fate.block and b.kind != "overrides" and b.strategy == "atomic"
                   for b in blocks), where
        assert before.rules and set(fate.by) == {r.source for r in before.rules.values()}, \
            where
    elif fate.kind == "unset":
        assert allow_unset and name in before.unset and name not in before.rules, where
        assert set(fate.by) == {p.key for p in lower if name in p.unset}, where
        assert any(b.kind != "overrides" for b in blocks), where
    elif fate.kind == "replaced":
        assert any(b.kind == "overrides" and b.strategy == "atomic" and name not in b.rules
                   for b in policy.blocks), where
    else:  # overridden, by a lower rule of that name its (merge) default gave way to
        assert fate.kind == "overridden", where
        (winner,) = fate.by
        assert rank[winner] > policy.precedence(), where
        assert before.rules[name].source == winner, where
        assert any(b.kind != "overrides" and b.strategy == "merge" for b in blocks), where


def _check_target(index: InheritanceIndex, eff: EffectivePolicy, *, allow_unset: bool) -> None:
    path = index.on_path(eff.target)
    for policy in path:
        for name in policy.rule_names():
            if eff.holds(policy.key, name):
                continue
            # Every rule not held was noted by the merge: nothing is guessed afterwards.
            fate = eff.fates.get(policy.key, {}).get(name)
            assert fate is not None and eff.fate(policy.key, name) == fate, \
                (eff.target, policy.key, name)
            _check_fate(eff.target, path, policy, name, fate, allow_unset=allow_unset)
    # An unset is credited on this target with exactly the names of the higher defaults
    # it kept out: those whose fate, where their default block merged, is "unset".
    expected: dict[str, set[str]] = {}
    for policy in path:
        defaults = msgspec.structs.replace(policy, unset=(), blocks=tuple(
            b for b in policy.blocks if b.kind != "overrides"))
        merged = effective_policy(eff.target, [*_lower(path, policy), defaults],
                                  allow_unset=allow_unset)
        for name in defaults.rule_names():
            fate = merged.fate(policy.key, name)
            if fate is not None and fate.kind == "unset":
                for key in fate.by:
                    expected.setdefault(key, set()).add(name)
    credited = {p.key: set(used) for p in path
                if (used := eff.unset_used(p.key, frozenset(p.unset)))}
    assert credited == expected, eff.target


@settings(max_examples=300, deadline=None)
@given(objs=st.lists(policies(names=NAMES, namespaces=NAMESPACES), min_size=1, max_size=8),
       fleet=fleets, allow_unset=st.booleans())
def test_every_fate_names_a_true_cause(objs: list[dict[str, Any]],
                                       fleet: tuple[list[str | None], list[str]],
                                       allow_unset: bool) -> None:
    index = _index(_compiled(objs), *fleet, allow_unset=allow_unset)
    for eff in index.effective.values():
        _check_target(index, eff, allow_unset=allow_unset)


@settings(max_examples=400, deadline=None)
@given(objs=st.lists(stacked(), min_size=2, max_size=6), allow_unset=st.booleans())
def test_every_fate_names_a_true_cause_on_one_path(objs: list[dict[str, Any]],
                                                   allow_unset: bool) -> None:
    index = _index(_compiled(objs), ["s1", None, None], ["s1"], allow_unset=allow_unset)
    for eff in index.effective.values():
        _check_target(index, eff, allow_unset=allow_unset)


IDLE = "has no effect: without it"


@settings(max_examples=200, deadline=None)
@given(objs=st.lists(policies(conditions=False, names=NAMES, namespaces=NAMESPACES),
                     min_size=1, max_size=8), fleet=fleets)
def test_an_unset_said_to_have_no_effect_changes_nothing_when_removed(
        objs: list[dict[str, Any]], fleet: tuple[list[str | None], list[str]]) -> None:
    """Without conditions (which read ``self.unset``): the status says an ``unset`` name
    keeps no default out exactly when it is credited nowhere in the policy's scope (and
    is no override's: that has its own note), and those names can be removed from the
    policy without changing any target's effective rules."""
    index = _index(_compiled(objs), *fleet)
    for key, policy in index.policies.items():
        found = status_of(index, key)
        assert found is not None
        if found[0].reason != "Accepted" or not policy.unset:
            continue
        scope = index.in_scope(policy)
        idle = {name for name in policy.unset
                if not any(name in eff.unset_used(key, frozenset(policy.unset)) for eff in scope)}
        overrides = {name for eff in scope for name in policy.unset
                     if name in eff.rules and eff.rules[name].block == "overrides"}
        message = found[-1].message
        assert (IDLE in message) == bool(idle - overrides), (message, idle, overrides)
        if idle - overrides:
            assert f"unset of {', '.join(sorted(idle - overrides))} {IDLE}" in message
        trimmed = msgspec.structs.replace(policy, unset=tuple(
            name for name in policy.unset if name not in idle))
        rebuilt = _index([*(p for p in index.policies.values() if p.key != key), trimmed],
                         *fleet)
        assert {t: e.rules for t, e in rebuilt.effective.items()} == \
            {t: e.rules for t, e in index.effective.items()}, (key, idle)
