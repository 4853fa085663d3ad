"""The public wire contract: every message that crosses NATS, as msgspec Structs.

These Structs are the only wire types of Clearance. ``proto-schemas/`` is generated
from them (``clearance schemas``) and a test fails when the two drift apart.

Requests ignore unknown fields (forward compatibility); a wrong type, a missing
required field or a value outside an enumeration is a ``bad_request``.
"""

from __future__ import annotations

import msgspec

from clearance_api.wire.audience import (
    OthersDecision,
    SubjectDecision,
    SubjectKind,
    WhoCanSeeReply,
    WhoCanSeeRequest,
)
from clearance_api.wire.common import (
    Action,
    DecisionKind,
    ErrorBody,
    ErrorCode,
    ErrorReply,
    EventType,
    FieldValue,
    Principal,
    PrincipalBase,
    RequestBase,
    Resource,
)
from clearance_api.wire.decisions import (
    BatchItem,
    BatchReply,
    BatchRequest,
    CacheClearReply,
    CacheClearRequest,
    CacheStatus,
    CheckRequest,
    CheckResult,
    ClusterPermissions,
    PermissionsReply,
    PoliciesReply,
    PolicyState,
    PolicyStatus,
    PolicyStatusRequest,
    PolicySummary,
    PrincipalRequest,
    ServiceStatus,
    StatusCondition,
    StatusReply,
    StatusRequest,
    StepOutcome,
    TraceStep,
)
from clearance_api.wire.effective import (
    AccessAnswer,
    AccessChange,
    AccessMove,
    AccessResource,
    AccessSubject,
    AccessTruncated,
    EffectiveReply,
    EffectiveRequest,
    ExcludedPolicy,
    ReachReply,
    ReachRequest,
    RuleInForce,
    SimulateReply,
    SimulateRequest,
    StatusChange,
    Target,
    TargetDiff,
)
from clearance_api.wire.events import (
    ChangedPrincipals,
    DecisionsChanged,
    Event,
)
from clearance_api.wire.lists import (
    CustomTypesReply,
    CustomTypesRequest,
    FilterReply,
    FilterRequest,
    ListItem,
    MetricsReply,
    MetricsRequest,
    NamespaceMetrics,
    NodeMetrics,
)
from clearance_api.wire.reviews import (
    HubEntry,
    NonResourceAttributes,
    ObjectMeta,
    ResourceAttributes,
    ResourceReviewReply,
    ResourceReviewRequest,
    RulesReviewReply,
    RulesReviewRequest,
    RulesReviewSpec,
    RulesReviewStatus,
    SearchFilterReply,
    SearchFilterRequest,
    SearchPlanReply,
    SearchResult,
    SqlParam,
    SqlWhere,
    Star,
    SubjectAccessReview,
    SubjectAccessReviewReply,
    SubjectAccessReviewSpec,
    SubjectAccessReviewStatus,
)

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
SUBJECT_POLICY_STATUS = "clearance.v1.policy-status"
SUBJECT_EFFECTIVE = "clearance.v1.effective"
SUBJECT_EFFECTIVE_REACH = "clearance.v1.effective.reach"
SUBJECT_EFFECTIVE_SIMULATE = "clearance.v1.effective.simulate"
SUBJECT_WHO_CAN_SEE = "clearance.v1.who-can-see"
SUBJECT_DECISIONS_CHANGED = "clearance.decisions.changed"

#: Every request/reply subject with its request and reply Structs: the decision service's
#: route table and the schema generator are both generated from it.
REQUESTS: dict[str, tuple[type[msgspec.Struct], type[msgspec.Struct]]] = {
    SUBJECT_CHECK: (CheckRequest, CheckResult),
    SUBJECT_BATCH: (BatchRequest, BatchReply),
    SUBJECT_STATUS: (StatusRequest, StatusReply),
    SUBJECT_FILTER: (FilterRequest, FilterReply),
    SUBJECT_METRICS: (MetricsRequest, MetricsReply),
    SUBJECT_CUSTOM_TYPES: (CustomTypesRequest, CustomTypesReply),
    SUBJECT_REVIEW_SUBJECT: (SubjectAccessReview, SubjectAccessReviewReply),
    SUBJECT_REVIEW_RULES: (RulesReviewRequest, RulesReviewReply),
    SUBJECT_REVIEW_RESOURCE: (ResourceReviewRequest, ResourceReviewReply),
    SUBJECT_SEARCH_FILTER: (SearchFilterRequest, SearchFilterReply),
    SUBJECT_SEARCH_PLAN: (PrincipalRequest, SearchPlanReply),
    SUBJECT_PERMISSIONS: (PrincipalRequest, PermissionsReply),
    SUBJECT_POLICIES: (PrincipalRequest, PoliciesReply),
    SUBJECT_CACHE_CLEAR: (CacheClearRequest, CacheClearReply),
    SUBJECT_POLICY_STATUS: (PolicyStatusRequest, PolicyStatus),
    SUBJECT_EFFECTIVE: (EffectiveRequest, EffectiveReply),
    SUBJECT_EFFECTIVE_REACH: (ReachRequest, ReachReply),
    SUBJECT_EFFECTIVE_SIMULATE: (SimulateRequest, SimulateReply),
    SUBJECT_WHO_CAN_SEE: (WhoCanSeeRequest, WhoCanSeeReply),
}

