"""Fold one stream event into the compiled value of its object (pure; the compiler stores).

Each ``fold_*`` function takes the event and the object's previous compiled value and
returns the new value (``None``: the object is gone or takes no effect) together with the
principals and clusters whose decisions the change can affect — exactly those, so the
cache-invalidator never has to guess or scan:

- a policy: the old and the new subjects (users, service accounts, groups);
- a Group: the users added or removed (a rename of the membership is both);
- a ManagedCluster: the cluster itself, when its existence or labels change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from clearance_api.errors import InvalidObject
from clearance_api.wire import PolicyState
from clearance_core.folding.narrowing import Narrow
from clearance_core.kube import objects, strict
from clearance_core.monitor.filters import BUILTIN_TYPES
from clearance_core.monitor.metricsource import CompiledSource, field_violations
from clearance_core.monitor.policy import CompiledPolicy, compile_policy, invalid_policy


class Affected(msgspec.Struct, kw_only=True):
    users: set[str] = msgspec.field(default_factory=set)
    groups: set[str] = msgspec.field(default_factory=set)
    clusters: set[str] = msgspec.field(default_factory=set)
    all: bool = False
    #: When not empty, the users' and groups' answers change only about these clusters
    #: (a ManagedCluster change alters no answer about another cluster): only their
    #: entries about them are invalidated. Announcements ignore it.
    within: set[str] = msgspec.field(default_factory=set)
    #: Not None: of the users' and groups' cached checks, only those this narrowing
    #: drops (``clearance_core.folding.narrowing``). Announcements ignore it.
    narrow: Narrow | None = None
    #: The names of the inventory or of the declared types changed: the cached answers
    #: that warn of a cluster or a type Clearance does not know go (README: Warnings).
    #: Announcements ignore it.
    unknown: bool = False

    def __bool__(self) -> bool:
        return bool(self.users or self.groups or self.clusters or self.all or self.unknown)

    def copy(self) -> Affected:
        return Affected(users=set(self.users), groups=set(self.groups),
                        clusters=set(self.clusters), all=self.all, within=set(self.within),
                        narrow=self.narrow, unknown=self.unknown)

    def update(self, other: Affected) -> None:
        # One narrowing covers all the subjects of a record: the union of both, or none
        # if either side's subjects are not narrowed.
        if other.users or other.groups:
            if not (self.users or self.groups):
                self.narrow = other.narrow
            elif self.narrow is None or other.narrow is None:
                self.narrow = None
            else:
                self.narrow = self.narrow.union(other.narrow)
        self.users |= other.users
        self.groups |= other.groups
        self.clusters |= other.clusters
        self.all = self.all or other.all
        self.unknown = self.unknown or other.unknown

    def add_policy_subjects(self, policy: CompiledPolicy | None) -> None:
        if policy is None:
            return
        self.users.update(policy.users)
        self.users.update(policy.service_accounts)
        self.groups.update(policy.groups)


def fold_policy(
    event_type: str,
    obj: dict[str, Any],
    previous: CompiledPolicy | None,
    sources: Mapping[str, CompiledSource],
) -> tuple[CompiledPolicy | None, Affected]:
    """New compiled policy (possibly an invalid record), or None when deleted.

    ``sources`` are the MetricSources by type: a field filter on a field its type does not
    declare filterable makes the policy invalid."""
    new: CompiledPolicy | None
    if event_type == "DELETED":
        new = None
    else:
        try:
            new = without_undeclared_types(compile_policy(obj), sources)
            problems = field_violations(new, sources)
            if problems:
                # Keep custom_types so a later MetricSource change re-checks this policy.
                new = msgspec.structs.replace(new, valid=False, error="; ".join(problems))
        except InvalidObject as exc:
            # Withdraw the previous valid version too; keep a record for status/traces.
            new = invalid_policy(obj, exc.message)
    return new, policy_change(previous, new)


def policy_change(previous: CompiledPolicy | None, new: CompiledPolicy | None) -> Affected:
    """Whose answers a policy going from ``previous`` to ``new`` can change."""
    affected = Affected()
    if previous != new:
        affected.add_policy_subjects(previous)
        affected.add_policy_subjects(new)
    return affected


def without_undeclared_types(
    policy: CompiledPolicy, sources: Mapping[str, CompiledSource]
) -> CompiledPolicy:
    """Drop the resource filters of custom types no MetricSource declares.

    Such a type is unknown (README: Principals): hidden for checks and filters and absent
    from ``custom-types`` until a MetricSource declares it, and an unlisted custom type is
    exactly that. ``custom_types`` keeps the name, so the MetricSource's arrival re-folds
    this policy (and its status carries the warning meanwhile)."""
    declared = BUILTIN_TYPES.union(sources)
    if all(f.type in declared for rule in policy.rules for f in rule.filters):
        return policy
    rules = tuple(
        msgspec.structs.replace(rule, filters=tuple(f for f in rule.filters
                                                    if f.type in declared))
        for rule in policy.rules)
    return msgspec.structs.replace(policy, rules=rules)


def cluster_labels(obj: dict[str, Any]) -> dict[str, str]:
    meta = objects.mapping(obj.get("metadata"), "metadata")
    labels = objects.mapping(meta.get("labels"), "metadata.labels")
    return {key: objects.text(value, f"metadata.labels.{key}")
            for key, value in labels.items() if value is not None}


def fold_cluster(
    event_type: str, name: str, obj: dict[str, Any], previous: dict[str, str] | None
) -> tuple[dict[str, str] | None, Affected]:
    new = None if event_type == "DELETED" else cluster_labels(obj)
    affected = Affected()
    if new != previous:
        affected.clusters.add(name)
    return new, affected


def group_users(obj: dict[str, Any]) -> list[str]:
    # One odd entry must not drop the whole Group (its members would lose access):
    # scalars count in their JSON form, nulls are absent (README: Conventions). A field a
    # Group does not have is an error, though: the whole Group is then withdrawn.
    strict.check_object("group", obj)
    return sorted(set(objects.texts(obj.get("users"), "users")))


def fold_group(
    event_type: str, obj: dict[str, Any], previous: list[str] | None
) -> tuple[list[str] | None, Affected]:
    new = None if event_type == "DELETED" else group_users(obj)
    affected = Affected()
    affected.users.update(set(previous or ()) ^ set(new or ()))
    return new, affected


def policy_state(policy: CompiledPolicy, now: float) -> tuple[PolicyState, str]:
    """ClusterPulse's status ``state`` and ``message`` for a compiled policy."""
    if not policy.valid:
        return "Error", policy.error or "invalid"
    if policy.not_after is not None and now >= policy.not_after:
        return "Expired", "validity window ended (notAfter)"
    if not policy.enabled:
        return "Inactive", "disabled (spec.access.enabled: false)"
    if policy.not_before is not None and now < policy.not_before:
        return "Inactive", "not yet valid (notBefore)"
    return "Active", "compiled and in force"
