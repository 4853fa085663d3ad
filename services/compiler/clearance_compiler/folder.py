"""Fold one stream message into Redis (one MULTI per event, via the state store).

The message's stream sequence is its revision. Malformed messages and kinds this
version does not compile still advance the revision (with an empty change record), so
``clearance.v1.status`` keeps moving and a bad message never blocks the pipeline.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
from nats.aio.client import Client

from clearance_core.errors import InvalidObject
from clearance_core.fold import fold_cluster, fold_group, fold_policy, policy_state
from clearance_core.kinds import ObjectRef, ref_of
from clearance_core.wire import Event
from clearance_runtime import logs, metrics
from clearance_runtime.state import StateStore

log = logs.get(__name__)
_decode_event = msgspec.json.Decoder(Event).decode
_encode = msgspec.json.Encoder().encode


class PolicyStatus(msgspec.Struct, kw_only=True):
    state: str
    message: str
    revision: int
    conditions: list[dict[str, str]] = []


class Folder:
    def __init__(self, store: StateStore, nc: Client) -> None:
        self._store = store
        self._nc = nc

    async def fold(self, seq: int, data: bytes) -> None:
        try:
            event = _decode_event(data)
            ref = ref_of(event.object)
        except (msgspec.DecodeError, msgspec.ValidationError, InvalidObject) as exc:
            metrics.MALFORMED.labels(where="compiler").inc()
            metrics.EVENTS_COMPILED.labels(kind="unknown", outcome="malformed").inc()
            log.warning("event_malformed", seq=seq, error=str(exc))
            async with self._store.transaction(seq):
                pass  # the revision advances; nothing else changes
            return
        outcome = await self._fold(seq, event.type, event.object, ref)
        metrics.EVENTS_COMPILED.labels(kind=ref.kind, outcome=outcome).inc()

    async def _fold(self, seq: int, event_type: str, obj: dict[str, Any], ref: ObjectRef) -> str:
        if ref.kind == "monitoraccesspolicy":
            key = f"{ref.namespace}/{ref.name}"
            previous = await self._store.policy(key)
            policy, affected = fold_policy(event_type, obj, previous)
            async with self._store.transaction(seq) as tx:
                tx.put_policy(key, previous, policy)
                tx.affected = affected
            if policy is None:
                await self._publish_status(ref, PolicyStatus(state="Deleted", message="deleted",
                                                             revision=seq))
                return "deleted"
            state, message = policy_state(policy, time.time())
            await self._publish_status(ref, PolicyStatus(state=state, message=message,
                                                         revision=seq))
            if not policy.valid:
                log.warning("policy_invalid", policy=key, seq=seq, error=policy.error)
                return "invalid"
            return "compiled"
        if ref.kind == "managedcluster":
            previous_labels = await self._store.cluster(ref.name)
            try:
                labels, affected = fold_cluster(event_type, ref.name, obj, previous_labels)
            except InvalidObject as exc:
                log.warning("cluster_invalid", cluster=ref.name, error=exc.message)
                labels, affected = fold_cluster("DELETED", ref.name, obj, previous_labels)
            async with self._store.transaction(seq) as tx:
                tx.put_cluster(ref.name, labels)
                tx.affected = affected
            return "compiled"
        if ref.kind == "group":
            previous_users = await self._store.group(ref.name)
            try:
                users, affected = fold_group(event_type, obj, previous_users)
            except InvalidObject as exc:
                log.warning("group_invalid", group=ref.name, error=exc.message)
                users, affected = fold_group("DELETED", obj, previous_users)
            async with self._store.transaction(seq) as tx:
                tx.put_group(ref.name, previous_users, users)
                tx.affected = affected
            return "compiled"
        # Kinds compiled by later versions (RBAC, AccessPolicy...) still advance the
        # revision.
        async with self._store.transaction(seq):
            pass
        return "ignored"

    async def _publish_status(self, ref: ObjectRef, status: PolicyStatus) -> None:
        subject = f"clearance.status.{ref.kind}.{ref.namespace or '_'}.{ref.name}"
        try:
            await self._nc.publish(subject, _encode(status))
        except Exception as exc:
            log.warning("status_publish_failed", subject=subject, error=str(exc))