__all__ = [
    "EVENTS_STREAM",
    "EVENTS_SUBJECTS",
    "SUBJECT_BATCH",
    "SUBJECT_CACHE_CLEAR",
    "SUBJECT_CHECK",
    "SUBJECT_CUSTOM_TYPES",
    "SUBJECT_DECISIONS_CHANGED",
    "SUBJECT_EFFECTIVE",
    "SUBJECT_EFFECTIVE_REACH",
    "SUBJECT_EFFECTIVE_SIMULATE",
    "SUBJECT_FILTER",
    "SUBJECT_METRICS",
    "SUBJECT_PERMISSIONS",
    "SUBJECT_POLICIES",
    "SUBJECT_POLICY_STATUS",
    "SUBJECT_REVIEW_RESOURCE",
    "SUBJECT_REVIEW_RULES",
    "SUBJECT_REVIEW_SUBJECT",
    "SUBJECT_SEARCH_FILTER",
    "SUBJECT_SEARCH_PLAN",
    "SUBJECT_STATUS",
    "SUBJECT_WHO_CAN_SEE",
    "AccessAnswer",
    "AccessChange",
    "AccessMove",
    "AccessResource",
    "AccessSubject",
    "AccessTruncated",
    "Action",
    "BatchItem",
    "BatchReply",
    "BatchRequest",
    "CacheClearReply",
    "CacheClearRequest",
    "CacheStatus",
    "ChangedPrincipals",
    "CheckRequest",
    "CheckResult",
    "ClusterPermissions",
    "CustomTypesReply",
    "CustomTypesRequest",
    "DecisionKind",
    "DecisionsChanged",
    "EffectiveReply",
    "EffectiveRequest",
    "ErrorBody",
    "ErrorCode",
    "ErrorReply",
    "Event",
    "EventType",
    "ExcludedPolicy",
    "FieldValue",
    "FilterReply",
    "FilterRequest",
    "HubEntry",
    "ListItem",
    "MetricsReply",
    "MetricsRequest",
    "NamespaceMetrics",
    "NodeMetrics",
    "NonResourceAttributes",
    "ObjectMeta",
    "OthersDecision",
    "PermissionsReply",
    "PoliciesReply",
    "PolicyState",
    "PolicyStatus",
    "PolicyStatusRequest",
    "PolicySummary",
    "Principal",
    "PrincipalBase",
    "PrincipalRequest",
    "ReachReply",
    "ReachRequest",
    "RequestBase",
    "Resource",
    "ResourceAttributes",
    "ResourceReviewReply",
    "ResourceReviewRequest",
    "RuleInForce",
    "RulesReviewReply",
    "RulesReviewRequest",
    "RulesReviewSpec",
    "RulesReviewStatus",
    "SearchFilterReply",
    "SearchFilterRequest",
    "SearchPlanReply",
    "SearchResult",
    "ServiceStatus",
    "SimulateReply",
    "SimulateRequest",
    "SqlParam",
    "SqlWhere",
    "Star",
    "StatusChange",
    "StatusCondition",
    "StatusReply",
    "StatusRequest",
    "StepOutcome",
    "SubjectAccessReview",
    "SubjectAccessReviewReply",
    "SubjectAccessReviewSpec",
    "SubjectAccessReviewStatus",
    "SubjectDecision",
    "SubjectKind",
    "Target",
    "TargetDiff",
    "TraceStep",
    "WhoCanSeeReply",
    "WhoCanSeeRequest",
]
