"""``clearance.v1.filter``, ``clearance.v1.metrics`` and ``clearance.v1.custom-types``.

Each reads one snapshot, finds what governs the cluster's target and each Namespace target
that answers the principal otherwise (:func:`.views.placed`: the cluster's deciding
MonitorAccessPolicy rule and the inherited AccessPolicy rules of each target, CONTRACT 6),
and judges every item by the target it lives in (:class:`clearance_core.placed.Placed`),
as ``check`` judges it. Nothing here is cached: the answers depend on the lists the
caller sends.
"""

from __future__ import annotations

import time
from typing import cast

from clearance_core.errors import BadRequest
from clearance_core.listing import aggregations, cluster_metrics
from clearance_core.placed import all_of, as_items
from clearance_core.resources import home_namespace, plural
from clearance_core.wire import (
    CustomTypesReply,
    CustomTypesRequest,
    FilterReply,
    FilterRequest,
    ListItem,
    MetricsReply,
    MetricsRequest,
)
from clearance_decision.views import placed, principal_snapshot
from clearance_runtime.reads import Reads


def _checked(kind: str, item: ListItem, index: int) -> str | None:
    try:
        return home_namespace(kind, item.name, item.namespace)
    except BadRequest as exc:
        raise BadRequest(f"items[{index}]: {exc.message}") from None


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
        kind, cluster = plural(request.type), request.cluster
        if kind == "namespaces":  # a namespace item lives in itself, nowhere else
            for index, item in enumerate(request.items):
                _checked(kind, item, index)
        snapshot, identity = await principal_snapshot(
            self._reads, request.who(), clusters=[cluster], spread=True)
        now = time.time()
        view = placed(snapshot, identity, cluster, "view", now=now)
        decision = view.type_decision(kind)
        if decision == "deny":
            return FilterReply(decision="deny", items=[], total=len(request.items), visible=0,
                               aggregations=None, revision=snapshot.revision)
        shown = cast("list[ListItem]", view.visible(kind, as_items(request.items)))
        metrics = placed(snapshot, identity, cluster, "view_metrics", now=now)
        # Aggregations count only the visible items whose own target grants view_metrics
        # (and shows them under the rules that grant it).
        counted = cast("list[ListItem]", metrics.visible(kind, as_items(shown)))
        metrics_allowed = any(metrics.governings())
        values = aggregations(
            all_of((view, metrics)), kind, counted,
            source=await self._reads.source(kind) if metrics_allowed else None,
            given=request.aggregations, metrics_allowed=metrics_allowed,
        )
        return FilterReply(decision=decision, items=shown, total=len(request.items),
                           visible=len(shown), aggregations=values,
                           revision=snapshot.revision)

    async def metrics(self, request: MetricsRequest) -> MetricsReply:
        snapshot, identity = await principal_snapshot(
            self._reads, request.who(), clusters=[request.cluster], spread=True)
        metrics = placed(snapshot, identity, request.cluster, "view_metrics")
        here = metrics.here
        if not here and not any(metrics.at(ns.name) for ns in request.namespaces):
            return MetricsReply(decision="deny", metrics={}, filtered=False,
                                revision=snapshot.revision)
        values, filtered = cluster_metrics(here, request.namespaces, request.nodes,
                                           namespace_view=metrics.at)
        return MetricsReply(decision="partial" if filtered else "allow", metrics=values,
                            filtered=filtered, revision=snapshot.revision)

    async def custom_types(self, request: CustomTypesRequest) -> CustomTypesReply:
        clusters = None if request.cluster is None else [request.cluster]
        snapshot, identity = await principal_snapshot(self._reads, request.who(),
                                                      clusters=clusters, spread=True)
        names = [request.cluster] if request.cluster is not None else sorted(snapshot.labels)
        now = time.time()
        types: set[str] = set()
        for cluster in names:
            # A Deny, or no match, shows nothing at that target; a type shows in the
            # cluster if it shows at its target or inside one of its Namespace targets.
            types |= placed(snapshot, identity, cluster, "view", now=now).custom_types()
        return CustomTypesReply(types=sorted(types), revision=snapshot.revision)
