"""The ledger: what the stream currently says about every object of one source.

Sources (the Kubernetes API, a manifest directory) report what they see; the ledger
turns that into the minimal events: ADDED for an object the stream does not have,
MODIFIED for a changed one, DELETED for one that vanished, nothing for one that is
unchanged. It is loaded from the stream at start (the last message of every subject
this source wrote), so a restarted watcher neither republishes everything nor misses
a deletion that happened while it was down.

Every publish waits for the JetStream ack and carries ``Nats-Msg-Id``; a retried publish
reuses its id, so the stream stores it once.

For the kinds whose status Clearance writes (``registry.STATUS_WRITTEN``), a new version
whose ``status`` moved and nothing else did (but the resourceVersion and managedFields
that move with it) is not an event: no fold reads a status, and publishing the watcher's own status
writes would feed them back through the compiler.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Iterable
from typing import Any, Protocol

import msgspec
import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from clearance_core.errors import InvalidObject
from clearance_core.kinds import ObjectRef, content_hash, event_subject, ref_of
from clearance_core.registry import STATUS_WRITTEN
from clearance_core.wire import EVENTS_STREAM, EVENTS_SUBJECTS, Event, EventType
from clearance_runtime import bus, logs, metrics, retries
from clearance_runtime.pull import open_puller

log = logs.get(__name__)
SOURCE_HEADER = "Clearance-Source"
_encode = msgspec.json.Encoder().encode
_decode_event = msgspec.json.Decoder(Event).decode
#: Messages asked for at a time while loading the stream at start.
LOAD_BATCH = 512


class Sink(Protocol):
    """What a source (the Kubernetes API, a manifest directory) reports what it sees to:
    a :class:`Ledger`, or a fake in tests."""

    async def sync(self, objects: Iterable[dict[str, Any]], *, kinds: Iterable[str]) -> None:
        """A complete snapshot of ``kinds``: what is absent from it was deleted."""

    async def apply(self, event_type: EventType, obj: dict[str, Any]) -> None:
        """One watch event for an object."""


class Known(msgspec.Struct, kw_only=True):
    subject: str
    version: str
    seq: int
    obj: dict[str, Any]


def loader_name(source: str) -> str:
    """The consumer a watcher reads its source's objects back with at start."""
    return f"clearance-watcher-{source}"


def version_of(obj: dict[str, Any]) -> str:
    """resourceVersion when the API server set one, else a hash of the content."""
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    return rv if isinstance(rv, str) and rv else f"h{content_hash(obj)}"


