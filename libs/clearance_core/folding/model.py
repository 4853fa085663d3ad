"""The compiled state as the compiler holds it in memory, and how a fold writes it.

The compiler is the single writer of the compiled state (one active copy, by lease), so
it keeps that state in a :class:`Model` — loaded from the store when it starts — and each
kind's fold reads the model and nothing else: folds are pure and synchronous, and an
event costs no store reads. A fold records what to persist in a :class:`Writes` (the
store's transaction implements it) and mutates the model to match; if the commit then
fails, the compiler discards the model and reloads it, so the two never drift apart.

A change names two audiences (``Writes.announce`` and ``Writes.invalidate``): whom
clients must hear about on ``clearance.decisions.changed`` (every answer that can change,
reviews included), and which cached decisions the cache must drop (only answers the
decision cache holds: checks, filters, lists). A RoleBinding change is announced but
deletes no cached check: checks never read RBAC.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from clearance_api.wire import StatusCondition
from clearance_core.folding.fold import Affected
from clearance_core.folding.rbac_changes import RbacModel
from clearance_core.inherit.accesspolicy import CompiledAccessPolicy
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.index import InheritanceIndex
from clearance_core.inherit.merge import EffectivePolicy
from clearance_core.inherit.status import ExcludedAt
from clearance_core.monitor.metricsource import CompiledSource
from clearance_core.monitor.policy import CompiledPolicy
from clearance_core.rbac.rules import Binding, Role

if TYPE_CHECKING:  # families.store takes a Model: imported for the annotation only
    from clearance_core.folding.families import Family


class Writes(Protocol):
    """What a fold may persist (implemented by the store's transaction)."""

    announce: Affected
    invalidate: Affected

    def put(self, family: Family, field: str, value: Any) -> None:
        """One field of a family a kind declares (``value`` None: deleted); folds call
        ``families.store``, which also keeps the model and the audiences."""

    def put_policy(self, key: str, previous: CompiledPolicy | None,
                   new: CompiledPolicy | None, obj: bytes | None) -> None:
        """A policy compiled (``new``; ``None``: deleted) and its object as JSON."""

    def put_source(self, key: str, new: CompiledSource | None) -> None: ...

    def put_type_source(self, type_name: str, winner: CompiledSource | None) -> None: ...

    def put_cluster(self, name: str, labels: dict[str, str] | None) -> None: ...

    def put_cluster_set(self, name: str, *, present: bool) -> None: ...

    def put_rbac(self, seq: int, key: str, value: Role | Binding | None) -> None: ...

    def put_namespace(self, name: str, *, present: bool) -> None: ...

    def put_group(self, name: str, previous: list[str] | None,
                  users: list[str] | None) -> None: ...

    def put_access_policy(self, key: str, policy: CompiledAccessPolicy | None,
                          error: str | None) -> None:
        """A valid AccessPolicy (``policy``), an invalid one (``error``) or neither."""

    def put_effective(self, target: Target, effective: EffectivePolicy | None) -> None:
        """A target's effective policy (``None``: the target is no longer materialised)."""

    def put_access_status(self, key: str, conditions: list[StatusCondition] | None) -> None:
        """An AccessPolicy's conditions (``None``: the policy is gone)."""

    def put_cluster_set_binding(self, namespace: str, name: str,
                                cluster_set: str | None) -> None:
        """A ManagedClusterSetBinding's ``spec.clusterSet`` (``None``: gone, or unread)."""

    def put_excluded(self, key: str, previous: ExcludedAt | None,
                     new: ExcludedAt | None) -> None:
        """Where an AccessPolicy that takes no part was aimed, and why (``None``: it takes
        part, or is gone); ``previous``: what was stored for it."""


@dataclass
class Model:
    """Everything folds need to know about what is already compiled."""

    policies: dict[str, CompiledPolicy] = field(default_factory=dict)
    #: The objects the policies were compiled from, as JSON (a MetricSource change
    #: compiles the policies naming its type again). Bytes, not decoded dicts: a fleet's
    #: objects kept as dicts were two thirds of the objects the collector walks again
    #: and again while a fresh fleet is folded.
    policy_objects: dict[str, bytes] = field(default_factory=dict)
    #: Every valid MetricSource by ``ns/name``; several may declare one type.
    sources: dict[str, CompiledSource] = field(default_factory=dict)
    #: The MetricSource in force per type (what the decision service reads).
    type_sources: dict[str, CompiledSource] = field(default_factory=dict)
    clusters: dict[str, dict[str, str]] = field(default_factory=dict)
    cluster_sets: set[str] = field(default_factory=set)
    groups: dict[str, list[str]] = field(default_factory=dict)
    namespaces: set[str] = field(default_factory=set)
    rbac: RbacModel = field(default_factory=RbacModel)
    #: Inherited AccessPolicies: the valid ones and every materialised target's
    #: effective policy (docs/guide/inherited.md), the errors of invalid ones, the conditions last
    #: stored per policy (so only a change is written and published).
    inherit: InheritanceIndex = field(default_factory=InheritanceIndex)
    access_invalid: dict[str, str] = field(default_factory=dict)
    access_status: dict[str, list[StatusCondition]] = field(default_factory=dict)
    #: The target an invalid AccessPolicy names, when its targetRef reads; and where each
    #: policy that takes no part is listed as excluded (``clearance.v1.effective``).
    access_invalid_target: dict[str, Target] = field(default_factory=dict)
    access_excluded: dict[str, ExcludedAt] = field(default_factory=dict)
    #: family name -> field -> value, for the families kinds declare
    #: (``KindSpec.families``); loaded with the rest.
    stored: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: custom type -> keys of the policies whose rules name it.
    _by_type: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    #: group -> how many MonitorAccessPolicies name it.
    _by_group: Counter[str] = field(default_factory=Counter)
    #: keys of the MonitorAccessPolicies selecting clusters by labels.
    _by_labels: set[str] = field(default_factory=set)

    def set_policy(self, key: str, policy: CompiledPolicy | None,
                   obj: bytes | None) -> None:
        old = self.policies.pop(key, None)
        self.policy_objects.pop(key, None)
        # Counted one by one: Counter.update and .subtract (Python, with their checks)
        # were a visible part of folding a fleet of policies naming a group or two each.
        by_group = self._by_group
        if old is not None:
            for type_name in old.custom_types:
                self._by_type[type_name].discard(key)
            for group in old.groups:
                by_group[group] -= 1
            self._by_labels.discard(key)
        if policy is not None:
            self.policies[key] = policy
            for type_name in policy.custom_types:
                self._by_type[type_name].add(key)
            for group in policy.groups:
                by_group[group] += 1
            if any(rule.selector.labels for rule in policy.rules):
                self._by_labels.add(key)
            if obj is not None:
                self.policy_objects[key] = obj

    def policies_naming_type(self, type_name: str) -> list[str]:
        return sorted(self._by_type.get(type_name, ()))

    def policies_selecting_by_labels(self) -> list[CompiledPolicy]:
        """The MonitorAccessPolicies with a ``matchLabels`` selector: the only ones whose
        answers a cluster's labels can change."""
        return [self.policies[key] for key in sorted(self._by_labels)]

    def group_decides(self, group: str) -> bool:
        """Whether a MonitorAccessPolicy or an AccessPolicy rule names the group: joining
        or leaving any other group changes no decision."""
        return self._by_group[group] > 0 or self.rules_name_group(group)

    def rules_name_group(self, group: str) -> bool:
        """Whether an AccessPolicy rule names the group."""
        return any(group in rule.groups for policy in self.inherit.policies.values()
                   for block in policy.blocks for rule in block.rules.values())

    def policies_naming_group(self, group: str) -> list[CompiledPolicy]:
        """The MonitorAccessPolicies whose subjects name the group."""
        if self._by_group[group] <= 0:
            return []
        return [p for p in self.policies.values() if group in p.groups]
