"""Where an item lives, and which Namespace targets of a cluster concern one principal.

An item is judged by the effective policy of the place it lives in
(:func:`clearance_core.kube.resources.home_namespace`): its namespace's target, or the
cluster's. A question that names no home — a whole type, or a namespaced item asked
without its namespace (:func:`spreads`) — is about items that may live in any namespace
of the cluster, so it is judged over every Namespace target that could answer it
differently from the cluster's target (:mod:`clearance_core.questions.spread`,
:mod:`clearance_core.questions.placed`).

Which targets can answer differently, for one principal? A decision reads of a target
only the rules whose subjects match the principal (everything else it reads — the
MonitorAccessPolicies, the declared custom types — belongs to the cluster). So a
Namespace target answers exactly as its cluster's target unless a rule that matches the
principal differs between the two: present in one only, or changed. A rule that differs
matters only to its own subjects. :class:`NamespaceIndex` keeps, for one cluster, each
Namespace target's differing rules and, keyed by their subjects (users and service
accounts by name, groups by group), the targets where they differ; a principal's
targets are then the union over its names and groups, confirmed rule by rule
(:meth:`NamespaceIndex.concerning`) — the cost of a question is what concerns the
principal, not the number of Namespace targets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from clearance_core.inherit.decide import subjects_match
from clearance_core.inherit.merge import EffectivePolicy, EffectiveRule
from clearance_core.kube.principal import Identity
from clearance_core.kube.resources import CLUSTER_SCOPED, home_namespace, singular

#: One rule that differs between a Namespace target and its cluster's: (there, cluster's).
Difference = tuple[EffectiveRule | None, EffectiveRule | None]


def spreads(type_name: str, name: str, namespace: str | None) -> bool:
    """Whether a question about ``type_name`` (``name``, ``namespace`` as the request
    gives them) is about items that may live in any namespace of the cluster: anything
    but a cluster, a node (they live in no namespace), a namespace item (it lives in
    itself) and an item or type placed in a namespace. BadRequest as
    :func:`home_namespace`."""
    if singular(type_name) in CLUSTER_SCOPED:
        return False
    return home_namespace(type_name, name, namespace) is None


def differences(rules: Mapping[str, EffectiveRule],
                base: Mapping[str, EffectiveRule]) -> tuple[Difference, ...]:
    """The rules (by name) that differ between a Namespace target's effective ``rules``
    and its cluster's (``base``)."""
    found: list[Difference] = []
    for name in sorted(rules.keys() | base.keys()):
        there, here = rules.get(name), base.get(name)
        if there != here:
            found.append((there, here))
    return tuple(found)


def _subjects(diff: Iterable[Difference]) -> tuple[set[str], set[str]]:
    """(names, groups) the differing rules name: users and service accounts by name."""
    names: set[str] = set()
    groups: set[str] = set()
    for pair in diff:
        for found in pair:
            if found is not None:
                names.update(found.rule.users, found.rule.service_accounts)
                groups.update(found.rule.groups)
    return names, groups


def differs(diff: Iterable[Difference], identity: Identity) -> bool:
    """Whether a target with these differences answers ``identity`` otherwise than its
    cluster's target: some differing rule matches it (on either side)."""
    return any((there is not None and subjects_match(there.rule, identity))
               or (here is not None and subjects_match(here.rule, identity))
               for there, here in diff)


class NamespaceIndex:
    """The Namespace targets of one cluster, by the subjects they can answer differently
    (see the module's docstring). ``base``: the rules of the cluster's target (its own
    effective policy, else the Fleet's)."""

    __slots__ = ("_base", "_by_group", "_by_name", "_diffs", "_keys", "targets")

    def __init__(self, base: Mapping[str, EffectiveRule] | None = None,
                 targets: Mapping[str, EffectivePolicy] | None = None) -> None:
        self._base: Mapping[str, EffectiveRule] = base or {}
        self._fill(targets or {})

    def _fill(self, targets: Mapping[str, EffectivePolicy]) -> None:
        self.targets: dict[str, EffectivePolicy] = {}
        self._diffs: dict[str, tuple[Difference, ...]] = {}
        self._keys: dict[str, tuple[set[str], set[str]]] = {}
        self._by_name: dict[str, set[str]] = {}
        self._by_group: dict[str, set[str]] = {}
        for namespace, effective in targets.items():
            self.put(namespace, effective)

    def __len__(self) -> int:
        return len(self.targets)

    def put(self, namespace: str, effective: EffectivePolicy | None) -> None:
        """A Namespace target's new effective policy (None: it is gone)."""
        self._unlink(namespace)
        if effective is None:
            self.targets.pop(namespace, None)
            return
        self.targets[namespace] = effective
        diff = differences(effective.rules, self._base)
        if not diff:
            return
        self._diffs[namespace] = diff
        names, groups = keys = _subjects(diff)
        self._keys[namespace] = keys
        for name in names:
            self._by_name.setdefault(name, set()).add(namespace)
        for group in groups:
            self._by_group.setdefault(group, set()).add(namespace)

    def rebase(self, base: Mapping[str, EffectiveRule]) -> None:
        """The cluster's rules changed: every target's differences are recomputed."""
        if base == self._base:
            return
        self._base = base
        self._fill(self.targets)

    def _unlink(self, namespace: str) -> None:
        self._diffs.pop(namespace, None)
        keys = self._keys.pop(namespace, None)
        if keys is None:
            return
        for index, members in ((self._by_name, keys[0]), (self._by_group, keys[1])):
            for member in members:
                found = index.get(member)
                if found is not None:
                    found.discard(namespace)
                    if not found:
                        del index[member]

    def concerning(self, identity: Identity) -> dict[str, EffectivePolicy]:
        """The Namespace targets that answer ``identity`` otherwise than the cluster's
        target, by namespace name (sorted)."""
        if not self._diffs:
            return {}
        candidates: set[str] = set()
        for name in identity.names:
            candidates.update(self._by_name.get(name, ()))
        by_group = self._by_group
        if len(identity.groups) <= len(by_group):
            for group in identity.groups:
                candidates.update(by_group.get(group, ()))
        else:
            for group, members in by_group.items():
                if group in identity.groups:
                    candidates.update(members)
        return {namespace: self.targets[namespace] for namespace in sorted(candidates)
                if differs(self._diffs[namespace], identity)}
