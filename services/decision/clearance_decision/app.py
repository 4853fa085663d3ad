"""The decision service: every request/reply subject of the contract, over NATS.

Runs any number of replicas: every subject is served in the queue group
``clearance-decision``, and all state lives in Redis. The routes come from
``clearance_api.wire.REQUESTS`` (:mod:`.routes`); this module only says which handler
answers which subject. ``clearance.v1.check`` is served in batches (:mod:`.checks`).
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
import redis.exceptions
from nats.aio.client import Client

from clearance_api.wire import (
    SUBJECT_BATCH,
    SUBJECT_CACHE_CLEAR,
    SUBJECT_CHECK,
    SUBJECT_CUSTOM_TYPES,
    SUBJECT_EFFECTIVE,
    SUBJECT_EFFECTIVE_REACH,
    SUBJECT_EFFECTIVE_SIMULATE,
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
    SUBJECT_WHO_CAN_SEE,
)
from clearance_decision.admission import Admission
from clearance_decision.audience import Audience, validate_who_can_see
from clearance_decision.checks import Checks, validate_batch
from clearance_decision.decider import Decider
from clearance_decision.inherited import Inherited, validate_effective, validate_reach
from clearance_decision.lists import Lists
from clearance_decision.operations import Operations
from clearance_decision.reviews import Reviews
from clearance_decision.routes import Route, Serve, route_table
from clearance_decision.views import Views
from clearance_runtime.edges.tokens import TokenReviews
from clearance_runtime.messaging.checkpoints import Checkpoints
from clearance_runtime.messaging.responder import Responder
from clearance_runtime.process import health, logs, probes
from clearance_runtime.process.settings import Settings
from clearance_runtime.reading.reads import Reads
from clearance_runtime.storage.cache import DecisionCache

log = logs.get(__name__)
QUEUE = "clearance-decision"


class DecisionService:
    def __init__(self, nc: Client, redis: aioredis.Redis, settings: Settings) -> None:
        self._r = redis  # only for the heartbeat: every read goes through Reads
        self._reads = Reads(redis)
        self._cache = DecisionCache(redis, ttl_seconds=settings.decision_cache_ttl,
                                    highwater=self._reads.highwater)
        #: The compiler's committed checkpoint, kept in NATS: the floor of this
        #: process's reads even before it has answered anything (:mod:`.highwater`).
        self._checkpoints = Checkpoints(nc.jetstream())
        budget = settings.namespace_target_budget
        decider = Decider(self._reads, self._cache, budget=budget,
                          admission=Admission(settings.decision_scan_misses))
        self._checks = Checks(decider, self._cache, self._reads,
                              recent=settings.decision_recent_replies)
        audience = Audience(self._reads, decider)
        lists, views = Lists(self._reads, budget=budget), Views(self._reads)
        review = self._reviews = Reviews(self._reads)
        operations = Operations(self._reads, self._cache)
        inherited = Inherited(self._reads, rows=settings.simulate_access_rows,
                              budget=budget, max_payload=lambda: nc.max_payload)
        self._tokens = TokenReviews(settings.kubeconfig,
                                    audiences=settings.token_audience_list)
        # The reviews and search (``review.*``) read one state through one probe, which
        # refuses a state that is not whole as ``whole=True`` would (a round trip less).
        self.routes: dict[str, Route] = route_table({
            SUBJECT_CHECK: Serve(self._checks.check),
            SUBJECT_BATCH: Serve(self._checks.batch, validate=validate_batch, whole=True),
            SUBJECT_STATUS: Serve(operations.status),
            SUBJECT_FILTER: Serve(lists.filter),
            SUBJECT_METRICS: Serve(lists.metrics),
            SUBJECT_CUSTOM_TYPES: Serve(lists.custom_types),
            SUBJECT_REVIEW_SUBJECT: Serve(review.subject),
            SUBJECT_REVIEW_RULES: Serve(review.rules),
            SUBJECT_REVIEW_RESOURCE: Serve(review.resource),
            SUBJECT_SEARCH_FILTER: Serve(review.search_filter),
            SUBJECT_SEARCH_PLAN: Serve(review.search_plan),
            SUBJECT_PERMISSIONS: Serve(views.permissions),
            SUBJECT_POLICIES: Serve(views.policies),
            SUBJECT_CACHE_CLEAR: Serve(operations.cache_clear),
            SUBJECT_POLICY_STATUS: Serve(operations.policy_status, whole=True),
            SUBJECT_EFFECTIVE: Serve(inherited.effective, validate=validate_effective,
                                     whole=True),
            SUBJECT_EFFECTIVE_REACH: Serve(inherited.reach, validate=validate_reach,
                                           whole=True),
            SUBJECT_EFFECTIVE_SIMULATE: Serve(inherited.simulate, whole=True),
            SUBJECT_WHO_CAN_SEE: Serve(audience.who_can_see, validate=validate_who_can_see),
        }, self._reads, self._tokens)
        self._responder = Responder(nc, queue=QUEUE, reply_prefixes=settings.reply_prefix_list)
        self._revision = 0
        #: Every decision replica answers: each beats under its own id (health.REPLICATED).
        self.replica = health.replica_id()

    async def check_many(self, bodies: list[bytes]) -> list[bytes]:
        """Checks that arrived together, answered together (see :mod:`.checks`)."""
        return await self._checks.many(self.routes[SUBJECT_CHECK], bodies)

    async def review_many(self, bodies: list[bytes]) -> list[bytes]:
        """SubjectAccessReviews that arrived together, answered from one state (see
        :mod:`.reviews`)."""
        return await self._reviews.subject_many(self.routes[SUBJECT_REVIEW_SUBJECT], bodies)

    async def run(self) -> None:
        for subject, route in self.routes.items():
            if subject == SUBJECT_CHECK:
                await self._responder.serve_many(subject, self.check_many)
            elif subject == SUBJECT_REVIEW_SUBJECT:
                await self._responder.serve_many(subject, self.review_many)
            else:
                await self._responder.serve(subject, route)
        log.info("decision_ready", subjects=list(self.routes))
        try:
            while True:
                probes.turn("decision")  # alive whatever the servers answer (liveness)
                record = await self._checkpoints.read()
                if record is not None:
                    self._reads.highwater.record(*record)
                try:
                    self._revision = max(self._revision, await self._reads.revision())
                    await self._cache.flush_stats()
                    await health.beat(self._r, "decision", self._revision,
                                      replica=self.replica)
                    # Every read would be refused while the store is behind: not ready.
                    probes.hold("decision", await self._reads.behind())
                except redis.exceptions.RedisError as exc:
                    log.warning("heartbeat_failed", error=str(exc))
                await asyncio.sleep(1.0)
        finally:
            await self._responder.stop()
            await self._tokens.close()
