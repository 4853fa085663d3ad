"""``clearance.v1.who-can-see``: every subject named anywhere that matters, allowed and
denied, and what everyone else gets (:mod:`clearance_core.questions.audience` says who is listed
and as which principal each is asked).

Complete by construction and exact: the subjects come from the indexes of one state (the
MonitorAccessPolicy indexes, the effective AccessPolicies of the question's targets, the
Group memberships, the RBAC bindings), and each is decided by the very code a check's
cache miss runs (``Decider``), on the snapshot that check would read — so no answer here
can differ from ``clearance.v1.check`` for the same principal. A whole namespaced type
asked without a namespace is about items in every namespace: its snapshots hold every
Namespace target of the cluster (read once, shared), whatever of them the evaluation
weighs.

Bounded: at most ``MAX_AUDIENCE`` subjects (more is a ``bad_request`` naming the limit),
one question at a time per process, and the subjects are decided in slices that let the
event loop answer other requests in between. An answer is of one state: if the mirror
moved on between two slices, the answer starts again; the last of ``ATTEMPTS`` decides
every slice without yielding (about 2 s at the limit), so a busy stream cannot starve it.
"""

from __future__ import annotations

import asyncio
import time

from clearance_api.errors import BadRequest, NotFound
from clearance_api.wire import (
    BatchItem,
    CheckResult,
    DecisionKind,
    OthersDecision,
    Principal,
    SubjectDecision,
    WhoCanSeeReply,
    WhoCanSeeRequest,
)
from clearance_api.wire.limits import MAX_AUDIENCE
from clearance_core.kube.principal import Identity
from clearance_core.kube.resources import place_of
from clearance_core.questions.audience import (
    UNNAMED,
    Names,
    principal_of,
    question,
    spans_namespaces,
    unnamed,
)
from clearance_decision.decider import Decider
from clearance_runtime.reading.reads import Reads, Snapshot, StateView

#: Subjects decided between two yields to the event loop.
SLICE = 256
#: Answers begun before one is of a single state: the last decides without yielding.
ATTEMPTS = 3


def validate_who_can_see(request: WhoCanSeeRequest) -> None:
    """The question must be one a check can ask (before any wait)."""
    place_of(question(request.cluster, request.type, request.namespace))


class Audience:
    def __init__(self, reads: Reads, decider: Decider) -> None:
        self._reads = reads
        self._decider = decider
        # One question at a time: each may decide thousands of subjects.
        self._one_at_a_time = asyncio.Semaphore(1)

    async def who_can_see(self, request: WhoCanSeeRequest) -> WhoCanSeeReply:
        resource = question(request.cluster, request.type, request.namespace)
        cluster, namespace = place_of(resource)
        check = BatchItem(action=request.action, resource=resource)
        async with self._one_at_a_time:
            for attempt in range(ATTEMPTS):
                reply = await self._answer(check, cluster, namespace,
                                           last=attempt == ATTEMPTS - 1)
                if reply is not None:
                    return reply
        raise AssertionError("the last attempt always answers")  # pragma: no cover

    async def _answer(self, check: BatchItem, cluster: str, namespace: str | None, *,
                      last: bool) -> WhoCanSeeReply | None:
        """The answer from one state; ``None`` if that state moved on while slices were
        decided (the caller starts again). ``last``: decide without yielding, so the
        answer is of one state however busy the stream is."""
        rbac = await self._reads.rbac_index()
        view = await self._reads.state_view()
        if not view.knows(cluster):
            raise NotFound(f"cluster {cluster!r} is not in the inventory (no ManagedCluster "
                           "of that name)")
        spans = spans_namespaces(check.resource)
        names = self._names(view, cluster, namespace, spans)
        bound_users, bound_groups = rbac.named([cluster])
        names.add(users=bound_users, groups=bound_groups)
        names.add_members(view.members())
        subjects = names.subjects()
        if len(subjects) > MAX_AUDIENCE:
            raise BadRequest(
                f"{len(subjects)} subjects are named for this question, more than the limit "
                f"of {MAX_AUDIENCE} in one who-can-see answer")
        nobody = unnamed(names.taken())
        everyone = [*subjects, None]  # None: others
        read = [] if namespace is None else [namespace]
        now = time.time()
        # (decision, policy) only: tens of thousands of results kept whole would be
        # objects for the cyclic collector to walk until the answer is sent.
        decided: list[tuple[DecisionKind, str | None]] = []
        for start in range(0, len(everyone), SLICE):
            for subject in everyone[start:start + SLICE]:
                principal = Principal(username=nobody) if subject is None else \
                    principal_of(subject, nobody)
                # Items in any namespace: the Namespace targets that concern this
                # principal are weighed, exactly as its check's snapshot weighs them.
                snapshot, identity = view.snapshot(principal, clusters=[cluster],
                                                   namespaces=read, spread=spans)
                result = self._decide(snapshot, identity, check, cluster=cluster, now=now)
                decided.append((result.decision, result.policy))
            if not last:
                await asyncio.sleep(0)  # let other requests through between slices
                if view.moved:
                    return None
        others, policy = decided.pop()
        return WhoCanSeeReply(
            subjects=[SubjectDecision(kind=subject.kind, name=subject.name, decision=decision,
                                      policy=by)
                      for subject, (decision, by) in zip(subjects, decided, strict=True)],
            others=OthersDecision(decision=others, policy=policy),
            revision=view.revision)

    @staticmethod
    def _names(view: StateView, cluster: str, namespace: str | None, spans: bool) -> Names:
        """The names the question's policies hold: every MonitorAccessPolicy's subjects,
        and the subjects of the effective AccessPolicy rules a check on it reads (with
        ``spans``, those of every Namespace target of the cluster too)."""
        names = Names()
        users, service_accounts, groups = view.named()
        names.add(users=users, service_accounts=service_accounts, groups=groups)
        targets, _ = view.snapshot(Principal(username=UNNAMED), clusters=[cluster],
                                   namespaces=None if spans else
                                   [] if namespace is None else [namespace])
        names.add_rules(targets.inherited(cluster, namespace)[1].values())
        if spans:
            for effective in targets.namespace_effective.get(cluster, {}).values():
                names.add_rules(effective.rules.values())
        return names

    def _decide(self, snapshot: Snapshot, identity: Identity, check: BatchItem, *,
                cluster: str, now: float) -> CheckResult:
        """What a check's cache miss answers for this snapshot (the cache entries it
        would store are dropped: nothing here is cached)."""
        # The check's own evaluation, not a copy of it: they cannot drift apart.
        return self._decider._result(
            snapshot, identity, check, pkey="", cluster=cluster, key="", now=now,
            entries=[], trace_key=None, warn=False)

