"""``clearance.v1.filter``, ``clearance.v1.metrics`` and ``clearance.v1.custom-types``.

Each reads one snapshot, with the Namespace targets that answer the principal otherwise
than the cluster's, and answers from it with :mod:`clearance_core.questions.answers`: every item
judged by the target it lives in, as ``check`` judges it. Nothing here is cached: the
answers depend on the lists the caller sends.
"""

from __future__ import annotations

import time
from typing import cast

import msgspec

from clearance_api.errors import BadRequest
from clearance_api.wire import (
    CustomTypesReply,
    CustomTypesRequest,
    FilterReply,
    FilterRequest,
    ListItem,
    MetricsReply,
    MetricsRequest,
)
from clearance_core.kube.resources import home_namespace, plural
from clearance_core.questions import answers, unknown_names
from clearance_core.questions.listing import aggregations
from clearance_core.questions.placed import as_items
from clearance_decision.decider import DEFAULT_BUDGET, within_budget
from clearance_decision.views import principal_snapshot
from clearance_runtime.reading.reads import Reads


def _checked(kind: str, item: ListItem, index: int) -> str | None:
    try:
        return home_namespace(kind, item.name, item.namespace)
    except BadRequest as exc:
        raise BadRequest(f"items[{index}]: {exc.message}") from None


class Lists:
    def __init__(self, reads: Reads, *, budget: int = DEFAULT_BUDGET) -> None:
        self._reads = reads
        self._budget = budget

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
        items = as_items(request.items)
        within_budget(answers.filter_cost(snapshot, cluster, kind, items), self._budget)
        listed = answers.filtered(snapshot, identity, cluster, kind, items, now=time.time())
        warnings = _warned(unknown_names.list_warnings(
            snapshot, identity, [cluster], type_name=request.type,
            known=snapshot.known_clusters, inventory=snapshot.inventory, asked=cluster))
        if listed.decision == "deny":
            return FilterReply(decision="deny", items=[], total=len(request.items), visible=0,
                               aggregations=None, warnings=warnings,
                               revision=snapshot.revision)
        shown = cast("list[ListItem]", listed.shown)
        values = aggregations(
            listed.aggregating, kind, cast("list[ListItem]", listed.counted),
            source=await self._reads.source(kind) if listed.metrics_allowed else None,
            given=request.aggregations, metrics_allowed=listed.metrics_allowed,
        )
        return FilterReply(decision=listed.decision, items=shown, total=len(request.items),
                           visible=len(shown), aggregations=values, warnings=warnings,
                           revision=snapshot.revision)

    async def metrics(self, request: MetricsRequest) -> MetricsReply:
        snapshot, identity = await principal_snapshot(
            self._reads, request.who(), clusters=[request.cluster], spread=True)
        decision, values, filtered = answers.metrics(
            snapshot, identity, request.cluster, request.namespaces, request.nodes,
            now=time.time())
        warnings = _warned(unknown_names.list_warnings(
            snapshot, identity, [request.cluster], known=snapshot.known_clusters,
            inventory=snapshot.inventory, asked=request.cluster))
        return MetricsReply(decision=decision, metrics=values, filtered=filtered,
                            warnings=warnings, revision=snapshot.revision)

    async def custom_types(self, request: CustomTypesRequest) -> CustomTypesReply:
        clusters = None if request.cluster is None else [request.cluster]
        snapshot, identity = await principal_snapshot(self._reads, request.who(),
                                                      clusters=clusters, spread=True)
        names = [request.cluster] if request.cluster is not None else sorted(snapshot.labels)
        types = answers.custom_types(snapshot, identity, names, now=time.time())
        warnings = _warned(unknown_names.list_warnings(
            snapshot, identity, names, known=snapshot.known_clusters,
            inventory=snapshot.inventory, asked=request.cluster))
        return CustomTypesReply(types=sorted(types), warnings=warnings,
                                revision=snapshot.revision)


def _warned(warnings: list[str]) -> list[str] | msgspec.UnsetType:
    """A reply's ``warnings``: absent when there is none (docs/api/README.md: Warnings)."""
    return warnings or msgspec.UNSET
