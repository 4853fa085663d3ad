"""The effective policy of every materialised target, kept current event by event.

:class:`InheritanceIndex` is pure and in memory: the compiler owns one, feeds it every
event that can move a target's effective policy, and persists what :meth:`apply` reports.

* :meth:`affected` (no mutation) names the targets an event touches: a Fleet policy every
  target; a ClusterSet policy the set, its member clusters and their namespace targets; a
  Cluster policy the cluster and its namespace targets; a Namespace policy that one target.
  A ManagedCluster whose existence or (existing) cluster set changes: the cluster and its
  namespace targets. A ManagedClusterSet appearing or vanishing: the set and its members.
  A ManagedClusterSetBinding: the scopes of the policies it moves in or out of authority.
* Only the policies their namespace may write take part (:mod:`clearance_core.inherit.authority`):
  a valid policy its namespace may not write is held (its status says ``Unauthorized``)
  but is on no target's path, until a binding, a cluster's set or the policy changes;
  :class:`~clearance_core.inherit.authority_index.Grants` names which policies an event can
  move, and only those are rechecked.
* :meth:`apply` mutates, recomputes exactly those targets and returns a :class:`Change`:
  new effective policies, targets that vanished, the policies on the touched targets'
  paths, and of those the ones whose status may have moved: the policy that changed and
  every policy whose tally (its parts in the targets' effective policies) moved.
* Per policy, a :class:`~clearance_core.inherit.tally.Tally` of its parts in the stored
  effective policies, replaced as targets are recomputed: its conditions are computed
  from that (:func:`clearance_core.inherit.status.status_of`) at the tally's cost, never
  its scope's — a Fleet policy's scope is every target.

Namespace targets are materialised while a valid policy names them and their cluster
exists (see :mod:`clearance_core.inherit.hierarchy`); the Fleet, every existing ClusterSet and every
existing Cluster always are. The result never depends on the order events arrive in: it is
the same as :meth:`build` from the final state (a property the tests check).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

import msgspec

from clearance_core.inherit import hierarchy
from clearance_core.inherit.accesspolicy import CompiledAccessPolicy
from clearance_core.inherit.authority import Authority
from clearance_core.inherit.authority_index import Grants
from clearance_core.inherit.events import (
    BindingChanged,
    Change,
    ClusterChanged,
    ClusterSetChanged,
    Event,
    PolicyApplied,
    PolicyRemoved,
)
from clearance_core.inherit.hierarchy import FLEET, Inventory, Target
from clearance_core.inherit.merge import EffectivePolicy, effective_policy
from clearance_core.inherit.tally import Tallies, Tally

# The events and the change are the index's vocabulary: its users import them from here.
__all__ = ["BindingChanged", "Change", "ClusterChanged", "ClusterSetChanged", "Event",
           "InheritanceIndex", "PolicyApplied", "PolicyRemoved"]

#: ManagedClusterSetBindings as the index is built from them: (namespace, name) ->
#: spec.clusterSet.
Bindings = Mapping[tuple[str, str], str]


class InheritanceIndex:
    def __init__(self, *, allow_unset: bool = True,
                 authority: Authority | None = None) -> None:
        self.allow_unset = allow_unset
        self.inventory = Inventory()
        #: Every valid policy, whether or not its namespace may write it.
        self.policies: dict[str, CompiledAccessPolicy] = {}
        #: The bindings, and the valid policies that take no part (``grants.denied``).
        self.grants = Grants(authority or Authority())
        self.effective: dict[Target, EffectivePolicy] = {FLEET: EffectivePolicy(target=FLEET)}
        self._at: dict[Target, dict[str, CompiledAccessPolicy]] = defaultdict(dict)
        #: cluster -> Namespace targets named by policies that take part (whether the
        #: cluster exists or not)
        self._namespaces: dict[str, set[Target]] = defaultdict(set)
        #: set name -> clusters whose label names it (whether the set exists or not)
        self._members: dict[str, set[str]] = defaultdict(set)
        #: Every policy's parts in the stored effective policies (what its status needs).
        self._tallies = Tallies()

    @classmethod
    def build(cls, policies: Iterable[CompiledAccessPolicy],
              clusters: Mapping[str, Mapping[str, str]], cluster_sets: Iterable[str], *,
              allow_unset: bool = True, authority: Authority | None = None,
              bindings: Bindings | None = None) -> InheritanceIndex:
        """From scratch (a restart): every materialised target computed once."""
        index = cls(allow_unset=allow_unset, authority=authority)
        index.inventory = Inventory({name: dict(labels) for name, labels in clusters.items()},
                                    set(cluster_sets))
        for (namespace, name), bound_to in (bindings or {}).items():
            index.grants.put_binding(BindingChanged(namespace, name, bound_to))
        for name, labels in index.inventory.clusters.items():
            set_name = hierarchy.labels_set(labels)
            if set_name:
                index._members[set_name].add(name)
        for policy in policies:
            index._add(policy)
        index.effective = {}
        shared: dict[frozenset[int], EffectivePolicy] = {}
        for target in index.targets():
            index._store(target, index.compute(target, shared))
        return index

    def copy(self) -> InheritanceIndex:
        """An independent copy (the values are immutable and shared); for simulations."""
        other = InheritanceIndex(allow_unset=self.allow_unset)
        other.inventory = self.inventory.copy()
        other.policies = dict(self.policies)
        other.grants = self.grants.copy()
        other.effective = dict(self.effective)
        for target, at in self._at.items():
            other._at[target] = dict(at)
        for name, targets in self._namespaces.items():
            other._namespaces[name] = set(targets)
        for name, members in self._members.items():
            other._members[name] = set(members)
        other._tallies = self._tallies.copy()
        return other

    # Queries ----------------------------------------------------------------------------

    def materialised(self, target: Target) -> bool:
        if target.kind == "Namespace":
            return self.inventory.exists(target) and bool(self._at.get(target))
        return self.inventory.exists(target)

    def targets(self) -> list[Target]:
        """Every materialised target, in listing order."""
        found = [FLEET]
        found += [hierarchy.cluster_set(name) for name in self.inventory.cluster_sets]
        for name in self.inventory.clusters:
            found.append(hierarchy.cluster(name))
            found += [t for t in self._namespaces.get(name, ()) if self._at.get(t)]
        return sorted(found, key=Target.sort_key)

    def namespace_targets(self, cluster_name: str) -> dict[str, EffectivePolicy]:
        """The materialised Namespace targets of a cluster, by namespace (sorted)."""
        found = {target.name: self.effective[target]
                 for target in self._namespaces.get(cluster_name, ())
                 if target in self.effective}
        return dict(sorted(found.items()))

    def on_path(self, target: Target) -> list[CompiledAccessPolicy]:
        path = self.inventory.path(target) or ()
        return [policy for step in path for policy in self._at.get(step, {}).values()]

    def compute(self, target: Target,
                shared: dict[frozenset[int], EffectivePolicy] | None = None) -> EffectivePolicy:
        """The effective policy of an existing target from the current state.

        ``shared`` (for one batch of targets, while the policies do not change) holds the
        merges already done by the set of policies merged: a target with the same
        policies on its path has the same effective policy but for its name. A Fleet
        policy touches every target, and most have no policy but the Fleet's: without
        it, each would merge (and evaluate the conditions of) the same policies again."""
        policies = self.on_path(target)
        if shared is None:
            return effective_policy(target, policies, allow_unset=self.allow_unset)
        key = frozenset(id(policy) for policy in policies)
        found = shared.get(key)
        if found is None:
            found = shared[key] = effective_policy(target, policies,
                                                   allow_unset=self.allow_unset)
        return found if found.target == target else msgspec.structs.replace(found,
                                                                            target=target)

    def effective_of(self, target: Target) -> EffectivePolicy | None:
        """What ``clearance.v1.effective`` answers; None for a target that does not exist.
        A Namespace no policy names gets its cluster's rules, under its own name."""
        found = self.effective.get(target)
        if found is not None or not self.inventory.exists(target):
            return found
        source = hierarchy.derived_from(target)
        derived = self.effective.get(source) if source is not None else None
        return self.compute(target) if derived is None else \
            msgspec.structs.replace(derived, target=target)

    def scope(self, target: Target) -> list[Target]:
        """The materialised targets whose path contains ``target`` (itself included)."""
        if not self.inventory.exists(target):
            return []
        if target.kind == "Fleet":
            return self.targets()
        if target.kind == "Namespace":
            return [target] if self.materialised(target) else []
        if target.kind == "ClusterSet":
            clusters = [c for c in self._members.get(target.name, ())
                        if self.inventory.set_of(c) == target.name]
            found = [target]
        else:
            clusters, found = [target.name], []
        for name in clusters:
            found.append(hierarchy.cluster(name))
            found += [t for t in self._namespaces.get(name, ()) if self._at.get(t)]
        return sorted(found, key=Target.sort_key)

    def in_scope(self, policy: CompiledAccessPolicy) -> list[EffectivePolicy]:
        """The effective policies of every target the policy takes part in."""
        return [self.effective[t] for t in self.scope(policy.target) if t in self.effective]

    def reach(self, policy: str, rule: str | None = None) -> list[Target]:
        """Every target whose effective policy holds that policy's rules (or that rule)."""
        return sorted((t for t, eff in self.effective.items() if eff.holds(policy, rule)),
                      key=Target.sort_key)

    def tally(self, key: str) -> Tally:
        """The policy's parts in the effective policies of its scope (read only)."""
        return self._tallies.get(key)

    def takes_part(self, key: str) -> bool:
        """Whether a valid policy's namespace may write it (it is then on the paths below
        its target, if that exists)."""
        return key in self.policies and key not in self.grants.denied

    def unauthorized(self, key: str) -> str | None:
        """Why a valid policy takes no part for want of authority (None: it may)."""
        if key not in self.grants.denied:
            return None
        return self.grants.message(self.policies[key], self.inventory)

    def policies_on_paths(self, targets: Iterable[Target]) -> set[str]:
        steps = {step for t in targets for step in (self.inventory.path(t) or ())}
        return {key for step in steps for key in self._at.get(step, {})}

    # Events -----------------------------------------------------------------------------

    def affected(self, event: Event) -> set[Target]:
        """The materialised targets (before or after the event) it can change."""
        if isinstance(event, PolicyApplied | PolicyRemoved):
            key = event.policy.key if isinstance(event, PolicyApplied) else event.key
            touched = set()
            if self.takes_part(key):
                touched.update(self.scope(self.policies[key].target))
            if isinstance(event, PolicyApplied) and \
                    self.grants.allows(event.policy, self.inventory):
                touched.update(self._appearing(event.policy.target))
            return touched
        if isinstance(event, BindingChanged):
            bound = self.grants.bound_after(event)
            touched = set()
            for key in self.grants.candidates(event):
                policy = self.policies[key]
                if self.grants.allows(policy, self.inventory, bound) != self.takes_part(key):
                    touched.update(self._appearing(policy.target))
            return touched
        if isinstance(event, ClusterChanged):
            before = self._cluster_state(event.name)
            after = None
            if event.labels is not None:
                label = hierarchy.labels_set(event.labels)
                after = label if label in self.inventory.cluster_sets else ""
            if before == after:
                return set()
            # Its namespaces' policies may move in or out of authority with its set.
            return {hierarchy.cluster(event.name)} | {
                t for t in self._namespaces.get(event.name, ()) if self._at.get(t)} | \
                self._namespace_targets(event)
        target = hierarchy.cluster_set(event.name)
        if (event.name in self.inventory.cluster_sets) == event.present:
            return set()
        found = {target}
        for name in self._members.get(event.name, ()):
            if name in self.inventory.clusters:
                found.add(hierarchy.cluster(name))
                found.update(t for t in self._namespaces.get(name, ()) if self._at.get(t))
        return found | self._namespace_targets(event)

    def _appearing(self, target: Target) -> set[Target]:
        """The scope of a policy taking part at ``target`` (a Namespace target appears
        with its first such policy)."""
        found = set(self.scope(target))
        if target.kind == "Namespace" and self.inventory.exists(target):
            found.add(target)
        return found

    def _namespace_targets(self, event: ClusterChanged | ClusterSetChanged) -> set[Target]:
        """The Namespace targets of the policies whose authority the event can move."""
        members = self._members.get(event.name, ()) \
            if isinstance(event, ClusterSetChanged) else ()
        keys = self.grants.candidates(event, members)
        return {t for t in self.grants.namespace_targets(keys, self.policies)
                if t.cluster in self.inventory.clusters
                or isinstance(event, ClusterChanged)}

    def _cluster_state(self, name: str) -> str | None:
        """None: no such cluster; "": no (existing) set; else the set on its path."""
        if name not in self.inventory.clusters:
            return None
        return self.inventory.set_of(name) or ""

    def apply(self, event: Event) -> Change:
        """Mutate the index by one event and recompute what it touched."""
        touched = self.affected(event)
        change = Change()
        change.policies = self.policies_on_paths(touched)
        change.previous = {t: self.effective[t] for t in touched if t in self.effective}
        if isinstance(event, PolicyApplied):
            self._remove(event.policy.key)
            self._add(event.policy)
            change.moved.add(event.policy.key)
        elif isinstance(event, PolicyRemoved):
            self._remove(event.key)
            change.moved.add(event.key)
        else:
            change.moved |= self._place_event(event, bool(touched))
        change.policies |= change.moved | self.policies_on_paths(touched)
        shared: dict[frozenset[int], EffectivePolicy] = {}
        for target in sorted(touched, key=Target.sort_key):
            if self.materialised(target):
                change.effective[target] = effective = self.compute(target, shared)
                self._store(target, effective, change.moved)
            elif self._store(target, None, change.moved) is not None:
                change.removed.add(target)
        return change

    def _place_event(self, event: BindingChanged | ClusterChanged | ClusterSetChanged,
                     moves: bool) -> set[str]:
        """Apply a binding, cluster or cluster-set event (``moves``: whether it changes
        any target) and recheck the authority of the policies it can move. Returns the
        policies whose status it can move that way: those moved in or out of authority,
        and those still held back (their message names the bindings and the set)."""
        candidates: set[str] = set()
        if isinstance(event, BindingChanged):
            candidates = self.grants.candidates(event)
            self.grants.put_binding(event)
        elif isinstance(event, ClusterChanged):
            if moves:
                candidates = self.grants.candidates(event)
            self._put_cluster(event.name, event.labels)
        elif moves:
            candidates = self.grants.candidates(event, self._members.get(event.name, ()))
            if event.present:
                self.inventory.cluster_sets.add(event.name)
            else:
                self.inventory.cluster_sets.discard(event.name)
        moved = set()
        for key in sorted(candidates):
            policy = self.policies[key]
            allowed = self.grants.allows(policy, self.inventory)
            if allowed and not self.takes_part(key):
                self.grants.denied.discard(key)
                self._place(policy)
            elif not allowed and self.takes_part(key):
                self._unplace(policy)
                self.grants.denied.add(key)
            elif allowed:
                continue
            moved.add(key)
        return moved

    def _store(self, target: Target, effective: EffectivePolicy | None,
               moved: set[str] | None = None) -> EffectivePolicy | None:
        """Keep (``None``: forget) a target's effective policy and the parts it gives the
        policies on its path, adding to ``moved`` the policies whose tally's version moved;
        returns what it had before."""
        old = self.effective.pop(target, None)
        changed = self._tallies.replace(target, old, effective)
        if moved is not None:
            moved.update(changed)
        if effective is not None:
            self.effective[target] = effective
        return old

    def _add(self, policy: CompiledAccessPolicy) -> None:
        self.policies[policy.key] = policy
        self._tallies.shape(policy)
        allowed = self.grants.allows(policy, self.inventory)
        self.grants.track(policy, allowed=allowed)
        if allowed:
            self._place(policy)

    def _remove(self, key: str) -> None:
        policy = self.policies.pop(key, None)
        if policy is None:
            return
        self._tallies.forget(key)
        if key not in self.grants.denied:
            self._unplace(policy)
        self.grants.untrack(policy)

    def _place(self, policy: CompiledAccessPolicy) -> None:
        """Put a policy that takes part on the paths below its target."""
        self._at[policy.target][policy.key] = policy
        if policy.target.kind == "Namespace" and policy.target.cluster is not None:
            self._namespaces[policy.target.cluster].add(policy.target)

    def _unplace(self, policy: CompiledAccessPolicy) -> None:
        at = self._at.get(policy.target)
        if at is not None:
            at.pop(policy.key, None)
            if not at:
                del self._at[policy.target]
                cluster = policy.target.cluster
                if policy.target.kind == "Namespace" and cluster is not None:
                    self._namespaces[cluster].discard(policy.target)
                    if not self._namespaces[cluster]:
                        del self._namespaces[cluster]

    def _put_cluster(self, name: str, labels: Mapping[str, str] | None) -> None:
        old = self.inventory.clusters.get(name)
        old_set = hierarchy.labels_set(old)
        if old_set is not None:
            self._members[old_set].discard(name)
            if not self._members[old_set]:
                del self._members[old_set]
        if labels is None:
            self.inventory.clusters.pop(name, None)
            return
        self.inventory.clusters[name] = dict(labels)
        new_set = hierarchy.labels_set(labels)
        if new_set is not None:
            self._members[new_set].add(name)
