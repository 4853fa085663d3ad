"""AccessPolicy (README: Inherited): compile, keep every target's effective policy current,
report RFC 0009 conditions.

The model's :class:`~clearance_core.inherit.index.InheritanceIndex` does the work: each
event that can move an effective policy — an AccessPolicy, a ManagedCluster (existence or
cluster-set label), a ManagedClusterSet, a ManagedClusterSetBinding (which policies take
part: :mod:`clearance_core.inherit.authority`) — becomes one index event, and :func:`follow`
persists exactly what it changed:

- the effective policy of every recomputed target that has a policy of its own on its
  path besides the Fleet's (others read the Fleet's), and the targets that vanished;
- whom it concerns: the subjects of every rule added, removed or changed on those
  targets (:func:`clearance_core.inherit.merge.subjects_changed`, old and new), both announced
  and invalidated — cached checks read effective rules; for a Namespace target that
  appears or vanishes, the subjects of its rules and of its cluster's, which its
  namespace reads without it;
- the conditions of every policy whose status may have moved (``Change.moved``), stored
  and published only when they differ from what was last stored; and, for one that is not
  accepted, where it was aimed and why it takes no part (``excluded`` in
  ``clearance.v1.effective``).

An AccessPolicy that does not compile withdraws its previous version whole (never half
applied), and its status says why (``Accepted`` False ``Invalid``).
"""

from __future__ import annotations

from clearance_api.errors import InvalidObject
from clearance_api.wire import PolicyStatus, StatusCondition
from clearance_core.folding import status
from clearance_core.folding.fold import Affected
from clearance_core.folding.folds import FoldEvent, FoldResult
from clearance_core.folding.kinds import ObjectRef
from clearance_core.folding.model import Model, Writes
from clearance_core.inherit import hierarchy
from clearance_core.inherit.accesspolicy import aimed_at, compile_access_policy
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.index import Change, Event, PolicyApplied, PolicyRemoved
from clearance_core.inherit.merge import EffectivePolicy, subjects_changed
from clearance_core.inherit.status import excluded, invalid_conditions, status_of

KIND = "accesspolicy"


def fold(model: Model, tx: Writes, event: FoldEvent) -> FoldResult:
    key = event.key
    index_event: Event
    error: str | None = None
    if event.deleted:
        index_event, outcome = PolicyRemoved(key), "deleted"
    else:
        try:
            policy = compile_access_policy(event.obj)
            index_event, outcome = PolicyApplied(policy), "compiled"
        except InvalidObject as exc:
            index_event, outcome, error = PolicyRemoved(key), "invalid", exc.message
    tx.put_access_policy(key, index_event.policy if isinstance(index_event, PolicyApplied)
                         else None, error)
    if error is None:
        model.access_invalid.pop(key, None)
        model.access_invalid_target.pop(key, None)
    else:
        _invalid(model, key, error, event.obj)
    statuses = follow(model, tx, index_event, event.seq)
    if event.deleted and all(ref != _ref(key) for ref, _ in statuses):
        statuses.append((_ref(key), status.deleted(event.seq)))
    return FoldResult(outcome, statuses)


def withdraw(model: Model, tx: Writes, event: FoldEvent, reason: str) -> FoldResult:
    """The object failed unexpectedly: withdrawn, and its status says why."""
    tx.put_access_policy(event.key, None, reason)
    _invalid(model, event.key, reason, event.obj)
    return FoldResult("failed", follow(model, tx, PolicyRemoved(event.key), event.seq))


def follow(model: Model, tx: Writes, index_event: Event,
           seq: int) -> list[tuple[ObjectRef, PolicyStatus]]:
    """Apply one event to the inheritance index and persist what it changed (see the
    module's docstring); returns the statuses to publish."""
    change = model.inherit.apply(index_event)
    for target in sorted({*change.effective, *change.removed},
                         key=lambda t: t.sort_key()):
        after = change.effective.get(target)
        users, groups = _concerned(model, change, target)
        tx.put_effective(target, after if after is not None and _stored(model, after)
                         else None)
        for audience in (tx.announce, tx.invalidate):
            audience.update(Affected(users=set(users), groups=set(groups)))
    published = []
    for key in sorted(change.moved):
        conditions = conditions_of(model, key)
        _exclude(model, tx, key, conditions)
        if conditions == model.access_status.get(key):
            continue
        tx.put_access_status(key, conditions)
        if conditions is None:
            model.access_status.pop(key, None)
            published.append((_ref(key), status.deleted(seq)))
        else:
            model.access_status[key] = conditions
            published.append((_ref(key), PolicyStatus(conditions=conditions, revision=seq)))
    return published


def _invalid(model: Model, key: str, error: str, obj: object) -> None:
    model.access_invalid[key] = error
    target = aimed_at(obj)
    if target is None:
        model.access_invalid_target.pop(key, None)
    else:
        model.access_invalid_target[key] = target


def _exclude(model: Model, tx: Writes, key: str,
             conditions: list[StatusCondition] | None) -> None:
    """Keep where a policy that takes no part is listed (its target may move while its
    conditions stay the same: an invalid policy aimed elsewhere with the same error)."""
    policy = model.inherit.policies.get(key)
    target = policy.target if policy is not None else model.access_invalid_target.get(key)
    found = excluded(key, conditions, target)
    previous = model.access_excluded.get(key)
    if found == previous:
        return
    tx.put_excluded(key, previous, found)
    if found is None:
        model.access_excluded.pop(key, None)
    else:
        model.access_excluded[key] = found


def _concerned(model: Model, change: Change, target: Target) -> tuple[set[str], set[str]]:
    """(users, groups) whose decisions on ``target`` the change can alter.

    Usually the subjects of the rules added, removed or changed there. A Namespace target
    that appears (its first policy) or vanishes (its last) is different: decisions in its
    namespace switch between its effective policy and its cluster's, which is another set
    of rules read from another target (their reasons name it) — every rule on either side
    concerns the change."""
    before, after = change.previous.get(target), change.effective.get(target)
    cluster = hierarchy.derived_from(target)
    if cluster is None or (before is None) == (after is None):
        return subjects_changed(before, after)
    if before is None:  # the cluster's as it was (if the event moved it too)
        touched = cluster in change.previous or cluster in change.effective
        before = change.previous.get(cluster) if touched else \
            model.inherit.effective.get(cluster)
    else:
        after = model.inherit.effective.get(cluster)
    users, groups = subjects_changed(None, before)
    more_users, more_groups = subjects_changed(None, after)
    return users | more_users, groups | more_groups


def _stored(model: Model, effective: EffectivePolicy) -> bool:
    """Whether a target's effective policy is stored. One whose path holds no policy but
    the Fleet's is the Fleet's (same policies, same merge), and readers fall back to the
    Fleet's: so a Fleet-level change writes the Fleet and the targets with policies of
    their own, not every cluster and namespace of the fleet."""
    if effective.target.kind == "Fleet":
        return bool(effective.policies)
    policies = model.inherit.policies
    return any(key in policies and policies[key].target.kind != "Fleet"
               for key in effective.policies)


def conditions_of(model: Model, key: str) -> list[StatusCondition] | None:
    """A policy's conditions now (None: no such policy, valid or invalid)."""
    found = status_of(model.inherit, key)
    if found is not None:
        return found
    error = model.access_invalid.get(key)
    return None if error is None else invalid_conditions(error)


def _ref(key: str) -> ObjectRef:
    namespace, _, name = key.partition("/")
    return ObjectRef(KIND, namespace, name)
