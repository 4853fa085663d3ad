"""One decision on any resource: the cluster's deciding rule, then that rule's filters.

The cluster decides first (``evaluate_cluster``): a Deny, or an Allow that does not grant
the action, ends it. Otherwise the one rule that matched the cluster governs everything
inside it — the same rule for every sub-resource, never a different policy per type
(a ClusterPulse defect) — through a :class:`RuleView`:

- a concrete item (``name`` given) is ``allow`` or ``deny``; a hidden item's trace step
  names the filter dimension that hid it;
- a whole type (``name`` ``"*"``) is ``deny`` when the type is invisible, ``partial`` with
  the filters when some item could be hidden, else ``allow``; one that names a
  ``namespace`` is also ``deny`` when that namespace hides every item of the type (the
  namespace rule, or the type's own ``namespaces`` filter).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from clearance_api.wire import Action, DecisionKind, Resource
from clearance_core.kube.principal import Identity
from clearance_core.kube.resources import plural, singular
from clearance_core.monitor.evaluate import Matcher, Outcome, evaluate_cluster, match_cluster
from clearance_core.monitor.filters import Item, reply_filters, rule_view
from clearance_core.monitor.policy import CompiledPolicy


class Decision(msgspec.Struct, kw_only=True):
    decision: DecisionKind
    reason: str
    policy: str | None
    permissions: tuple[Action, ...]
    filters: dict[str, Any] | None
    outcome: Outcome


def decide(
    policies: Iterable[CompiledPolicy],
    identity: Identity,
    *,
    action: str,
    resource: Resource,
    cluster: str,
    labels: Mapping[str, str],
    now: float,
    match: Matcher = match_cluster,
    explain: bool = True,
) -> Decision:
    """``explain=False``: no trace (see ``evaluate_cluster``)."""
    outcome = evaluate_cluster(policies, identity, action=action, cluster=cluster,
                               labels=labels, now=now, match=match, explain=explain)
    return decide_on(outcome, resource)


def decide_on(outcome: Outcome, resource: Resource) -> Decision:
    """The decision on ``resource`` once its cluster's evaluation is known: one outcome
    serves every resource of the cluster (the same question placed in several
    namespaces). With an explained outcome, the deciding step notes what the filters did
    (the outcome is then this decision's own)."""

    def made(decision: DecisionKind, reason: str,
             filters: dict[str, Any] | None = None) -> Decision:
        return Decision(decision=decision, reason=reason, policy=outcome.policy,
                        permissions=outcome.permissions, filters=filters, outcome=outcome)

    if outcome.decision != "allow" or singular(resource.type) == "cluster":
        return made(outcome.decision, outcome.reason)
    assert outcome.rule is not None
    view = rule_view(outcome.rule)
    kind = plural(resource.type)
    if resource.name == "*":
        verdict = view.type_decision(kind)
        if verdict == "deny":
            reason = f"{kind} are not visible under {outcome.policy}"
            _note(outcome, f"type {kind} invisible")
            return made("deny", reason)
        if resource.namespace is not None:
            # The items of the type in that namespace: none shows if it is hidden.
            hidden = view.namespace_hides(kind, resource.namespace)
            if hidden is not None:
                _note(outcome, f"namespace {resource.namespace} hidden", hidden)
                return made("deny", f"{kind} in namespace {resource.namespace!r} are hidden "
                                    f"by the {hidden} filter of {outcome.policy}")
        if verdict == "partial":
            return made("partial", f"{kind} filtered by {outcome.policy}",
                        reply_filters(view, kind))
        return made("allow", outcome.reason)
    item = Item(name=resource.name, namespace=resource.namespace, labels=resource.labels,
                fields=resource.fields)
    shown, hidden_by = view.item_visible(kind, item)
    if shown:
        return made("allow", outcome.reason)
    _note(outcome, f"item hidden by {hidden_by}", hidden_by)
    return made("deny", f"{singular(kind)} {resource.name!r} hidden by the {hidden_by} "
                        f"filter of {outcome.policy}")


def _note(outcome: Outcome, text: str, hidden_by: str | None = None) -> None:
    """Record on the deciding trace step what the filters did."""
    if outcome.decided_at is not None:
        step = outcome.trace[outcome.decided_at]
        step.reason = f"{step.reason}; {text}"
        if hidden_by is not None:
            step.hidden_by = hidden_by
