"""The decision service: NATS responders for check, check.batch and status.

Runs any number of replicas: every subject is served in the queue group
``clearance-decision``, and all state lives in Redis.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import msgspec
import redis.asyncio as aioredis
import redis.exceptions
from nats.aio.client import Client

from clearance_core.errors import BadRequest, NotFound, Unavailable
from clearance_core.resources import cluster_of, principal_digest
from clearance_core.status import policy_status as status_of
from clearance_core.wire import (
    SUBJECT_BATCH,
    SUBJECT_CACHE_CLEAR,
    SUBJECT_CHECK,
    SUBJECT_CUSTOM_TYPES,
    SUBJECT_FILTER,
    SUBJECT_METRICS,
    SUBJECT_PERMISSIONS,
    SUBJECT_POLICIES,
    SUBJECT_POLICY_STATUS,
    SUBJECT_REVIEW_RESOURCE,
    SUBJECT_REVIEW_RULES,
    SUBJECT_REVIEW_SUBJECT,
    SUBJECT_SEARCH_FILTER,
    SUBJECT_SEARCH_PLAN,
    SUBJECT_STATUS,
    BatchItem,
    BatchReply,
    BatchRequest,
    CacheClearReply,
    CacheClearRequest,
    CacheStatus,
    CheckRequest,
    CheckResult,
    CustomTypesRequest,
    FilterRequest,
    MetricsRequest,
    PermissionsReply,
    PoliciesReply,
    PolicyStatusRequest,
    PrincipalRequest,
    RequestBase,
    ResourceReviewRequest,
    RulesReviewRequest,
    SearchFilterRequest,
    ServiceStatus,
    StatusReply,
    StatusRequest,
    SubjectAccessReview,
)
from clearance_decision import views
from clearance_decision.decider import Decider
from clearance_decision.lists import Lists
from clearance_decision.reviews import Reviews
from clearance_runtime import health, logs
from clearance_runtime.cache import DecisionCache
from clearance_runtime.reads import Reads
from clearance_runtime.responder import Responder, decode_request, reply_to
from clearance_runtime.settings import Settings

log = logs.get(__name__)
In = TypeVar("In")
Req = TypeVar("Req", bound=RequestBase)
Out = TypeVar("Out")
QUEUE = "clearance-decision"
_encode = msgspec.json.Encoder().encode
_check = msgspec.json.Decoder(CheckRequest)
_batch = msgspec.json.Decoder(BatchRequest)
_status = msgspec.json.Decoder(StatusRequest)
_principal_request = msgspec.json.Decoder(PrincipalRequest)
_cache_clear = msgspec.json.Decoder(CacheClearRequest)
_filter = msgspec.json.Decoder(FilterRequest)
_metrics = msgspec.json.Decoder(MetricsRequest)
_custom_types = msgspec.json.Decoder(CustomTypesRequest)
_sar = msgspec.json.Decoder(SubjectAccessReview)
_rules = msgspec.json.Decoder(RulesReviewRequest)
_resource_review = msgspec.json.Decoder(ResourceReviewRequest)
_search_filter = msgspec.json.Decoder(SearchFilterRequest)
_policy_status = msgspec.json.Decoder(PolicyStatusRequest)


class _Reply(Protocol):
    request_id: str | msgspec.UnsetType | None


def _with_id(reply: _Reply, request_id: str | None) -> bytes:
    """Encode a successful reply, echoing the request id (CONTRACT section 0)."""
    if request_id is not None:
        reply.request_id = request_id
    return _encode(reply)


def _guarded(handler: Callable[[In], Awaitable[Out]]) -> Callable[[In], Awaitable[Out]]:
    """Redis unreachable -> ``unavailable`` (the caller may retry); never an allow."""

    async def guarded(body: In) -> Out:
        try:
            return await handler(body)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            raise Unavailable(f"state store unavailable: {exc}") from None

    return guarded


class DecisionService:
    def __init__(self, nc: Client, redis: aioredis.Redis, settings: Settings) -> None:
        self._nc = nc
        self._r = redis
        self._cache = DecisionCache(redis, ttl_seconds=settings.decision_cache_ttl)
        self._reads = Reads(redis)
        self._decider = Decider(self._reads, self._cache)
        self._lists = Lists(self._reads)
        self._reviews = Reviews(self._reads)
        self._responder = Responder(nc, queue=QUEUE)
        self._revision = 0

    async def _read(self, decoder: msgspec.json.Decoder[Req], body: bytes) -> Req:
        """Decode a request (``bad_request`` on any problem) and honour its min_revision."""
        request = decode_request(decoder, body)
        await self._await_revision(request)
        return request

    async def _await_revision(self, request: RequestBase) -> None:
        # Always asked of Redis (one GET): a flushed store being rebuilt must not be
        # mistaken for one that already reached the revision.
        if request.min_revision is not None:
            self._revision = await self._reads.wait_for(request.min_revision,
                                                        request.timeout_ms)

    async def check(self, body: bytes) -> bytes:
        request = await self._read(_check, body)
        revision, (result,) = await self._decider.decide(
            request.principal,
            [BatchItem(action=request.action, resource=request.resource)],
            explain=request.explain,
        )
        self._revision = max(self._revision, revision)
        result.revision = revision
        return _with_id(result, request.request_id)

    async def check_many(self, bodies: list[bytes]) -> list[bytes]:
        """The hot path: cache hits of many concurrent checks answered with one MGET; the
        rest (misses, ``min_revision``, bad requests) go through :meth:`check` one by
        one, concurrently.

        Requests are isolated (CONTRACT section 0): whatever one body holds, it can only
        fall out of the fast path, and the slow path answers each body on its own, so its
        error reply is its own and never its neighbours'.
        """
        replies: list[bytes | None] = [None] * len(bodies)
        fast: list[tuple[int, CheckRequest, str]] = []
        if self._cache.enabled:
            for index, body in enumerate(bodies):
                try:
                    request = decode_request(_check, body)
                    if request.min_revision is None:
                        fast.append((index, request, self._decider.cache_key(
                            request.principal,
                            BatchItem(action=request.action, resource=request.resource))))
                except Exception:  # noqa: S112 - the slow path answers it with its own error
                    continue
        if fast:
            revision, blobs = await self._cache.lookup([key for _, _, key in fast])
            for (index, request, _), blob in zip(fast, blobs, strict=True):
                if blob is not None:
                    replies[index] = self._from_cache(blob, request, revision)
        slow = [i for i, reply in enumerate(replies) if reply is None]
        if slow:
            answers = await asyncio.gather(*(self._one(bodies[i]) for i in slow))
            for index, answer in zip(slow, answers, strict=True):
                replies[index] = answer
        return [reply for reply in replies if reply is not None]

    def _from_cache(self, blob: bytes, request: CheckRequest, revision: int) -> bytes | None:
        """A cache hit as the encoded reply; None (the slow path decides) if unusable."""
        try:
            result = self._decider.cached(blob, explain=request.explain)
            result.revision = revision
            if request.request_id is not None:
                result.request_id = request.request_id
            return _encode(result)
        except Exception:
            log.exception("cache_entry_unreadable")
            return None

    async def _one(self, body: bytes) -> bytes:
        reply, _ = await reply_to(SUBJECT_CHECK, _guarded(self.check), body)
        return reply

    async def batch(self, body: bytes) -> bytes:
        request = decode_request(_batch, body)
        for index, item in enumerate(request.checks):
            # One request, one answer: a bad item makes the whole batch a bad_request
            # (a result has no error form), named so the caller can fix it.
            try:
                cluster_of(item.resource)
            except BadRequest as exc:
                raise BadRequest(f"checks[{index}]: {exc.message}") from None
        await self._await_revision(request)
        revision = self._revision
        results: list[CheckResult] = []
        if request.checks:
            revision, results = await self._decider.decide(
                request.principal, request.checks, explain=request.explain
            )
        else:
            revision = await self._reads.revision()
        reply = BatchReply(results=results, revision=revision)
        return _with_id(reply, request.request_id)

    async def status(self, body: bytes) -> bytes:
        request = await self._read(_status, body)
        await self._cache.flush_stats()
        counts = await self._reads.counts()
        reply = StatusReply(
            revision=counts.revision,
            services={
                name: ServiceStatus(revision=rev, healthy=ok)
                for name, (rev, ok) in (await self._reads.services()).items()
            },
            policies=counts.policies,
            cache=CacheStatus(entries=await self._cache.entries(), hits=counts.hits,
                              misses=counts.misses),
        )
        return _with_id(reply, request.request_id)

    async def permissions(self, body: bytes) -> bytes:
        request = await self._read(_principal_request, body)
        snapshot, identity = await views.principal_snapshot(
            self._reads, request.principal, clusters=None)
        reply = PermissionsReply(clusters=views.permissions(snapshot, identity),
                                 revision=snapshot.revision)
        return _with_id(reply, request.request_id)

    async def policies(self, body: bytes) -> bytes:
        request = await self._read(_principal_request, body)
        snapshot, identity = await views.principal_snapshot(
            self._reads, request.principal, clusters=[])
        reply = PoliciesReply(policies=views.policies(snapshot, identity),
                              revision=snapshot.revision)
        return _with_id(reply, request.request_id)

    async def cache_clear(self, body: bytes) -> bytes:
        request = await self._read(_cache_clear, body)
        digest = None if request.principal is None else principal_digest(request.principal)
        cleared = await self._cache.clear(digest)
        reply = CacheClearReply(cleared=cleared, revision=await self._reads.revision())
        return _with_id(reply, request.request_id)

    async def filter(self, body: bytes) -> bytes:
        request = await self._read(_filter, body)
        return _with_id(await self._lists.filter(request), request.request_id)

    async def metrics(self, body: bytes) -> bytes:
        request = await self._read(_metrics, body)
        return _with_id(await self._lists.metrics(request), request.request_id)

    async def custom_types(self, body: bytes) -> bytes:
        request = await self._read(_custom_types, body)
        return _with_id(await self._lists.custom_types(request), request.request_id)

    async def review_subject(self, body: bytes) -> bytes:
        review = await self._read(_sar, body)
        return _encode(await self._reviews.subject(body, review))

    async def review_rules(self, body: bytes) -> bytes:
        request = await self._read(_rules, body)
        return _with_id(await self._reviews.rules(request), request.request_id)

    async def review_resource(self, body: bytes) -> bytes:
        request = await self._read(_resource_review, body)
        return _with_id(await self._reviews.resource(request), request.request_id)

    async def search_filter(self, body: bytes) -> bytes:
        request = await self._read(_search_filter, body)
        return _with_id(await self._reviews.search_filter(request), request.request_id)

    async def search_plan(self, body: bytes) -> bytes:
        request = await self._read(_principal_request, body)
        return _with_id(await self._reviews.search_plan(request.principal), request.request_id)

    async def policy_status(self, body: bytes) -> bytes:
        request = await self._read(_policy_status, body)
        if request.kind.lower() != "monitoraccesspolicy":
            raise BadRequest(f"kind {request.kind!r}: this version serves the status of "
                             "MonitorAccessPolicy objects")
        key = f"{request.namespace}/{request.name}"
        policy, revision = await self._reads.policy(key)
        if policy is None:
            raise NotFound(f"MonitorAccessPolicy {key} not found")
        reply = status_of(policy, await self._reads.sources(), now=time.time(),
                          revision=revision)
        return _with_id(reply, request.request_id)

    async def run(self) -> None:
        await self._responder.serve_many(SUBJECT_CHECK, _guarded(self.check_many))
        await self._responder.serve(SUBJECT_BATCH, _guarded(self.batch))
        handlers = {
            SUBJECT_FILTER: self.filter,
            SUBJECT_METRICS: self.metrics,
            SUBJECT_CUSTOM_TYPES: self.custom_types,
            SUBJECT_REVIEW_SUBJECT: self.review_subject,
            SUBJECT_REVIEW_RULES: self.review_rules,
            SUBJECT_REVIEW_RESOURCE: self.review_resource,
            SUBJECT_SEARCH_FILTER: self.search_filter,
            SUBJECT_SEARCH_PLAN: self.search_plan,
            SUBJECT_STATUS: self.status,
            SUBJECT_POLICY_STATUS: self.policy_status,
            SUBJECT_PERMISSIONS: self.permissions,
            SUBJECT_POLICIES: self.policies,
            SUBJECT_CACHE_CLEAR: self.cache_clear,
        }
        for subject, handler in handlers.items():
            await self._responder.serve(subject, _guarded(handler))
        log.info("decision_ready", subjects=[SUBJECT_CHECK, SUBJECT_BATCH, *handlers])
        try:
            while True:
                try:
                    self._revision = max(self._revision, await self._reads.revision())
                    await self._cache.flush_stats()
                    await health.beat(self._r, "decision", self._revision)
                except redis.exceptions.RedisError as exc:
                    log.warning("heartbeat_failed", error=str(exc))
                await asyncio.sleep(1.0)
        finally:
            await self._responder.stop()
