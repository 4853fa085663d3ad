"""Policy authority: which hub namespace may write policies for which target, what a
policy it may not write does (nothing) and says (``Unauthorized``), and how bindings,
clusters and cluster sets move policies in and out of authority — on the pure core."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_core.folding.fold import Affected
from clearance_core.folding.model import Model
from clearance_core.inherit import hierarchy
from clearance_core.inherit.authority import Authority, parse_namespaces
from clearance_core.inherit.hierarchy import FLEET, Inventory, Target
from clearance_core.inherit.index import (
    BindingChanged,
    ClusterChanged,
    ClusterSetChanged,
    InheritanceIndex,
    PolicyApplied,
)
from clearance_core.inherit.status import ExcludedAt, status_of
from tests.unit.accesspolicies import (
    CLUSTERSET_LABEL,
    access_policy,
    block,
    compiled,
    fleet_index,
    rule,
    sources,
)
from tests.unit.test_fold_accesspolicies import Store, fold, managed_cluster, managed_cluster_set

ADMIN = Authority.of(["clearance-system"])
C1, C2 = hierarchy.cluster("c1"), hierarchy.cluster("c2")
PROD = hierarchy.cluster_set("prod")
C1_SHOP = hierarchy.namespace("c1", "shop")


def binding(name: str, namespace: str, cluster_set: str | None = None) -> dict[str, Any]:
    return {"apiVersion": "cluster.open-cluster-management.io/v1beta2",
            "kind": "ManagedClusterSetBinding",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterSet": name if cluster_set is None else cluster_set}}


def index(*objs: dict[str, Any], bindings: dict[tuple[str, str], str] | None = None,
          clusters: dict[str, str | None] | None = None) -> InheritanceIndex:
    """c1 in the set prod, c2 in none (unless said otherwise); the default authority."""
    return fleet_index(*objs, clusters=clusters or {"c1": "prod", "c2": None},
                       sets=("prod",), authority=ADMIN, bindings=bindings)


def accepted(found: InheritanceIndex, key: str) -> tuple[str, str]:
    conditions = status_of(found, key)
    assert conditions is not None
    return conditions[0].reason, conditions[0].message


GRANT = {"grab": rule(users=["mallory"], view=True, metrics=True)}
LOCKOUT = {"lockout": rule(groups=["platform-team"], effect="Deny")}


# The rule -----------------------------------------------------------------------------


@pytest.mark.parametrize(("namespace", "target", "bound", "allowed"), [
    ("clearance-system", FLEET, False, True),
    ("clearance-system", C1_SHOP, False, True),
    ("team", FLEET, True, False),                 # no binding reaches the Fleet
    ("team", PROD, False, False),
    ("team", PROD, True, True),                   # bound to prod
    ("team", C1, True, True),                     # c1 is in prod
    ("team", C1_SHOP, True, True),
    ("team", C2, True, False),                    # c2 is in no set
    ("c1", C1, False, True),                      # the cluster's namespace
    ("c1", C1_SHOP, False, True),
    ("c1", C2, False, False),
    ("c1", PROD, False, False),
    ("shop", C1_SHOP, False, True),               # namespace sameness
    ("shop", hierarchy.namespace("c2", "shop"), False, True),
    ("shop", C1, False, False),
    ("shop", hierarchy.namespace("c1", "web"), False, False),
])
def test_who_may_write_each_target(namespace: str, target: Target, bound: bool,
                                   allowed: bool) -> None:
    inventory = Inventory({"c1": {CLUSTERSET_LABEL: "prod"}, "c2": {}}, {"prod"})
    cluster = target.name if target.kind == "Cluster" else target.cluster
    writers = ADMIN.writers(target, inventory.set_of(cluster) if cluster else None)
    assert writers.allow(namespace, lambda ns, s: bound and (ns, s) == ("team", "prod")) \
        is allowed


NAMESPACES = ("clearance-system", "team", "c1", "c2", "shop", "web")


@settings(max_examples=300, deadline=None)
@given(namespace=st.sampled_from(NAMESPACES),
       labels=st.tuples(st.sampled_from(["prod", "dev", None]),
                        st.sampled_from(["prod", "dev", None])),
       sets=st.sets(st.sampled_from(["prod", "dev"])),
       bound=st.sets(st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(["prod", "dev"]))))
def test_governing_a_target_is_governing_every_target_below_it(
        namespace: str, labels: tuple[str | None, str | None], sets: set[str],
        bound: set[tuple[str, str]]) -> None:
    """Downward closed: whoever may write a target may write every target on whose path it
    lies — so an override written with authority binds everything below it."""
    inventory = Inventory({name: {CLUSTERSET_LABEL: label} if label else {}
                           for name, label in zip(("c1", "c2"), labels, strict=True)}, sets)

    def allowed(target: Target) -> bool:
        cluster = target.name if target.kind == "Cluster" else target.cluster
        writers = ADMIN.writers(target, inventory.set_of(cluster) if cluster else None)
        return writers.allow(namespace, lambda ns, s: (ns, s) in bound)

    below = [hierarchy.namespace(c, n) for c in ("c1", "c2") for n in ("shop", "web")]
    targets = [FLEET, *map(hierarchy.cluster_set, sets), C1, C2, *below]
    for target in targets:
        path = inventory.path(target) or ()
        for higher in path:
            if allowed(higher):
                assert allowed(target), (higher, target)


def test_admin_namespaces_are_a_comma_separated_list() -> None:
    assert parse_namespaces(" b, a,,a ") == ("a", "b")
    assert parse_namespaces(" , ") == ()
    assert Authority.of(parse_namespaces("x,y")).token() == "x,y"


# What a policy it may not write does and says -------------------------------------------


def test_a_team_fleet_override_takes_no_part_and_says_who_may_write_it() -> None:
    found = index(
        access_policy("base", namespace="clearance-system", rules={"sre": rule(groups=["sre"])}),
        access_policy("grab", namespace="team-a", overrides=block(GRANT | LOCKOUT)))
    assert sources(found, C1) == sources(found, FLEET) == {"sre": "clearance-system/base:rules"}
    assert found.effective_of(C1) is not None
    assert "team-a/grab" not in found.effective_of(C1).policies  # type: ignore[union-attr]
    reason, message = accepted(found, "team-a/grab")
    assert reason == "Unauthorized"
    assert message == ("Policy namespace team-a may not govern Fleet fleet: only the admin "
                       "namespaces (clearance-system) may write policies for it")
    assert found.reach("team-a/grab") == []


@pytest.mark.parametrize(("target", "writers"), [
    (("ClusterSet", "prod"), "the admin namespaces (clearance-system) or a namespace with a "
                             "ManagedClusterSetBinding to prod"),
    (("Cluster", "c1"), "the admin namespaces (clearance-system), c1 (the cluster's "
                        "namespace) or a namespace with a ManagedClusterSetBinding to prod"),
    (("Cluster", "c2"), "the admin namespaces (clearance-system) or c2 (the cluster's "
                        "namespace)"),
    (("Namespace", "c1", "shop"), "the admin namespaces (clearance-system), shop (the "
                                  "namespace of the same name), c1 (the cluster's namespace) "
                                  "or a namespace with a ManagedClusterSetBinding to prod"),
])
def test_the_unauthorized_message_names_the_namespaces_that_may_write_the_target(
        target: tuple[str, ...], writers: str) -> None:
    found = index(access_policy("grab", namespace="team-a", target=target, rules=GRANT))
    reason, message = accepted(found, "team-a/grab")
    assert reason == "Unauthorized"
    assert message.endswith(f"only {writers} may write policies for it")


def test_an_unauthorized_deny_locks_nobody_out_and_an_admin_deny_still_does() -> None:
    lockout = access_policy("lockout", namespace="team-a", target=("Cluster", "c1"),
                            overrides=block(LOCKOUT))
    assert sources(index(lockout), C1) == {}
    admin = access_policy("lockout", namespace="clearance-system", target=("Cluster", "c1"),
                          overrides=block(LOCKOUT))
    assert sources(index(admin), C1) == {"lockout": "clearance-system/lockout:overrides"}


def test_a_missing_target_is_reported_before_authority() -> None:
    found = index(access_policy("grab", namespace="team-a", target=("Cluster", "nowhere"),
                                rules=GRANT))
    assert accepted(found, "team-a/grab")[0] == "TargetNotFound"


# Bindings, clusters and sets move policies in and out --------------------------------


SET_POLICY = access_policy("prod-ops", namespace="team-a", target=("ClusterSet", "prod"),
                           overrides=block({"ops": rule(groups=["ops"])}, "merge"))
CLUSTER_POLICY = access_policy("c1-ops", namespace="team-a", target=("Cluster", "c1"),
                               defaults=block({"c1": rule(groups=["c1-ops"])}, "merge"))


def test_a_binding_brings_a_cluster_set_policy_in_and_its_deletion_takes_it_out() -> None:
    found = index(SET_POLICY, CLUSTER_POLICY)
    assert accepted(found, "team-a/prod-ops")[0] == "Unauthorized"
    change = found.apply(BindingChanged("team-a", "prod", "prod"))
    assert {PROD, C1} <= set(change.effective)
    assert {"team-a/prod-ops", "team-a/c1-ops"} <= change.moved
    assert sources(found, C1) == {"ops": "team-a/prod-ops:overrides",
                                  "c1": "team-a/c1-ops:defaults"}
    assert accepted(found, "team-a/prod-ops")[0] == "Accepted"
    assert sources(found, C2) == {}  # c2 is in no set: the binding gives nothing there
    change = found.apply(BindingChanged("team-a", "prod", None))
    assert sources(found, C1) == {} and {"team-a/prod-ops", "team-a/c1-ops"} <= change.moved
    assert accepted(found, "team-a/c1-ops")[0] == "Unauthorized"


def test_a_binding_named_otherwise_than_its_set_binds_nothing_and_the_policy_says_so() -> None:
    found = index(SET_POLICY, bindings={("team-a", "prod-binding"): "prod"})
    reason, message = accepted(found, "team-a/prod-ops")
    assert reason == "Unauthorized"
    assert message.endswith("ManagedClusterSetBinding team-a/prod-binding binds nothing: a "
                            "binding must be named as its spec.clusterSet (prod)")
    found.apply(BindingChanged("team-a", "prod-binding", None))
    assert "binds nothing" not in accepted(found, "team-a/prod-ops")[1]


def test_a_binding_in_another_namespace_gives_nothing() -> None:
    found = index(SET_POLICY, bindings={("team-b", "prod"): "prod"})
    assert accepted(found, "team-a/prod-ops")[0] == "Unauthorized"


def test_a_cluster_leaving_the_bound_set_takes_its_policies_out() -> None:
    shop = access_policy("shop", namespace="team-a", target=("Namespace", "c1", "shop"),
                         rules={"dev": rule(groups=["dev"])})
    found = index(CLUSTER_POLICY, shop, bindings={("team-a", "prod"): "prod"})
    assert set(sources(found, C1_SHOP)) == {"c1", "dev"}
    change = found.apply(ClusterChanged("c1", {}))
    assert C1_SHOP in change.removed  # no policy that takes part names it any more
    assert sources(found, C1_SHOP) == sources(found, C1) == {}
    assert {"team-a/c1-ops", "team-a/shop"} <= change.moved
    found.apply(ClusterChanged("c1", {CLUSTERSET_LABEL: "prod"}))
    assert set(sources(found, C1_SHOP)) == {"c1", "dev"}


def test_a_cluster_set_vanishing_takes_its_bound_policies_out() -> None:
    found = index(CLUSTER_POLICY, bindings={("team-a", "prod"): "prod"})
    assert sources(found, C1) == {"c1": "team-a/c1-ops:defaults"}
    change = found.apply(ClusterSetChanged("prod", False))
    assert sources(found, C1) == {} and "team-a/c1-ops" in change.moved
    change = found.apply(ClusterSetChanged("prod", True))
    assert sources(found, C1) == {"c1": "team-a/c1-ops:defaults"}
    assert "team-a/c1-ops" in change.moved


def test_a_policy_moving_its_target_out_of_its_authority_leaves_the_old_place() -> None:
    found = index(access_policy("mine", namespace="c1", target=("Cluster", "c1"),
                                rules=GRANT))
    assert sources(found, C1) == {"grab": "c1/mine:rules"}
    change = found.apply(PolicyApplied(compiled(access_policy(
        "mine", namespace="c1", target=("Cluster", "c2"), rules=GRANT))[0]))
    assert C1 in change.effective and sources(found, C1) == sources(found, C2) == {}


# Through the folds ----------------------------------------------------------------------


class Recorder(Store):
    """The AccessPolicy store, and where policies that take no part are listed."""

    def __init__(self) -> None:
        super().__init__()
        self.bindings: dict[tuple[str, str], str] = {}
        self.excluded: dict[str, ExcludedAt] = {}

    def put_cluster_set_binding(self, namespace: str, name: str,
                                cluster_set: str | None) -> None:
        if cluster_set is None:
            self.bindings.pop((namespace, name), None)
        else:
            self.bindings[namespace, name] = cluster_set

    def put_excluded(self, key: str, previous: ExcludedAt | None,
                     new: ExcludedAt | None) -> None:
        assert previous == self.excluded.get(key)
        if new is None:
            self.excluded.pop(key, None)
        else:
            self.excluded[key] = new


def model_and_store() -> tuple[Model, Recorder]:
    model, store = Model(inherit=InheritanceIndex(authority=ADMIN)), Recorder()
    fold(model, store, managed_cluster_set("prod"), seq=1)
    fold(model, store, managed_cluster("c1", "prod"), seq=2)
    return model, store


def test_a_binding_fold_invalidates_the_subjects_it_brings_in_and_publishes_the_status() -> None:
    model, store = model_and_store()
    result = fold(model, store, SET_POLICY, seq=3)
    assert [s.conditions[0].reason for _, s in result.statuses] == ["Unauthorized"]
    assert store.invalidate == Affected()  # it took no part: no decision changed
    assert store.excluded["team-a/prod-ops"].target == PROD
    result = fold(model, store, binding("prod", "team-a"), seq=4)
    assert result.outcome == "compiled" and store.bindings == {("team-a", "prod"): "prod"}
    assert store.invalidate.groups == store.announce.groups == {"ops"}
    assert [s.conditions[0].reason for _, s in result.statuses] == ["Accepted"]
    assert "team-a/prod-ops" not in store.excluded
    result = fold(model, store, binding("prod", "team-a"), "DELETED", seq=5)
    assert result.outcome == "deleted" and store.bindings == {}
    assert store.invalidate.groups == {"ops"}
    assert [s.conditions[0].reason for _, s in result.statuses] == ["Unauthorized"]


@pytest.mark.parametrize(("obj", "stored"), [
    (binding("prod-binding", "team-a", "prod"), {("team-a", "prod-binding"): "prod"}),
    ({**binding("prod", "team-a"), "spec": {}}, {}),
    ({**binding("prod", "team-a"), "spec": {"clusterSet": ["prod"]}}, {}),
    ({**binding("prod", "team-a"), "metadata": {"name": "prod"}}, {}),
])
def test_a_binding_that_binds_nothing_is_invalid_and_grants_nothing(
        obj: dict[str, Any], stored: dict[tuple[str, str], str]) -> None:
    model, store = model_and_store()
    fold(model, store, SET_POLICY, seq=3)
    result = fold(model, store, obj, seq=4)
    assert result.outcome == "invalid" and store.bindings == stored
    assert store.invalidate == Affected()
    assert accepted(model.inherit, "team-a/prod-ops")[0] == "Unauthorized"


def test_an_invalid_policy_is_listed_where_it_was_aimed() -> None:
    model, store = model_and_store()
    broken = access_policy("half", namespace="clearance-system", target=("Cluster", "c1"),
                           rules=GRANT, defaults=block(GRANT))
    fold(model, store, broken, seq=3)
    assert store.excluded["clearance-system/half"].target == C1
    assert store.excluded["clearance-system/half"].entry.reason == "Invalid"
    # Aimed elsewhere with the same error: the listing moves with it.
    fold(model, store, access_policy("half", namespace="clearance-system", target="Fleet",
                                     rules=GRANT, defaults=block(GRANT)), "MODIFIED", seq=4)
    assert store.excluded["clearance-system/half"].target == FLEET
    fold(model, store, access_policy("half", namespace="clearance-system", target="Fleet",
                                     rules=GRANT), "MODIFIED", seq=5)
    assert "clearance-system/half" not in store.excluded


AUTHORS = ("clearance-system", "team-a", "c1", "n1")
FOLD_EVENTS = st.one_of(
    st.tuples(st.just("policy"), st.builds(
        lambda ns, name, target, broken: access_policy(
            name, namespace=ns, target=target, rules={"r": rule(groups=[f"g-{name}"])},
            **({"defaults": block({"x": rule(groups=["x"])})} if broken else {})),
        st.sampled_from(AUTHORS), st.sampled_from(["p", "q"]),
        st.sampled_from(["Fleet", ("ClusterSet", "s1"), ("Cluster", "c1"),
                         ("Namespace", "c1", "n1"), ("Namespace", "c2", "n1")]),
        st.booleans()), st.booleans()),
    st.tuples(st.just("binding"), st.sampled_from(["team-a", "n1"]),
              st.sampled_from(["s1", "s1-binding"]), st.booleans()),
    st.tuples(st.just("cluster"), st.sampled_from(["c1", "c2"]),
              st.sampled_from([None, "s1"]), st.booleans()),
    st.tuples(st.just("set"), st.just("s1"), st.booleans()))


@settings(max_examples=150, deadline=None)
@given(st.lists(FOLD_EVENTS, max_size=14))
def test_what_the_folds_store_is_what_a_restart_on_the_final_state_computes(
        events: list[Any]) -> None:
    """Through the folds, with authority: the effective policies readers see, the
    statuses and where each policy that takes no part is listed equal a rebuild from what
    was stored (policies and bindings) — what a restarted compiler starts from."""
    model, store = Model(inherit=InheritanceIndex(authority=ADMIN)), Recorder()
    for seq, event in enumerate(events, start=1):
        kind, deleted = event[0], "DELETED" if event[-1] else "ADDED"
        if kind == "policy":
            fold(model, store, event[1], deleted, seq)
        elif kind == "binding":
            fold(model, store, binding(event[2], event[1], "s1"), deleted, seq)
        elif kind == "cluster":
            fold(model, store, managed_cluster(event[1], event[2]), deleted, seq)
        else:
            fold(model, store, managed_cluster_set(event[1]), deleted, seq)
    rebuilt = InheritanceIndex.build(store.policies.values(), model.clusters,
                                     model.cluster_sets, authority=ADMIN,
                                     bindings=store.bindings)
    for target in rebuilt.targets():
        expected = rebuilt.effective_of(target)
        assert expected is not None
        assert store.read(target) == {n: r.wire() for n, r in expected.rules.items()}, target
    for key in rebuilt.policies:
        assert store.conditions[key] == status_of(rebuilt, key), key
    listed = {key for key, conditions in store.conditions.items()
              if conditions[0].status == "False"}
    aimed = {key: found.target for key, found in store.excluded.items()}
    assert set(aimed) <= listed
    for key in listed & set(rebuilt.policies):
        assert aimed[key] == rebuilt.policies[key].target
        assert store.excluded[key].entry.message == store.conditions[key][0].message
