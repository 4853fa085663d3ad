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

What can never be published is rejected, never retried: a name or namespace longer than
Kubernetes allows, an event larger than the server's ``max_payload`` (read from the
connection; headers included), or a publish the server refuses for good (a payload or
permissions violation, a bad request: :func:`permanent`). The ledger then publishes a
tombstone in the object's place (``clearance_core.folding.rejections``): the compiler withdraws
the version in force and the object's status says why. Each rejection is logged
(``object_rejected``) and counted (``clearance_watcher_rejected_total{kind,reason}``),
once per version, and the ledger goes on with the other objects. Only outages (a
disconnect, a timeout, JetStream unavailable) are retried. Subjects and message ids stay
bounded whatever the object holds: an unsafe uid is replaced by a token derived from
namespace/name, and a message id longer than :data:`MAX_MSG_ID` or with characters a
header cannot carry is replaced by its hash.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import re
from collections.abc import Iterable
from typing import Any, Protocol

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from clearance_api.errors import ClearanceError, InvalidObject
from clearance_api.wire import EVENTS_SUBJECTS, Event, EventType
from clearance_core.folding import rejections
from clearance_core.folding.kinds import ObjectRef, content_hash, event_subject, over_limits, ref_of
from clearance_core.folding.registry import STATUS_WRITTEN
from clearance_runtime.messaging import bus
from clearance_runtime.messaging.jetstream import Topology
from clearance_runtime.messaging.pull import open_puller
from clearance_runtime.process import logs, metrics, retries
from clearance_runtime.process.outages import is_transient

log = logs.get(__name__)
SOURCE_HEADER = "Clearance-Source"
_encode = msgspec.json.Encoder().encode
_decode_event = msgspec.json.Decoder(Event).decode
#: Messages asked for at a time while loading the stream at start.
LOAD_BATCH = 512
#: Longest ``Nats-Msg-Id`` sent as it is (longer ones are hashed).
MAX_MSG_ID = 512
_PRINTABLE = re.compile(r"[\x21-\x7e]+")  # a header value: printable ASCII, no spaces
#: What NATS's default server configuration allows, for a connection not yet connected.
DEFAULT_MAX_PAYLOAD = 1 << 20


