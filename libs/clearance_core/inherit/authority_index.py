"""The inheritance index's share of the policy authority (:mod:`clearance_core.inherit.authority`):
the ManagedClusterSetBindings, which valid policies their namespaces may not write, and
which policies an event can move in or out of authority.

A policy's authority depends on its namespace and target, the admin namespaces, the
(existing) cluster set of its target's cluster and the bindings of its namespace. So:

* a ManagedClusterSetBinding in namespace X can move the policies of X;
* a ManagedCluster C whose cluster set (or existence) changes can move the policies
  aimed at C and at its namespaces;
* a ManagedClusterSet S appearing or vanishing can move those aimed at the clusters
  labelled S and their namespaces (their set changes), and its own policies' status
  (``TargetNotFound`` comes before ``Unauthorized``).

:meth:`Grants.candidates` names exactly those, so an event rechecks a handful of
policies — never all of them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from clearance_core.inherit.accesspolicy import CompiledAccessPolicy
from clearance_core.inherit.authority import Authority, Writers, unauthorized
from clearance_core.inherit.events import BindingChanged, ClusterChanged, ClusterSetChanged
from clearance_core.inherit.hierarchy import Inventory, Target

Bound = Callable[[str, str], bool]


def _cluster_of(target: Target) -> str | None:
    if target.kind == "Cluster":
        return target.name
    return target.cluster if target.kind == "Namespace" else None


class Grants:
    def __init__(self, authority: Authority) -> None:
        self.authority = authority
        #: (namespace, name) -> spec.clusterSet of every readable binding, bound or not.
        self.bindings: dict[tuple[str, str], str] = {}
        #: (namespace, set) pairs a binding binds (named as its set).
        self._bound: set[tuple[str, str]] = set()
        #: (namespace, set) -> names of bindings naming that set under another name.
        self._mismatched: dict[tuple[str, str], set[str]] = defaultdict(set)
        #: Keys of the valid policies their namespace may not write.
        self.denied: set[str] = set()
        self._by_namespace: dict[str, set[str]] = defaultdict(set)
        self._by_cluster: dict[str, set[str]] = defaultdict(set)
        self._by_set: dict[str, set[str]] = defaultdict(set)

    def copy(self) -> Grants:
        other = Grants(self.authority)
        other.bindings = dict(self.bindings)
        other._bound = set(self._bound)
        for (table, mine) in ((other._mismatched, self._mismatched),
                              (other._by_namespace, self._by_namespace),
                              (other._by_cluster, self._by_cluster),
                              (other._by_set, self._by_set)):
            for key, members in mine.items():
                table[key] = set(members)  # type: ignore[index]
        other.denied = set(self.denied)
        return other

    # Bindings ---------------------------------------------------------------------------

    def bound(self, namespace: str, set_name: str) -> bool:
        return (namespace, set_name) in self._bound

    def bound_after(self, event: BindingChanged) -> Bound:
        """:meth:`bound` as it will be once ``event`` is applied."""
        pair = (event.namespace, event.name)
        binds = event.binds
        return lambda namespace, set_name: binds if (namespace, set_name) == pair \
            else (namespace, set_name) in self._bound

    def put_binding(self, event: BindingChanged) -> None:
        pair = (event.namespace, event.name)
        old = self.bindings.pop(pair, None)
        self._bound.discard(pair)
        if old is not None and old != event.name:
            self._forget_mismatch(event.namespace, old, event.name)
        if event.cluster_set is None or not event.namespace:
            return
        self.bindings[pair] = event.cluster_set
        if event.binds:
            self._bound.add(pair)
        else:
            self._mismatched[event.namespace, event.cluster_set].add(event.name)

    def _forget_mismatch(self, namespace: str, set_name: str, name: str) -> None:
        names = self._mismatched.get((namespace, set_name))
        if names is not None:
            names.discard(name)
            if not names:
                del self._mismatched[namespace, set_name]

    # Policies ---------------------------------------------------------------------------

    def writers(self, policy: CompiledAccessPolicy, inventory: Inventory) -> Writers:
        cluster = _cluster_of(policy.target)
        return self.authority.writers(
            policy.target, inventory.set_of(cluster) if cluster is not None else None)

    def allows(self, policy: CompiledAccessPolicy, inventory: Inventory,
               bound: Bound | None = None) -> bool:
        return self.writers(policy, inventory).allow(policy.namespace, bound or self.bound)

    def message(self, policy: CompiledAccessPolicy, inventory: Inventory) -> str:
        """Why a denied policy takes no part (its ``Accepted`` message)."""
        writers = self.writers(policy, inventory)
        mismatched = () if writers.bound_set is None else \
            self._mismatched.get((policy.namespace, writers.bound_set), ())
        return unauthorized(policy.namespace, policy.target, writers, mismatched)

    def track(self, policy: CompiledAccessPolicy, *, allowed: bool) -> None:
        key = policy.key
        self._by_namespace[policy.namespace].add(key)
        for table, at in self._place_of(policy.target):
            table[at].add(key)
        if not allowed:
            self.denied.add(key)

    def untrack(self, policy: CompiledAccessPolicy) -> None:
        key = policy.key
        self.denied.discard(key)
        for table, at in ((self._by_namespace, policy.namespace),
                          *self._place_of(policy.target)):
            members = table.get(at)
            if members is not None:
                members.discard(key)
                if not members:
                    del table[at]

    def _place_of(self, target: Target) -> list[tuple[dict[str, set[str]], str]]:
        cluster = _cluster_of(target)
        if cluster is not None:
            return [(self._by_cluster, cluster)]
        if target.kind == "ClusterSet":
            return [(self._by_set, target.name)]
        return []

    # Events -----------------------------------------------------------------------------

    def candidates(self, event: BindingChanged | ClusterChanged | ClusterSetChanged,
                   members: Iterable[str] = ()) -> set[str]:
        """The policies whose authority or Unauthorized message the event can move:
        a binding's namespace's, a cluster's, or (``members``: the clusters labelled
        with the set) a set's and its clusters'."""
        if isinstance(event, BindingChanged):
            return set(self._by_namespace.get(event.namespace, ()))
        if isinstance(event, ClusterChanged):
            return set(self._by_cluster.get(event.name, ()))
        found = set(self._by_set.get(event.name, ()))
        for cluster in members:
            found.update(self._by_cluster.get(cluster, ()))
        return found

    def namespace_targets(self, keys: Iterable[str],
                          policies: dict[str, CompiledAccessPolicy]) -> set[Target]:
        """The Namespace targets of those policies (they appear with their first policy
        that takes part, and vanish with their last)."""
        return {policies[k].target for k in keys
                if k in policies and policies[k].target.kind == "Namespace"}
