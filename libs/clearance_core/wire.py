"""The public wire contract: every message that crosses NATS, as msgspec Structs.

These Structs are the only wire types of Clearance. ``proto-schemas/`` is generated
from them (``clearance schemas``) and a test fails when the two drift apart.

Requests ignore unknown fields (forward compatibility); a wrong type, a missing
required field or a value outside an enumeration is a ``bad_request``.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Action = Literal["view", "view_metrics"]
DecisionKind = Literal["allow", "deny", "partial"]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
FieldValue = str | int | float | bool | None


class Principal(msgspec.Struct, kw_only=True, frozen=True):
    """Who is asking, as asserted by the calling service (CONTRACT section 2)."""

    username: str
    groups: list[str] = []
    email: str | None = None


class Resource(msgspec.Struct, kw_only=True, frozen=True):
    """What is asked about. ``cluster`` defaults to ``name`` for ``type: cluster``."""

    type: str
    name: str = "*"
    cluster: str | None = None
    namespace: str | None = None
    labels: dict[str, str] = {}
    fields: dict[str, FieldValue] = {}


class RequestBase(msgspec.Struct, kw_only=True):
    """Fields every request subject accepts (CONTRACT section 0)."""

    request_id: str | None = None
    min_revision: int | None = None
    timeout_ms: int | None = None


class CheckRequest(RequestBase, kw_only=True):
    """``clearance.v1.check``."""

    principal: Principal
    action: Action
    resource: Resource
    explain: bool = False


class BatchItem(msgspec.Struct, kw_only=True, frozen=True):
    action: Action
    resource: Resource


class BatchRequest(RequestBase, kw_only=True):
    """``clearance.v1.check.batch``: many checks for one principal, answered in order."""

    principal: Principal
    checks: list[BatchItem]
    explain: bool = False


class StatusRequest(RequestBase, kw_only=True):
    """``clearance.v1.status``."""


class PrincipalRequest(RequestBase, kw_only=True):
    """``clearance.v1.permissions`` and ``clearance.v1.policies``."""

    principal: Principal


class ClusterPermissions(msgspec.Struct, kw_only=True):
    decision: DecisionKind
    permissions: list[Action]


class PermissionsReply(msgspec.Struct, kw_only=True):
    clusters: dict[str, ClusterPermissions]
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class PolicySummary(msgspec.Struct, kw_only=True):
    name: str
    namespace: str
    priority: int
    effect: str
    enabled: bool
    valid: bool
    in_force: bool
    matched_by: str


class PoliciesReply(msgspec.Struct, kw_only=True):
    policies: list[PolicySummary]
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class CacheClearRequest(RequestBase, kw_only=True):
    """``clearance.v1.cache.clear``: one principal's cached decisions, or all."""

    principal: Principal | None = None


