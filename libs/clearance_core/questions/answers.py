"""Every subject's answer for one principal, from one state: ``check``,
``filter``, ``metrics``, ``custom-types`` and ``permissions`` judge each item by the
target it lives in, so they agree with ``check`` on every item in its namespace.

The decision service hands its snapshot (:class:`State`: the principal's candidate
MonitorAccessPolicies, the clusters' labels, the effective AccessPolicies of the targets
it read and the Namespace targets that answer the principal otherwise than their
cluster's); the property tests hand an in-memory fleet. Nothing here reads anything else.

* :func:`at_target` — one resource at one target: the MonitorAccessPolicies
  (:func:`clearance_core.monitor.decide.decide`), then the effective rules of the target
  (:func:`clearance_core.inherit.decide.decide_with_inherited`).
* :func:`check` — at the resource's own target, and, for a question that names no home
  (:func:`clearance_core.questions.placement.spreads`), also inside every Namespace target that
  concerns the principal, combined by :mod:`clearance_core.questions.spread`.
* :func:`placed` — what governs an action on a cluster's items, target by target
  (:class:`clearance_core.questions.placed.Placed`), for :func:`filtered`, :func:`metrics` and
  :func:`custom_types`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol

import msgspec

from clearance_api.wire import (
    Action,
    ClusterPermissions,
    DecisionKind,
    NamespaceMetrics,
    NodeMetrics,
    Resource,
)
from clearance_core.inherit.decide import decide_with_inherited, denies
from clearance_core.inherit.govern import Governing, govern
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.merge import EffectivePolicy, EffectiveRule
from clearance_core.kube.principal import Identity
from clearance_core.kube.resources import plural, target_namespace
from clearance_core.monitor.decide import Decision, decide, decide_on
from clearance_core.monitor.evaluate import Matcher, Outcome, evaluate_cluster
from clearance_core.monitor.filters import Item
from clearance_core.monitor.policy import CompiledPolicy
from clearance_core.questions import placement, spread
from clearance_core.questions.listing import cluster_metrics
from clearance_core.questions.placed import Placed, all_of, placed_spreads

ACTIONS: tuple[Action, ...] = ("view", "view_metrics")


class State(Protocol):
    """What decides for one principal (the decision service's snapshot)."""

    @property
    def policies(self) -> Sequence[CompiledPolicy]: ...
    @property
    def labels(self) -> Mapping[str, Mapping[str, str]]: ...
    @property
    def declared(self) -> frozenset[str]: ...
    @property
    def match(self) -> Matcher: ...

    def inherited(self, cluster: str, namespace: str | None
                  ) -> tuple[Target | None, Mapping[str, EffectiveRule]]:
        """The effective rules of Namespace C/N if it has its own, else Cluster C's."""
        ...

    def cluster_rules(self, cluster: str
                      ) -> tuple[Target | None, Mapping[str, EffectiveRule]]: ...

    def namespace_targets(self, cluster: str) -> Mapping[str, EffectivePolicy]:
        """The Namespace targets that answer the principal otherwise than the cluster's
        target, by namespace (sorted)."""
        ...


def at_target(state: State, identity: Identity, action: str, resource: Resource, *,
              cluster: str, namespace: str | None, now: float, explain: bool,
              outcome: Outcome | None = None) -> Decision:
    """The answer at the target ``namespace`` reads (None: the cluster's). ``outcome``:
    the cluster's MonitorAccessPolicy evaluation, when already known (unexplained)."""
    target, rules = state.inherited(cluster, namespace)
    if outcome is None:
        decision = decide(state.policies, identity, action=action, resource=resource,
                          cluster=cluster, labels=state.labels.get(cluster, {}), now=now,
                          match=state.match, explain=explain)
    elif rules and denies(rules, identity):
        # An inherited Deny decides whatever the MonitorAccessPolicy's filters would
        # show: they are not applied (the outcome is all the decision builds on).
        decision = Decision(decision=outcome.decision, reason=outcome.reason,
                            policy=outcome.policy, permissions=outcome.permissions,
                            filters=None, outcome=outcome)
    else:
        decision = decide_on(outcome, resource)
    if rules:
        decision = decide_with_inherited(
            rules, identity, action=action, resource=resource, monitor=decision,
            target=target, declared=state.declared, explain=explain)
    return decision


def check_cost(state: State, resource: Resource, cluster: str) -> int:
    """The Namespace targets :func:`check` weighs besides the resource's own target."""
    if not placement.spreads(resource.type, resource.name, resource.namespace):
        return 0
    return len(state.namespace_targets(cluster))


def filter_cost(state: State, cluster: str, type_name: str, items: Sequence[Item]) -> int:
    """The (item, Namespace target) pairs :func:`filtered` weighs one by one: items
    without a namespace and operators available everywhere, times the Namespace targets
    that concern the principal."""
    targets = len(state.namespace_targets(cluster))
    if not targets:
        return 0
    return targets * sum(1 for item in items if placed_spreads(type_name, item))


def check(state: State, identity: Identity, action: str, resource: Resource, *,
          cluster: str, now: float, explain: bool) -> Decision:
    """``clearance.v1.check`` of a placed resource (``cluster`` from
    :func:`clearance_core.kube.resources.place_of`, which has checked it)."""
    namespace = target_namespace(resource)
    decision = at_target(state, identity, action, resource, cluster=cluster,
                         namespace=namespace, now=now, explain=explain)
    if not placement.spreads(resource.type, resource.name, resource.namespace):
        return decision
    there = state.namespace_targets(cluster)
    if not there:
        return decision
    # Named without its namespace: the same question inside every Namespace target that
    # answers this principal otherwise than the cluster's (one MonitorAccessPolicy
    # evaluation of the cluster for all of them).
    outcome = evaluate_cluster(state.policies, identity, action=action, cluster=cluster,
                               labels=state.labels.get(cluster, {}), now=now,
                               match=state.match, explain=False)
    inside = {ns: at_target(state, identity, action,
                            msgspec.structs.replace(resource, namespace=ns),
                            cluster=cluster, namespace=ns, now=now, explain=False,
                            outcome=outcome)
              for ns in there}
    kind = plural(resource.type)
    if resource.name == "*":
        return spread.whole_type(kind, cluster, decision, inside, explain=explain)
    return spread.bare_item(kind, resource.name, cluster, decision, inside, explain=explain)


def placed(state: State, identity: Identity, cluster: str, action: str, *,
           now: float, spread_over: bool = True) -> Placed:
    """What governs ``action`` on the items of ``cluster``: the cluster's target and
    (``spread_over``) each Namespace target that concerns the principal. The cluster's
    MonitorAccessPolicy outcome is one for all of them."""
    outcome = evaluate_cluster(state.policies, identity, action=action, cluster=cluster,
                               labels=state.labels.get(cluster, {}), now=now,
                               match=state.match, explain=False)
    here = govern(outcome, state.cluster_rules(cluster)[1], identity, action,
                  state.declared)
    targets = state.namespace_targets(cluster) if spread_over else {}
    there = {namespace: govern(outcome, effective.rules, identity, action, state.declared)
             for namespace, effective in targets.items()}
    return Placed(here, there)


class Listed(NamedTuple):
    """A filtered list: the whole type's decision, the visible items (input order), those
    of them aggregations count, and the rules whose include/exclude apply."""

    decision: DecisionKind
    shown: list[Item]
    counted: list[Item]
    aggregating: Governing
    metrics_allowed: bool


def filtered(state: State, identity: Identity, cluster: str, type_name: str,
             items: Sequence[Item], *, now: float) -> Listed:
    """``clearance.v1.filter``: every item as ``check`` judges it where it lives; the
    decision is the whole type's; aggregations count only the visible items whose own
    target grants view_metrics (and shows them under the rules that grant it), and are
    given at all only where some target grants view_metrics."""
    kind = plural(type_name)
    view = placed(state, identity, cluster, "view", now=now)
    decision = view.type_decision(kind)
    if decision == "deny":
        return Listed("deny", [], [], all_of(()), False)
    metrics_view = placed(state, identity, cluster, "view_metrics", now=now)
    shown = view.visible(kind, items)
    counted = metrics_view.visible(kind, shown)
    return Listed(decision, shown, counted, all_of((view, metrics_view)),
                  any(metrics_view.governings()))


def metrics(state: State, identity: Identity, cluster: str,
            namespaces: Sequence[NamespaceMetrics], nodes: Sequence[NodeMetrics], *,
            now: float) -> tuple[DecisionKind, dict[str, float], bool]:
    """``clearance.v1.metrics``: (decision, metrics over the visible namespaces and
    nodes, whether one was hidden). A namespace is counted as ``check`` answers
    ``view_metrics`` on it (its own target), a node as the cluster's target does."""
    found = placed(state, identity, cluster, "view_metrics", now=now)
    if not found.here and not any(found.at(ns.name) for ns in namespaces):
        return "deny", {}, False
    values, hidden = cluster_metrics(found.here, namespaces, nodes, namespace_view=found.at)
    return ("partial" if hidden else "allow"), values, hidden


def custom_types(state: State, identity: Identity, clusters: Iterable[str], *,
                 now: float) -> set[str]:
    """``clearance.v1.custom-types``: the custom types a whole-type ``check`` does not
    deny in some of ``clusters`` (at the cluster's target or inside a Namespace target
    of it)."""
    types: set[str] = set()
    for cluster in clusters:
        types |= placed(state, identity, cluster, "view", now=now).custom_types()
    return types


def permissions(state: State, identity: Identity, clusters: Iterable[str], *,
                now: float) -> dict[str, ClusterPermissions]:
    """``clearance.v1.permissions``: per cluster, ``check``'s answer on the cluster
    object for ``view`` and the actions it allows (the cluster lives at its own target,
    never a namespace's)."""
    out: dict[str, ClusterPermissions] = {}
    for cluster in clusters:
        granted = [action for action in ACTIONS if placed(
            state, identity, cluster, action, now=now, spread_over=False).here]
        out[cluster] = ClusterPermissions(
            decision="allow" if "view" in granted else "deny", permissions=granted)
    return out
