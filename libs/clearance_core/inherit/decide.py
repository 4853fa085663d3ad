"""Decisions with inherited AccessPolicies (docs/guide/inherited.md), on top of
MonitorAccessPolicies.

For a resource in cluster C (namespace N if given) the decision reads the effective
policy of Namespace C/N, else Cluster C, else the Fleet (:func:`target_for` names them in
that order). Of its rules, those whose subjects match the principal take part:

1. a matching ``Deny`` rule denies everything in that target, whatever any
   MonitorAccessPolicy says;
2. otherwise the first matching MonitorAccessPolicy decides (``monitor``: what
   :func:`clearance_core.monitor.decide.decide` answered, unchanged);
3. otherwise the matching ``Allow`` rules decide together: the permissions are their union
   (a rule with none grants ``view``), and an item is visible if any of the rules that
   grant the action shows it;
4. otherwise deny.

Choices the contract leaves open, made fail-closed:

* Visibility is decided by the rules that grant the *requested* action only: a rule that
  grants ``view`` of everything and one that grants ``view_metrics`` in one namespace do not
  add up to metrics everywhere.
* A whole-type check that several rules answer ``partial`` replies with the filters of the
  first of them (by rule name): a client that applies ``filters`` itself then shows a subset
  of what is allowed, never more. Checks on items and ``filter`` requests are exact.
* A check on a namespace item (type ``namespace``, a name) reads that Namespace target;
  a cluster or a node reads the Cluster target whatever namespace the request names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import msgspec

from clearance_api.wire import Action, DecisionKind, Resource, StepOutcome, TraceStep
from clearance_core.inherit import hierarchy
from clearance_core.inherit.accesspolicy import AccessRule
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.merge import EffectiveRule
from clearance_core.kube.principal import Identity
from clearance_core.kube.resources import plural, singular, target_namespace
from clearance_core.monitor.decide import Decision
from clearance_core.monitor.filters import BUILTIN_TYPES, Item, RuleView, reply_filters, rule_view

#: AccessPolicy rules have no priority; trace steps for them carry this value.
NO_PRIORITY = -1
_ACTIONS: tuple[Action, ...] = ("view", "view_metrics")



def namespace_of(resource: Resource) -> str | None:
    """The namespace whose Namespace target a decision on ``resource`` reads
    (:func:`clearance_core.kube.resources.target_namespace`)."""
    return target_namespace(resource)


def target_for(resource: Resource, cluster: str) -> tuple[Target, ...]:
    """The targets to read, the first that has an effective policy wins."""
    return hierarchy.decision_targets(cluster, namespace_of(resource))


def access_view(rule: AccessRule, declared: frozenset[str] | None = None) -> RuleView:
    """An AccessPolicy rule's filters as a view. A custom type no MetricSource declares
    (absent from ``declared``) is unlisted, so hidden (docs/api/README.md: Principals), exactly as
    in a MonitorAccessPolicy; ``None`` counts every type as declared."""
    if declared is None or all(f.type in BUILTIN_TYPES or f.type in declared
                               for f in rule.filters):
        return rule_view(rule)  # the usual case: one view per rule, cached
    return RuleView.of(f for f in rule.filters
                       if f.type in BUILTIN_TYPES or f.type in declared)


def subjects_match(rule: AccessRule, identity: Identity) -> bool:
    """Users match the username or email, service accounts the username, groups any
    effective group; exact and case-sensitive (docs/api/README.md: Principals)."""
    return (any(name in rule.users for name in identity.names)
            or identity.username in rule.service_accounts
            or not identity.groups.isdisjoint(rule.groups))


class _Subjects(NamedTuple):
    """Which rules of a rule set name each subject: users (usernames and emails),
    service accounts, groups -> rule names."""

    users: dict[str, tuple[str, ...]]
    service_accounts: dict[str, tuple[str, ...]]
    groups: dict[str, tuple[str, ...]]


#: Rule sets with their subject index, by id (the set kept with it, so the id is not
#: reused while it is here): built once per effective policy a decision process decoded.
_indexed: dict[int, tuple[Mapping[str, EffectiveRule], _Subjects]] = {}
_INDEXED_MAX = 8192
#: Below this many rules a scan costs less than the index (which is built on first use).
_SCAN_BELOW = 4


def _subjects(rules: Mapping[str, EffectiveRule]) -> _Subjects:
    cached = _indexed.get(id(rules))
    if cached is not None and cached[0] is rules:
        return cached[1]
    found: tuple[dict[str, list[str]], dict[str, list[str]], dict[str, list[str]]] = \
        ({}, {}, {})
    for name, effective in rules.items():
        rule = effective.rule
        for index, subjects in zip(found, (rule.users, rule.service_accounts, rule.groups),
                                   strict=True):
            for subject in dict.fromkeys(subjects):
                index.setdefault(subject, []).append(name)
    built = _Subjects(*({k: tuple(v) for k, v in index.items()} for index in found))
    if len(_indexed) >= _INDEXED_MAX:
        _indexed.clear()
    _indexed[id(rules)] = (rules, built)
    return built


def matching_names(rules: Mapping[str, EffectiveRule], identity: Identity) -> set[str]:
    """The names of the rules whose subjects match (:func:`subjects_match`), found by
    subject rather than by asking every rule: a target on a long path holds about 30
    rules, and every uncached check reads one or more targets' (docs/performance.md)."""
    if len(rules) < _SCAN_BELOW:
        return {name for name, found in rules.items() if subjects_match(found.rule, identity)}
    index = _subjects(rules)
    names: set[str] = set()
    for name in identity.names:
        names.update(index.users.get(name, ()))
    names.update(index.service_accounts.get(identity.username, ()))
    groups = identity.groups
    if len(groups) <= len(index.groups):
        for group in groups:
            names.update(index.groups.get(group, ()))
    else:
        for group, named in index.groups.items():
            if group in groups:
                names.update(named)
    return names


