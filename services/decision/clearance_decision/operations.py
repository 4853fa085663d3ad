"""Operating subjects: ``clearance.v1.status``, ``clearance.v1.policy-status`` and
``clearance.v1.cache.clear``."""

from __future__ import annotations

import time

import msgspec

from clearance_api.errors import BadRequest, NotFound
from clearance_api.wire import (
    CacheClearReply,
    CacheClearRequest,
    CacheStatus,
    PolicyStatus,
    PolicyStatusRequest,
    ServiceStatus,
    StatusReply,
    StatusRequest,
)
from clearance_core.folding.status import policy_status
from clearance_core.kube.resources import principal_digest
from clearance_runtime.reading.reads import Reads
from clearance_runtime.storage.cache import DecisionCache


class Operations:
    def __init__(self, reads: Reads, cache: DecisionCache) -> None:
        self._reads = reads
        self._cache = cache

    async def status(self, request: StatusRequest) -> StatusReply:
        await self._cache.flush_stats()  # this replica's counts, so the totals are current
        counts = await self._reads.counts()
        return StatusReply(
            revision=counts.revision,
            services={
                name: ServiceStatus(revision=found.revision, healthy=found.healthy,
                                    lag=found.lag, heartbeat_age_s=found.heartbeat_age_s)
                for name, found in (await self._reads.services()).items()
            },
            policies=counts.policies,
            cache=CacheStatus(entries=await self._cache.entries(), hits=counts.hits,
                              misses=counts.misses),
            policies_by_state=(msgspec.UNSET if counts.policies_by_state is None
                               else counts.policies_by_state),
        )

    async def policy_status(self, request: PolicyStatusRequest) -> PolicyStatus:
        kind = request.kind.lower()
        key = f"{request.namespace}/{request.name}"
        if kind == "accesspolicy":
            conditions = await self._reads.inherited.conditions(key)
            if conditions is None:
                raise NotFound(f"AccessPolicy {key} not found")
            return PolicyStatus(conditions=conditions, revision=await self._reads.revision())
        if kind != "monitoraccesspolicy":
            raise BadRequest(f"kind {request.kind!r}: the status of MonitorAccessPolicy and "
                             "AccessPolicy objects is served")
        policy, revision = await self._reads.policy(key)
        if policy is None:
            raise NotFound(f"MonitorAccessPolicy {key} not found")
        return policy_status(policy, await self._reads.sources(), now=time.time(),
                             revision=revision)

    async def cache_clear(self, request: CacheClearRequest) -> CacheClearReply:
        digest = None if request.principal is None else principal_digest(request.principal)
        cleared = await self._cache.clear(digest)
        return CacheClearReply(cleared=cleared, revision=await self._reads.revision())
