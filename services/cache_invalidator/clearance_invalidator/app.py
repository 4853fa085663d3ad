"""Follow the compiler's change records and delete exactly the affected cache entries.

The compiler appends one record per event to the Redis stream ``clr:changes`` (id
``<revision>-0``) in the same transaction as the state change, so no change can be
compiled without its record. This loop reads the records after ``clr:inval:rev``, deletes
the entries indexed under the record's users, groups and clusters (``lua/invalidate.lua``,
which also advances ``clr:inval:rev``: the system revision; the records read at once go
in a few script calls, in one pipeline, one round trip), publishes
``clearance.decisions.changed`` per record. It keeps no state of its own, so a restart, or a
flushed Redis, simply resumes from what Redis says. The compiler bounds the stream
(``changes.CHANGES_KEPT``): a loop so far behind that records it never applied were
trimmed drops every cached answer instead (it cannot know whose they were).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import msgspec
import redis.asyncio as aioredis
from nats.aio.client import Client
from prometheus_client import Histogram

from clearance_api.wire import SUBJECT_DECISIONS_CHANGED, ChangedPrincipals, DecisionsChanged
from clearance_core.folding.fold import Affected
from clearance_runtime.process import health, logs, metrics, retries
from clearance_runtime.storage import invalidation, keys
from clearance_runtime.storage.changes import ChangeRecord, trimmed_past
from clearance_runtime.storage.invalidation import Call, Invalidation

log = logs.get(__name__)

_record = msgspec.json.Decoder(ChangeRecord).decode
_BY_USER = keys.prefix(keys.cache_by_user)
_BY_GROUP = keys.prefix(keys.cache_by_group)
_BY_CLUSTER = keys.prefix(keys.cache_by_cluster)
_encode = msgspec.json.Encoder().encode


def index_keys(record: ChangeRecord) -> tuple[list[str], list[str]]:
    """The cache index sets holding every entry the change can alter, and the index sets
    of users and groups whose entries are narrowed (to the cluster index sets listed
    last, ``within``, or by ``narrow``; none: whole)."""
    scope = record.invalidate
    # Prefixes joined in comprehensions: a policy change names each member of its groups,
    # and a key function's call per name was a visible part of applying a backlog.
    # Sorted: the record's sets, decoded, are in no particular order, and the calls a
    # record makes are the same every time it is read.
    subjects = [_BY_USER + u for u in sorted(scope.users)]
    subjects += [_BY_GROUP + g for g in sorted(scope.groups)]
    clusters = [_BY_CLUSTER + c for c in sorted(scope.clusters)]
    if scope.unknown:  # the answers warning of a name that may now be known (or gone)
        clusters.append(keys.CACHE_WARNED)
    if scope.narrow is not None and not scope.within and subjects:
        return clusters, subjects
    if scope.within and subjects:
        # Whole clusters first (a script call of their own), then the narrowed subjects.
        return clusters, [*subjects, *(_BY_CLUSTER + c for c in sorted(scope.within))]
    return [*subjects, *clusters], []


def record_calls(record: ChangeRecord, after: int, *, cached: bool = True) -> list[Call]:
    """The record's invalidation calls, whole ("i") and narrowed ("n"). Its revision
    moves (in the last call) only from ``after`` (the record before it in the same script
    call) or later: if that one's call failed, the revision stays before it, and the
    loop, restarted by the retry policy, reads it again. Not ``cached`` (nothing was
    cached once the record was read): one call naming no index set, which only moves the
    revision — what the script does with any call while nothing is cached."""
    if not cached:
        return [("i", [], [str(record.revision), "0", "0", str(after)])]
    whole, narrowed = index_keys(record)
    narrow = record.invalidate.narrow
    calls: list[Call] = []
    # Neither narrowed call moves the revision: the call after them does.
    if narrowed and narrow is not None and not record.invalidate.within:
        calls.append(("n", narrowed, [invalidation.narrow_arg(narrow)]))
    elif narrowed:
        calls.append(("i", narrowed, ["0", "0", str(len(record.invalidate.within))]))
    calls.append(("i", whole, [str(record.revision), "1" if record.invalidate.all else "0",
                               "0", str(after)]))
    return calls


#: Change records read (and applied in one round trip) at most at a time.
READ = 512
#: Records applied by one script call: Valkey serves no other client while a script
#: runs, so a read's records go in a few short calls (one round trip still).
RECORDS_PER_CALL = 64
#: Seconds between sweeps of dangling cache index members.
SWEEP_EVERY = 60.0
#: The ``consumer`` label of this service's lag: the change log it follows.
CHANGE_LOG = "change-log"


class Invalidator:
    def __init__(self, nc: Client, redis: aioredis.Redis) -> None:
        self._nc = nc
        self._r = redis
        self._invalidation = Invalidation(redis)
        self._revision = 0
        self._next_sweep = 0.0
        #: Event-to-effect histograms by kind (looked up once, not per record).
        self._effect: dict[str, Histogram] = {}

    async def run(self) -> None:
        self._next_sweep = time.monotonic() + SWEEP_EVERY
        while True:
            # Outages are waited out by the retry policy; anything else ends the run and
            # the supervisor restarts the service.
            await retries.forever("invalidator", self._round)

    async def _round(self) -> None:
        await self._step()
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + SWEEP_EVERY
            metrics.CACHE_SWEPT.inc(await invalidation.sweep(self._r))

    async def _step(self) -> None:
        self._revision = await health.revision(self._r)
        response: Any = await self._r.xread(
            {keys.CHANGES: f"{self._revision}-0"}, count=READ, block=1000
        )
        for _stream, entries in response or ():
            records = [_record(fields[b"r"]) for _entry_id, fields in entries]
            if records and records[0].revision > self._revision + 1:
                records[:0] = await self._lost()
            await self._apply(records)
        # Behind by what the compiler has folded and this loop has not yet applied.
        compiled = int(await self._r.get(keys.REV) or 0)
        lag = max(compiled - self._revision, 0)
        await health.beat(self._r, "cache-invalidator", self._revision, lag=lag,
                          consumer=CHANGE_LOG)

    async def _lost(self) -> list[ChangeRecord]:
        """A record dropping every cached answer, if records after this loop's revision
        were trimmed before it applied them (revisions skip numbers, so a gap alone does
        not say so: the stream's last deleted id does)."""
        info: Any = await self._r.xinfo_stream(keys.CHANGES)
        lost = trimmed_past(info)
        if lost <= self._revision:
            return []
        log.warning("change_records_lost", applied=self._revision, trimmed_to=lost)
        return [ChangeRecord(revision=lost, invalidate=Affected(all=True),
                             announce=Affected(all=True), kind="lost")]

    async def _apply(self, records: list[ChangeRecord]) -> None:
        """Apply the records of one read in one round trip: their invalidation
        calls, in order, in a few script calls (each call still advances the system
        revision after its own deletions, so a decision never sees a revision before its
        entries are gone), then the trim of what they applied; then announce each, in
        order."""
        # A read of several records (a backlog, a rebuild) first asks whether anything is
        # cached at all: with nothing, no call has any entry to delete, and naming their
        # index sets (thousands per read: a policy's groups and their members) was most
        # of the cost of passing them as script keys. Sound for the same reason as the
        # script's own check, made a little earlier: the records were committed before
        # they were read, and an entry stored since was computed from a state that holds
        # them (stores are fenced on the compiled state).
        cached = len(records) == 1 or bool(await self._r.exists(keys.CACHE_ALL))
        per_record, after = [], 0
        for record in records:
            per_record.append(record_calls(record, after, cached=cached))
            after = record.revision
        async with self._r.pipeline(transaction=False) as pipe:
            for start in range(0, len(per_record), RECORDS_PER_CALL):
                chunk = [c for calls in per_record[start:start + RECORDS_PER_CALL]
                         for c in calls]
                await self._invalidation.apply(chunk, client=pipe)
            replies = await pipe.execute()
        counts = iter(int(n) for reply in replies for n in reply)
        removed_by_kind: Counter[str] = Counter()
        for record, calls in zip(records, per_record, strict=True):
            removed = sum(next(counts) for _ in calls)
            self._revision = record.revision
            removed_by_kind[record.kind or "unknown"] += removed
            await self._report(record, removed, alone=len(records) == 1)
        # Counted once per kind per read: a labelled counter's lookup per record was a
        # visible part of applying a backlog.
        for kind, removed in removed_by_kind.items():
            metrics.INVALIDATIONS.labels(kind=kind).inc(removed)
        if len(records) > 1:
            # One line per read of a backlog (each record's at debug level): a JSON line
            # per record cost as much as applying it.
            log.info("invalidated_read", records=len(records),
                     revisions=f"{records[0].revision}-{records[-1].revision}",
                     removed=sum(removed_by_kind.values()))

    async def _report(self, record: ChangeRecord, removed: int, *, alone: bool) -> None:
        if record.published_ms is not None:
            kind = record.kind or "unknown"
            histogram = self._effect.get(kind)
            if histogram is None:
                histogram = self._effect[kind] = metrics.EVENT_TO_EFFECT.labels(kind=kind)
            histogram.observe(max(time.time() - record.published_ms / 1000, 0.0))
        told = record.announce
        if told:
            # A cluster's labels can change anyone's answer about it: clients with caches
            # of their own must drop everything about that cluster, hence ``all``.
            message = DecisionsChanged(
                revision=record.revision,
                principals=ChangedPrincipals(users=sorted(told.users),
                                             groups=sorted(told.groups)),
                all=told.all or bool(told.clusters),
            )
            try:
                await self._nc.publish(SUBJECT_DECISIONS_CHANGED, _encode(message))
            except Exception as exc:
                log.warning("decisions_changed_publish_failed", error=str(exc))
            (log.info if alone else log.debug)(
                "invalidated", revision=record.revision, removed=removed,
                users=len(told.users), groups=len(told.groups), clusters=told.clusters)
