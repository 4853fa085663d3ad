"""MonitorAccessPolicy: compile, withdraw when invalid, report status."""

from __future__ import annotations

from clearance_api.wire import PolicyStatus
from clearance_core.folding import narrowing, status
from clearance_core.folding.fold import fold_policy, policy_change
from clearance_core.folding.folds import FoldEvent, FoldResult
from clearance_core.folding.model import Model, Writes
from clearance_core.kube import objects
from clearance_core.monitor.policy import CompiledPolicy, invalid_policy


def fold(model: Model, tx: Writes, event: FoldEvent) -> FoldResult:
    key = event.key  # made anew at each reading
    previous = model.policies.get(key)
    policy, affected = fold_policy(event.type, event.obj, previous, model.type_sources)
    obj = None if policy is None else objects.to_json(event.obj)
    tx.put_policy(key, previous, policy, obj)
    tx.announce, tx.invalidate = affected, affected.copy()
    if event.precise:
        tx.invalidate.narrow = narrowing.policy_change(model.clusters, previous, policy)
    model.set_policy(key, policy, obj)
    outcome = "deleted" if policy is None else ("compiled" if policy.valid else "invalid")
    return FoldResult(outcome, [(event.ref, report(policy, model, event))])


def withdraw(model: Model, tx: Writes, event: FoldEvent, reason: str) -> FoldResult:
    """The object failed unexpectedly: keep an invalid record (status, traces) in place
    of whatever version was in force."""
    previous = model.policies.get(event.key)
    record = invalid_policy(event.obj, reason)
    obj = None if record is None else objects.to_json(event.obj)
    tx.put_policy(event.key, previous, record, obj)
    affected = policy_change(previous, record)
    tx.announce, tx.invalidate = affected, affected.copy()
    if event.precise:
        tx.invalidate.narrow = narrowing.policy_change(model.clusters, previous, record)
    model.set_policy(event.key, record, obj)
    report_ = status.failed(event.seq, reason) if record is None else \
        report(record, model, event)
    return FoldResult("failed", [(event.ref, report_)])


def report(policy: CompiledPolicy | None, model: Model, event: FoldEvent
           ) -> PolicyStatus:
    if policy is None:
        return status.deleted(event.seq)
    return status.policy_status(policy, model.type_sources, now=event.now,
                                revision=event.seq)
