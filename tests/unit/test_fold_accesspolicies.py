"""The AccessPolicy fold through the registry: what the compiler persists, whom it
concerns, and which statuses it publishes — on the pure model, with a recording store."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from clearance_api.wire import StatusCondition
from clearance_core.folding.fold import Affected
from clearance_core.folding.folds import FoldEvent
from clearance_core.folding.kinds import ref_of
from clearance_core.folding.model import Model
from clearance_core.folding.registry import REGISTRY
from clearance_core.inherit.accesspolicy import CompiledAccessPolicy
from clearance_core.inherit.hierarchy import FLEET, Target, cluster, derived_from
from clearance_core.inherit.index import InheritanceIndex
from clearance_core.inherit.merge import EffectivePolicy
from tests.unit.accesspolicies import ANYONE, CLUSTERSET_LABEL, access_policy, block, rule


def open_model() -> Model:
    """A model whose every namespace may write every target (authority has its own
    tests: test_authority.py)."""
    return Model(inherit=InheritanceIndex(authority=ANYONE))


class Store:
    """Implements ``Writes`` for the AccessPolicy part (the rest is recorded loosely)."""

    def __init__(self) -> None:
        self.effective: dict[Target, EffectivePolicy] = {}
        self.policies: dict[str, CompiledAccessPolicy] = {}
        self.invalid: dict[str, str] = {}
        self.conditions: dict[str, list[StatusCondition]] = {}
        self.announce = Affected()
        self.invalidate = Affected()

    def begin(self) -> None:
        self.announce, self.invalidate = Affected(), Affected()

    def put_access_policy(self, key: str, policy: CompiledAccessPolicy | None,
                          error: str | None) -> None:
        self.policies.pop(key, None)
        self.invalid.pop(key, None)
        if policy is not None:
            self.policies[key] = policy
        if error is not None:
            self.invalid[key] = error

    def put_effective(self, target: Target, effective: EffectivePolicy | None) -> None:
        if effective is None:
            self.effective.pop(target, None)
        else:
            self.effective[target] = effective

    def put_access_status(self, key: str, conditions: list[StatusCondition] | None) -> None:
        if conditions is None:
            self.conditions.pop(key, None)
        else:
            self.conditions[key] = conditions

    def __getattr__(self, name: str) -> Any:  # the other kinds' writes: not under test
        return lambda *args, **kwargs: None

    def read(self, target: Target) -> dict[str, Any]:
        """What a reader gets: stored, else (a Namespace) its cluster's, else the Fleet's."""
        found = self.effective.get(target)
        source = derived_from(target)
        if found is None and source is not None:
            found = self.effective.get(source)
        if found is None:
            found = self.effective.get(FLEET)
        return {} if found is None else {n: r.wire() for n, r in found.rules.items()}


def fold(model: Model, store: Store, obj: dict[str, Any], event_type: str = "ADDED",
         seq: int = 1) -> Any:
    store.begin()
    ref = ref_of(obj)
    spec = REGISTRY[ref.kind]
    assert spec.fold is not None
    return spec.fold(model, store, FoldEvent(seq, event_type, obj, ref, 0.0))


def managed_cluster(name: str, set_name: str | None = None) -> dict[str, Any]:
    labels = {CLUSTERSET_LABEL: set_name} if set_name else {}
    return {"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": name, "labels": labels}}


def managed_cluster_set(name: str) -> dict[str, Any]:
    return {"apiVersion": "cluster.open-cluster-management.io/v1beta2",
            "kind": "ManagedClusterSet", "metadata": {"name": name}}


def test_a_fleet_default_concerns_its_subjects_and_publishes_its_conditions() -> None:
    """Stored for the Fleet only (clusters read it), announced and invalidated for the
    rule's group, with Accepted and Enforced published."""
    model, store = open_model(), Store()
    fold(model, store, managed_cluster("c1"))
    result = fold(model, store, access_policy(
        "base", rules={"ops": rule(groups=["ops"])}))
    assert result.outcome == "compiled"
    assert set(store.effective) == {FLEET}
    assert store.read(cluster("c1")) == store.read(FLEET) != {}
    assert store.announce.groups == store.invalidate.groups == {"ops"}
    [(ref, status)] = result.statuses
    assert (ref.kind, ref.namespace, ref.name) == ("accesspolicy", "ns", "base")
    assert [c.reason for c in status.conditions] == ["Accepted", "Enforced"]


