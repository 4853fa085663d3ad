"""Inherited AccessPolicies (README: Inherited): ``clearance.v1.effective``,
``clearance.v1.effective.reach`` and ``clearance.v1.effective.simulate``.

All three answer from what the compiler stored: ``effective`` reads the effective policies
it keeps current event by event; ``reach`` and ``simulate`` use an index of the stored
policies and inventory (rebuilt only when they change), and ``simulate`` runs the
compiler's own index event on a copy of it (:func:`clearance_core.simulate.simulate`), so a
dry run says exactly what applying the policy would do.
"""

from __future__ import annotations

import msgspec

from clearance_core.errors import BadRequest, NotFound
from clearance_core.merge import EffectivePolicy
from clearance_core.simulate import simulate
from clearance_core.wire import (
    EffectiveReply,
    EffectiveRequest,
    ReachReply,
    ReachRequest,
    RuleInForce,
    SimulateReply,
    SimulateRequest,
    Target,
)
from clearance_runtime.reads import Reads

ACCESS_POLICY = "accesspolicy"


def check_target(target: Target) -> None:
    """A Namespace names its cluster; no other kind does (``bad_request`` otherwise)."""
    if target.kind == "Namespace":
        if not target.cluster or not target.name:
            raise BadRequest("target: a Namespace target needs name and cluster")
    elif target.cluster is not None:
        raise BadRequest(f"target: cluster is only for Namespace targets, not {target.kind}")
    if not target.name:
        raise BadRequest("target.name must be non-empty")


def validate_effective(request: EffectiveRequest) -> None:
    check_target(request.target)


def validate_reach(request: ReachRequest) -> None:
    if request.kind.lower() != ACCESS_POLICY:
        raise BadRequest(f"kind {request.kind!r}: reach is defined for AccessPolicy")
    if not request.name:
        raise BadRequest("name must be non-empty")


def reply_of(effective: EffectivePolicy) -> EffectiveReply:
    return EffectiveReply(
        target=effective.target,
        rules={name: RuleInForce(rule=found.rule.raw, source=found.source,
                                 block=found.block)
               for name, found in sorted(effective.rules.items())},
        policies=list(effective.policies),
        affected_by=effective.affected_by)


class Inherited:
    def __init__(self, reads: Reads) -> None:
        self._reads = reads

    async def effective(self, request: EffectiveRequest) -> EffectiveReply:
        found = await self._reads.inherited.effective(request.target)
        if found is None:
            raise NotFound(f"target {request.target} does not exist")
        reply = reply_of(found)
        reply.excluded = await self._reads.inherited.excluded(request.target)
        reply.revision = await self._reads.revision()
        return reply

    async def reach(self, request: ReachRequest) -> ReachReply:
        key = f"{request.namespace}/{request.name}"
        if not await self._reads.inherited.known(key):
            raise NotFound(f"AccessPolicy {key} not found")
        index = (await self._reads.inherited.simulation()).index
        return ReachReply(targets=index.reach(key, request.rule),
                          revision=await self._reads.revision())

    async def simulate(self, request: SimulateRequest) -> SimulateReply:
        kind = request.policy.get("kind")
        if kind is not None and kind != "AccessPolicy":
            raise BadRequest(f"policy.kind {kind!r}: simulate takes an AccessPolicy")
        start = await self._reads.inherited.simulation()
        result = simulate(start.index, request.policy, request.operation,
                          invalid=start.invalid)
        return msgspec.structs.replace(result, revision=await self._reads.revision())
