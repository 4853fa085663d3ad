"""Inherited AccessPolicies (docs/guide/inherited.md): ``clearance.v1.effective``,
``clearance.v1.effective.reach`` and ``clearance.v1.effective.simulate``.

All three answer from what the compiler stored: ``effective`` reads the effective policies
it keeps current event by event; ``reach`` and ``simulate`` use an index of the stored
policies and inventory (rebuilt only when they change), and ``simulate`` runs the
compiler's own index event on a copy of it (:func:`clearance_core.questions.simulate.dry_run`), so a
dry run says exactly what applying the policy would do.

``simulate`` also says who gains or loses access where (:mod:`clearance_core.questions.impact`):
each subject is decided by ``check``'s own code before and after, its MonitorAccessPolicy
side read from the same state ``who-can-see`` reads (``Reads.state_view``: the mirror's
policy indexes and Groups). Bounded like ``who-can-see``: one access diff at a time, at
most ``rows`` rows and ``budget`` (question, Namespace target) pairs, decided in slices
that let other requests through; the dry run itself runs in a worker thread, one at a
time, so a change that rewrites thousands of targets does not hold the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import msgspec

from clearance_api.errors import BadRequest, NotFound
from clearance_api.wire import (
    AccessTruncated,
    EffectiveReply,
    EffectiveRequest,
    ReachReply,
    ReachRequest,
    RuleInForce,
    SimulateReply,
    SimulateRequest,
    Target,
)
from clearance_core.inherit.index import InheritanceIndex
from clearance_core.inherit.merge import EffectivePolicy
from clearance_core.kube.principal import Identity
from clearance_core.questions.audience import Subject
from clearance_core.questions.impact import Impact, Monitors
from clearance_core.questions.simulate import dry_run
from clearance_runtime.reading.reads import Reads

ACCESS_POLICY = "accesspolicy"
_encode = msgspec.json.Encoder().encode
#: Access rows decided between two yields to the event loop.
SLICE = 128
#: Room left in a reply for what the route adds (its request_id).
MARGIN = 1024


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
    def __init__(self, reads: Reads, *, rows: int = 2000, budget: int = 100_000,
                 max_payload: Callable[[], int] | None = None) -> None:
        self._reads = reads
        self._rows = rows
        self._budget = budget
        self._max_payload = max_payload
        # One access diff at a time: each may decide thousands of checks.
        self._one_at_a_time = asyncio.Semaphore(1)
        self._dry_runs = asyncio.Semaphore(1)

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
        # Off the event loop (a Fleet-wide change over thousands of targets takes seconds),
        # one at a time: the index is shared and only read; the copy is the run's own.
        async with self._dry_runs:
            reply, after = await asyncio.to_thread(
                dry_run, start.index, request.policy, request.operation,
                invalid=start.invalid)
        await self._access(reply, start.index, after)
        reply.revision = await self._reads.revision()
        return reply

    async def _access(self, reply: SimulateReply, before: InheritanceIndex,
                      after: InheritanceIndex) -> None:
        """Fill the reply's ``access`` (and ``truncated``). ``before`` is shared and never
        mutated (a new state replaces it), ``after`` is this request's own: the slices
        may yield between them."""
        if not reply.targets:
            return
        async with self._one_at_a_time:
            view = await self._reads.state_view()
            # From here to the last snapshot nothing awaits: one state of the mirror.
            users, accounts, _ = view.named()
            impact = Impact(before, after, declared=view.declared(), now=time.time())
            plan = impact.plan([diff.target for diff in reply.targets], view.members(),
                               limit=self._rows, taken=[*users, *accounts])
            clusters = sorted({question.cluster for question in plan.questions})
            states: dict[Subject, tuple[Monitors, Identity]] = {
                subject: view.snapshot(principal, clusters=clusters, namespaces=())
                for subject, principal in plan.principals.items()}
            for row in impact.answers(plan, states.__getitem__, budget=self._budget):
                reply.access.append(row)
                if len(reply.access) % SLICE == 0:
                    await asyncio.sleep(0)  # let other requests through between slices
            reply.truncated = impact.truncated(
                plan, len(reply.access), limit=self._rows, budget=self._budget,
                limit_setting="CLEARANCE_SIMULATE_ACCESS_ROWS",
                budget_setting="CLEARANCE_NAMESPACE_TARGET_BUDGET")
            self._fit(reply, plan.total)

    def _fit(self, reply: SimulateReply, total: int) -> None:
        """Cut the access rows to what the NATS server can carry: a dry run too large to
        send would be only an error, while its first rows say who moves."""
        limit = self._max_payload() - MARGIN if self._max_payload is not None else None
        if limit is None:
            return
        size = len(_encode(reply))
        while size > limit and reply.access:
            keep = min(len(reply.access) - 1, int(len(reply.access) * limit / size * 0.9))
            reply.access = reply.access[:max(keep, 0)]
            reply.truncated = AccessTruncated(
                listed=len(reply.access), total=total,
                reason=f"the rest would take the reply over the NATS server's max_payload "
                       f"of {limit + MARGIN} bytes")
            size = len(_encode(reply))
