"""``clearance.v1.check`` and ``clearance.v1.check.batch``: the hot path.

Concurrent checks are answered together (:meth:`Checks.many`): each body is decoded once,
the cache hits of all of them come back in one MGET, and every other request is answered
on its own through the check route. A miss is evaluated at once, without decoding its
body or asking the cache again. A body answered from the cache before, asked again while
the cache stands where it stood, gets the same reply without being decoded
(:mod:`.recent`): the batch's MGET then only confirms the position.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import msgspec

from clearance_api.errors import BadRequest
from clearance_api.wire import (
    SUBJECT_CHECK,
    BatchItem,
    BatchReply,
    BatchRequest,
    CheckRequest,
    CheckResult,
)
from clearance_core.kube.resources import place_of
from clearance_decision.decider import Decider
from clearance_decision.recent import Kept, Position, Recent, reusable
from clearance_decision.routes import Route
from clearance_runtime.messaging.responder import reply_to
from clearance_runtime.process import logs
from clearance_runtime.process.health import Probe
from clearance_runtime.reading.reads import STORE_OUTAGES, Reads, unavailable
from clearance_runtime.storage.cache import DecisionCache, Looked

log = logs.get(__name__)
_encode = msgspec.json.Encoder().encode
#: What :meth:`Checks._from_cache` returns for an entry past its validity (never a reply).
_PAST = b"(past its validity)"


def validate_batch(request: BatchRequest) -> None:
    """One request, one answer: a bad item makes the whole batch a bad_request (a result
    has no error form), named so the caller can fix it."""
    for index, item in enumerate(request.checks):
        try:
            place_of(item.resource)
        except BadRequest as exc:
            raise BadRequest(f"checks[{index}]: {exc.message}") from None


class Checks:
    def __init__(self, decider: Decider, cache: DecisionCache, reads: Reads, *,
                 recent: int = 0) -> None:
        self._decider = decider
        self._cache = cache
        self._reads = reads
        #: Replies read from the cache, reused while it stands still (:mod:`.recent`).
        self._recent = Recent(recent, cache.ttl_ms / 1000)
        #: The cache's position at the latest lookup: a kept reply read at another is
        #: not worth waiting for this batch's lookup to confirm.
        self._position: Position | None = None

    async def check(self, request: CheckRequest) -> CheckResult:
        return await self._check(request, lookup=True)

    async def check_missed(self, request: CheckRequest) -> CheckResult:
        """A check whose cache lookup just missed."""
        return await self._check(request, lookup=False)

    async def _check(self, request: CheckRequest, *, lookup: bool) -> CheckResult:
        revision, (result,) = await self._decider.decide(
            request.who(),
            [BatchItem(action=request.action, resource=request.resource)],
            explain=request.explain, lookup=lookup,
        )
        result.revision = revision
        return result

    async def batch(self, request: BatchRequest) -> BatchReply:
        if not request.checks:
            return BatchReply(results=[], revision=await self._reads.revision())
        revision, results = await self._decider.decide(
            request.who(), request.checks, explain=request.explain)
        return BatchReply(results=results, revision=revision)

    async def many(self, route: Route, bodies: list[bytes]) -> list[bytes]:
        """One reply per body, in order, for checks that arrived together (``route``: the
        check route).

        Requests are isolated (docs/api/README.md: Conventions): whatever one body holds, it can
        only fall out of the fast path, and the slow path answers each body on its own, so its
        error reply is its own and never its neighbours'.
        """
        replies: list[bytes | None] = [None] * len(bodies)
        requests: list[CheckRequest | None] = [None] * len(bodies)
        fast: list[tuple[int, CheckRequest, tuple[str, str]]] = []  # (key, principal digest)
        reused: list[tuple[int, Kept]] = []  # replies kept from an earlier lookup (.recent)
        decode, cache_key, cached = route.decode, self._decider.cache_key, self._cache.enabled
        recent, position = self._recent, self._position
        for index, body in enumerate(bodies):
            if recent.enabled and (kept := recent.get(body)) is not None \
                    and kept.position == position:
                reused.append((index, kept))  # confirmed (or not) by this batch's lookup
                continue
            try:
                request = decode(body)
                requests[index] = request
                # A token is resolved on the slow path (its TokenReview may be a wait), and
                # an explanation is looked up with its answer (cached apart).
                if cached and request.min_revision is None and request.principal is not None \
                        and not request.explain:
                    fast.append((index, request, cache_key(
                        request.principal,
                        BatchItem(action=request.action, resource=request.resource))))
            except Exception:  # noqa: S112 - the slow path answers it with its own error
                continue
        missed: dict[int, tuple[str, str]] = {}  # index -> the key it missed, its digest
        probe = None
        if fast or reused:
            try:
                looked = await self._cache.lookup_now([key for _, _, (key, _) in fast])
            except STORE_OUTAGES as exc:
                raise unavailable(exc) from None
            probe, now, hits = looked.probe, time.time(), Counter[str]()
            self._position = looked.position
            for index, kept in reused:
                if reusable(kept, looked.position, now):
                    replies[index] = kept.reply
                    hits[kept.decision] += 1
                # else: the slow path decodes it and asks the cache again
            for (index, request, key), blob in zip(fast, looked.blobs, strict=True):
                reply = None if blob is None else self._from_cache(
                    route, blob, request, bodies[index], looked, now=now, hits=hits)
                if reply is _PAST or blob is None:  # evaluated at once
                    missed[index] = key
                elif reply is not None:  # an unusable entry is answered (or failed) by
                    replies[index] = reply  # the slow path
            self._decider.count_hits(hits)
        if missed:
            await self._misses(route, bodies, requests, missed, replies, probe=probe)
        slow = [i for i, reply in enumerate(replies) if reply is None]
        if slow:
            answers = await asyncio.gather(*(
                self._one(route, bodies[i], requests[i], missed=i in missed) for i in slow))
            for index, answer in zip(slow, answers, strict=True):
                replies[index] = answer
        return [reply for reply in replies if reply is not None]

    async def _misses(self, route: Route, bodies: list[bytes],
                      requests: list[CheckRequest | None], missed: dict[int, tuple[str, str]],
                      replies: list[bytes | None], *, probe: Probe | None) -> None:
        """The cache misses answered together (one probe, one store); any that fails is
        left to the slow path, which answers it alone with its own error."""
        asked = [(i, request, principal, key) for i, key in missed.items()
                 if (request := requests[i]) is not None
                 and (principal := request.principal) is not None]
        try:
            answers = await self._decider.misses([
                (principal, BatchItem(action=request.action, resource=request.resource),
                 *key) for _, request, principal, key in asked], probe)
        except Exception:  # each is then answered alone, failing with its own error
            return
        for (index, request, _, _), answer in zip(asked, answers, strict=True):
            if isinstance(answer, Exception):
                continue
            answer.trace = msgspec.UNSET  # none asked for an explanation
            try:
                replies[index] = route.encode(answer, request, bodies[index])
            except Exception:
                log.exception("miss_unencodable")

    def _from_cache(self, route: Route, blob: bytes, request: CheckRequest, body: bytes,
                    looked: Looked, *, now: float, hits: Counter[str]) -> bytes | None:
        """A cache hit as the encoded reply (counted in ``hits`` by decision, and kept for
        the same body: :mod:`.recent`); ``_PAST`` if a validity boundary passed since it
        was computed; None (the slow path decides) if unusable."""
        try:
            held = self._decider.cached(blob, now)
            if held is None:
                return _PAST
            result, valid_until = held
            result.revision = looked.revision
            reply = route.encode(result, request, body)
        except Exception:
            log.exception("cache_entry_unreadable")
            return None
        hits[result.decision] += 1
        if request.request_id is None:
            self._recent.keep(body, reply, looked.position, result.decision,
                              valid_until=valid_until, now=now)
        return reply

    async def _one(self, route: Route, body: bytes, request: CheckRequest | None, *,
                   missed: bool) -> bytes:
        if request is None:  # not decodable: the route fails it with its own error
            reply, _ = await reply_to(SUBJECT_CHECK, route, body)
            return reply
        handler = self.check_missed if missed else None

        async def decoded(body: bytes) -> bytes:  # decoded once: answered from the Struct
            return await route.answer(request, body, handler)

        reply, _ = await reply_to(SUBJECT_CHECK, decoded, body)
        return reply