class Rejected(ClearanceError):
    """An object that can never be published: why, and the counter's reason label."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.message, self.reason = message, reason


def permanent(exc: BaseException, subject: str = "", nc: Client | None = None) -> bool:
    """Whether a publish failed for good: the payload is over the server's limit, the
    subject or a header is invalid, JetStream refused the request as bad (400), or — the
    request then times out — the server reported a permissions violation for the
    subject. Anything else (a disconnect, a timeout, 503) is an outage."""
    if isinstance(exc, nats.errors.MaxPayloadError | nats.errors.BadSubjectError
                  | nats.errors.BadHeaderError | nats.js.errors.BadRequestError):
        return True
    if isinstance(exc, nats.js.errors.APIError) and exc.code in (400, 413):
        return True
    if isinstance(exc, nats.errors.TimeoutError | TimeoutError) and nc is not None:
        last = str(nc.last_error or "")
        return "Permissions Violation" in last and f'"{subject}"' in last
    return False


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
    def __init__(self, js: JetStreamContext, *, source: str, nc: Client | None = None,
                 topology: Topology = bus.DEFAULT) -> None:
        self._js = js
        self._topology = topology
        self._nc = nc
        self._source = source
        self._known: dict[ObjectRef, Known] = {}
        #: Objects rejected, by the version rejected: the same version is not tried again.
        self._rejected: dict[ObjectRef, str] = {}
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
        info = await self._js.stream_info(self._topology.stream)
        if not info.state.messages:
            return
        # A consumer named for this source, not one the server names: the watcher's NATS
        # user may create, read and delete only these (deploy/nats/accounts.conf), never
        # the compiler's. One left by a watcher that died while loading is replaced (its
        # position is past what it delivered).
        name = loader_name(self._source)
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await self._js.delete_consumer(self._topology.stream, name)
        # Read with the compiler's reader (``clearance_runtime.messaging.pull``): nats-py's fetch
        # spent 45 us per message, most of a restart's reload of a large stream.
        puller = await open_puller(self._js, self._topology.stream, ConsumerConfig(
            name=name,
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=30.0,
            filter_subject=EVENTS_SUBJECTS,
            num_replicas=self._topology.replicas,
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
                await self._js.delete_consumer(self._topology.stream, puller.durable)
        log.info("ledger_loaded", source=self._source, objects=len(self._known))

    def _max_payload(self) -> int:
        """The server's limit, from the connection's INFO (nats-py keeps it)."""
        limit = getattr(self._nc, "max_payload", None) if self._nc is not None else None
        return limit if isinstance(limit, int) and limit > 0 else DEFAULT_MAX_PAYLOAD

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
            await self._apply_one(event_type, obj)

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
                await self._apply_one("ADDED", obj)
            vanished = [r for r in self._known if r.kind in kinds and r not in seen]
            for ref in sorted(vanished):
                await self._apply_one("DELETED", self._known[ref].obj)

    async def _apply_one(self, event_type: EventType, obj: dict[str, Any]) -> None:
        """One object's failure is its own: anything but an outage is logged and counted,
        and the ledger goes on with the next object (a source that retried it would
        stall every later change behind it)."""
        try:
            await self._apply(event_type, obj)
        except Exception as exc:
            if is_transient(exc):
                raise
            metrics.WATCHER_REJECTED.labels(kind=_kind(obj), reason="failed").inc()
            log.error("object_failed", source=self._source, type=event_type,
                      error=f"{type(exc).__name__}: {str(exc)[:300]}")

    async def _apply(self, event_type: EventType, obj: dict[str, Any]) -> None:
        try:
            ref = ref_of(obj)
        except InvalidObject as exc:
            metrics.MALFORMED.labels(where="watcher").inc()
            log.warning("object_skipped", source=self._source, error=exc.message)
            return
        current = self._known.get(ref)
        if event_type == "DELETED":
            self._rejected.pop(ref, None)
            if current is None:
                return
            try:
                await self._publish(current.subject, "DELETED", obj, ref)
            except Rejected:
                # The final version is unpublishable: delete what the stream holds.
                try:
                    await self._publish(current.subject, "DELETED", current.obj, ref)
                except Rejected as rejected:
                    log.error("deletion_unpublishable", source=self._source,
                              object=_short(str(ref)), error=rejected.message)
            del self._known[ref]
            return
        version = version_of(obj)
        if self._rejected.get(ref) == version:
            return  # this version was rejected already
        subject = event_subject(obj, ref)
        if current is not None and current.subject == subject and (
                current.version == version or _status_only(ref, current.obj, obj)):
            return
        try:
            reason = over_limits(ref)
            if reason is not None:
                raise Rejected(reason, "name_too_long" if "name is" in reason
                               else "namespace_too_long")
            await self._put(current, subject, obj, ref, version)
            self._rejected.pop(ref, None)
        except Rejected as rejected:
            await self._reject(obj, ref, version, rejected)

    async def _put(self, current: Known | None, subject: str, obj: dict[str, Any],
                   ref: ObjectRef, version: str) -> None:
        """Publish a new version (ADDED or MODIFIED) and remember it."""
        if current is not None and current.subject != subject:
            # Recreated under a new uid: close the old subject so replays stay clean.
            await self._publish(current.subject, "DELETED", current.obj, ref)
            del self._known[ref]
            current = None
        kind: EventType = "ADDED" if current is None else "MODIFIED"
        seq = await self._publish(subject, kind, obj, ref)
        self._known[ref] = Known(subject=subject, version=version, seq=seq, obj=obj)

    async def _reject(self, obj: dict[str, Any], ref: ObjectRef, version: str,
                      rejected: Rejected) -> None:
        """Publish a tombstone in place of a version that can never be published."""
        self._rejected[ref] = version
        metrics.WATCHER_REJECTED.labels(kind=ref.kind, reason=rejected.reason).inc()
        log.warning("object_rejected", source=self._source, object=_short(str(ref)),
                    reason=rejected.reason, error=rejected.message)
        tomb = rejections.tombstone(obj, ref, rejected.message)
        tomb_version = version_of(tomb)
        subject = event_subject(tomb, ref)
        current = self._known.get(ref)
        if current is not None and current.subject == subject \
                and current.version == tomb_version:
            return
        try:
            await self._put(current, subject, tomb, ref, tomb_version)
        except Rejected as again:  # not even its identity fits: nothing can say it
            log.error("tombstone_unpublishable", source=self._source,
                      object=_short(str(ref)), error=again.message)

    async def _publish(
        self,
        subject: str,
        event_type: EventType,
        obj: dict[str, Any],
        ref: ObjectRef,
    ) -> int:
        """Publish one event and wait for its ack (outages retried); :class:`Rejected`
        if it can never be published."""
        # The id names the object version and the sequence it follows, so a retry is
        # de-duplicated but re-adding identical content after a delete is not.
        prior = self._last_seq.get(ref, 0)
        suffix = ":DELETED" if event_type == "DELETED" else ""
        msg_id = bounded_msg_id(f"{ref}@{version_of(obj)}{suffix}#{prior}")
        try:
            payload = _encode(Event(type=event_type, object=obj))
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            raise Rejected(f"cannot be encoded: {exc}", "unencodable") from None
        headers = {"Nats-Msg-Id": msg_id, SOURCE_HEADER: self._source}
        size = len(payload) + _headers_size(headers)
        limit = self._max_payload()
        if size > limit:
            raise Rejected(f"its event is {size:,} bytes; the NATS server's max_payload is "
                           f"{limit:,}", "payload_too_large")
        try:
            ack = await retries.forever(
                "publish", functools.partial(self._js.publish, subject, payload,
                                             timeout=5.0, headers=headers),
                on=lambda exc: is_transient(exc) and not permanent(exc, subject, self._nc),
                subject=subject)
        except Exception as exc:
            if not permanent(exc, subject, self._nc):
                raise
            raise Rejected(f"the server refused it: {type(exc).__name__}: {exc}"[:500],
                           "publish_refused") from None
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


def bounded_msg_id(msg_id: str) -> str:
    """The id as it is if a header carries it and it is short, else its hash."""
    if len(msg_id) <= MAX_MSG_ID and _PRINTABLE.fullmatch(msg_id):
        return msg_id
    return "h-" + hashlib.sha256(msg_id.encode("utf-8", "surrogatepass")).hexdigest()


def _headers_size(headers: dict[str, str]) -> int:
    """Bytes of the NATS header block (``NATS/1.0``, ``k: v`` lines, a blank line)."""
    return 10 + sum(len(k) + len(v.encode("utf-8", "surrogatepass")) + 4
                    for k, v in headers.items()) + 2


def _short(text: str) -> str:
    return text if len(text) <= 300 else text[:300] + "…"


def _kind(obj: Any) -> str:
    try:
        return ref_of(obj).kind
    except Exception:
        return "unknown"
