"""MetricSource: declare a custom type, and re-check every policy naming it.

Several MetricSources may declare one type; the oldest is in force (``winner``), and
deleting any of them leaves the others. A change re-folds the policies naming the
type(s) it touches in the same transaction: a field filter can become valid or invalid
with it, and an undeclared type's filters appear or vanish. A type becoming declared or
undeclared also concerns the subjects of the AccessPolicy rules that list it.
"""

from __future__ import annotations

from clearance_api.errors import InvalidObject
from clearance_core.folding.fold import Affected, fold_policy
from clearance_core.folding.folds import FoldEvent, FoldResult
from clearance_core.folding.folds.policies import report
from clearance_core.folding.kinds import ObjectRef
from clearance_core.folding.model import Model, Writes
from clearance_core.kube import objects
from clearance_core.monitor.metricsource import CompiledSource, compile_source, winner


def fold(model: Model, tx: Writes, event: FoldEvent) -> FoldResult:
    previous = model.sources.pop(event.key, None)
    source: CompiledSource | None = None
    outcome = "deleted"
    error: str | None = None
    if not event.deleted:
        try:
            source = compile_source(event.obj)
            outcome = "compiled"
        except InvalidObject as exc:
            outcome, error = "invalid", exc.message  # withdrawn whole, like a policy
    if source is not None:
        model.sources[event.key] = source
    tx.put_source(event.key, source)
    types = sorted({s.type_name for s in (previous, source) if s is not None})
    for type_name in types:
        in_force = winner(s for s in model.sources.values() if s.type_name == type_name)
        if (in_force is None) != (type_name not in model.type_sources):
            # Declared or undeclared now: AccessPolicy rules listing the type show it or
            # hide it (they are read against the declared types when deciding).
            inherited = access_rule_subjects(model, type_name)
            tx.announce.update(inherited)
            tx.invalidate.update(inherited)
            # Answers about the type warned that no one declares it (or will): they go,
            # here and in clients' caches (README: Warnings).
            tx.invalidate.unknown = True
            tx.announce.all = True
        if in_force is None:
            model.type_sources.pop(type_name, None)
        else:
            model.type_sources[type_name] = in_force
        tx.put_type_source(type_name, in_force)
    result = FoldResult(outcome, error=error)
    for type_name in types:
        for key in model.policies_naming_type(type_name):
            raw = model.policy_objects.get(key)
            before = model.policies.get(key)
            if raw is None or before is None:
                continue
            after, affected = fold_policy("MODIFIED", objects.from_json(raw), before,
                                          model.type_sources)
            if after == before:
                continue
            tx.put_policy(key, before, after, raw)
            tx.announce.update(affected)
            tx.invalidate.update(affected)
            model.set_policy(key, after, raw)
            namespace, _, name = key.partition("/")
            ref = ObjectRef("monitoraccesspolicy", namespace, name)
            result.statuses.append((ref, report(after, model, event)))
    return result


def access_rule_subjects(model: Model, type_name: str) -> Affected:
    """The subjects of the AccessPolicy rules whose resource filters name the type."""
    affected = Affected()
    for policy in model.inherit.policies.values():
        for block in policy.blocks:
            for rule in block.rules.values():
                if any(f.type == type_name for f in rule.filters):
                    affected.users.update(rule.users, rule.service_accounts)
                    affected.groups.update(rule.groups)
    return affected
