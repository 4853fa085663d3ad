"""Status written back: the compiler's status of each policy, on its status subresource.

Runs beside the Kubernetes source, so only while the watcher holds its lease: two
replicas never write at once, and what a paused former holder still writes is what the
holder writes too (``clearance_core.kube.status_patch`` is deterministic).

What is wanted, per object (``MonitorAccessPolicy``, ``AccessPolicy``): the newest status
heard for it — the compiler's ``clearance.status.<kind>.<namespace>.<name>`` events, or
``clearance.v1.policy-status`` asked with ``min_revision`` — if it is at least as new as
the object's last event on the stream (``Ledger.known``: its ``seq`` and ``generation``,
hence ``observedGeneration``). A status older than that is not written: the compiler
has not folded the version the API shows, and the ask below brings the newer status.

When to ask ``policy-status``: for every object of a LIST (at start, so a restarted
watcher converges, and after a 410 relist), when an object's last event is newer than
any status heard for it (an AccessPolicy whose conditions did not move is not
republished), and every ``resync_seconds`` for every object (a status event missed
while NATS reconnected; a MonitorAccessPolicy whose validity window opened or closed).

What is live: the status the API last showed (LIST and watch, through
:class:`kube.Observer`) or last answered to a patch. The merge patch is sent only if
it changes something, so the watch event of the watcher's own write finds nothing to
do (and the ledger publishes no event for it: a status-only change is not one).

Work is a queue of objects, de-duplicated, served by ``workers`` tasks: at most that
many requests at once, and never two for one object. Transient failures (NATS timeouts,
``stale``/``unavailable`` replies, a 409 conflict, 429, 5xx, connection errors) are
retried with the retry policy's ``FAILURE`` back-off; a 404 means the object is gone
and is dropped quietly; anything else is logged, counted and left to the next resync.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
from collections.abc import Mapping
from typing import Any

import aiohttp
import kubernetes_asyncio.client
import msgspec
import nats.errors
from kubernetes_asyncio.client import ApiException
from nats.aio.client import Client
from nats.aio.msg import Msg

from clearance_api.errors import ClearanceError, InvalidObject
from clearance_api.wire import (
    SUBJECT_POLICY_STATUS,
    EventType,
    PolicyStatus,
    PolicyStatusRequest,
)
from clearance_core.folding.kinds import ObjectRef, ref_of, status_subject
from clearance_core.folding.registry import REGISTRY, STATUS_WRITTEN
from clearance_core.kube import status_patch
from clearance_runtime.process import health, logs, metrics, retries
from clearance_watcher import kube
from clearance_watcher.ledger import Ledger

log = logs.get(__name__)
MERGE_PATCH = "application/merge-patch+json"
ASK_TIMEOUT_MS = 30_000
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.decode


class _Retry(ClearanceError):
    """A reply worth asking again for (the decision service is behind or unavailable)."""


class StatusWriter:
    def __init__(self, nc: Client, api: kubernetes_asyncio.client.ApiClient,
                 ledger: Ledger, *, workers: int = 4, resync_seconds: float = 300.0) -> None:
        self._nc = nc
        self._api = api
        self._ledger = ledger
        self._workers = workers
        self._resync = resync_seconds
        self._live: dict[ObjectRef, dict[str, Any]] = {}
        #: The status subject of every object in ``_live`` (a subject may carry a hashed
        #: namespace or name, so the object is found by its subject, not parsed from it).
        self._subjects: dict[str, ObjectRef] = {}
        self._wanted: dict[ObjectRef, PolicyStatus] = {}
        self._ask: set[ObjectRef] = set()
        self._queue: asyncio.Queue[ObjectRef] = asyncio.Queue()
        self._queued: set[ObjectRef] = set()
        self._busy: set[ObjectRef] = set()
        self._again: set[ObjectRef] = set()

    async def run(self) -> None:
        subs = [await self._nc.subscribe(f"clearance.status.{kind}.>", cb=self._on_status)
                for kind in sorted(STATUS_WRITTEN)]
        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(self._workers):
                    group.create_task(self._work())
                group.create_task(self._resync_every())
        finally:
            for sub in subs:
                with contextlib.suppress(nats.errors.Error):  # a stop may close NATS first
                    await sub.unsubscribe()

    # What the API shows (kube.Observer), after the ledger took it.

    def listed(self, kind: str, objects: list[dict[str, Any]]) -> None:
        if kind not in STATUS_WRITTEN:
            return
        listed = {ref: _status_of(obj) for obj in objects if (ref := _ref(obj)) is not None}
        for ref in [r for r in self._live if r.kind == kind and r not in listed]:
            self._forget(ref)
        self._live.update(listed)
        self._subjects.update((status_subject(ref), ref) for ref in listed)
        for ref in listed:
            self._ask.add(ref)
            self._mark(ref)

    def seen(self, event_type: EventType, obj: dict[str, Any]) -> None:
        ref = _ref(obj)
        if ref is None or ref.kind not in STATUS_WRITTEN:
            return
        if event_type == "DELETED":
            self._forget(ref)
            return
        self._live[ref] = _status_of(obj)
        self._subjects[status_subject(ref)] = ref
        self._mark(ref)

    # What the compiler says.

    async def _on_status(self, msg: Msg) -> None:
        ref = self._subjects.get(msg.subject)
        if ref is None or ref not in self._live:
            return  # not an object of the API (a manifest), or not listed yet
        try:
            status = _decode(msg.data, type=PolicyStatus)
        except (msgspec.DecodeError, msgspec.ValidationError):
            metrics.MALFORMED.labels(where="watcher").inc()
            return
        self._remember(ref, status)
        self._mark(ref)

    def _remember(self, ref: ObjectRef, status: PolicyStatus) -> PolicyStatus:
        known = self._wanted.get(ref)
        if known is None or status.revision >= known.revision:
            self._wanted[ref] = known = status
        return known

    def _forget(self, ref: ObjectRef) -> None:
        self._live.pop(ref, None)
        self._subjects.pop(status_subject(ref), None)
        self._wanted.pop(ref, None)
        self._ask.discard(ref)

    # The work queue: one object at a time per object, ``workers`` at once.

    def _mark(self, ref: ObjectRef) -> None:
        if ref in self._busy:
            self._again.add(ref)
        elif ref not in self._queued:
            self._queued.add(ref)
            self._queue.put_nowait(ref)

    async def _work(self) -> None:
        while True:
            ref = await self._queue.get()
            self._queued.discard(ref)
            self._busy.add(ref)
            try:
                await self._reconcile(ref)
            except Exception as exc:  # one object's failure is its own
                metrics.STATUS_WRITES.labels(kind=ref.kind, outcome="failed").inc()
                log.error("status_write_failed", object=str(ref),
                          error=f"{type(exc).__name__}: {str(exc)[:300]}")
            finally:
                self._busy.discard(ref)
                if ref in self._again:
                    self._again.discard(ref)
                    self._mark(ref)

    async def _resync_every(self) -> None:
        while True:
            await asyncio.sleep(self._resync)
            for ref in list(self._live):
                self._ask.add(ref)
                self._mark(ref)

    async def _reconcile(self, ref: ObjectRef) -> None:
        known = self._ledger.known.get(ref)
        if known is None or ref not in self._live:
            return
        wanted = self._wanted.get(ref)
        if ref in self._ask or wanted is None or wanted.revision < known.seq:
            self._ask.discard(ref)
            answered = await self._ask_status(ref, str(known.obj.get("kind") or ref.kind),
                                              known.seq)
            if answered is None:
                return
            wanted = self._remember(ref, answered)
        live = self._live.get(ref)
        if live is None or wanted.revision < known.seq or wanted.state == "Deleted":
            return
        generation = (known.obj.get("metadata") or {}).get("generation")
        want = status_patch.desired(wanted, generation if isinstance(generation, int) else None,
                                    live, _now())
        patch = status_patch.patch(want, live)
        if patch is None:
            return
        written = await self._patch(ref, patch)
        if written is None:
            # Gone: nothing more is written for it until the API shows it again.
            self._forget(ref)
        elif ref in self._live:
            self._live[ref] = written

    async def _ask_status(self, ref: ObjectRef, kind: str, revision: int
                          ) -> PolicyStatus | None:
        request = _encode(PolicyStatusRequest(kind=kind, namespace=ref.namespace,
                                              name=ref.name, min_revision=revision,
                                              timeout_ms=ASK_TIMEOUT_MS))

        async def ask() -> PolicyStatus | None:
            msg = await self._nc.request(SUBJECT_POLICY_STATUS, request,
                                         timeout=ASK_TIMEOUT_MS / 1000 + 5)
            health.stop_if_asked()
            return _reply(msg.data, ref)

        return await retries.forever("policy-status", ask, on=_retry_ask,
                                     backoff=retries.FAILURE, object=str(ref))

    async def _patch(self, ref: ObjectRef, status: dict[str, Any]) -> dict[str, Any] | None:
        """Send the merge patch; the status the API answered, None if the object is gone."""
        spec = REGISTRY[ref.kind]
        path = (f"/apis/{spec.api_version}/namespaces/{ref.namespace}/{spec.plural}/"
                f"{ref.name}/status")
        call = functools.partial(kube.call_json, self._api, "PATCH", path,
                                 body={"status": status}, content_type=MERGE_PATCH)
        try:
            obj = await retries.forever("status patch", call, on=_retry_patch,
                                        backoff=retries.FAILURE, object=str(ref))
        except ApiException as exc:
            if exc.status != 404:
                raise
            # Deleted since the API showed it (its watch event will say so): not an error.
            metrics.STATUS_WRITES.labels(kind=ref.kind, outcome="gone").inc()
            log.info("status_target_gone", object=str(ref))
            return None
        metrics.STATUS_WRITES.labels(kind=ref.kind, outcome="written").inc()
        log.info("status_written", object=str(ref), state=status.get("state"),
                 observed_generation=status.get("observedGeneration"))
        return _status_of(obj)



def _reply(data: bytes, ref: ObjectRef) -> PolicyStatus | None:
    body = _decode(data)
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code = error.get("code")
        if code in ("stale", "unavailable"):
            raise _Retry(f"{code}: {error.get('message')}")
        if code != "not_found":  # not_found: withdrawn before it was recorded; no status
            log.warning("policy_status_refused", object=str(ref), code=code,
                        error=str(error.get("message"))[:300])
        return None
    return msgspec.convert(body, PolicyStatus)


def _retry_ask(exc: BaseException) -> bool:
    return isinstance(exc, (_Retry, nats.errors.TimeoutError, nats.errors.NoRespondersError,
                            nats.errors.ConnectionClosedError, TimeoutError))


def _retry_patch(exc: BaseException) -> bool:
    if isinstance(exc, ApiException):
        return exc.status in (409, 429) or exc.status >= 500
    return isinstance(exc, (aiohttp.ClientError, TimeoutError, OSError))


def _ref(obj: Mapping[str, Any]) -> ObjectRef | None:
    try:
        return ref_of(dict(obj))
    except InvalidObject:
        return None


def _status_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    status = obj.get("status")
    return dict(status) if isinstance(status, dict) else {}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