def test_an_invalid_policy_withdraws_its_previous_version_whole() -> None:
    model, store = open_model(), Store()
    fold(model, store, access_policy("base", rules={"ops": rule(groups=["ops"])}))
    broken = access_policy("base", rules={"ops": rule(groups=["ops"])},
                           defaults=block({"x": rule(users=["u"])}))
    result = fold(model, store, broken, "MODIFIED", 2)
    assert result.outcome == "invalid"
    assert store.read(FLEET) == {} and "ns/base" in store.invalid
    assert store.invalidate.groups == {"ops"}  # the withdrawn rule's subjects
    assert store.conditions["ns/base"][0].reason == "Invalid"


def test_an_unchanged_policy_concerns_nobody_and_publishes_nothing() -> None:
    model, store = open_model(), Store()
    obj = access_policy("base", rules={"ops": rule(groups=["ops"])})
    fold(model, store, obj)
    result = fold(model, store, obj, "MODIFIED", 2)
    assert not store.announce and not store.invalidate and result.statuses == []


def test_deleting_a_policy_publishes_its_deletion() -> None:
    model, store = open_model(), Store()
    obj = access_policy("base", rules={"ops": rule(groups=["ops"])})
    fold(model, store, obj)
    result = fold(model, store, obj, "DELETED", 2)
    assert result.outcome == "deleted" and "ns/base" not in store.conditions
    assert [s.state for _, s in result.statuses] == ["Deleted"]


NAMES = ("a", "b", "c")
TARGETS = st.sampled_from(["Fleet", ("ClusterSet", "s1"), ("Cluster", "c1"),
                           ("Cluster", "c2"), ("Namespace", "c1", "n1"),
                           ("Namespace", "c2", "n1")])
RULES = st.dictionaries(st.sampled_from(["r1", "r2"]),
                        st.builds(lambda g, deny: rule(groups=[g],
                                                       effect="Deny" if deny else None),
                                  st.sampled_from(["g1", "g2"]), st.booleans()),
                        max_size=2)
POLICIES = st.builds(
    lambda name, target, rules, kind, strategy: access_policy(
        name, target=target, **({"rules": rules} if kind == "rules" else
                                {kind: block(rules, strategy=strategy)})),
    st.sampled_from(NAMES), TARGETS, RULES,
    st.sampled_from(["rules", "defaults", "overrides"]),
    st.sampled_from(["atomic", "merge"]))
EVENTS = st.one_of(
    st.tuples(st.just("policy"), POLICIES, st.booleans()),
    st.tuples(st.just("cluster"), st.sampled_from(["c1", "c2"]),
              st.sampled_from([None, "s1", "s2"]), st.booleans()),
    st.tuples(st.just("set"), st.sampled_from(["s1", "s2"]), st.booleans()))


@settings(max_examples=150, deadline=None)
@given(st.lists(EVENTS, max_size=14))
def test_what_is_stored_reads_as_a_rebuild_from_the_final_state(events: list[Any]) -> None:
    """Whatever the events, a reader of the stored effective policies (with the Fleet and
    cluster fallbacks) sees what a compiler restarted on the final state computes."""
    model, store = open_model(), Store()
    for seq, event in enumerate(events, start=1):
        if event[0] == "policy":
            fold(model, store, event[1], "DELETED" if event[2] else "ADDED", seq)
        elif event[0] == "cluster":
            fold(model, store, managed_cluster(event[1], event[2]),
                 "DELETED" if event[3] else "ADDED", seq)
        else:
            fold(model, store, managed_cluster_set(event[1]), "ADDED" if event[2] else
                 "DELETED", seq)
    rebuilt = InheritanceIndex.build(store.policies.values(), model.clusters,
                                     model.cluster_sets, authority=ANYONE)
    for target in rebuilt.targets():
        expected = rebuilt.effective_of(target)
        assert expected is not None
        assert store.read(target) == {n: r.wire() for n, r in expected.rules.items()}, target


