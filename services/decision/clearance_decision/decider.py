"""Checks: cache first, else one consistent snapshot and the pure evaluator.

A batch is answered with one cache round trip, one snapshot for all its clusters and one
cache write. Every cached entry carries its own explanation, so ``explain`` is answered
from the cache too; the entry lives no longer than the TTL nor past the next validity
boundary of any candidate policy. That boundary is stored with the answer and checked
when it is read, by the clock that evaluated it: Redis expires the entry by its own
clock, a moment after the write reached it (later still if the event loop was busy), so
its TTL alone would let an allow outlive a ``notAfter`` by that much.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Sequence

import msgspec

from clearance_core.decide import Decision, decide
from clearance_core.inherited_decide import decide_with_inherited, namespace_of
from clearance_core.principal import Identity
from clearance_core.resources import (
    check_principal,
    cluster_of,
    decision_digest,
    principal_digest,
)
from clearance_core.wire import BatchItem, CheckResult, Principal, TraceStep
from clearance_decision.views import principal_snapshot
from clearance_runtime import metrics
from clearance_runtime.cache import DecisionCache, Entry, entry_indexes, entry_key
from clearance_runtime.reads import Reads, Snapshot


class Stored(msgspec.Struct, array_like=True):
    """A cached answer (without its trace), the moment it stops holding (its next
    notBefore/notAfter, POSIX seconds; None: none ahead) and its trace, compressed.

    The trace is most of an answer's bytes (about 1.2 KB of a 1.3 KB entry with six
    candidate policies; 260 bytes compressed) and is read only by ``explain``: kept
    apart, it keeps a million cached decisions under 1 GiB of Valkey, and an answer
    without ``explain`` decodes less."""

    result: CheckResult
    valid_until: float | None = None
    trace: bytes | None = None


_encode_stored = msgspec.msgpack.Encoder().encode
_decode_stored = msgspec.msgpack.Decoder(Stored).decode
_encode_trace = msgspec.msgpack.Encoder().encode
_decode_trace = msgspec.msgpack.Decoder(list[TraceStep]).decode


def pack(result: CheckResult, valid_until: float | None) -> bytes:
    """A cache entry's blob: the answer, its validity limit and its compressed trace."""
    trace = result.trace
    bare = msgspec.structs.replace(result, trace=msgspec.UNSET)
    packed = None if trace is msgspec.UNSET else zlib.compress(_encode_trace(trace), 1)
    return _encode_stored(Stored(bare, valid_until, packed))


def unpack(blob: bytes, now: float, *, explain: bool = True) -> CheckResult | None:
    """The cached answer (with its trace if ``explain``), or None if a validity boundary
    has passed since it was computed (the entry is about to expire: a miss)."""
    stored = _decode_stored(blob)
    if stored.valid_until is not None and now >= stored.valid_until:
        return None
    stored.result.cached = True
    if explain and stored.trace is not None:
        stored.result.trace = _decode_trace(zlib.decompress(stored.trace))
    return stored.result


def result_of(decision: Decision) -> CheckResult:
    return CheckResult(
        decision=decision.decision,
        allowed=decision.decision in ("allow", "partial"),
        reason=decision.reason,
        policy=decision.policy,
        permissions=list(decision.permissions),
        filters=decision.filters,
        cached=False,
        trace=decision.outcome.trace,
    )


