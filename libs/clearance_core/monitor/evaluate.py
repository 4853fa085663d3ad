"""Evaluate MonitorAccessPolicies for one principal, action and cluster
(docs/guide/monitor-access-policies.md).

Policies whose subjects match are taken in ascending priority (Deny before Allow at equal
priority, then ``namespace/name``); those not in force are skipped; the first policy that
matches the cluster decides and later ones are never consulted (the trace still lists
them, as not consulted). The result also says how long it stays true (``valid_until``):
the next validity boundary of any candidate, so a cached answer never outlives
``notAfter`` nor misses a ``notBefore``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import msgspec

from clearance_api.wire import Action, DecisionKind, TraceStep
from clearance_core.kube.principal import Identity
from clearance_core.monitor import patterns
from clearance_core.monitor.policy import CompiledPolicy, CompiledRule, CompiledSelector


class Outcome(msgspec.Struct, kw_only=True):
    decision: DecisionKind
    reason: str
    policy: str | None = None
    permissions: tuple[Action, ...] = ()
    rule: CompiledRule | None = None
    trace: list[TraceStep] = []
    valid_until: float | None = None
    #: The deciding step's position in ``trace`` (None: no policy decided).
    decided_at: int | None = None
    #: The deciding MonitorAccessPolicy's ``order()`` (None: none decided). A cached
    #: answer keeps it: a policy change can alter it only if the changed policy comes
    #: no later in that order (``clearance_core.folding.narrowing``).
    order: str | None = None


def matched_by(policy: CompiledPolicy, identity: Identity) -> str | None:
    """How the policy's subjects name this identity: ``user``, ``serviceaccount``,
    ``group:<g>`` (alphabetically first), or ``None``."""
    if any(name in policy.users for name in identity.names):
        return "user"
    if identity.username in policy.service_accounts:
        return "serviceaccount"
    groups = sorted(identity.groups.intersection(policy.groups))
    return f"group:{groups[0]}" if groups else None


def names(policy: CompiledPolicy, identity: Identity) -> bool:
    """Whether the policy's subjects name this identity (``matched_by`` is not None)."""
    return (not identity.groups.isdisjoint(policy.groups)
            or identity.username in policy.service_accounts
            or any(name in policy.users for name in identity.names))


def candidates(policies: Iterable[CompiledPolicy], identity: Identity) -> list[CompiledPolicy]:
    """The policies whose subjects match, in evaluation order, each once."""
    unique = {p.key: p for p in policies if names(p, identity)}
    return sorted(unique.values(), key=CompiledPolicy.sort_key)


def skip_reason(policy: CompiledPolicy, now: float) -> str | None:
    if not policy.valid:
        return "invalid"
    if not policy.enabled:
        return "disabled"
    if policy.not_before is not None and now < policy.not_before:
        return "not_yet_valid"
    if policy.not_after is not None and now >= policy.not_after:
        return "expired"
    return None


def _selector_field(
    selector: CompiledSelector, cluster: str, labels: Mapping[str, str]
) -> str | None:
    # Fields present are OR-ed; an absent or empty field matches nothing.
    if selector.names is not None and selector.names.matches(cluster):
        return "matchNames"
    if selector.pattern is not None and patterns.fullmatch(selector.pattern, cluster):
        return "matchPattern"
    if selector.labels and all(labels.get(k) == v for k, v in selector.labels.items()):
        return "matchLabels"
    return None


#: Which rule of a policy matches a cluster: (rule index, selector field), ``(None,
#: "default")`` or ``None``.
ClusterMatch = tuple[int | None, str] | None
#: ``match_cluster`` or an exact memo of it (a decision replica's, see
#: ``clearance_runtime.reading.mirror``): the same answer for the same policy, cluster and labels.
Matcher = Callable[[CompiledPolicy, str, Mapping[str, str]], ClusterMatch]


def match_cluster(
    policy: CompiledPolicy, cluster: str, labels: Mapping[str, str]
) -> ClusterMatch:
    """The first rule (index, selector field) matching the cluster, ``(None, "default")``
    for a matching ``default: all``, or ``None``."""
    for index, rule in enumerate(policy.rules):
        field = _selector_field(rule.selector, cluster, labels)
        if field is not None:
            return index, field
    return (None, "default") if policy.default_match else None


