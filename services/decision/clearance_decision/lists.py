"""``clearance.v1.filter``, ``clearance.v1.metrics`` and ``clearance.v1.custom-types``.

Each reads one snapshot, lets the evaluator pick the cluster's deciding rule, and hands
the rule's filters to the pure listing functions. Nothing here is cached: the answers
depend on the lists the caller sends.
"""

from __future__ import annotations

import time

from clearance_core.errors import BadRequest
from clearance_core.evaluate import Outcome, evaluate_cluster
from clearance_core.filters import RuleView, rule_view
from clearance_core.listing import aggregations, cluster_metrics, custom_types_in, visible_items
from clearance_core.principal import Identity
from clearance_core.resources import plural
from clearance_core.wire import (
    CustomTypesReply,
    CustomTypesRequest,
    FilterReply,
    FilterRequest,
    MetricsReply,
    MetricsRequest,
)
from clearance_decision.views import principal_snapshot
from clearance_runtime.reads import Reads, Snapshot


def _outcome(snapshot: Snapshot, identity: Identity, cluster: str, action: str) -> Outcome:
    return evaluate_cluster(snapshot.policies, identity, action=action, cluster=cluster,
                            labels=snapshot.labels.get(cluster, {}), now=time.time())


def _view(outcome: Outcome) -> RuleView | None:
    if outcome.decision != "allow" or outcome.rule is None:
        return None
    return rule_view(outcome.rule)


class Lists:
    def __init__(self, reads: Reads) -> None:
        self._reads = reads

    async def filter(self, request: FilterRequest) -> FilterReply:
        if not request.type or not request.cluster:
            raise BadRequest("type and cluster must be non-empty")
        if plural(request.type) == "clusters":
            # A list of clusters is not a list inside one cluster: answering it with that
            # cluster's rule would show every cluster. Fail closed; point to the right tool.
            raise BadRequest("type clusters: use clearance.v1.permissions or "
                             "clearance.v1.check.batch to filter a list of clusters")
        snapshot, identity = await principal_snapshot(
            self._reads, request.principal, clusters=[request.cluster])
        kind = plural(request.type)
        view = _view(_outcome(snapshot, identity, request.cluster, "view"))
        decision = "deny" if view is None else view.type_decision(kind)
        if view is None or decision == "deny":
            return FilterReply(decision="deny", items=[], total=len(request.items), visible=0,
                               aggregations=None, revision=snapshot.revision)
        shown = visible_items(view, kind, request.items)
        metrics_allowed = _outcome(snapshot, identity, request.cluster,
                                   "view_metrics").decision == "allow"
        values = aggregations(
            view, kind, shown,
            source=await self._reads.source(kind) if metrics_allowed else None,
            given=request.aggregations, metrics_allowed=metrics_allowed,
        )
        return FilterReply(decision=decision, items=shown, total=len(request.items),
                           visible=len(shown), aggregations=values,
                           revision=snapshot.revision)

    async def metrics(self, request: MetricsRequest) -> MetricsReply:
        snapshot, identity = await principal_snapshot(
            self._reads, request.principal, clusters=[request.cluster])
        view = _view(_outcome(snapshot, identity, request.cluster, "view_metrics"))
        if view is None:
            return MetricsReply(decision="deny", metrics={}, filtered=False,
                                revision=snapshot.revision)
        values, filtered = cluster_metrics(view, request.namespaces, request.nodes)
        return MetricsReply(decision="partial" if filtered else "allow", metrics=values,
                            filtered=filtered, revision=snapshot.revision)

    async def custom_types(self, request: CustomTypesRequest) -> CustomTypesReply:
        clusters = None if request.cluster is None else [request.cluster]
        snapshot, identity = await principal_snapshot(self._reads, request.principal,
                                                      clusters=clusters)
        names = [request.cluster] if request.cluster is not None else sorted(snapshot.labels)
        types: set[str] = set()
        for cluster in names:
            view = _view(_outcome(snapshot, identity, cluster, "view"))
            if view is not None:  # a Deny, or no match, shows nothing in that cluster
                types |= custom_types_in(view)
        return CustomTypesReply(types=sorted(types), revision=snapshot.revision)
