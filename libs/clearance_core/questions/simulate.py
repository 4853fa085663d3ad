"""What applying or deleting one AccessPolicy would change, computed without applying it.

``simulate`` runs the very event the compiler would run, on a copy of the index (its
values are immutable and shared, so the copy costs one pass over the containers), and
compares: per target the rules ``added``, ``removed`` and ``changed`` (a different rule,
source or block under the same name), and the policies whose conditions would move. That
it is the same code path is the point: ``simulate(apply P)`` is, by construction and by
test, the effective policies after applying P.

A policy that does not compile simulates as what the compiler would do with it: its
previous valid version (if any) is withdrawn, and its status becomes ``Invalid``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clearance_api.errors import BadRequest, InvalidObject
from clearance_api.wire import StatusCondition
from clearance_api.wire.effective import Operation, SimulateReply, StatusChange, TargetDiff
from clearance_core.inherit.accesspolicy import compile_access_policy, policy_key
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.index import (
    Event,
    InheritanceIndex,
    PolicyApplied,
    PolicyRemoved,
)
from clearance_core.inherit.merge import EffectivePolicy
from clearance_core.inherit.status import invalid_conditions, status_of


def diff(before: EffectivePolicy | None, after: EffectivePolicy | None,
         target: Target) -> TargetDiff | None:
    """The rule changes from ``before`` to ``after`` (None: nothing changed)."""
    old = {name: rule.wire() for name, rule in (before.rules if before else {}).items()}
    new = {name: rule.wire() for name, rule in (after.rules if after else {}).items()}
    result = TargetDiff(
        target=target,
        added={name: rule for name, rule in sorted(new.items()) if name not in old},
        removed=sorted(name for name in old if name not in new),
        changed={name: rule for name, rule in sorted(new.items())
                 if name in old and old[name] != rule})
    return result if result.added or result.removed or result.changed else None


def _conditions(index: InheritanceIndex, key: str,
                invalid: Mapping[str, str]) -> list[StatusCondition]:
    found = status_of(index, key)
    if found is not None:
        return found
    return invalid_conditions(invalid[key]) if key in invalid else []


def simulate(index: InheritanceIndex, obj: Any, operation: Operation, *,
             invalid: Mapping[str, str] | None = None) -> SimulateReply:
    """``invalid``: the errors of policies that are currently invalid (by ``ns/name``),
    so their status before the change is right. Raises BadRequest when ``obj`` has no
    usable name; never mutates ``index``."""
    return dry_run(index, obj, operation, invalid=invalid)[0]


def dry_run(index: InheritanceIndex, obj: Any, operation: Operation, *,
            invalid: Mapping[str, str] | None = None
            ) -> tuple[SimulateReply, InheritanceIndex]:
    """:func:`simulate`, and the index after the change (a copy: who gains or loses
    access is asked of both, :mod:`clearance_core.questions.impact`)."""
    key = policy_key(obj)
    if key is None:
        raise BadRequest("policy: metadata.name is required")
    errors = dict(invalid or {})
    event: Event
    if operation == "delete":
        event = PolicyRemoved(key)
        errors_after = {k: v for k, v in errors.items() if k != key}
    else:
        errors_after = dict(errors)
        try:
            event = PolicyApplied(compile_access_policy(obj))
            errors_after.pop(key, None)
        except InvalidObject as exc:
            event = PolicyRemoved(key)
            errors_after[key] = exc.message
    after = index.copy()
    change = after.apply(event)
    targets = []
    for target in sorted({*change.effective, *change.removed}, key=Target.sort_key):
        found = diff(index.effective_of(target), after.effective_of(target), target)
        if found is not None:
            targets.append(found)
    status = {}
    for policy in sorted(change.moved | {key}):
        old = _conditions(index, policy, errors)
        new = _conditions(after, policy, errors_after)
        if old != new or policy == key:
            status[policy] = StatusChange(before=old, after=new)
    return SimulateReply(targets=targets, status=status), after