def matching(rules: Mapping[str, EffectiveRule],
             identity: Identity) -> list[tuple[str, EffectiveRule]]:
    """The rules whose subjects match, by rule name."""
    return [(name, rules[name]) for name in sorted(matching_names(rules, identity))]


def denies(rules: Mapping[str, EffectiveRule], identity: Identity) -> bool:
    """Whether a matching Deny rule denies everything there (the first step of
    :func:`decide_with_inherited`)."""
    return any(rules[name].rule.effect == "Deny" for name in matching_names(rules, identity))


def permissions_of(rules: Iterable[tuple[str, EffectiveRule]]) -> tuple[Action, ...]:
    granted = {action for _, found in rules for action in found.rule.permissions}
    return tuple(action for action in _ACTIONS if action in granted)


def _step(name: str, found: EffectiveRule, outcome: StepOutcome, reason: str) -> TraceStep:
    return TraceStep(policy=found.source, priority=NO_PRIORITY, effect=found.rule.effect,
                     outcome=outcome,
                     reason=f"AccessPolicy rule {name} ({found.block}): {reason}")


class _Verdict:
    """What the decision so far knows: the MonitorAccessPolicy answer it builds on, where
    the rules come from, the permissions of the matching rules and the trace steps."""

    def __init__(self, monitor: Decision, where: str,
                 declared: frozenset[str] | None, *, explain: bool = True) -> None:
        self.monitor = monitor
        self.where = where
        self.declared = declared
        self.explain = explain
        self.permissions: tuple[Action, ...] = ()
        self.steps: list[TraceStep] = []

    def note(self, name: str, found: EffectiveRule, outcome: StepOutcome,
             reason: str) -> None:
        """A trace step, when explaining (an unexplained answer's steps were built
        only to be dropped: a visible part of an uncached check)."""
        if self.explain:
            self.steps.append(_step(name, found, outcome, reason))

    def made(self, decision: DecisionKind, reason: str, policy: str | None,
             filters: dict[str, Any] | None = None) -> Decision:
        trace = [*self.monitor.outcome.trace, *self.steps] if self.steps \
            else self.monitor.outcome.trace
        outcome = msgspec.structs.replace(
            self.monitor.outcome, decision=decision, reason=reason, policy=policy,
            permissions=self.permissions, trace=trace,
            decided_at=len(trace) - 1 if self.steps else self.monitor.outcome.decided_at)
        return Decision(decision=decision, reason=reason, policy=policy,
                        permissions=self.permissions, filters=filters, outcome=outcome)

    def overrule_monitor(self) -> None:
        """An inherited Deny comes first: the MonitorAccessPolicy step that would have
        decided only matched (one trace, one decider)."""
        outcome = self.monitor.outcome
        if outcome.decided_at is None:
            return
        trace = list(outcome.trace)
        step = trace[outcome.decided_at]
        trace[outcome.decided_at] = msgspec.structs.replace(
            step, outcome="matched",
            reason=f"overruled: {step.reason}, but an inherited Deny decides first")
        self.monitor = msgspec.structs.replace(
            self.monitor, outcome=msgspec.structs.replace(outcome, trace=trace))

    def allow(self, name: str, found: EffectiveRule) -> Decision:
        self.note(name, found, "decided", "allow")
        return self.made("allow", f"allowed by AccessPolicy rule {name} of {found.source}"
                                  f"{self.where}", found.source)

    def whole_type(self, granting: list[tuple[str, EffectiveRule]], kind: str,
                   namespace: str | None) -> Decision:
        partial: list[tuple[str, EffectiveRule, RuleView]] = []
        for name, found in granting:
            view = access_view(found.rule, self.declared)
            verdict = view.type_decision(kind)
            if verdict != "deny" and namespace is not None and \
                    view.namespace_hides(kind, namespace) is not None:
                verdict = "deny"
            if verdict == "allow":
                return self.allow(name, found)
            if verdict == "partial":
                partial.append((name, found, view))
        if not partial:
            return self.made("deny", f"{kind} are not visible under the AccessPolicy rules"
                                     f"{self.where}", granting[0][1].source)
        name, found, view = partial[0]
        reason = f"{kind} filtered by AccessPolicy rule {name} of {found.source}{self.where}"
        if len(partial) > 1:
            others = ", ".join(n for n, _, _ in partial)
            reason += f" (an item shows if any of {others} shows it)"
        self.note(name, found, "decided", "partial")
        return self.made("partial", reason, found.source, reply_filters(view, kind))


