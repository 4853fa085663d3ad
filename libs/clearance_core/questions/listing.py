"""Lists, aggregations and cluster metrics as one principal may see them
(README: Policy semantics; The API).

Everything a reply counts is derived from the visible items only — totals of what is
visible, aggregations recomputed over the visible items, cluster metrics summed over the
visible namespaces and nodes — so nothing hidden leaks through a number.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from clearance_api.wire import ListItem, NamespaceMetrics, NodeMetrics
from clearance_core.inherit.govern import Governing
from clearance_core.kube.resources import plural
from clearance_core.monitor.aggregate import compute
from clearance_core.monitor.filters import BUILTIN_TYPES, Item
from clearance_core.monitor.metricsource import CompiledSource


def visible_items(view: Governing, type_name: str,
                  items: Sequence[ListItem]) -> list[ListItem]:
    """The visible items as given, in input order.

    A ``ListItem`` has exactly the attributes the matchers read from an ``Item`` (name,
    namespace, labels, fields, namespaces), so the wire objects are filtered as they are:
    converting 100,000 items first cost more than filtering them."""
    return cast("list[ListItem]", view.filter_items(type_name, cast("list[Item]", items)))


def aggregations(
    view: Governing,
    type_name: str,
    visible: Sequence[ListItem],
    *,
    source: CompiledSource | None,
    given: dict[str, Any] | None,
    metrics_allowed: bool,
) -> dict[str, Any] | None:
    """Custom-type aggregations: null without ``view_metrics`` (or for built-in types, or
    with no MetricSource to say what they are); recomputed from the visible items when the
    MetricSource says so (the default), else the caller's values; then the policy's
    include/exclude (exclude wins)."""
    kind = plural(type_name)
    if not metrics_allowed or kind in BUILTIN_TYPES or source is None:
        return None
    if source.filter_aggregations:
        values = compute(source.aggregations, [dict(item.fields) for item in visible])
    else:
        declared = {agg.name for agg in source.aggregations}
        values = {k: v for k, v in (given or {}).items() if k in declared}
    return view.select(values, kind)


def cluster_metrics(
    view: Governing, namespaces: Sequence[NamespaceMetrics], nodes: Sequence[NodeMetrics],
    *, namespace_view: Callable[[str], Governing] | None = None,
) -> tuple[dict[str, float], bool]:
    """(metrics over the visible namespaces and nodes, whether anything was hidden).
    ``namespace_view``: what governs one namespace, when not ``view`` (a Namespace
    target with its own inherited policy)."""
    of = namespace_view or (lambda _name: view)
    shown_ns = [
        ns for ns in namespaces
        if of(ns.name).item_visible("namespaces", Item(name=ns.name, labels=ns.labels))[0]
    ]
    shown_nodes = [
        node for node in nodes
        if view.item_visible("nodes", Item(name=node.name, labels=node.labels))[0]
    ]
    metrics: dict[str, float] = {
        "namespaces": len(shown_ns),
        "pods": sum(ns.pods for ns in shown_ns),
        "pods_running": sum(ns.pods_running for ns in shown_ns),
        "deployments": sum(ns.deployments for ns in shown_ns),
        "services": sum(ns.services for ns in shown_ns),
        "nodes": len(shown_nodes),
        "nodes_ready": sum(1 for node in shown_nodes if node.ready),
        "cpu_capacity": sum(node.cpu_capacity for node in shown_nodes),
        "memory_capacity": sum(node.memory_capacity for node in shown_nodes),
    }
    filtered = len(shown_ns) < len(namespaces) or len(shown_nodes) < len(nodes)
    return metrics, filtered


def custom_types_in(view: Governing) -> set[str]:
    """Custom types the governing rules list with a visibility other than none."""
    return view.custom_types()
