"""Filtered lists, cluster metrics and custom types (README: Policy semantics; The API)."""

from __future__ import annotations

from typing import Any

import msgspec

from clearance_api.wire.common import DecisionKind, FieldValue, PrincipalBase
from clearance_api.wire.limits import Items


class ListItem(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """One item of a list a UI is about to show (``clearance.v1.filter``)."""

    name: str
    namespace: str | None = None
    labels: dict[str, str] = {}
    fields: dict[str, FieldValue] = {}
    #: For operators: the namespaces the operator is available in (``["*"]``: all).
    namespaces: list[str] | None = None


#: A caller's aggregation value: a result (a number, or null for an empty set), or, for a
#: ``groupBy`` aggregation, an object from group value to result. Typed, not ``Any``: an
#: arbitrary structure would cost the decoder far more per byte than a list of items.
AggregationValue = str | int | float | bool | dict[str, FieldValue] | None


class FilterRequest(PrincipalBase, kw_only=True):
    """``clearance.v1.filter``."""

    cluster: str
    type: str
    items: Items[ListItem]
    aggregations: dict[str, AggregationValue] | None = None


class FilterReply(msgspec.Struct, kw_only=True):
    decision: DecisionKind
    items: list[ListItem]
    total: int
    visible: int
    aggregations: dict[str, Any] | None
    #: An extension (README: Warnings), absent when there is nothing to say: the names
    #: the question uses that Clearance does not know. It changes no decision.
    warnings: list[str] | msgspec.UnsetType = msgspec.UNSET
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class NamespaceMetrics(msgspec.Struct, kw_only=True, frozen=True):
    name: str
    labels: dict[str, str] = {}
    pods: int = 0
    pods_running: int = 0
    deployments: int = 0
    services: int = 0


class NodeMetrics(msgspec.Struct, kw_only=True, frozen=True):
    name: str
    labels: dict[str, str] = {}
    ready: bool = False
    cpu_capacity: float = 0
    memory_capacity: float = 0


class MetricsRequest(PrincipalBase, kw_only=True):
    """``clearance.v1.metrics``: cluster metrics recomputed from what may be seen."""

    cluster: str
    namespaces: Items[NamespaceMetrics] = []
    nodes: Items[NodeMetrics] = []


class MetricsReply(msgspec.Struct, kw_only=True):
    decision: DecisionKind
    metrics: dict[str, float]
    filtered: bool
    #: An extension (README: Warnings), absent when there is nothing to say: the names
    #: the question uses that Clearance does not know. It changes no decision.
    warnings: list[str] | msgspec.UnsetType = msgspec.UNSET
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class CustomTypesRequest(PrincipalBase, kw_only=True):
    """``clearance.v1.custom-types``."""

    cluster: str | None = None


class CustomTypesReply(msgspec.Struct, kw_only=True):
    types: list[str]
    #: An extension (README: Warnings), absent when there is nothing to say: the names
    #: the question uses that Clearance does not know. It changes no decision.
    warnings: list[str] | msgspec.UnsetType = msgspec.UNSET
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET
