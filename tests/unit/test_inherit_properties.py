"""Properties of inherited policies over random fleets, policies and event orders."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_core.inherit.accesspolicy import CompiledAccessPolicy, compile_access_policy
from clearance_core.inherit.authority import Authority
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.index import (
    BindingChanged,
    ClusterChanged,
    ClusterSetChanged,
    Event,
    InheritanceIndex,
    PolicyApplied,
    PolicyRemoved,
)
from clearance_core.inherit.merge import effective_policy
from clearance_core.inherit.status import status_of
from clearance_core.questions.simulate import simulate
from tests.unit.accesspolicies import ANYONE, CLUSTERSET_LABEL, access_policy, rule

CLUSTERS = ("c1", "c2", "c3")
SETS = ("s1", "s2")
TARGETS: list[Any] = (
    ["Fleet"] + [("ClusterSet", s) for s in SETS] + [("Cluster", c) for c in CLUSTERS]
    + [("Namespace", c, n) for c in CLUSTERS for n in ("n1", "n2")])
STAMPS = (None, "2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z")
RULE_NAMES = ("a", "b", "c", "d")
RULES = (rule(groups=["g1"]), rule(groups=["g2"], effect="Deny"),
         rule(users=["u"], metrics=True))
CONDITIONS = ("size(self.rules) > 1", "'a' in self.unset", "has(self.rules.b)",
              "self.rules.c.effect == 'Deny'")  # the last fails at run time without c

rule_sets = st.dictionaries(st.sampled_from(RULE_NAMES), st.sampled_from(RULES), max_size=3)
#: Authority: "adm" is the admin namespace; "c1" is a cluster's namespace, "n1" a
#: namespace's; "t" and "u" may write what their bindings allow.
AUTHORITY = Authority.of(["adm"])
NAMESPACES = ("adm", "t", "t", "u", "c1", "n1")


@st.composite
def blocks(draw: st.DrawFn, *, conditions: bool) -> dict[str, Any]:
    written: dict[str, Any] = {"rules": draw(rule_sets)}
    strategy = draw(st.sampled_from([None, "atomic", "merge"]))
    if strategy is not None:
        written["strategy"] = strategy
    if conditions and draw(st.booleans()):
        written["when"] = draw(st.sampled_from(CONDITIONS))
    return written


@st.composite
def policies(draw: st.DrawFn, *, conditions: bool = True,
             names: tuple[str, ...] = ("p0", "p1", "p2", "p3", "p4"),
             namespaces: tuple[str, ...] = ("t",)) -> dict[str, Any]:
    shape = draw(st.sampled_from(["rules", "defaults", "overrides", "both"]))
    spec: dict[str, Any] = {}
    if shape == "rules":
        spec["rules"] = draw(rule_sets)
    if shape in ("defaults", "both"):
        spec["defaults"] = draw(blocks(conditions=conditions))
    if shape in ("overrides", "both"):
        spec["overrides"] = draw(blocks(conditions=conditions))
    unset = draw(st.lists(st.sampled_from(RULE_NAMES), max_size=2))
    return access_policy(draw(st.sampled_from(names)), namespace=draw(st.sampled_from(namespaces)),
                         target=draw(st.sampled_from(TARGETS)),
                         created=draw(st.sampled_from(STAMPS)), unset=unset or None, **spec)


def labels(set_name: str | None) -> dict[str, str]:
    return {CLUSTERSET_LABEL: set_name} if set_name else {}


# Weighted towards what moves targets between paths: clusters joining s1, sets appearing;
# and policies between authority and none: bindings of "t" and "u" to s1 (or misnamed).
events = st.one_of(
    policies(namespaces=NAMESPACES).map(lambda obj: PolicyApplied(compile_access_policy(obj))),
    policies(namespaces=NAMESPACES).map(lambda obj: PolicyApplied(compile_access_policy(obj))),
    st.tuples(st.sampled_from(NAMESPACES), st.sampled_from([f"p{i}" for i in range(5)]))
    .map(lambda k: PolicyRemoved(f"{k[0]}/{k[1]}")),
    st.tuples(st.sampled_from(("t", "u")), st.sampled_from(("s1", "s2", "other")),
              st.sampled_from(("s1", "s1", "s2", None)))
    .map(lambda b: BindingChanged(*b)),
    st.tuples(st.sampled_from(CLUSTERS),
              st.sampled_from(["s1", "s1", "s2", None, "s3", "gone"]))
    .map(lambda c: ClusterChanged(c[0], None if c[1] == "gone" else labels(c[1]))),
    st.tuples(st.sampled_from(("s1", "s1", "s2", "s3")), st.sampled_from([True, True, False]))
    .map(lambda s: ClusterSetChanged(s[0], s[1])),
)


State = tuple[dict[str, CompiledAccessPolicy], dict[str, dict[str, str]], set[str],
              dict[tuple[str, str], str]]


def final_state(history: list[Event]) -> State:
    found: dict[str, CompiledAccessPolicy] = {}
    clusters: dict[str, dict[str, str]] = {}
    sets: set[str] = set()
    bindings: dict[tuple[str, str], str] = {}
    for event in history:
        if isinstance(event, BindingChanged):
            if event.cluster_set is None:
                bindings.pop((event.namespace, event.name), None)
            else:
                bindings[event.namespace, event.name] = event.cluster_set
        elif isinstance(event, PolicyApplied):
            found[event.policy.key] = event.policy
        elif isinstance(event, PolicyRemoved):
            found.pop(event.key, None)
        elif isinstance(event, ClusterChanged):
            if event.labels is None:
                clusters.pop(event.name, None)
            else:
                clusters[event.name] = dict(event.labels)
        elif event.present:
            sets.add(event.name)
        else:
            sets.discard(event.name)
    return found, clusters, sets, bindings


def statuses(index: InheritanceIndex) -> dict[str, Any]:
    return {key: status_of(index, key) for key in index.policies}


@settings(max_examples=200, deadline=None)
@given(history=st.lists(events, min_size=4, max_size=40))
def test_incremental_index_equals_from_scratch_after_any_history(history: list[Event]) -> None:
    """With policy authority: bindings, clusters changing sets and sets coming and going
    move policies in and out of the paths, and the index follows event by event."""
    incremental = InheritanceIndex(authority=AUTHORITY)
    for event in history:
        before = statuses(incremental)
        before_effective = dict(incremental.effective)
        change = incremental.apply(event)
        after = statuses(incremental)
        # The change names every policy whose conditions moved, every target recomputed
        # and every target gone: the compiler persists and publishes exactly these.
        moved = {key for key in {*before, *after} if before.get(key) != after.get(key)}
        assert moved <= change.policies
        assert {t for t in {*before_effective, *incremental.effective}
                if before_effective.get(t) != incremental.effective.get(t)} <= \
            set(change.effective) | change.removed
    found, clusters, sets, bindings = final_state(history)
    scratch = InheritanceIndex.build(found.values(), clusters, sets, authority=AUTHORITY,
                                     bindings=bindings)
    assert incremental.effective == scratch.effective
    assert statuses(incremental) == statuses(scratch)
    # Only the policies their namespace may write are on any path.
    for eff in scratch.effective.values():
        for key in eff.policies:
            policy = scratch.policies[key]
            assert policy.namespace == "adm" or policy.namespace in (
                policy.target.name, policy.target.cluster) or any(
                ns == policy.namespace and name == set_name
                for (ns, name), set_name in bindings.items()), key


@settings(max_examples=200, deadline=None)
@given(objs=st.lists(policies(names=tuple(f"p{i}" for i in range(10)),
                              namespaces=NAMESPACES), min_size=3, max_size=10),
       cluster_sets=st.lists(st.sampled_from(["s1", "s2", None]), min_size=3, max_size=3),
       existing=st.sets(st.sampled_from(SETS)), noise=st.lists(events, max_size=6),
       seed=st.integers(0, 2**32))
def test_the_same_final_state_in_any_arrival_order_gives_the_same_result(
        objs: list[dict[str, Any]], cluster_sets: list[str | None], existing: set[str],
        noise: list[Event], seed: int) -> None:
    found = {p.key: p for p in map(compile_access_policy, objs)}
    clusters = {name: labels(s) for name, s in zip(CLUSTERS, cluster_sets, strict=True)}
    bindings = {("t", "s1"): "s1", ("u", "s2"): "s1"}
    scratch = InheritanceIndex.build(found.values(), clusters, existing, authority=AUTHORITY,
                                     bindings=bindings)
    arrivals: list[Event] = [PolicyApplied(p) for p in found.values()]
    arrivals += [BindingChanged(ns, name, s) for (ns, name), s in bindings.items()]
    arrivals += [ClusterChanged(name, lab) for name, lab in clusters.items()]
    arrivals += [ClusterSetChanged(name, True) for name in existing]
    # Earlier versions of anything may arrive first (they are then replaced) ...
    rng = random.Random(seed)
    rng.shuffle(arrivals)
    arrivals = noise + arrivals
    # ... and whatever the noise left behind that the final state lacks goes away.
    stale_policies, stale_clusters, stale_sets, stale_bindings = final_state(arrivals)
    arrivals += [PolicyRemoved(key) for key in stale_policies if key not in found]
    arrivals += [BindingChanged(ns, name, None) for ns, name in stale_bindings
                 if (ns, name) not in bindings]
    arrivals += [ClusterChanged(name, None) for name in stale_clusters if name not in clusters]
    arrivals += [ClusterSetChanged(name, False) for name in stale_sets if name not in existing]
    incremental = InheritanceIndex(authority=AUTHORITY)
    for event in arrivals:
        incremental.apply(event)
    assert incremental.effective == scratch.effective
    assert statuses(incremental) == statuses(scratch)


def _index(objs: list[dict[str, Any]], cluster_sets: list[str | None],
           existing_sets: list[str]) -> InheritanceIndex:
    unique = {compile_access_policy(obj).key: compile_access_policy(obj) for obj in objs}
    inventory = {name: labels(set_name) for name, set_name in zip(CLUSTERS, cluster_sets,
                                                                  strict=True)}
    return InheritanceIndex.build(unique.values(), inventory, existing_sets, authority=ANYONE)


fleets = st.tuples(st.lists(st.sampled_from([None, "s1", "s2"]), min_size=3, max_size=3),
                   st.lists(st.sampled_from(SETS), max_size=2))


@settings(max_examples=150, deadline=None)
@given(others=st.lists(policies(conditions=False), max_size=6),
       override=st.tuples(st.sampled_from(TARGETS), st.sampled_from(STAMPS), rule_sets),
       fleet=fleets)
def test_an_atomic_override_decides_every_target_below_unless_a_higher_override_applies(
        others: list[dict[str, Any]], override: tuple[Any, Any, dict[str, Any]],
        fleet: tuple[list[str | None], list[str]]) -> None:
    target, created, rules = override
    obj = access_policy("override", namespace="o", target=target, created=created,
                        overrides={"rules": rules})
    index = _index([*others, obj], *fleet)
    policy = index.policies["o/override"]
    for eff in index.in_scope(policy):
        higher = [p for p in index.on_path(eff.target) if p.precedence() < policy.precedence()]
        if any(b.kind == "overrides" for p in higher for b in p.blocks):
            continue
        higher_keys = {p.key for p in higher}
        for name in rules:
            assert eff.rules[name].source == "o/override", (eff.target, name)
        for name, found in eff.rules.items():
            if name not in rules:  # only a higher merge default can add to it
                assert found.source in higher_keys and found.block != "overrides"
        if not higher:
            assert set(eff.rules) == set(rules)


@settings(max_examples=150, deadline=None)
@given(others=st.lists(policies(conditions=False), max_size=6),
       default=st.tuples(st.sampled_from(TARGETS), st.sampled_from(STAMPS), rule_sets),
       fleet=fleets)
def test_a_merge_default_never_removes_a_lower_rule(
        others: list[dict[str, Any]], default: tuple[Any, Any, dict[str, Any]],
        fleet: tuple[list[str | None], list[str]]) -> None:
    target, created, rules = default
    obj = access_policy("default", namespace="m", target=target, created=created,
                        defaults={"rules": rules, "strategy": "merge"})
    without = _index(others, *fleet)
    with_it = _index([*others, obj], *fleet)
    policy = with_it.policies["m/default"]
    for target_ in with_it.scope(policy.target):
        before, after = without.effective_of(target_), with_it.effective_of(target_)
        assert before is not None and after is not None
        for name, found in before.rules.items():
            source = without.policies[found.source]
            if source.precedence() > policy.precedence():  # lower than the default
                assert after.rules.get(name) == found, (target_, name)


@settings(max_examples=150, deadline=None)
@given(existing=st.lists(policies(), max_size=6), change=policies(),
       operation=st.sampled_from(["apply", "delete"]), fleet=fleets)
def test_simulate_equals_the_effective_policies_after_the_change(
        existing: list[dict[str, Any]], change: dict[str, Any], operation: Any,
        fleet: tuple[list[str | None], list[str]]) -> None:
    index = _index(existing, *fleet)
    before_targets = index.targets()
    result = simulate(index, change, operation)
    assert index.targets() == before_targets  # nothing was applied
    after = index.copy()
    compiled = compile_access_policy(change)
    after.apply(PolicyApplied(compiled) if operation == "apply" else PolicyRemoved(
        compiled.key))
    diffs = {d.target: d for d in result.targets}
    for target in {*before_targets, *after.targets()}:
        old, new = index.effective_of(target), after.effective_of(target)
        rules = {n: r.wire() for n, r in (old.rules if old else {}).items()}
        diff = diffs.get(target)
        if diff is not None:
            rules.update(diff.added)
            rules.update(diff.changed)
            for name in diff.removed:
                del rules[name]
        assert rules == {n: r.wire() for n, r in (new.rules if new else {}).items()}, target
    for key in after.policies:
        expected = result.status[key].after if key in result.status else \
            status_of(index, key)
        assert status_of(after, key) == expected, key


@settings(max_examples=100, deadline=None)
@given(objs=st.lists(policies(), max_size=6), seed=st.integers(0, 2**32))
def test_the_fold_does_not_depend_on_the_order_policies_are_given_in(
        objs: list[dict[str, Any]], seed: int) -> None:
    unique = list({p.key: p for p in map(compile_access_policy, objs)}.values())
    shuffled = list(unique)
    random.Random(seed).shuffle(shuffled)
    target = Target(kind="Cluster", name="c1")
    assert effective_policy(target, unique) == effective_policy(target, shuffled)