class Ledger:
    def __init__(self, js: JetStreamContext, *, source: str) -> None:
        self._js = js
        self._source = source
        self._known: dict[ObjectRef, Known] = {}
        # The last sequence written for every object, deleted ones included: message ids
        # name it, so identical content re-added after a delete is not de-duplicated away.
        self._last_seq: dict[ObjectRef, int] = {}
        self._lock = asyncio.Lock()

    @property
    def known(self) -> dict[ObjectRef, Known]:
        return self._known

    @property
    def last_seq(self) -> int:
        """The highest stream sequence this source has written or loaded."""
        return max(self._last_seq.values(), default=0)

    async def load(self) -> None:
        """Rebuild the ledger from the last message of every subject of this source."""
        info = await self._js.stream_info(EVENTS_STREAM)
        if not info.state.messages:
            return
        # A consumer named for this source, not one the server names: the watcher's NATS
        # user may create, read and delete only these (deploy/nats/accounts.conf), never
        # the compiler's. One left by a watcher that died while loading is replaced (its
        # position is past what it delivered).
        name = loader_name(self._source)
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await self._js.delete_consumer(EVENTS_STREAM, name)
        # Read with the compiler's reader (``clearance_runtime.pull``): nats-py's fetch
        # spent 45 us per message, most of a restart's reload of a large stream.
        puller = await open_puller(self._js, EVENTS_STREAM, ConsumerConfig(
            name=name,
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=30.0,
            filter_subject=EVENTS_SUBJECTS,
        ), batch=LOAD_BATCH)
        try:
            # Stop when the consumer says nothing is pending, not at the first wait that
            # ends empty: a loaded machine can exceed one wait mid-way, and an object
            # missed here would never get its DELETED after a restart.
            pending, idle = 1, 0
            while pending:
                msgs = await puller.next_batch(wait=2.0)
                if not msgs:
                    idle += 1
                    if idle >= 5:
                        log.warning("ledger_load_incomplete", source=self._source,
                                    pending=pending)
                        break
                    continue
                for msg, at in msgs:
                    pending = at.pending
                    self._load_one(msg)
        finally:
            await puller.stop()
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                await self._js.delete_consumer(EVENTS_STREAM, puller.durable)
        log.info("ledger_loaded", source=self._source, objects=len(self._known))

    def _load_one(self, msg: Any) -> None:
        if bus.header(msg, SOURCE_HEADER) != self._source:
            return
        try:
            event = _decode_event(msg.data)
            ref = ref_of(event.object)
        except (msgspec.DecodeError, InvalidObject):
            return
        seq = bus.position(msg).stream_seq
        if self._last_seq.get(ref, 0) > seq:
            return
        self._last_seq[ref] = seq
        if event.type == "DELETED":
            self._known.pop(ref, None)
        else:
            self._known[ref] = Known(
                subject=msg.subject, version=version_of(event.object), seq=seq, obj=event.object
            )

    async def apply(self, event_type: EventType, obj: dict[str, Any]) -> None:
        """Report one watch event (ADDED, MODIFIED or DELETED) for an object."""
        async with self._lock:
            await self._apply(event_type, obj)

    async def sync(self, objects: Iterable[dict[str, Any]], *, kinds: Iterable[str]) -> None:
        """Report a complete snapshot of ``kinds``: what is absent from it was deleted."""
        async with self._lock:
            kinds = set(kinds)
            seen: set[ObjectRef] = set()
            for obj in objects:
                try:
                    seen.add(ref_of(obj))
                except InvalidObject:
                    continue
                await self._apply("ADDED", obj)
            vanished = [r for r in self._known if r.kind in kinds and r not in seen]
            for ref in sorted(vanished):
                await self._apply("DELETED", self._known[ref].obj)

    async def _apply(self, event_type: EventType, obj: dict[str, Any]) -> None:
        try:
            ref = ref_of(obj)
        except InvalidObject as exc:
            metrics.MALFORMED.labels(where="watcher").inc()
            log.warning("object_skipped", source=self._source, error=exc.message)
            return
        current = self._known.get(ref)
        if event_type == "DELETED":
            if current is None:
                return
            await self._publish(current.subject, "DELETED", obj, ref)
            del self._known[ref]
            return
        version = version_of(obj)
        subject = event_subject(obj, ref)
        if current is not None and current.subject == subject and (
                current.version == version or _status_only(ref, current.obj, obj)):
            return
        if current is not None and current.subject != subject:
            # Recreated under a new uid: close the old subject so replays stay clean.
            await self._publish(current.subject, "DELETED", current.obj, ref)
            current = None
        kind: EventType = "ADDED" if current is None else "MODIFIED"
        seq = await self._publish(subject, kind, obj, ref)
        self._known[ref] = Known(subject=subject, version=version, seq=seq, obj=obj)

    async def _publish(
        self,
        subject: str,
        event_type: EventType,
        obj: dict[str, Any],
        ref: ObjectRef,
    ) -> int:
        # The id names the object version and the sequence it follows, so a retry is
        # de-duplicated but re-adding identical content after a delete is not.
        prior = self._last_seq.get(ref, 0)
        suffix = ":DELETED" if event_type == "DELETED" else ""
        msg_id = f"{ref}@{version_of(obj)}{suffix}#{prior}"
        payload = _encode(Event(type=event_type, object=obj))
        headers = {"Nats-Msg-Id": msg_id, SOURCE_HEADER: self._source}
        ack = await retries.forever(
            "publish", functools.partial(self._js.publish, subject, payload, timeout=5.0,
                                         headers=headers),
            subject=subject)
        self._last_seq[ref] = max(int(ack.seq), prior)
        metrics.EVENTS_PUBLISHED.labels(source=self._source, type=event_type).inc()
        log.info("event_published", type=event_type, object=str(ref), seq=ack.seq,
                 duplicate=bool(ack.duplicate))
        return int(ack.seq)


def _status_only(ref: ObjectRef, before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether ``after`` is a status write over ``before``: its status moved and nothing
    else did (but the resourceVersion and managedFields that move with it). A new version
    with nothing changed at all is still published, as every version always was."""
    return ref.kind in STATUS_WRITTEN and before.get("status") != after.get("status") \
        and _without_status(before) == _without_status(after)


def _without_status(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items()
            if k not in ("resourceVersion", "managedFields")}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}
