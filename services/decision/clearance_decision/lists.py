"""``clearance.v1.filter``, ``clearance.v1.metrics`` and ``clearance.v1.custom-types``.

Each reads one snapshot and finds what governs the list (:func:`.views.governing`: the
cluster's deciding MonitorAccessPolicy rule, or the inherited AccessPolicy rules of the
target, CONTRACT 6), per namespace where a namespace has inherited policies of its own,
and hands those filters to the pure listing functions. Nothing here is cached: the
answers depend on the lists the caller sends.
"""

from __future__ import annotations

from collections.abc import Iterable

from clearance_core.errors import BadRequest
from clearance_core.govern import Governing, combined
from clearance_core.listing import aggregations, cluster_metrics, custom_types_in, visible_items
from clearance_core.principal import Identity
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
from clearance_decision.views import governing, principal_snapshot
from clearance_runtime.reads import Reads, Snapshot


def _by_namespace(snapshot: Snapshot, identity: Identity, cluster: str, kind: str, *,
                  items: list[ListItem], base: Governing,
                  ) -> list[tuple[Governing, list[ListItem]]]:
    """The items grouped by what governs them: a namespace with its own inherited
    AccessPolicy (a Namespace target) has its own rules; every other item the cluster's.
    An item's namespace is where it lives: a node's is none, a namespace's is itself
    (whatever ``namespace`` field the item carries). Groups keep the input order inside
    them."""
    own = snapshot.namespaces_with_policies(cluster)
    if not own:
        if kind == "namespaces":  # the same bad_request with or without Namespace targets
            for index, item in enumerate(items):
                _checked(kind, item, index)
        return [(base, items)]
    views: dict[str | None, Governing] = {}
    groups: dict[str | None, list[ListItem]] = {}
    for index, item in enumerate(items):
        namespace = _checked(kind, item, index)
        key = namespace if namespace in own else None
        groups.setdefault(key, []).append(item)
    for key in groups:
        views[key] = base if key is None else governing(snapshot, identity, cluster,
                                                        "view", key)
    return [(views[key], members) for key, members in groups.items()]


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
        snapshot, identity = await principal_snapshot(
            self._reads, request.who(), clusters=[request.cluster], namespaces=None)
        kind, cluster = plural(request.type), request.cluster
        base = governing(snapshot, identity, cluster, "view")
        groups = _by_namespace(snapshot, identity, cluster, kind, items=request.items,
                               base=base)
        decision = combined(view.type_decision(kind) for view, _ in groups)
        if decision == "deny":
            return FilterReply(decision="deny", items=[], total=len(request.items), visible=0,
                               aggregations=None, revision=snapshot.revision)
        visible: set[int] = set()
        for view, members in groups:
            visible.update(id(item) for item in visible_items(view, kind, members))
        shown = [item for item in request.items if id(item) in visible]
        metrics_view = governing(snapshot, identity, cluster, "view_metrics")
        metrics_allowed = bool(metrics_view)
        values = aggregations(
            _all_of(view for view, _ in groups), kind, shown,
            source=await self._reads.source(kind) if metrics_allowed else None,
            given=request.aggregations, metrics_allowed=metrics_allowed,
        )
        return FilterReply(decision=decision, items=shown, total=len(request.items),
                           visible=len(shown), aggregations=values,
                           revision=snapshot.revision)

    async def metrics(self, request: MetricsRequest) -> MetricsReply:
        snapshot, identity = await principal_snapshot(
            self._reads, request.who(), clusters=[request.cluster], namespaces=None)
        cluster = request.cluster
        view = governing(snapshot, identity, cluster, "view_metrics")
        own = snapshot.namespaces_with_policies(cluster)
        if not view and not own:
            return MetricsReply(decision="deny", metrics={}, filtered=False,
                                revision=snapshot.revision)
        per_namespace: dict[str, Governing] = {}

        def of(name: str) -> Governing:
            if name not in own:
                return view
            if name not in per_namespace:
                per_namespace[name] = governing(snapshot, identity, cluster,
                                                "view_metrics", name)
            return per_namespace[name]

        if not view and not any(of(ns.name) for ns in request.namespaces):
            return MetricsReply(decision="deny", metrics={}, filtered=False,
                                revision=snapshot.revision)
        values, filtered = cluster_metrics(view, request.namespaces, request.nodes,
                                           namespace_view=of)
        return MetricsReply(decision="partial" if filtered else "allow", metrics=values,
                            filtered=filtered, revision=snapshot.revision)

    async def custom_types(self, request: CustomTypesRequest) -> CustomTypesReply:
        clusters = None if request.cluster is None else [request.cluster]
        snapshot, identity = await principal_snapshot(self._reads, request.who(),
                                                      clusters=clusters)
        names = [request.cluster] if request.cluster is not None else sorted(snapshot.labels)
        types: set[str] = set()
        for cluster in names:
            # A Deny, or no match, shows nothing in that cluster.
            types |= custom_types_in(governing(snapshot, identity, cluster, "view"))
        return CustomTypesReply(types=sorted(types), revision=snapshot.revision)


def _all_of(governings: Iterable[Governing]) -> Governing:
    """One Governing over several: aggregations pass only what every one lets through."""
    return Governing([view for group in governings for view in group.views])
