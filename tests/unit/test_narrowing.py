"""Narrowed invalidation never keeps an answer that a change alters.

For random fleets, identities and changes (a MonitorAccessPolicy replaced, added or
deleted; the identity joining or leaving a group), every cached answer the narrowing
keeps — about a cluster, as the decision service caches it (its cluster if in the
inventory, its deciding policy's order) — must equal the answer after the change, at
every moment it may still be served (until its validity limit). And it must not be
vacuous: a change confined to one cluster keeps the answers about the others.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_core.folding.narrowing import Narrow, matches, membership_change, policy_change
from clearance_core.kube.principal import Identity
from clearance_core.monitor.evaluate import Outcome, evaluate_cluster, match_cluster
from clearance_core.monitor.policy import CompiledPolicy, compile_policy
from tests.unit.policies import policy

NOW = 1_800_000_000.0
SOON, LATER = "2027-01-15T08:00:00Z", "2027-02-01T00:00:00Z"  # 1.8e9 is 2027-01-15T08:00
INVENTORY = {"prod-east": {"env": "prod"}, "prod-west": {"env": "prod"},
             "dev-1": {"env": "dev"}, "staging": {"env": "staging"}}
UNKNOWN = "prod-9"  # asked about, not in the inventory
USERS = ["alice", "bob"]
GROUPS = ["devs", "ops", "sre"]

selectors = st.one_of(
    st.builds(lambda n: {"matchNames": n},
              st.lists(st.sampled_from(["prod-*", "dev-?", "staging", "*"]), min_size=1,
                       max_size=2)),
    st.builds(lambda p: {"matchPattern": p}, st.sampled_from(["prod-.*", "dev-[0-9]"])),
    st.builds(lambda e: {"matchLabels": {"env": e}}, st.sampled_from(["prod", "dev"])),
)
policy_dicts = st.builds(
    policy,
    name=st.sampled_from(["a", "b", "c", "d"]),
    namespace=st.sampled_from(["x", "y"]),
    priority=st.integers(0, 3),
    effect=st.sampled_from(["Allow", "Deny"]),
    enabled=st.booleans(),
    users=st.lists(st.sampled_from(USERS), max_size=1),
    groups=st.lists(st.sampled_from(GROUPS), max_size=2),
    default=st.sampled_from(["all", "none", "none", "none"]),
    rules=st.lists(st.builds(
        lambda sel, perms: {"selector": sel, "permissions": perms},
        selectors, st.fixed_dictionaries({"view": st.booleans(),
                                          "viewMetrics": st.booleans()}),
    ), max_size=2),
    not_before=st.sampled_from([None, None, SOON]),
    not_after=st.sampled_from([None, None, LATER]),
)
identities = st.builds(
    lambda user, groups: Identity(username=user, email=None, groups=frozenset(groups)),
    st.sampled_from(USERS), st.lists(st.sampled_from(GROUPS), max_size=2))


def fleet(dicts: list[dict[str, Any]]) -> dict[str, CompiledPolicy]:
    compiled = (compile_policy(d) for d in dicts)
    return {p.key: p for p in compiled if p is not None}


def outcome(policies: dict[str, CompiledPolicy], who: Identity, cluster: str,
            at: float) -> Outcome:
    return evaluate_cluster(policies.values(), who, action="view", cluster=cluster,
                            labels=INVENTORY.get(cluster, {}), now=at)


def answer(found: Outcome) -> tuple[Any, ...]:
    """What a cached check holds (its explanation is cached apart)."""
    return (found.decision, found.reason, found.policy, found.permissions, found.rule)


def moments(before: dict[str, CompiledPolicy], after: dict[str, CompiledPolicy],
            until: float | None) -> list[float]:
    """Now, and every validity boundary at which the answer after the change may differ,
    while the cached one is still served."""
    bounds = {t for p in (*before.values(), *after.values())
              for t in (p.not_before, p.not_after) if t is not None and t > NOW}
    return [NOW, *sorted(t for t in bounds if until is None or t < until)]


def assert_exact(narrow: Narrow, before: dict[str, CompiledPolicy],
                 after: dict[str, CompiledPolicy], who_before: Identity,
                 who_after: Identity) -> None:
    for cluster in [*INVENTORY, UNKNOWN]:
        cached = outcome(before, who_before, cluster, NOW)
        known = cluster if cluster in INVENTORY else None
        if narrow.drops(known, cached.order):
            continue
        for at in moments(before, after, cached.valid_until):
            fresh = outcome(after, who_after, cluster, at)
            assert answer(fresh) == answer(cached), (cluster, at, narrow)


def named(policy_: CompiledPolicy | None, who: Identity) -> bool:
    return policy_ is not None and (who.username in policy_.users
                                    or not who.groups.isdisjoint(policy_.groups))


@settings(max_examples=600, deadline=None)
@given(st.lists(policy_dicts, max_size=6), st.one_of(st.none(), policy_dicts),
       st.one_of(st.none(), policy_dicts), identities)
def test_a_policy_change_never_keeps_an_answer_it_alters(
    dicts: list[dict[str, Any]], old_dict: dict[str, Any] | None,
    new_dict: dict[str, Any] | None, who: Identity,
) -> None:
    if old_dict is None and new_dict is None:
        return
    # One key changes: added, replaced or deleted.
    meta = (old_dict or new_dict or {})["metadata"]
    old = None if old_dict is None else compile_policy({**old_dict, "metadata": meta})
    new = None if new_dict is None else compile_policy({**new_dict, "metadata": meta})
    key = f"{meta['namespace']}/{meta['name']}"
    before = {k: p for k, p in fleet(dicts).items() if k != key}
    after = dict(before)
    if old is not None:
        before[key] = old
    if new is not None:
        after[key] = new
    if not (named(old, who) or named(new, who)):
        return  # not a subject of the change: its entries are not in the record
    narrow = policy_change(INVENTORY, old, new)
    assert_exact(narrow, before, after, who, who)


TWEAKS = {
    "priority": st.integers(0, 3), "effect": st.sampled_from(["Allow", "Deny"]),
    "enabled": st.booleans(), "groups": st.lists(st.sampled_from(GROUPS), max_size=2),
    "users": st.lists(st.sampled_from(USERS), max_size=1),
    "default": st.sampled_from(["all", "none"]), "not_before": st.sampled_from([None, SOON]),
    "not_after": st.sampled_from([None, LATER]),
    "rules": st.lists(st.builds(lambda sel: {"selector": sel, "permissions": {"view": True}},
                                selectors), max_size=2),
}


@settings(max_examples=600, deadline=None)
@given(st.lists(policy_dicts, max_size=5), st.data(), identities)
def test_one_field_of_a_policy_changing_never_keeps_an_answer_it_alters(
    dicts: list[dict[str, Any]], data: st.DataObject, who: Identity,
) -> None:
    """Independent versions rarely differ in one field only; edits usually do."""
    fields = {name: data.draw(TWEAKS[name]) for name in TWEAKS}
    base = {**fields, "name": "p", "namespace": "x"}
    field = data.draw(st.sampled_from(sorted(TWEAKS)))
    edited = {**base, field: data.draw(TWEAKS[field])}
    old, new = compile_policy(policy(**base)), compile_policy(policy(**edited))
    before = {**{k: p for k, p in fleet(dicts).items() if k != "x/p"}, "x/p": old}
    after = {**before, "x/p": new}
    if not (named(old, who) or named(new, who)):
        return
    assert_exact(policy_change(INVENTORY, old, new), before, after, who, who)


@settings(max_examples=600, deadline=None)
@given(st.lists(policy_dicts, max_size=6), identities, st.sampled_from(GROUPS),
       st.booleans())
def test_joining_or_leaving_a_group_never_keeps_an_answer_it_alters(
    dicts: list[dict[str, Any]], who: Identity, group: str, joins: bool,
) -> None:
    policies = fleet(dicts)
    other = who.groups - {group}
    before = Identity(username=who.username, email=None,
                      groups=other if joins else other | {group})
    after = Identity(username=who.username, email=None,
                     groups=other | {group} if joins else other)
    naming = [p for p in policies.values() if group in p.groups]
    narrow = membership_change(INVENTORY, naming)
    assert_exact(narrow, policies, policies, before, after)


def test_an_effect_flip_keeps_the_answers_about_clusters_the_policy_does_not_select() -> None:
    old = compile_policy(policy("p", groups=["devs"], priority=5,
                                rules=[{"selector": {"matchNames": ["dev-1"]},
                                        "permissions": {"view": True}}]))
    new = compile_policy(policy("p", groups=["devs"], priority=5, effect="Deny",
                                rules=[{"selector": {"matchNames": ["dev-1"]},
                                        "permissions": {"view": True}}]))
    narrow = policy_change(INVENTORY, old, new)
    assert narrow.clusters == frozenset({"dev-1"})
    assert not narrow.drops("prod-east", None)
    assert narrow.drops("dev-1", None)
    assert narrow.drops(None, None)  # a cluster outside the inventory: always


def test_answers_decided_before_the_changed_policy_are_kept() -> None:
    first = compile_policy(policy("first", groups=["devs"], priority=1, default="all"))
    old = compile_policy(policy("p", groups=["devs"], priority=5, default="all"))
    new = compile_policy(policy("p", groups=["devs"], priority=5, default="all",
                                effect="Deny"))
    assert first is not None and old is not None and new is not None
    narrow = policy_change(INVENTORY, old, new)
    assert narrow.clusters is not None and "prod-east" in narrow.clusters
    assert not narrow.drops("prod-east", first.order())
    assert narrow.drops("prod-east", old.order())


def test_order_strings_sort_as_the_evaluation_order() -> None:
    made = [compile_policy(policy(n, priority=p, effect=e))
            for n, p, e in [("z", 2, "Allow"), ("a", 10, "Deny"), ("b", 2, "Deny"),
                            ("a", 2, "Allow"), ("c", 9223372036854775807, "Allow"),
                            ("d", 9007199254740993, "Allow"), ("e", 9007199254740992, "Deny")]]
    ready = [p for p in made if p is not None]
    assert sorted(ready, key=CompiledPolicy.sort_key) == \
        sorted(ready, key=lambda p: p.order().encode())


@settings(max_examples=400, deadline=None)
@given(policy_dicts)
def test_bulk_matching_is_match_cluster_over_the_inventory(raw: dict[str, Any]) -> None:
    compiled = compile_policy(raw)
    found = matches(compiled, INVENTORY)
    if not (compiled.valid and compiled.enabled):
        assert found == {}
        return
    assert found == {c: m for c, labels in INVENTORY.items()
                     if (m := match_cluster(compiled, c, labels)) is not None}