#: What decisions read: a named Namespace target, an unnamed one, each Cluster.
READ = (Target(kind="Namespace", cluster="c1", name="n1"),
        Target(kind="Namespace", cluster="c2", name="n1"),
        Target(kind="Namespace", cluster="c1", name="other"), cluster("c1"), cluster("c2"))
_FLEET_G1 = access_policy("a", rules={"r1": rule(groups=["g1"])})
_N1_G2 = access_policy("b", target=("Namespace", "c1", "n1"), rules={"r2": rule(groups=["g2"])})


def seen(store: Store, target: Target) -> tuple[Target, dict[str, Any]]:
    """The target a decision names (a Namespace without an effective policy of its own
    reads, and names, its cluster's) and the rules it reads."""
    source = derived_from(target)
    named = source if source is not None and target not in store.effective else target
    return named, store.read(target)


@settings(max_examples=500, deadline=None)
@given(st.lists(EVENTS, max_size=14))
@example([("cluster", "c1", None, False), ("policy", _FLEET_G1, False),
          ("policy", _N1_G2, False), ("policy", _N1_G2, True)])  # n1 falls back to g1's
@example([("cluster", "c1", None, False), ("policy", _FLEET_G1, False),
          ("policy", access_policy("b", target=("Namespace", "c1", "n1"),
                                   rules={"r1": rule(groups=["g2"])}), False)])
@example([("cluster", "c1", None, False), ("policy", _FLEET_G1, False),  # same r1, but
          ("policy", access_policy("b", target=("Namespace", "c1", "n1"),  # now read at n1
                                   defaults=block({"r1": rule(groups=["g2"])})), False)])
@example([("policy", access_policy("a", rules={"r1": rule(groups=["g2"])}), False),
          ("policy", access_policy("b", target=("Cluster", "c1"),  # c1 not yet there: n1
                                   rules={"r1": rule(groups=["g1"])}), False),  # reads g2
          ("cluster", "c1", None, False)])  # now g1's: g2's answers about c1 change too
def test_every_answer_a_change_can_alter_concerns_its_subjects(events: list[Any]) -> None:
    """After any event, each rule that a decision in some namespace or cluster reads
    differently (added, removed, other content or source, or read from another target,
    which its reason names) has subjects the event invalidates — also when a Namespace
    target vanishes and its namespace falls back to its cluster's rules — unless the
    cluster itself changed (its entries all go)."""
    model, store = open_model(), Store()
    for seq, event in enumerate(events, start=1):
        before = {target: seen(store, target) for target in READ}
        if event[0] == "policy":
            fold(model, store, event[1], "DELETED" if event[2] else "ADDED", seq)
        elif event[0] == "cluster":
            fold(model, store, managed_cluster(event[1], event[2]),
                 "DELETED" if event[3] else "ADDED", seq)
        else:
            fold(model, store, managed_cluster_set(event[1]), "ADDED" if event[2] else
                 "DELETED", seq)
        for target in READ:
            name = target.cluster or target.name
            if name in store.invalidate.clusters or name not in model.clusters:
                continue
            (old_at, old_rules), (new_at, new_rules) = before[target], seen(store, target)
            for rule_name in {*old_rules, *new_rules}:
                old, new = old_rules.get(rule_name), new_rules.get(rule_name)
                if old != new or old_at != new_at:
                    groups = {g for r in (old, new) if r is not None
                              for g in r["rule"]["subjects"]["groups"]}
                    assert groups <= store.invalidate.groups, (target, rule_name, old, new)