class Decider:
    def __init__(self, reads: Reads, cache: DecisionCache) -> None:
        self._reads = reads
        self._cache = cache

    def cache_key(self, principal: Principal, check: BatchItem) -> str:
        """The cache key of one check (BadRequest for an unusable principal or resource)."""
        check_principal(principal)
        return entry_key(decision_digest(
            principal_digest(principal), check.action, check.resource,
            cluster_of(check.resource)))

    def cached(self, blob: bytes, *, explain: bool) -> CheckResult | None:
        """A cache hit as a reply, counted; None if it no longer holds (not counted: the
        caller evaluates it as a miss)."""
        result = unpack(blob, time.time(), explain=explain)
        if result is None:
            return None
        if not explain:
            result.trace = msgspec.UNSET
        self._cache.hits += 1
        metrics.BOUND.cache_hit.inc()
        metrics.BOUND.decision("check", result.decision).inc()
        return result

    async def decide(
        self, principal: Principal, checks: Sequence[BatchItem], *, explain: bool,
        lookup: bool = True,
    ) -> tuple[int, list[CheckResult]]:
        """(revision, one result per check in order). ``lookup=False``: the caller just
        missed the cache for these checks; they are evaluated without asking it again."""
        check_principal(principal)
        pkey = principal_digest(principal)
        clusters = [cluster_of(c.resource) for c in checks]
        digests = [
            decision_digest(pkey, c.action, c.resource, cluster)
            for c, cluster in zip(checks, clusters, strict=True)
        ]
        results: list[CheckResult | None] = [None] * len(checks)
        revision = 0
        if self._cache.enabled and lookup:
            revision, blobs = await self._cache.lookup([entry_key(d) for d in digests])
            now = time.time()
            for index, blob in enumerate(blobs):
                if blob is not None:
                    results[index] = unpack(blob, now, explain=explain)
        hits = sum(r is not None for r in results)
        self._cache.hits += hits
        self._cache.misses += len(checks) - hits
        metrics.BOUND.cache_hit.inc(hits)
        metrics.BOUND.cache_miss.inc(len(checks) - hits)
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            revision = await self._evaluate(
                principal=principal, pkey=pkey, checks=checks, clusters=clusters,
                digests=digests, missing=missing, results=results,
            )
        final: list[CheckResult] = []
        for result in results:
            assert result is not None
            if not explain:
                result.trace = msgspec.UNSET
            metrics.BOUND.decision("check", result.decision).inc()
            final.append(result)
        return revision, final

    async def _evaluate(
        self,
        *,
        principal: Principal,
        pkey: str,
        checks: Sequence[BatchItem],
        clusters: list[str],
        digests: list[str],
        missing: list[int],
        results: list[CheckResult | None],
    ) -> int:
        started = time.time()
        namespaces = {i: namespace_of(checks[i].resource) for i in missing}
        snapshot, identity = await principal_snapshot(
            self._reads, principal, clusters=sorted({clusters[i] for i in missing}),
            namespaces=sorted({ns for ns in namespaces.values() if ns is not None}))
        entries: list[Entry] = []
        for i in missing:
            # Validity is measured from when the evaluation started (before the read).
            results[i] = self._result(
                snapshot, identity, checks[i], pkey=pkey, cluster=clusters[i],
                namespace=namespaces[i], key=entry_key(digests[i]), now=started,
                entries=entries)
        await self._store(snapshot.compiled_revision, entries)
        return snapshot.revision

    async def misses(self, asked: Sequence[tuple[Principal, BatchItem, str]]
                     ) -> list[CheckResult | Exception] | None:
        """Single checks that just missed the cache, answered together from the mirror:
        one probe for all, each evaluated at once, their entries stored in one call. A
        check that cannot be answered gets its exception (its own error reply); ``None``
        without a mirror (each is then answered on its own). Each comes with the cache key
        its lookup just missed (:meth:`cache_key`)."""
        started = time.time()
        revision = await self._reads.current()
        if revision is None:
            return None
        out: list[CheckResult | Exception] = []
        entries: list[Entry] = []
        state = ""
        for principal, check, key in asked:
            try:
                check_principal(principal)
                cluster = cluster_of(check.resource)
                namespace = namespace_of(check.resource)
                pkey = principal_digest(principal)
                snapshot, identity = self._reads.snapshot_now(
                    principal, revision, clusters=[cluster],
                    namespaces=[] if namespace is None else [namespace])
                state = snapshot.compiled_revision
                result = self._result(
                    snapshot, identity, check, pkey=pkey, cluster=cluster,
                    namespace=namespace, now=started, entries=entries, key=key)
            except Exception as exc:
                out.append(exc)
                continue
            result.revision = revision
            self._cache.misses += 1
            metrics.BOUND.cache_miss.inc()
            metrics.BOUND.decision("check", result.decision).inc()
            out.append(result)
        await self._store(state, entries)
        return out

    def _result(self, snapshot: Snapshot, identity: Identity, check: BatchItem, *,
                pkey: str, cluster: str, namespace: str | None, key: str, now: float,
                entries: list[Entry]) -> CheckResult:
        """One check decided from a snapshot; its cache entry appended to ``entries``."""
        decision = decide(
            snapshot.policies,
            identity,
            action=check.action,
            resource=check.resource,
            cluster=cluster,
            labels=snapshot.labels.get(cluster, {}),
            now=now,
            match=snapshot.match,
        )
        target, rules = snapshot.inherited(cluster, namespace)
        if rules:
            decision = decide_with_inherited(
                rules, identity, action=check.action, resource=check.resource,
                monitor=decision, target=target, declared=snapshot.declared)
        result = result_of(decision)
        if self._cache.ttl_ms > 0:
            entries.append(Entry(
                key=key,
                blob=pack(result, decision.outcome.valid_until),
                ttl_ms=self._cache.ttl_ms,
                indexes=entry_indexes(identity.names, identity.groups, cluster, pkey),
                valid_until=decision.outcome.valid_until,
            ))
        return result

    async def _store(self, state: str, entries: list[Entry]) -> None:
        # Lifetimes are cut at the next validity boundary as of the moment of storing, not
        # of evaluating: a long batch must not leave an entry alive past a notAfter.
        stored_at = time.time()
        entries = [e for e in (_bounded(e, stored_at) for e in entries) if e.ttl_ms > 0]
        await self._cache.store(state, entries)


def _bounded(entry: Entry, now: float) -> Entry:
    """The entry with its TTL cut at its next notBefore/notAfter (0: do not store)."""
    if entry.valid_until is None:
        return entry
    ttl = min(entry.ttl_ms, math.floor((entry.valid_until - now) * 1000))
    return msgspec.structs.replace(entry, ttl_ms=max(ttl, 0))