class CacheClearReply(msgspec.Struct, kw_only=True):
    cleared: int
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class ListItem(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """One item of a list a UI is about to show (``clearance.v1.filter``)."""

    name: str
    namespace: str | None = None
    labels: dict[str, str] = {}
    fields: dict[str, FieldValue] = {}
    #: For operators: the namespaces the operator is available in (``["*"]``: all).
    namespaces: list[str] | None = None


class FilterRequest(RequestBase, kw_only=True):
    """``clearance.v1.filter``."""

    principal: Principal
    cluster: str
    type: str
    items: list[ListItem]
    aggregations: dict[str, Any] | None = None


class FilterReply(msgspec.Struct, kw_only=True):
    decision: DecisionKind
    items: list[ListItem]
    total: int
    visible: int
    aggregations: dict[str, Any] | None
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


class MetricsRequest(RequestBase, kw_only=True):
    """``clearance.v1.metrics``: cluster metrics recomputed from what may be seen."""

    principal: Principal
    cluster: str
    namespaces: list[NamespaceMetrics] = []
    nodes: list[NodeMetrics] = []


class MetricsReply(msgspec.Struct, kw_only=True):
    decision: DecisionKind
    metrics: dict[str, float]
    filtered: bool
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class CustomTypesRequest(RequestBase, kw_only=True):
    """``clearance.v1.custom-types``."""

    principal: Principal
    cluster: str | None = None


class CustomTypesReply(msgspec.Struct, kw_only=True):
    types: list[str]
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class ResourceAttributes(msgspec.Struct, kw_only=True, rename="camel"):
    namespace: str = ""
    verb: str = ""
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""


class NonResourceAttributes(msgspec.Struct, kw_only=True):
    path: str = ""
    verb: str = ""


class SubjectAccessReviewSpec(msgspec.Struct, kw_only=True, rename="camel"):
    resource_attributes: ResourceAttributes | None = None
    non_resource_attributes: NonResourceAttributes | None = None
    user: str = ""
    groups: list[str] = []
    uid: str = ""
    extra: dict[str, list[str]] = {}


class SubjectAccessReview(RequestBase, kw_only=True, rename={"api_version": "apiVersion"}):
    """``clearance.v1.review.subject``: what a Kubernetes client sends to an API server."""

    api_version: str = "authorization.k8s.io/v1"
    kind: str = "SubjectAccessReview"
    spec: SubjectAccessReviewSpec


class RulesReviewSpec(msgspec.Struct, kw_only=True):
    namespace: str = ""


class RulesReviewRequest(RequestBase, kw_only=True):
    """``clearance.v1.review.rules`` (SelfSubjectRulesReview shape, for any subject)."""

    spec: RulesReviewSpec = msgspec.field(default_factory=RulesReviewSpec)
    user: str
    groups: list[str] = []


class RulesReviewStatus(msgspec.Struct, kw_only=True, rename="camel"):
    resource_rules: list[dict[str, Any]]
    non_resource_rules: list[dict[str, Any]]
    incomplete: bool = False
    evaluation_error: str | msgspec.UnsetType = msgspec.UNSET


class RulesReviewReply(msgspec.Struct, kw_only=True):
    status: RulesReviewStatus
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class ResourceReviewRequest(RequestBase, kw_only=True):
    """``clearance.v1.review.resource``: who can (ResourceAccessReview)."""

    verb: str
    resource: str
    group: str = ""
    namespace: str = ""
    name: str = ""
    subresource: str = ""


class ResourceReviewReply(msgspec.Struct, kw_only=True):
    users: list[str]
    groups: list[str]
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class SearchResult(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """One ACM search result (``clearance.v1.search.filter``)."""

    cluster: str
    group: str = ""
    resource: str
    kind: str | None = None
    namespace: str | None = None
    name: str


class SearchFilterRequest(RequestBase, kw_only=True):
    principal: Principal
    items: list[SearchResult]


class SearchFilterReply(msgspec.Struct, kw_only=True):
    items: list[SearchResult]
    total: int
    visible: int
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class SearchPlanReply(msgspec.Struct, kw_only=True):
    """``clearance.v1.search.plan``: the same rules as a query plan and SQL."""

    hub: list[dict[str, Any]]
    managed_clusters: list[str]
    sql: dict[str, Any]
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class TraceStep(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One candidate policy in an explanation, in evaluation order.

    ``outcome`` is ``skipped`` (with ``reason`` one of ``disabled``, ``invalid``,
    ``not_yet_valid``, ``expired``, ``invalid_time``), ``no_match`` (no rule and no
    default matched the cluster), ``matched`` (a rule matched but another step decides)
    or ``decided``.
    """

    policy: str
    priority: int
    effect: str
    outcome: Literal["skipped", "no_match", "matched", "decided"]
    reason: str
    rule: int | None = None
    selector: str | None = None
    #: For a concrete item: the filter dimension that hid it (names, namespaces, labels,
    #: fields.<f>, visibility, namespace (the namespace rule), unlisted).
    hidden_by: str | None = None


class CheckResult(msgspec.Struct, kw_only=True):
    """The answer to one check (``clearance.v1.check`` and each batch entry)."""

    decision: DecisionKind
    allowed: bool
    reason: str
    policy: str | None = None
    permissions: list[Action] = []
    filters: dict[str, Any] | None = None
    cached: bool = False
    trace: list[TraceStep] | msgspec.UnsetType = msgspec.UNSET
    revision: int | msgspec.UnsetType = msgspec.UNSET
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class BatchReply(msgspec.Struct, kw_only=True):
    results: list[CheckResult]
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class ServiceStatus(msgspec.Struct, kw_only=True):
    revision: int
    healthy: bool


class CacheStatus(msgspec.Struct, kw_only=True):
    entries: int
    hits: int
    misses: int


class StatusReply(msgspec.Struct, kw_only=True):
    revision: int
    services: dict[str, ServiceStatus]
    policies: int
    cache: CacheStatus
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class ErrorBody(msgspec.Struct, kw_only=True):
    code: Literal["bad_request", "not_found", "stale", "unavailable", "internal"]
    message: str


class ErrorReply(msgspec.Struct, kw_only=True):
    error: ErrorBody
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class Event(msgspec.Struct, kw_only=True):
    """One change on ``clearance.events.<kind>.<id>`` (CONTRACT section 1)."""

    type: EventType
    object: dict[str, Any]


class ChangedPrincipals(msgspec.Struct, kw_only=True):
    users: list[str] = []
    groups: list[str] = []


class DecisionsChanged(msgspec.Struct, kw_only=True):
    """``clearance.decisions.changed``: whose cached decisions an event may alter."""

    revision: int
    principals: ChangedPrincipals
    all: bool = False


# Subjects -----------------------------------------------------------------------------

EVENTS_STREAM = "CLEARANCE_EVENTS"
EVENTS_SUBJECTS = "clearance.events.>"
SUBJECT_CHECK = "clearance.v1.check"
SUBJECT_BATCH = "clearance.v1.check.batch"
SUBJECT_STATUS = "clearance.v1.status"
SUBJECT_FILTER = "clearance.v1.filter"
SUBJECT_METRICS = "clearance.v1.metrics"
SUBJECT_CUSTOM_TYPES = "clearance.v1.custom-types"
SUBJECT_REVIEW_SUBJECT = "clearance.v1.review.subject"
SUBJECT_REVIEW_RULES = "clearance.v1.review.rules"
SUBJECT_REVIEW_RESOURCE = "clearance.v1.review.resource"
SUBJECT_SEARCH_FILTER = "clearance.v1.search.filter"
SUBJECT_SEARCH_PLAN = "clearance.v1.search.plan"
SUBJECT_PERMISSIONS = "clearance.v1.permissions"
SUBJECT_POLICIES = "clearance.v1.policies"
SUBJECT_CACHE_CLEAR = "clearance.v1.cache.clear"
SUBJECT_DECISIONS_CHANGED = "clearance.decisions.changed"

#: Every request Struct with the subject it is served on (used by the schema generator).
REQUESTS: dict[str, tuple[type[msgspec.Struct], type[msgspec.Struct]]] = {
    SUBJECT_CHECK: (CheckRequest, CheckResult),
    SUBJECT_BATCH: (BatchRequest, BatchReply),
    SUBJECT_STATUS: (StatusRequest, StatusReply),
    SUBJECT_FILTER: (FilterRequest, FilterReply),
    SUBJECT_METRICS: (MetricsRequest, MetricsReply),
    SUBJECT_CUSTOM_TYPES: (CustomTypesRequest, CustomTypesReply),
    SUBJECT_REVIEW_SUBJECT: (SubjectAccessReview, SubjectAccessReview),
    SUBJECT_REVIEW_RULES: (RulesReviewRequest, RulesReviewReply),
    SUBJECT_REVIEW_RESOURCE: (ResourceReviewRequest, ResourceReviewReply),
    SUBJECT_SEARCH_FILTER: (SearchFilterRequest, SearchFilterReply),
    SUBJECT_SEARCH_PLAN: (PrincipalRequest, SearchPlanReply),
    SUBJECT_PERMISSIONS: (PrincipalRequest, PermissionsReply),
    SUBJECT_POLICIES: (PrincipalRequest, PoliciesReply),
    SUBJECT_CACHE_CLEAR: (CacheClearRequest, CacheClearReply),
}
