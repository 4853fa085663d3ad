"""Checks: cache first, else one consistent snapshot and the pure evaluator.

A batch is answered with one cache round trip, one snapshot for all its clusters and one
cache write. An answer and its explanation are cached apart (``entries``): a check with
``explain`` is a hit only when both are; each lives no longer than the TTL nor past the
next validity boundary of any candidate policy.

A batch of at least ``WHOLE_BATCH`` checks that all missed is cached as one entry, not
one per answer: in Valkey an entry costs its SET, its ZADD and an SADD per index set
whatever its size, and those writes were most of an uncached batch's cost (a hundred
answers of one principal share every index set but their clusters'). The entry joins
the union of its answers' index sets and carries the header of an answer about no
cluster in the inventory, so any invalidation that could change one of its answers drops
it whole; the same batch asked again is one key. Its answers are not cached one by one
(the cache then holds either form of an answer, never both to keep in step).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import Counter
from collections.abc import Sequence

import msgspec

from clearance_api.errors import BadRequest
from clearance_api.wire import BatchItem, CheckResult, Principal, Resource
from clearance_core.inherit.decide import namespace_of
from clearance_core.kube.principal import Identity
from clearance_core.kube.resources import (
    check_principal,
    decision_digest,
    place_of,
    principal_digest,
)
from clearance_core.monitor.decide import Decision
from clearance_core.questions import answers, placement, unknown_names
from clearance_decision.admission import Admission
from clearance_decision.entries import (
    pack,
    pack_batch,
    pack_trace,
    unpack,
    unpack_batch,
    unpack_trace,
    unpack_until,
)
from clearance_decision.views import principal_snapshot
from clearance_runtime.process import metrics
from clearance_runtime.process.health import Probe
from clearance_runtime.reading.reads import Reads, Snapshot
from clearance_runtime.storage.cache import (
    DecisionCache,
    Entry,
    batch_key,
    entry_indexes,
    entry_key,
    trace_key,
)

#: Checks from which a batch that missed whole is cached as one entry (a smaller one is
#: cached answer by answer, as single checks are: each invalidated precisely).
WHOLE_BATCH = 16

#: CLEARANCE_NAMESPACE_TARGET_BUDGET's default (the settings hold the one in force).
DEFAULT_BUDGET = 100_000


def within_budget(cost: int, budget: int) -> None:
    """BadRequest when one request would weigh more (question, Namespace target) pairs
    than ``budget``: a principal many Namespace targets concern, asked many questions
    that name no namespace, must not stall the service for everyone else."""
    if cost > budget:
        raise BadRequest(
            f"this request weighs {cost} (question, Namespace target) pairs, more than "
            f"{budget} (CLEARANCE_NAMESPACE_TARGET_BUDGET): the principal is concerned by "
            "many Namespace targets; name the namespaces, or ask for less at once")


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
    def __init__(self, reads: Reads, cache: DecisionCache, *,
                 budget: int = DEFAULT_BUDGET, admission: Admission | None = None) -> None:
        self._reads = reads
        self._cache = cache
        #: Which answers are stored while the cache is being scanned (:mod:`.admission`).
        self.admission = admission if admission is not None else Admission(0)
        #: (question, Namespace target) pairs one request may weigh.
        self._budget = budget

    def cache_key(self, principal: Principal, check: BatchItem) -> tuple[str, str]:
        """The cache key of one check and its principal's digest (BadRequest for an
        unusable principal or resource)."""
        check_principal(principal)
        pkey = principal_digest(principal)
        cluster, _ = place_of(check.resource)
        return entry_key(decision_digest(pkey, check.action, check.resource, cluster)), pkey

    def cached(self, blob: bytes, now: float) -> tuple[CheckResult, float | None] | None:
        """A cache hit (without explanation) as a reply, not yet counted
        (:meth:`count_hits`), and the moment it stops holding; None if it no longer holds
        (the caller evaluates it as a miss)."""
        return unpack_until(blob, now)

    def count_hits(self, decided: Counter[str]) -> None:
        """Count cache hits answered, by decision (once per batch: a labelled counter's
        increment per check was a visible part of a hit)."""
        self._count_lookups(sum(decided.values()), 0)
        for decision, count in decided.items():
            metrics.BOUND.decision("check", decision).inc(count)

    def _count_lookups(self, hits: int, misses: int) -> None:
        """Lookups answered from the cache (``hits``) and evaluated (``misses``): the
        status's totals, the metrics and the admission's windows, in one place."""
        self.admission.counted(hits, misses)
        if hits:
            self._cache.hits += hits
            metrics.BOUND.cache_hit.inc(hits)
        if misses:
            self._cache.misses += misses
            metrics.BOUND.cache_miss.inc(misses)

    async def decide(
        self, principal: Principal, checks: Sequence[BatchItem], *, explain: bool,
        lookup: bool = True,
    ) -> tuple[int, list[CheckResult]]:
        """(revision, one result per check in order). ``lookup=False``: the caller just
        missed the cache for these checks; they are evaluated without asking it again."""
        check_principal(principal)
        pkey = principal_digest(principal)
        clusters = [place_of(c.resource)[0] for c in checks]
        digests = [
            decision_digest(pkey, c.action, c.resource, cluster)
            for c, cluster in zip(checks, clusters, strict=True)
        ]
        results: list[CheckResult | None] = [None] * len(checks)
        revision = 0
        whole = None  # the key of the batch's answers cached as one entry
        if self._cache.enabled and lookup:
            wanted = [entry_key(d) for d in digests]
            if explain:
                wanted += [trace_key(d) for d in digests]
            elif len(checks) >= WHOLE_BATCH:
                whole = batch_key(_batch_digest(digests))
                wanted.append(whole)
            looked = await self._cache.lookup(wanted)
            revision, blobs = looked.revision, looked.blobs
            now = time.time()
            cached_whole = None if whole is None or blobs[-1] is None \
                else unpack_batch(blobs[-1], now)
            if cached_whole is not None and len(cached_whole) == len(checks):
                results = list(cached_whole)
            else:
                for index, blob in enumerate(blobs[:len(checks)]):
                    if blob is not None:
                        results[index] = _hit(blob, blobs[len(checks) + index] if explain
                                              else None, now, explain=explain)
        hits = sum(r is not None for r in results)
        self._count_lookups(hits, len(checks) - hits)
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            revision = await self._evaluate(
                principal=principal, pkey=pkey, checks=checks, clusters=clusters,
                digests=digests, missing=missing, results=results, explain=explain,
                whole=whole if hits == 0 else None,
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
        explain: bool,
        whole: str | None = None,
    ) -> int:
        """Evaluates the ``missing`` checks from one snapshot and caches their answers:
        under ``whole`` as one entry if given (the whole batch missed), else one by one."""
        started = time.time()
        namespaces = {i: namespace_of(checks[i].resource) for i in missing}
        snapshot, identity = await principal_snapshot(
            self._reads, principal, clusters=sorted({clusters[i] for i in missing}),
            namespaces=sorted({ns for ns in namespaces.values() if ns is not None}),
            spread=any(_spreads(checks[i].resource) for i in missing))
        within_budget(sum(answers.check_cost(snapshot, checks[i].resource, clusters[i])
                          for i in missing), self._budget)
        entries: list[Entry] = []
        admit = self.admission.admit
        # A whole batch is stored (or not) as its one entry; else each answer on its own.
        whole_stored = whole is not None and admit(whole)
        for i in missing:
            key = entry_key(digests[i])
            stored = whole_stored if whole is not None else admit(key)
            # Validity is measured from when the evaluation started (before the read).
            results[i] = self._result(
                snapshot, identity, checks[i], pkey=pkey, cluster=clusters[i],
                key=key, now=started, entries=entries if stored else None,
                trace_key=trace_key(digests[i]) if explain else None,
                packed=whole is None)
        if whole is not None and entries:
            entries = [_whole(whole, [r for r in results if r is not None], entries)]
        await self._store(snapshot.compiled_revision, entries)
        return snapshot.revision

    async def misses(self, asked: Sequence[tuple[Principal, BatchItem, str, str]],
                     probe: Probe | None = None) -> list[CheckResult | Exception]:
        """Single checks that just missed the cache, answered together from the mirror:
        one probe for all, each evaluated at once, their entries stored in one call. A
        check that cannot be answered gets its exception (its own error reply). Each
        comes with the cache key its lookup just missed and its principal's digest
        (:meth:`cache_key`: the principal was checked then); none asks for an
        explanation. ``probe``: where the store stood at that lookup (the mirror
        catches up to it)."""
        started = time.time()
        revision = await self._reads.current(probe)
        out: list[CheckResult | Exception] = []
        entries: list[Entry] = []
        state = ""
        decided: Counter[str] = Counter()
        admit = self.admission.admit
        for principal, check, key, pkey in asked:
            try:
                cluster, namespace = place_of(check.resource)
                snapshot, identity = self._reads.snapshot_now(
                    principal, revision, clusters=[cluster],
                    namespaces=[] if namespace is None else [namespace],
                    spread=_spreads(check.resource))
                state = snapshot.compiled_revision
                within_budget(answers.check_cost(snapshot, check.resource, cluster),
                              self._budget)
                result = self._result(
                    snapshot, identity, check, pkey=pkey, cluster=cluster,
                    now=started, entries=entries if admit(key) else None, key=key,
                    trace_key=None)
            except Exception as exc:
                out.append(exc)
                continue
            result.revision = revision
            decided[result.decision] += 1
            out.append(result)
        # Counted once per batch: a labelled counter's increment per check was a visible
        # part of a miss.
        self._count_lookups(0, sum(decided.values()))
        for decision, count in decided.items():
            metrics.BOUND.decision("check", decision).inc(count)
        await self._store(state, entries)
        return out

    def _result(self, snapshot: Snapshot, identity: Identity, check: BatchItem, *,
                pkey: str, cluster: str, key: str, now: float,
                entries: list[Entry] | None, trace_key: str | None,
                warn: bool = True, packed: bool = True) -> CheckResult:
        """One check decided from a snapshot, with its warnings (``warn``); its cache
        entry (and its explanation's, under ``trace_key`` if given) appended to
        ``entries`` — without its blob unless ``packed`` (a whole batch's entry takes
        only the index sets and validity of its answers'); None: not stored
        (:mod:`.admission`)."""
        decision = answers.check(snapshot, identity, check.action, check.resource,
                                 cluster=cluster, now=now, explain=trace_key is not None)
        result = result_of(decision)
        warned = unknown_names.check_warnings(
            snapshot, identity, check.resource, cluster, known=snapshot.known_clusters,
            inventory=snapshot.inventory, decided_by=decision.policy) \
            if warn else unknown_names.Warnings()
        if warned.names or warned.subject is not None:
            result.warnings = warned.all()
        if entries is not None and self._cache.ttl_ms > 0:
            outcome = decision.outcome
            # Warnings are cached with the answer, and leave with it (docs/api/README.md: Warnings):
            # one about a cluster or a type joins the index every change of the
            # inventory's or the declared types' names drops; one about the principal
            # carries the "not in the inventory" header, which every invalidation naming
            # the principal or its groups drops, narrowed or not.
            # An answer about a custom type joins the names' index too, warned of or not:
            # its type may become undeclared (a MetricSource deleted), and then the answer
            # must warn of it.
            indexes = entry_indexes(
                identity.names, identity.groups, cluster, pkey,
                warned=bool(warned.names)
                or check.resource.type not in unknown_names.BUILTIN_NAMES)
            known = cluster if cluster in snapshot.known_clusters \
                and warned.subject is None else None
            entries.append(Entry(
                key=key,
                blob=pack(result, outcome.valid_until, cluster=known, order=outcome.order)
                if packed else b"",
                ttl_ms=self._cache.ttl_ms, indexes=indexes, valid_until=outcome.valid_until,
            ))
            if trace_key is not None:
                entries.append(Entry(
                    key=trace_key,
                    blob=pack_trace(outcome.trace, outcome.valid_until),
                    ttl_ms=self._cache.ttl_ms, indexes=indexes,
                    valid_until=outcome.valid_until,
                ))
        return result

    async def _store(self, state: str, entries: list[Entry]) -> None:
        # Lifetimes are cut at the next validity boundary as of the moment of storing, not
        # of evaluating: a long batch must not leave an entry alive past a notAfter.
        stored_at = time.time()
        entries = [e for e in (_bounded(e, stored_at) for e in entries) if e.ttl_ms > 0]
        await self._cache.store(state, entries)


def _spreads(resource: Resource) -> bool:
    """Whether a check is judged over the cluster's Namespace targets (the resource was
    placed, so :func:`placement.spreads` cannot raise)."""
    return placement.spreads(resource.type, resource.name, resource.namespace)


def _batch_digest(digests: list[str]) -> str:
    """A batch's digest: of its checks' digests in order (each names the principal)."""
    return hashlib.blake2b("\n".join(digests).encode(), digest_size=20).hexdigest()


def _whole(key: str, results: list[CheckResult], entries: list[Entry]) -> Entry:
    """One entry for a whole batch: every answer, the union of their index sets, the
    earliest validity limit."""
    limits = [e.valid_until for e in entries if e.valid_until is not None]
    valid_until = min(limits) if limits else None
    indexes = tuple(dict.fromkeys(index for e in entries for index in e.indexes))
    return Entry(key=key, blob=pack_batch(results, valid_until), ttl_ms=entries[0].ttl_ms,
                 indexes=indexes, valid_until=valid_until)


def _bounded(entry: Entry, now: float) -> Entry:
    """The entry with its TTL cut at its next notBefore/notAfter (0: do not store)."""
    if entry.valid_until is None:
        return entry
    ttl = min(entry.ttl_ms, math.floor((entry.valid_until - now) * 1000))
    return msgspec.structs.replace(entry, ttl_ms=max(ttl, 0))


def _hit(blob: bytes, trace: bytes | None, now: float, *, explain: bool
         ) -> CheckResult | None:
    """A cached answer, with its cached explanation if ``explain`` (None: a miss)."""
    result = unpack(blob, now)
    if result is None or not explain:
        return result
    steps = None if trace is None else unpack_trace(trace, now)
    if steps is None:
        return None
    result.trace = steps
    return result
