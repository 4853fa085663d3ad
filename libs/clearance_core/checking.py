"""One access check on compiled state: the MonitorAccessPolicies, then the inherited
AccessPolicies on top (``inherited_decide``: inherited Deny > first MonitorAccessPolicy >
inherited Allows).

This is the one place the two are put together, whatever holds the compiled state: the
decision service's snapshot (read from the store, or its mirror) and a model folded from
manifests offline (``clearance test``, :mod:`clearance_core.offline`) answer through it, so
an offline answer is the service's answer by construction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from clearance_core.decide import Decision, decide
from clearance_core.evaluate import Matcher
from clearance_core.hierarchy import Target
from clearance_core.inherited_decide import decide_with_inherited
from clearance_core.merge import EffectiveRule
from clearance_core.policy import CompiledPolicy
from clearance_core.principal import Identity
from clearance_core.wire import Resource


class CompiledState(Protocol):
    """What a check reads of the compiled state."""

    @property
    def policies(self) -> Sequence[CompiledPolicy]:
        """The MonitorAccessPolicies that may name the principal (more is harmless)."""

    @property
    def labels(self) -> Mapping[str, Mapping[str, str]]:
        """The inventory's labels of the clusters asked about."""

    @property
    def declared(self) -> frozenset[str]:
        """The custom types some MetricSource declares."""

    @property
    def match(self) -> Matcher: ...

    def inherited(self, cluster: str, namespace: str | None
                  ) -> tuple[Target | None, Mapping[str, EffectiveRule]]:
        """The effective AccessPolicy rules a decision there reads, and whose they are."""


def decide_check(state: CompiledState, identity: Identity, *, action: str,
                 resource: Resource, cluster: str, namespace: str | None, now: float,
                 explain: bool) -> Decision:
    """One check (``cluster`` and ``namespace``: where the resource is, as
    :func:`clearance_core.resources.place_of` says)."""
    decision = decide(
        state.policies, identity, action=action, resource=resource, cluster=cluster,
        labels=state.labels.get(cluster, {}), now=now, match=state.match, explain=explain)
    target, rules = state.inherited(cluster, namespace)
    if rules:
        decision = decide_with_inherited(
            rules, identity, action=action, resource=resource, monitor=decision,
            target=target, declared=state.declared)
    return decision
