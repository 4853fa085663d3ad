"""Fold one stream message into Redis: decode, dispatch by kind, commit, report.

The kind's fold (``clearance_core.registry``) does the work, pure, on the in-memory
model of the compiled state; this room only moves bytes: it decodes the event, opens the
store's fenced transaction, commits, and publishes the statuses the fold produced. The
message's stream sequence is its revision. Malformed messages and kinds no fold compiles
still advance the revision (with an empty change record), so ``clearance.v1.status``
keeps moving and a bad message never blocks the pipeline.

Anything other than a store/bus outage raised while folding or committing one object is
that object's failure (CONTRACT section 1): it is withdrawn, its status says why, it is
counted, and the checkpoint moves past it so a restart never replays into it.
"""

from __future__ import annotations

import time

import msgspec
from nats.aio.client import Client

from clearance_core import status
from clearance_core.census import Census, census
from clearance_core.errors import InvalidObject
from clearance_core.folds import FoldEvent, FoldResult, accesspolicies, policies, reach_members
from clearance_core.kinds import ObjectRef, ref_of, status_subject
from clearance_core.model import Model
from clearance_core.registry import REGISTRY
from clearance_core.wire import Event, PolicyStatus
from clearance_runtime import logs, metrics
from clearance_runtime.outages import is_transient
from clearance_runtime.state import StateStore

log = logs.get(__name__)
_decode_event = msgspec.json.Decoder(Event).decode
_encode = msgspec.json.Encoder().encode
#: An event older than this (ms since the stream stored it), or with more than this many
#: messages behind it, is folded as part of a backlog.
BACKLOG_MS = 1000
BACKLOG_PENDING = 32


class Folder:
    def __init__(self, store: StateStore, nc: Client) -> None:
        self._store = store
        self._nc = nc
        self._model: Model | None = None
        self._published_ms: int | None = None

    def reset(self) -> None:
        """Forget the in-memory model (reloaded from the store on the next event)."""
        self._model = None

    async def census(self, now: float) -> Census:
        """How many policies are in each state at ``now`` (loading the model first if
        no event has yet: a compiler restarted on a quiet stream still reports)."""
        if self._model is None:
            self._model = await self._store.load_model()
        return census(self._model.policies.values(), self._model.access_status, now)

    async def fold(self, seq: int, data: bytes, published_ms: int | None = None,
                   pending: int = 0) -> None:
        """Fold one message (``published_ms``: when the stream stored it; ``pending``:
        how many messages wait behind it). Only transient store/bus failures escape (to
        be retried)."""
        try:
            event = _decode_event(data)
            ref = ref_of(event.object)
        except (msgspec.DecodeError, msgspec.ValidationError, InvalidObject, RecursionError,
                UnicodeError) as exc:
            metrics.MALFORMED.labels(where="compiler").inc()
            metrics.EVENTS_COMPILED.labels(kind="unknown", outcome="malformed").inc()
            log.warning("event_malformed", seq=seq, error=str(exc)[:500])
            await self._store.advance(seq, published_ms=published_ms)
            return
        now = time.time()
        # An event with many behind it, or published long ago, is part of a burst or a
        # backlog being replayed (a rebuild, a restart, a GitOps sync): its invalidation
        # is not narrowed, which costs a pass over the inventory per policy event, and
        # throughput matters more than precision then.
        behind = pending > BACKLOG_PENDING or (
            published_ms is not None and now * 1000 - published_ms > BACKLOG_MS)
        folding = FoldEvent(seq, event.type, event.object, ref, now, precise=not behind)
        self._published_ms = published_ms
        try:
            result = await self._commit(folding, normal=True)
        except Exception as exc:
            if is_transient(exc):
                self.reset()  # the commit may not have happened: reload what did
                raise
            result = await self._object_failed(folding, exc)
        metrics.EVENTS_COMPILED.labels(kind=ref.kind, outcome=result.outcome).inc()
        for status_ref, body in result.statuses:
            await self._publish_status(status_ref, body)

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
        async with self._store.transaction(event.seq, kind=event.ref.kind,
                                           published_ms=self._published_ms) as tx:
            if normal:
                result = spec.fold(self._model, tx, event)
            elif event.ref.kind == "monitoraccesspolicy":
                result = policies.withdraw(self._model, tx, event, reason)
            elif event.ref.kind == "accesspolicy":
                result = accesspolicies.withdraw(self._model, tx, event, reason)
            else:
                withdrawn = spec.fold(self._model, tx, FoldEvent(
                    event.seq, "DELETED", event.obj, event.ref, event.now))
                result = FoldResult("failed", withdrawn.statuses)
            reach_members(self._model, tx)
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
            if is_transient(second):
                self.reset()
                raise
            # Not even the withdrawal can be stored: move on rather than stop everything.
            log.error("object_withdrawal_failed", object=str(event.ref), seq=event.seq,
                      error=f"{type(second).__name__}: {str(second)[:300]}")
            self.reset()
            await self._store.advance(event.seq, kind=event.ref.kind,
                                      published_ms=self._published_ms)
            statuses = [(event.ref, status.failed(event.seq, reason))] \
                if event.ref.kind in ("monitoraccesspolicy", "accesspolicy") else []
            return FoldResult("failed", statuses)

    async def _publish_status(self, ref: ObjectRef, body: PolicyStatus) -> None:
        subject = status_subject(ref)
        try:
            await self._nc.publish(subject, _encode(body))
        except Exception as exc:
            log.warning("status_publish_failed", subject=subject, error=str(exc))