def decide_with_inherited(rules: Mapping[str, EffectiveRule], identity: Identity, *,
                          action: str, resource: Resource, monitor: Decision,
                          target: Target | None = None,
                          declared: frozenset[str] | None = None,
                          explain: bool = True) -> Decision:
    """The decision once the effective rules of the resource's target are known.

    ``rules``: the effective policy's rules (empty when there is none); ``monitor``: the
    MonitorAccessPolicy decision for the same request; ``target``: for the reasons only;
    ``declared``: the custom types some MetricSource declares (see :func:`access_view`);
    ``explain``: with the trace steps of the rules.
    """
    verdict = _Verdict(monitor, f" at {target}" if target is not None else "", declared,
                       explain=explain)
    where = verdict.where
    matched = matching(rules, identity)
    for name, found in matched:
        if found.rule.effect == "Deny":
            verdict.overrule_monitor()
            verdict.note(name, found, "decided", f"deny everything{where}")
            return verdict.made("deny", f"denied by AccessPolicy rule {name} of "
                                        f"{found.source}{where}", found.source)
    if monitor.outcome.order is not None:
        return monitor  # a MonitorAccessPolicy matched the cluster: it decides
    if not matched:
        return monitor  # no policy of either kind: deny
    verdict.permissions = permissions_of(matched)
    if explain:
        verdict.steps = [_step(n, r, "matched", "subjects match") for n, r in matched]
    granting = [(n, r) for n, r in matched if action in r.rule.permissions]
    if not granting:
        return verdict.made("deny", f"AccessPolicy rules{where} do not grant {action}",
                            matched[0][1].source)
    kind = plural(resource.type)
    if singular(resource.type) == "cluster":
        return verdict.allow(*granting[0])
    if resource.name == "*":
        return verdict.whole_type(granting, kind, resource.namespace)
    item = Item(name=resource.name, namespace=resource.namespace, labels=resource.labels,
                fields=resource.fields)
    hidden_by = None
    for name, found in granting:
        shown, reason = access_view(found.rule, declared).item_visible(kind, item)
        if shown:
            return verdict.allow(name, found)
        hidden_by = hidden_by or reason
    return verdict.made("deny", f"{singular(kind)} {resource.name!r} is hidden by every "
                                f"AccessPolicy rule granting {action}{where} ({hidden_by})",
                        granting[0][1].source)


def visible_items(rules: Mapping[str, EffectiveRule], identity: Identity, *, action: str,
                  type_name: str, items: Iterable[Item],
                  declared: frozenset[str] | None = None) -> list[Item]:
    """For list filtering when no Deny rule matched and no MonitorAccessPolicy decided:
    the items (input order) that any matching Allow rule granting ``action`` shows."""
    granting = [r for _, r in matching(rules, identity)
                if r.rule.effect == "Allow" and action in r.rule.permissions]
    if not granting:
        return []
    items = list(items)
    shown: set[int] = set()
    for found in granting:
        visible = {id(item) for item in
                   access_view(found.rule, declared).filter_items(type_name, items)}
        shown |= visible
    return [item for item in items if id(item) in shown]
