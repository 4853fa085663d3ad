"""Kubernetes and OpenShift access reviews over NATS (CONTRACT section 5).

``review.subject`` takes a SubjectAccessReview exactly as a Kubernetes client sends it and
returns the same object with its ``status``; ``review.rules`` answers in the
SelfSubjectRulesReview shape; ``review.resource`` is "who can" (ResourceAccessReview).

The RBAC index is built in this process from the Roles and bindings the compiler stores,
and rebuilt only when ``clr:rbac:rev`` moves; answers then cost an index lookup, not a
scan of every binding. Request groups are expanded as everywhere else: the given groups,
the OpenShift Groups listing the user, and the service-account groups.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import redis.asyncio as aioredis

from clearance_core import search
from clearance_core.errors import BadRequest, InvalidObject
from clearance_core.principal import service_account_groups
from clearance_core.rbac import (
    Attributes,
    Binding,
    NonResourceAttributes,
    ResourceAttributes,
    Role,
    parse_binding,
    parse_role,
)
from clearance_core.rbac_index import RbacIndex
from clearance_core.resources import check_principal
from clearance_core.wire import (
    Principal,
    ResourceReviewReply,
    ResourceReviewRequest,
    RulesReviewReply,
    RulesReviewRequest,
    RulesReviewStatus,
    SearchFilterReply,
    SearchFilterRequest,
    SearchPlanReply,
    SubjectAccessReview,
)
from clearance_runtime import health, keys, logs

log = logs.get(__name__)
_object = msgspec.json.Decoder(dict[str, Any])
# A review comes back as it was sent: its members are kept as raw JSON, never rebuilt as
# Python objects (cheap whatever the client put in them).
_members = msgspec.json.Decoder(dict[str, msgspec.Raw])
_labels = msgspec.json.Decoder(dict[str, str])


class Reviews:
    def __init__(self, redis: aioredis.Redis) -> None:
        self._r = redis
        self._index = RbacIndex()
        self._built_at: bytes | None = None
        self._lock = asyncio.Lock()

    async def index(self) -> RbacIndex:
        version: bytes | None = await self._r.get(keys.RBAC_REV)  # type: ignore[assignment]
        if version == self._built_at:
            return self._index
        async with self._lock:
            if version != self._built_at:
                rows: dict[bytes, bytes] = await self._r.hgetall(keys.RBAC)  # type: ignore[assignment]
                roles: list[Role] = []
                bindings: list[Binding] = []
                for blob in rows.values():
                    obj = _object.decode(blob)
                    try:
                        if obj.get("kind") in ("Role", "ClusterRole"):
                            roles.append(parse_role(obj))
                        else:
                            bindings.append(parse_binding(obj))
                    except InvalidObject as exc:  # the compiler already withdrew these
                        log.warning("rbac_object_skipped", error=exc.message)
                self._index = RbacIndex(roles, bindings)
                self._built_at = version
        return self._index

    async def groups(self, user: str, given: list[str], email: str | None = None) -> list[str]:
        """Given groups + OpenShift Groups listing the user (or email) + SA groups."""
        expanded = {*given, *service_account_groups(user)}
        for name in (user, email):
            if name:
                member: set[bytes] = await self._r.smembers(keys.member_of(name))  # type: ignore[assignment]
                expanded.update(m.decode() for m in member)
        return sorted(expanded)

    async def search_filter(self, request: SearchFilterRequest) -> SearchFilterReply:
        principal = request.principal
        check_principal(principal)
        index, inventory = await self.index(), await self._inventory()
        groups = await self.groups(principal.username, principal.groups, principal.email)
        shown = search.search_filter(
            index, principal.username, groups, inventory,
            [search.SearchItem(cluster=i.cluster, group=i.group, resource=i.resource,
                               kind=i.kind or "", namespace=i.namespace or "", name=i.name)
             for i in request.items])
        visible = [item for item, ok in zip(request.items, shown, strict=True) if ok]
        return SearchFilterReply(items=visible, total=len(request.items), visible=len(visible),
                                 revision=await health.revision(self._r))

    async def search_plan(self, principal: Principal) -> SearchPlanReply:
        check_principal(principal)
        index, inventory = await self.index(), await self._inventory()
        groups = await self.groups(principal.username, principal.groups, principal.email)
        plan = search.search_plan(index, principal.username, groups, inventory)
        return SearchPlanReply(hub=plan.hub, managed_clusters=plan.managed_clusters,
                               sql=plan.sql, revision=await health.revision(self._r))

    async def _inventory(self) -> dict[str, dict[str, str]]:
        rows: dict[bytes, bytes] = await self._r.hgetall(keys.CLUSTERS)  # type: ignore[assignment]
        return {k.decode(): _labels.decode(v) for k, v in rows.items()}

    async def subject(self, body: bytes, review: SubjectAccessReview) -> dict[str, Any]:
        spec = review.spec
        attrs: Attributes
        if spec.resource_attributes is not None and spec.non_resource_attributes is not None:
            # The API server refuses it too (ValidateSubjectAccessReviewSpec).
            raise BadRequest("spec.nonResourceAttributes cannot be specified in combination "
                             "with spec.resourceAttributes: exactly one is required")
        if spec.resource_attributes is not None:
            ra = spec.resource_attributes
            if not ra.verb or not ra.resource:
                raise BadRequest("spec.resourceAttributes needs verb and resource")
            attrs = ResourceAttributes(verb=ra.verb, group=ra.group, version=ra.version,
                                       resource=ra.resource, subresource=ra.subresource,
                                       name=ra.name, namespace=ra.namespace)
        elif spec.non_resource_attributes is not None:
            nra = spec.non_resource_attributes
            if not nra.verb or not nra.path:
                raise BadRequest("spec.nonResourceAttributes needs path and verb")
            attrs = NonResourceAttributes(path=nra.path, verb=nra.verb)
        else:
            raise BadRequest("spec needs exactly one of resourceAttributes or "
                             "nonResourceAttributes")
        if not spec.user and not spec.groups:
            raise BadRequest("spec needs a user or groups")
        groups = await self.groups(spec.user, spec.groups) if spec.user else spec.groups
        allowed, reason, error = (await self.index()).allowed(attrs, spec.user, groups)
        status: dict[str, Any] = {"allowed": allowed, "reason": reason}
        if error:
            status["evaluationError"] = error
        reply: dict[str, Any] = dict(_members.decode(body))  # the same object back
        reply["status"] = status
        reply["revision"] = await health.revision(self._r)
        return reply

    async def rules(self, request: RulesReviewRequest) -> RulesReviewReply:
        if not request.user:
            raise BadRequest("user is required")
        index = await self.index()
        groups = await self.groups(request.user, request.groups)
        resource_rules, non_resource_rules = index.rules_for(
            request.user, groups, request.spec.namespace)
        status = RulesReviewStatus(resource_rules=resource_rules,
                                   non_resource_rules=non_resource_rules)
        error = index.evaluation_error(request.user, groups, request.spec.namespace)
        if error:
            status.evaluation_error = error
        return RulesReviewReply(status=status, revision=await health.revision(self._r))

    async def resource(self, request: ResourceReviewRequest) -> ResourceReviewReply:
        if not request.verb or not request.resource:
            raise BadRequest("verb and resource are required")
        attrs = ResourceAttributes(verb=request.verb, group=request.group,
                                   resource=request.resource,
                                   subresource=request.subresource, name=request.name,
                                   namespace=request.namespace)
        users, groups = (await self.index()).who_can(attrs)
        return ResourceReviewReply(users=users, groups=groups,
                                   revision=await health.revision(self._r))
