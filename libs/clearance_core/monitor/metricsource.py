"""MetricSource (clusterpulse.io/v1alpha1): the custom resource types policies may name.

A MetricSource declares a type (``spec.rbac.resourceTypeName``), which of its fields
policies may filter on (``filterableFields``), whether aggregations are recomputed from
what a user may see (``filterAggregations``, default true) and the aggregations
themselves (``spec.aggregations``). A policy whose field filter names a field the type's
MetricSource does not list is invalid — checked whenever either side changes, unlike
ClusterPulse, which stored ``filterableFields`` and never enforced it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from clearance_api.errors import InvalidObject
from clearance_core.kube import objects, strict
from clearance_core.monitor.aggregate import Aggregation, compile_aggregations
from clearance_core.monitor.policy import CompiledPolicy, object_identity


class CompiledSource(msgspec.Struct, kw_only=True, frozen=True):
    namespace: str
    name: str
    type_name: str
    #: metadata.creationTimestamp (POSIX seconds; absent: +inf). When two MetricSources
    #: declare one type the oldest wins, then ``namespace/name``: a newcomer cannot take
    #: over a type, and deleting either leaves the other in force.
    created: float = math.inf
    filterable_fields: tuple[str, ...] = ()
    filter_aggregations: bool = True
    aggregations: tuple[Aggregation, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def precedence(self) -> tuple[float, str]:
        return (self.created, self.key)


def winner(candidates: Iterable[CompiledSource]) -> CompiledSource | None:
    """The MetricSource in force for a type among all that declare it."""
    return min(candidates, key=CompiledSource.precedence, default=None)


def _created(obj: dict[str, Any]) -> float:
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    try:
        return objects.rfc3339(stamp, "metadata.creationTimestamp")
    except InvalidObject:
        return math.inf


def compile_source(obj: dict[str, Any]) -> CompiledSource:
    namespace, name = object_identity(obj)
    spec = objects.prune(obj.get("spec"), "spec")  # the limits first
    strict.check_object("metricsource", obj)
    if not isinstance(spec, dict):
        raise InvalidObject("spec is required")
    rbac = spec.get("rbac")
    if not isinstance(rbac, dict):
        raise InvalidObject("spec.rbac is required")
    type_name = objects.text(rbac.get("resourceTypeName", ""),
                             "spec.rbac.resourceTypeName")
    if not type_name:
        raise InvalidObject("spec.rbac.resourceTypeName must be a non-empty string")
    fields = objects.texts(rbac.get("filterableFields"), "spec.rbac.filterableFields")
    recompute = rbac.get("filterAggregations", True)
    if not isinstance(recompute, bool):
        raise InvalidObject("spec.rbac.filterAggregations must be a boolean")
    return CompiledSource(
        namespace=namespace,
        name=name,
        created=_created(obj),
        type_name=type_name,
        filterable_fields=tuple(dict.fromkeys(fields)),
        filter_aggregations=recompute,
        aggregations=tuple(compile_aggregations(spec.get("aggregations") or [],
                                                "spec.aggregations")),
    )


def field_violations(
    policy: CompiledPolicy, sources: Mapping[str, CompiledSource]
) -> list[str]:
    """Field filters on fields the type's MetricSource does not declare filterable."""
    problems = []
    for index, rule in enumerate(policy.rules):
        for flt in rule.filters:
            source = sources.get(flt.type)
            if source is None:
                continue  # a warning, not an error: see missing_sources
            for field in flt.fields:
                if field not in source.filterable_fields:
                    problems.append(
                        f"rules[{index}] filters {flt.type} on field {field!r}, which "
                        f"MetricSource {source.key} does not list in filterableFields"
                    )
    return problems


def missing_sources(policy: CompiledPolicy, sources: Mapping[str, CompiledSource]) -> list[str]:
    return [t for t in policy.custom_types if t not in sources]
