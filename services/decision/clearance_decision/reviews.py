"""Kubernetes and OpenShift access reviews over NATS (docs/api/reviews.md).

``review.subject`` takes a SubjectAccessReview exactly as a Kubernetes client sends it and
returns the same object with its ``status``; ``review.rules`` answers in the
SelfSubjectRulesReview shape; ``review.resource`` is "who can" (ResourceAccessReview).

Each answer reads one state, :meth:`clearance_runtime.reading.reads.Reads.rbac`: the RBAC
index (built in this process, then updated change by change from the compiler's RBAC
change log), the Group memberships and the system revision, after one probe of the store
that the requests of an event-loop iteration share — and that refuses a state being
rebuilt, so these routes need no separate check (``app.py``). Answers cost an index
lookup, not a scan of every binding. Request groups are the effective groups of every
decision: the given groups, the OpenShift Groups listing the user, and the
service-account groups.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from clearance_api.errors import BadRequest
from clearance_api.wire import (
    SUBJECT_REVIEW_SUBJECT,
    Principal,
    PrincipalRequest,
    ResourceReviewReply,
    ResourceReviewRequest,
    RulesReviewReply,
    RulesReviewRequest,
    RulesReviewStatus,
    SearchFilterReply,
    SearchFilterRequest,
    SearchPlanReply,
    SubjectAccessReview,
    SubjectAccessReviewReply,
    SubjectAccessReviewStatus,
)
from clearance_core.kube.resources import check_principal
from clearance_core.rbac import search
from clearance_core.rbac.rules import Attributes, NonResourceAttributes, ResourceAttributes
from clearance_decision.routes import Route
from clearance_runtime.messaging.responder import reply_to
from clearance_runtime.reading.reads import RbacState, Reads

#: Seconds of answering a batch of reviews from one state before the event loop gets a
#: turn (and the rest of the batch a state read again).
SLICE_SECONDS = 0.02


class Reviews:
    def __init__(self, reads: Reads) -> None:
        self._reads = reads

    async def _search_inputs(
        self, principal: Principal
    ) -> tuple[RbacState, dict[str, dict[str, str]], list[str]]:
        """One state's RBAC, its cluster inventory and the principal's effective groups."""
        check_principal(principal)
        state = await self._reads.rbac()
        groups = state.effective_groups(principal.username, principal.groups,
                                        principal.email)
        return state, state.inventory(), groups

    async def search_filter(self, request: SearchFilterRequest) -> SearchFilterReply:
        principal = request.who()
        state, inventory, groups = await self._search_inputs(principal)
        shown = search.search_filter(
            state.index, principal.username, groups, inventory,
            [search.SearchItem(cluster=i.cluster, group=i.group, resource=i.resource,
                               kind=i.kind or "", namespace=i.namespace or "", name=i.name)
             for i in request.items])
        visible = [item for item, ok in zip(request.items, shown, strict=True) if ok]
        return SearchFilterReply(items=visible, total=len(request.items), visible=len(visible),
                                 revision=state.revision)

    async def search_plan(self, request: PrincipalRequest) -> SearchPlanReply:
        principal = request.who()
        state, inventory, groups = await self._search_inputs(principal)
        plan = search.search_plan(state.index, principal.username, groups, inventory)
        return SearchPlanReply(hub=plan.hub, managed_clusters=plan.managed_clusters,
                               sql=plan.sql, revision=state.revision)

    async def subject(self, review: SubjectAccessReview) -> SubjectAccessReviewReply:
        attrs = _attributes(review)
        return self._subject(await self._reads.rbac(), review, attrs)

    async def subject_many(self, route: Route, bodies: list[bytes]) -> list[bytes]:
        """One reply per body, in order, for reviews that arrived together (``route``: the
        review.subject route), in slices of at most ``SLICE_SECONDS``: the reviews of
        a slice that need no wait are answered from one state read for it, with no await
        between two answers. Requests stay isolated
        (docs/api/README.md: Conventions): a body that cannot be answered so — malformed,
        asking for ``min_revision``, or failing in any way — falls to the route, which
        answers it alone with its own error."""
        replies: list[bytes | None] = [None] * len(bodies)
        position = 0
        while position < len(bodies):
            # One state per slice, read by one probe (shared with the other requests of
            # the iteration); a store outage leaves the rest to be answered alone below,
            # each as unavailable.
            state: RbacState | None = None
            with contextlib.suppress(Exception):
                state = await self._reads.rbac()
            if state is None:
                break
            # No await within a slice: its answers are of one state. A slice ends after
            # SLICE_SECONDS, decoding included (a review may assert 10,000 groups:
            # milliseconds to decode and to answer), and the loop lets other requests in
            # before the next one.
            until = time.monotonic() + SLICE_SECONDS
            while position < len(bodies):
                index, position = position, position + 1
                # Whatever fails here is answered (and logged) alone, below.
                with contextlib.suppress(Exception):
                    review = route.decode(bodies[index])
                    if review.min_revision is None:
                        answer = self._subject(state, review, _attributes(review))
                        replies[index] = route.encode(answer, review, bodies[index])
                if time.monotonic() > until:
                    break
        slow = [i for i, reply in enumerate(replies) if reply is None]
        for index, (reply, _) in zip(slow, await asyncio.gather(*(
                reply_to(SUBJECT_REVIEW_SUBJECT, route, bodies[i]) for i in slow)),
                strict=True):
            replies[index] = reply
        return [reply for reply in replies if reply is not None]

    @staticmethod
    def _subject(state: RbacState, review: SubjectAccessReview,
                 attrs: Attributes) -> SubjectAccessReviewReply:
        """The review answered from ``state`` (synchronous: one state)."""
        spec = review.spec
        groups = state.effective_groups(spec.user, spec.groups) if spec.user else spec.groups
        index = state.index
        allowed, reason, error = index.allowed(attrs, spec.user, groups)
        if not allowed:
            # The status has no warnings member: a deny's reason says which name of the
            # question no rule uses — a misspelled verb or resource (docs/api/reviews.md).
            reason = "; ".join([*([reason] if reason else []), *index.unnamed(attrs)])
        status = SubjectAccessReviewStatus(allowed=allowed, reason=reason)
        if error:
            status.evaluation_error = error
        # The contract's members only: nothing else the request held is sent back.
        # request_id is echoed by the route, and only when the request carried one.
        return SubjectAccessReviewReply(
            api_version=review.api_version, kind=review.kind, metadata=review.metadata,
            spec=spec, status=status, revision=state.revision)

    async def rules(self, request: RulesReviewRequest) -> RulesReviewReply:
        if not request.user:
            raise BadRequest("user is required")
        state = await self._reads.rbac()
        index, groups = state.index, state.effective_groups(request.user, request.groups)
        resource_rules, non_resource_rules = index.rules_for(
            request.user, groups, request.spec.namespace)
        status = RulesReviewStatus(resource_rules=resource_rules,
                                   non_resource_rules=non_resource_rules)
        error = index.evaluation_error(request.user, groups, request.spec.namespace)
        if error:
            status.evaluation_error = error
        return RulesReviewReply(status=status, revision=state.revision)

    async def resource(self, request: ResourceReviewRequest) -> ResourceReviewReply:
        if not request.verb or not request.resource:
            raise BadRequest("verb and resource are required")
        attrs = ResourceAttributes(verb=request.verb, group=request.group,
                                   resource=request.resource,
                                   subresource=request.subresource, name=request.name,
                                   namespace=request.namespace)
        state = await self._reads.rbac()
        users, groups = state.index.who_can(attrs)
        return ResourceReviewReply(users=users, groups=groups, revision=state.revision)


def _attributes(review: SubjectAccessReview) -> Attributes:
    """What the review asks about; ``BadRequest`` for a spec the API server refuses too."""
    spec = review.spec
    if spec.resource_attributes is not None and spec.non_resource_attributes is not None:
        # The API server refuses it too (ValidateSubjectAccessReviewSpec).
        raise BadRequest("spec.nonResourceAttributes cannot be specified in combination "
                         "with spec.resourceAttributes: exactly one is required")
    attrs: Attributes
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
    return attrs
