"""Kubernetes access reviews and ACM search (README: RBAC reviews)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from clearance_api.wire.common import PrincipalBase, RequestBase
from clearance_api.wire.limits import Groups, Items


# The review's members are sent back as Kubernetes writes them: empty ones left out
# (omit_defaults), as an API server answers.
class ResourceAttributes(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    namespace: str = ""
    verb: str = ""
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""


class NonResourceAttributes(msgspec.Struct, kw_only=True, omit_defaults=True):
    path: str = ""
    verb: str = ""


class SubjectAccessReviewSpec(msgspec.Struct, kw_only=True, rename="camel",
                              omit_defaults=True):
    resource_attributes: ResourceAttributes | None = None
    non_resource_attributes: NonResourceAttributes | None = None
    user: str = ""
    groups: Groups = []
    uid: str = ""
    extra: dict[str, list[str]] = {}


class ObjectMeta(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    """Kubernetes ObjectMeta, the members a review's ``metadata`` may carry and gets back
    (others are ignored, as any unknown member)."""

    name: str = ""
    generate_name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    creation_timestamp: str | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class SubjectAccessReview(RequestBase, kw_only=True, rename={"api_version": "apiVersion"}):
    """``clearance.v1.review.subject``: what a Kubernetes client sends to an API server."""

    api_version: str = "authorization.k8s.io/v1"
    kind: str = "SubjectAccessReview"
    metadata: ObjectMeta | msgspec.UnsetType = msgspec.UNSET
    spec: SubjectAccessReviewSpec


class SubjectAccessReviewStatus(msgspec.Struct, kw_only=True, rename="camel"):
    allowed: bool
    reason: str
    #: Bindings that apply to the subject but whose role does not exist.
    evaluation_error: str | msgspec.UnsetType = msgspec.UNSET


class SubjectAccessReviewReply(msgspec.Struct, kw_only=True,
                               rename={"api_version": "apiVersion"}):
    """``clearance.v1.review.subject``: the review as Kubernetes knows it — ``apiVersion``,
    ``kind``, ``metadata`` and ``spec`` as sent (the members declared here; anything else
    the request held is not sent back) — with ``status`` and ``revision`` set."""

    api_version: str = "authorization.k8s.io/v1"
    kind: str = "SubjectAccessReview"
    metadata: ObjectMeta | msgspec.UnsetType = msgspec.UNSET
    spec: SubjectAccessReviewSpec
    status: SubjectAccessReviewStatus
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class RulesReviewSpec(msgspec.Struct, kw_only=True):
    namespace: str = ""


class RulesReviewRequest(RequestBase, kw_only=True):
    """``clearance.v1.review.rules`` (SelfSubjectRulesReview shape, for any subject)."""

    spec: RulesReviewSpec = msgspec.field(default_factory=RulesReviewSpec)
    user: str
    groups: Groups = []


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


class SearchFilterRequest(PrincipalBase, kw_only=True):
    items: Items[SearchResult]


class SearchFilterReply(msgspec.Struct, kw_only=True):
    items: list[SearchResult]
    total: int
    visible: int
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


Star = Literal["*"]
#: A SQL parameter: a value, or a list bound as a PostgreSQL array.
SqlParam = str | list[str]


class HubEntry(msgspec.Struct, frozen=True, kw_only=True):
    """Hub rows of (group, resource) in ``namespaces`` named ``names``; ``*``: any."""

    group: str
    resource: str
    namespaces: list[str] | Star
    names: list[str] | Star


class SqlWhere(msgspec.Struct, frozen=True, kw_only=True):
    """A WHERE clause over ``search.resources`` with psycopg ``%s`` placeholders."""

    where: str
    params: list[SqlParam]


class SearchPlanReply(msgspec.Struct, kw_only=True):
    """``clearance.v1.search.plan``: the same rules as a query plan and SQL."""

    hub: list[HubEntry]
    managed_clusters: list[str]
    sql: SqlWhere
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET
