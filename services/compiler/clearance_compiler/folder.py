"""Fold stream messages into Redis: decode, dispatch by kind, batch, commit, report.

The kind's fold (``clearance_core.folding.registry``) does the work, pure, on the in-memory
model of the compiled state; this room only moves bytes: it decodes each event, folds it
into the current batch (``clearance_runtime.storage.commits``), commits the batch in one fenced
script call, and then publishes the statuses its folds produced. The message's stream
sequence is its revision. Malformed messages and kinds no fold compiles still advance
the revision (with an empty change record), so ``clearance.v1.status`` keeps moving and
a bad message never blocks the pipeline.

Anything other than a store/bus outage raised while folding or committing one object is
that object's failure (docs/api/events.md) — a store error counts against the object
only while the store is seen taking writes (``_blame_store``): a fault of the store never
withdraws an object: it is withdrawn, its status says why, it is
counted, and the checkpoint moves past it so a restart never replays into it. Such a
failure is committed on its own: the events batched before it are committed first (the
model is then reloaded, since the failed fold may have left half of its change in it),
and a batch the store refuses as a whole is folded again one event per commit, so the
failure lands on the object that caused it.

A tombstone — the watcher's stand-in for an object it could not publish
(``clearance_core.folding.rejections``) — withdraws the object's version in force, and the
object is invalid with the watcher's reason.

The folds of the kinds that say so (``KindSpec.off_loop``: those that move the
inheritance index, once any AccessPolicy exists) run on a worker thread
(``_off_loop``): one Fleet AccessPolicy recomputes every target, and conditions may
spend their budget on each (measured in ``bench/conditions.py``), which must not hold
the event loop that renews the compiler's lease, beats and lands the commit in flight.
Quick folds run inline, and the loop gets a turn every ``YIELD_EVERY`` seconds of them.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass

import msgspec
from nats.aio.client import Client

from clearance_api.errors import InvalidObject
from clearance_api.wire import Event, PolicyStatus
from clearance_core.folding import rejections, status
from clearance_core.folding.census import Census, census
from clearance_core.folding.folds import Fold, FoldEvent, FoldResult, reach_members
from clearance_core.folding.kinds import ObjectRef, ref_of, status_subject
from clearance_core.folding.model import Model, Writes
from clearance_core.folding.registry import REGISTRY, KindSpec
from clearance_runtime.process import logs, metrics
from clearance_runtime.process.outages import is_store_error, is_transient
from clearance_runtime.storage.commits import Batch
from clearance_runtime.storage.state import StateStore

log = logs.get(__name__)
_decode_event = msgspec.json.Decoder(Event).decode
_encode = msgspec.json.Encoder().encode
#: An event older than this (ms since the stream stored it), or with more than this many
#: messages behind it, is folded as part of a backlog.
BACKLOG_MS = 1000
BACKLOG_PENDING = 32
#: A batch is committed once its messages add up to this many bytes, whatever their
#: number: the script's single argument must stay well below Redis's bulk limit, and a
#: huge commit would stall every other client of the store while it runs.
BATCH_BYTES = 4 << 20
#: Seconds of quick folds after which the event loop gets a turn.
YIELD_EVERY = 0.05


# Plain slotted classes: a frozen dataclass's constructor costs three times as much,
# and one of each is made per event.
@dataclass(slots=True)
class _Message:
    seq: int
    data: bytes
    published_ms: int | None
    pending: int


@dataclass(slots=True)
class _Folded:
    """What to report of one batched event once its batch is committed."""

    kind: str
    outcome: str
    statuses: list[tuple[ObjectRef, PolicyStatus]]


@dataclass(slots=True)
class _Flight:
    """A batch whose commit is in flight, and what to report of it once it lands."""

    batch: Batch
    messages: list[_Message]
    folded: list[_Folded]
    task: asyncio.Task[None]


class Folder:
    def __init__(self, store: StateStore, nc: Client) -> None:
        self._store = store
        self._nc = nc
        self._model: Model | None = None
        self._published_ms: int | None = None
        self._batch = Batch()
        #: The batch's messages (to fold again one by one if the store refuses it) and
        #: what to report of each once it is committed.
        self._messages: list[_Message] = []
        self._folded: list[_Folded] = []
        self._bytes = 0
        self._flight: _Flight | None = None
        self._yielded = time.monotonic()
        #: The sequence of the last event committed (None: none yet in this run).
        self.committed: int | None = None
        #: The events up to this sequence are folded by a build from the first event
        #: that has not reached it yet (``clr:built``'s target, set by the compiler): no
        #: decision is answered until the system revision passes it
        #: (``health.rebuilding``), so nothing is cached that their invalidation could
        #: miss, and it is not widened to the named groups' members (``_reach``).
        self.building_until = 0

    def reset(self) -> None:
        """Forget the in-memory model (reloaded from the store on the next event), any
        batch not committed, and a commit in flight (cancelled: the caller restarts
        from the store's checkpoint, and the commit is fenced on it)."""
        if self._flight is not None:
            self._flight.task.cancel()
        self._flight = None
        self._model = None
        # New containers, not cleared ones: a fold still running on its thread when its
        # task was cancelled finishes into the ones it was given, not into these.
        self._batch = Batch()
        self._messages, self._folded = [], []
        self._bytes = 0

    async def census(self, now: float) -> Census:
        """How many policies are in each state at ``now`` (loading the model first if
        no event has yet: a compiler restarted on a quiet stream still reports)."""
        if self._model is None:
            self._model = await self._store.load_model()
        return census(self._model.policies.values(), self._model.access_status, now)

    async def fold(self, seq: int, data: bytes, published_ms: int | None = None,
                   pending: int = 0) -> None:
        """Fold one message (``published_ms``: when the stream stored it; ``pending``:
        how many messages wait behind it) into the batch, committed by :meth:`commit`
        (or sooner, when the batch is full or an object fails). Only transient
        store/bus failures escape (to be retried)."""
        message = _Message(seq, data, published_ms, pending)
        self._messages.append(message)
        self._bytes += len(data)
        if self._model is None:
            self._model = await self._store.load_model()
        folding = self._decode(message)
        if folding is not None and _off_loop(folding, self._model):
            # Off the event loop: one such event can recompute every target (a Fleet
            # policy), and the loop must go on renewing the lease, beating and landing the
            # commit in flight meanwhile. Only this task touches the model and the batch,
            # and it waits for the thread.
            failed = await asyncio.to_thread(self._fold, message, folding, self._model,
                                             self._batch, self._folded)
        else:
            failed = self._fold(message, folding, self._model, self._batch, self._folded)
            now = time.monotonic()
            if now - self._yielded >= YIELD_EVERY:
                self._yielded = now
                await asyncio.sleep(0)  # a long batch of quick folds lets the loop run
        if failed is not None:
            await self._failed(*failed)
        if self._bytes >= BATCH_BYTES:
            await self.commit()

    async def commit(self) -> None:
        """Commit the batch (one script call) and report each of its events: metrics
        and the statuses their folds produced, in order. A batch the store refuses for
        any reason but an outage is folded again, one event per commit."""
        await self.send()
        await self.landed()

    @property
    def sending(self) -> bool:
        """Whether a batch's commit is in flight (:meth:`send`)."""
        return self._flight is not None

    async def send(self) -> None:
        """Start committing the batch and go on folding into a new one: while a backlog
        is read, the next batch folds during the store's ~20% of a batch. One commit is in
        flight at most, so commits stay in order; :meth:`landed` awaits it."""
        await self.landed()
        if not self._batch:
            return
        self._flight = _Flight(self._batch, self._messages, self._folded,
                               asyncio.create_task(self._store.commit(self._batch)))
        self._batch, self._messages, self._folded, self._bytes = Batch(), [], [], 0

    async def landed(self) -> None:
        """Wait for the batch in flight, then report its events. If the store refused it,
        the events folded since rest on a state that was never written: the model is
        reloaded, the refused batch is folded again one event per commit, and then the
        events since (into the new batch)."""
        flight, self._flight = self._flight, None
        if flight is None:
            return
        try:
            await flight.task
        except Exception as exc:
            since = list(self._messages)
            self.reset()
            await self._blame_store(exc)
            log.warning("batch_refused", events=len(flight.messages), error=str(exc)[:300])
            for message in flight.messages:
                await self._fold_alone(message)
            for message in since:
                await self.fold(message.seq, message.data, message.published_ms,
                                message.pending)
            return
        self.committed = flight.batch.last
        await self._report(*flight.folded)

    async def _report(self, *items: _Folded) -> None:
        # Counted by (kind, outcome) first: a labelled counter's lookup per event was a
        # visible part of folding a backlog.
        for (kind, outcome), count in Counter((i.kind, i.outcome) for i in items).items():
            metrics.EVENTS_COMPILED.labels(kind=kind, outcome=outcome).inc(count)
        publish = self._nc.publish
        for item in items:
            for status_ref, body in item.statuses:
                # Inline (no coroutine per status): a fleet's rebuild publishes thousands.
                subject = status_subject(status_ref)
                try:
                    await publish(subject, _encode(body))
                except Exception as exc:
                    log.warning("status_publish_failed", subject=subject, error=str(exc))

    def _decode(self, message: _Message) -> FoldEvent | None:
        """The event to fold (None: malformed, logged and counted)."""
        try:
            event = _decode_event(message.data)
            ref = ref_of(event.object)
        except (msgspec.DecodeError, msgspec.ValidationError, InvalidObject, RecursionError,
                UnicodeError) as exc:
            metrics.MALFORMED.labels(where="compiler").inc()
            log.warning("event_malformed", seq=message.seq, error=str(exc)[:500])
            return None
        now = time.time()
        # An event with many behind it, or published long ago, is part of a burst or a
        # backlog being replayed (a rebuild, a restart, a GitOps sync): its invalidation
        # is not narrowed, which costs a pass over the inventory per policy event, and
        # throughput matters more than precision then.
        published_ms = message.published_ms
        behind = message.pending > BACKLOG_PENDING or (
            published_ms is not None and now * 1000 - published_ms > BACKLOG_MS)
        self._published_ms = published_ms
        return FoldEvent(message.seq, event.type, event.object, ref, now, precise=not behind)

    def _fold(self, message: _Message, folding: FoldEvent | None, model: Model,
              batch: Batch, folded: list[_Folded]) -> tuple[FoldEvent, Exception] | None:
        """Fold one decoded message (None: malformed) into the batch (synchronous: folds
        are pure, and a backlog folds thousands of events between two awaits); the event
        and its error if its object failed."""
        if folding is None:
            with batch.event(message.seq, published_ms=message.published_ms):
                pass  # the revision moves past it all the same
            folded.append(_Folded("unknown", "malformed", []))
            return None
        try:
            result = self._batched(folding, model, batch)
        except Exception as exc:
            return folding, exc
        folded.append(_Folded(folding.ref.kind, result.outcome, result.statuses))
        return None

    async def _failed(self, folding: FoldEvent, exc: Exception) -> None:
        """An object failed while folded into the batch. Its writes are not in the
        batch, but the model may hold half of them: the events before it are committed
        first, then it is withdrawn on its own (``_object_failed`` reloads the model)."""
        if is_transient(exc):
            self.reset()
            raise exc
        self._messages.pop()
        await self.commit()
        result = await self._object_failed(folding, exc)
        self.committed = folding.seq
        await self._report(_Folded(folding.ref.kind, result.outcome, result.statuses))

    async def _blame_store(self, exc: Exception) -> None:
        """Raise ``exc`` (or the store's own error) when the store, not the object, is at
        fault: an outage by type, or any store error while the store takes no write.
        Withdrawing an object because the store was failing over turns a Deny into an
        allow; a store that takes writes and still refuses this commit refuses it for
        what it holds (too large, too many arguments), and the object is withdrawn."""
        if is_transient(exc):
            raise exc
        if is_store_error(exc):
            await self._store.takes_writes()  # raises the outage, if there is one

    def _batched(self, event: FoldEvent, model: Model, batch: Batch) -> FoldResult:
        spec = REGISTRY[event.ref.kind]
        with batch.event(event.seq, kind=event.ref.kind,
                         published_ms=self._published_ms) as tx:
            if spec.fold is None:
                # Kinds carried on the stream that no fold compiles (CRDs) still
                # advance the revision.
                return FoldResult("ignored")
            result = _fold_one(spec, spec.fold, model, tx, event)
            self._reach(event, model, tx)
            return result

    def _reach(self, event: FoldEvent, model: Model, tx: Writes) -> None:
        """Widen the event's invalidation to the members of the groups it names
        (``reach_members``) — unless a build folds it: then no entry is cached that the
        widening could reach (``building_until``). A fleet's policies each naming a
        group of twenty spent ~5% of a rebuild's CPU widening, sorting and writing
        those names, and the invalidator reading them, for nothing."""
        if event.seq > self.building_until:
            reach_members(model, tx)

    async def _fold_alone(self, message: _Message) -> None:
        """Fold one message and commit it on its own: a store failure that is not an
        outage is then this object's own."""
        folding = self._decode(message)
        if folding is None:
            await self._store.advance(message.seq, published_ms=message.published_ms)
            result, kind = FoldResult("malformed"), "unknown"
        else:
            kind = folding.ref.kind
            try:
                result = await self._commit(folding, normal=True)
            except Exception as exc:
                self.reset()  # the commit may not have happened: reload what did
                await self._blame_store(exc)
                result = await self._object_failed(folding, exc)
        self.committed = message.seq
        await self._report(_Folded(kind, result.outcome, result.statuses))

    async def _commit(self, event: FoldEvent, *, normal: bool,
                      reason: str = "") -> FoldResult:
        if self._model is None:
            self._model = await self._store.load_model()
        spec = REGISTRY[event.ref.kind]
        if spec.fold is None:
            # Kinds carried on the stream that no fold compiles (CRDs) still advance
            # the revision.
            await self._store.advance(event.seq, kind=event.ref.kind,
                                      published_ms=self._published_ms)
            return FoldResult("ignored")
        model, kind_fold = self._model, spec.fold
        async with self._store.transaction(event.seq, kind=event.ref.kind,
                                           published_ms=self._published_ms) as tx:

            def fold() -> FoldResult:
                if normal:
                    return _fold_one(spec, kind_fold, model, tx, event)
                return _withdraw(spec, model, tx, event, reason)

            # As in fold(): an inherited kind's fold runs off the event loop.
            result = await asyncio.to_thread(fold) if _off_loop(event, model) else fold()
            self._reach(event, model, tx)
            return result

    async def _object_failed(self, event: FoldEvent, exc: Exception) -> FoldResult:
        """Withdraw the object; its status says why; the checkpoint moves past it."""
        reason = f"could not be compiled or stored: {type(exc).__name__}: {str(exc)[:300]}"
        metrics.OBJECT_FAILURES.labels(kind=event.ref.kind).inc()
        log.error("object_failed", object=str(event.ref), seq=event.seq, error=reason,
                  exc_info=(type(exc), exc, exc.__traceback__))
        self.reset()  # the model may hold half of this event: reload from the store
        try:
            return await self._commit(event, normal=False, reason=reason)
        except Exception as second:
            self.reset()
            await self._blame_store(second)
            # Not even the withdrawal can be stored: move on rather than stop everything.
            log.error("object_withdrawal_failed", object=str(event.ref), seq=event.seq,
                      error=f"{type(second).__name__}: {str(second)[:300]}")
            self.reset()
            await self._store.advance(event.seq, kind=event.ref.kind,
                                      published_ms=self._published_ms)
            statuses = [(event.ref, status.failed(event.seq, reason))] \
                if REGISTRY[event.ref.kind].writes_status else []
            return FoldResult("failed", statuses)


def _off_loop(event: FoldEvent, model: Model) -> bool:
    """Whether to fold on the worker thread: as the kind declares
    (``KindSpec.off_loop``)."""
    off_loop = REGISTRY[event.ref.kind].off_loop
    return off_loop is not None and off_loop(model)


def _fold_one(spec: KindSpec, kind_fold: Fold, model: Model, tx: Writes,
              event: FoldEvent) -> FoldResult:
    """The kind's fold, or the withdrawal of an object the watcher rejected (a tombstone:
    ``clearance_core.folding.rejections``), which is then invalid with the watcher's reason."""
    reason = rejections.reason_of(event.obj) if event.type != "DELETED" else None
    if reason is None:
        return kind_fold(model, tx, event)
    return FoldResult("rejected", _withdraw(spec, model, tx, event, reason).statuses)


def _withdraw(spec: KindSpec, model: Model, tx: Writes, event: FoldEvent,
              reason: str) -> FoldResult:
    """Withdraw the object's version in force: as its kind declares (``KindSpec.withdraw``:
    a policy keeps an invalid record with the reason, its status says it); a kind without
    one is folded as deleted."""
    if spec.withdraw is not None:
        return spec.withdraw(model, tx, event, reason)
    assert spec.fold is not None  # a kind no fold compiles is never withdrawn
    withdrawn = spec.fold(model, tx, FoldEvent(event.seq, "DELETED", event.obj, event.ref,
                                               event.now))
    return FoldResult("failed", withdrawn.statuses)