DEFAULT_RULE = CompiledRule(selector=CompiledSelector(), permissions=("view",))


def _next_boundary(policies: Iterable[CompiledPolicy], now: float) -> float | None:
    bounds = [
        t
        for p in policies
        if p.valid
        for t in (p.not_before, p.not_after)
        if t is not None and t > now
    ]
    return min(bounds) if bounds else None


def evaluate_cluster(
    policies: Iterable[CompiledPolicy],
    identity: Identity,
    *,
    action: str,
    cluster: str,
    labels: Mapping[str, str],
    now: float,
    match: Matcher = match_cluster,
    explain: bool = True,
) -> Outcome:
    """Decide ``action`` on ``cluster`` (and find the rule that governs what is inside it).

    With ``explain`` the trace lists every candidate (docs/api/decisions.md): those after
    the deciding policy were not consulted, and say so — ``matched`` (with the rule and
    selector that would have matched), ``no_match`` or ``skipped`` — which never changes
    the decision. Without it, no trace is built and the evaluation stops at the deciding
    policy: with many candidates the trace was most of a cache miss's cost.
    """
    ordered = candidates(policies, identity)
    trace: list[TraceStep] = []
    valid_until = _next_boundary(ordered, now)
    decided: Outcome | None = None
    for policy in ordered:
        if not explain:
            if skip_reason(policy, now) is None:
                matched = match(policy, cluster, labels)
                if matched is not None:
                    return _decided(policy, matched, action, trace=[], at=None,
                                    valid_until=valid_until)
            continue
        key = policy.key
        reason = skip_reason(policy, now)
        if reason is not None:
            detail = f"invalid: {policy.error}" if reason == "invalid" else reason
            trace.append(TraceStep(policy=key, priority=policy.priority, effect=policy.effect,
                                   outcome="skipped", reason=detail))
            continue
        matched = match(policy, cluster, labels)
        if matched is None:
            trace.append(TraceStep(policy=key, priority=policy.priority, effect=policy.effect,
                                   outcome="no_match",
                                   reason=f"no rule matches cluster {cluster}"))
            continue
        index, field = matched
        where = "default: all" if index is None else f"rule {index} by {field}"
        if decided is not None:
            trace.append(TraceStep(
                policy=key, priority=policy.priority, effect=policy.effect,
                outcome="matched", rule=index, selector=field,
                reason=f"not consulted: {where} matches, but policy {decided.policy} "
                       f"decided first"))
            continue
        decided = _decided(policy, matched, action, trace=trace, at=len(trace),
                           valid_until=valid_until)
    if decided is not None:
        return decided
    return Outcome(decision="deny", reason="no policy in force matches this principal and cluster",
                   trace=trace, valid_until=valid_until)


def _decided(policy: CompiledPolicy, matched: tuple[int | None, str], action: str, *,
             trace: list[TraceStep], at: int | None, valid_until: float | None) -> Outcome:
    """The outcome of the deciding policy (its step appended to ``trace`` at ``at``,
    when explaining)."""
    index, field = matched
    where = "default: all" if index is None else f"rule {index} by {field}"
    key = policy.key
    rule = DEFAULT_RULE if index is None else policy.rules[index]
    if policy.effect == "Deny":
        step, why = f"deny: {where}", f"denied by policy {key} ({where})"
        decision: DecisionKind = "deny"
        granted: tuple[Action, ...] = ()
    elif action not in rule.permissions:
        step, decision = f"{where} does not grant {action}", "deny"
        why = f"policy {key} ({where}) does not grant {action}"
        granted = rule.permissions
    else:
        step, decision, why = f"allow: {where}", "allow", f"allowed by policy {key} ({where})"
        granted = rule.permissions
    if at is not None:
        trace.append(TraceStep(policy=key, priority=policy.priority, effect=policy.effect,
                               outcome="decided", reason=step, rule=index, selector=field))
    return Outcome(decision=decision, reason=why, policy=key, permissions=granted,
                   rule=rule, trace=trace, valid_until=valid_until, decided_at=at,
                   order=policy.order())
