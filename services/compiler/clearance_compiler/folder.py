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

from clearance_core import status
from clearance_core.errors import InvalidObject
from clearance_core.fold import fold_cluster, fold_group, fold_policy, policy_change
from clearance_core.kinds import ObjectRef, ref_of
from clearance_core.metricsource import CompiledSource, compile_source, winner
from clearance_core.policy import CompiledPolicy, invalid_policy
from clearance_core.rbac import Binding, Role, RoleKey, parse_binding, parse_role
from clearance_core.rbac_changes import RbacModel
from clearance_core.wire import Event, PolicyStatus
from clearance_runtime import logs, metrics
from clearance_runtime.outages import is_transient
from clearance_runtime.state import StateStore

log = logs.get(__name__)
_decode_event = msgspec.json.Decoder(Event).decode
_encode = msgspec.json.Encoder().encode


ROLE_KINDS = {"role": "Role", "clusterrole": "ClusterRole"}
RBAC_KINDS = frozenset({*ROLE_KINDS, "rolebinding", "clusterrolebinding"})


def _apply_rbac(model: RbacModel, obj: dict[str, Any], *, present: bool) -> None:
    """Keep the compiler's model in step with what was stored (invalid = absent)."""
    ref = ref_of(obj)
    try:
        if ref.kind in ROLE_KINDS:
            role = parse_role(obj)
            model.put_role(role.key, role if present else None)
        else:
            binding = parse_binding(obj)
            model.put_binding((ref.kind, f"{ref.namespace}/{ref.name}"),
                              binding if present else None)
    except InvalidObject:
        if ref.kind in ROLE_KINDS:
            model.put_role(RoleKey(ROLE_KINDS[ref.kind], ref.namespace, ref.name), None)
        else:
            model.put_binding((ref.kind, f"{ref.namespace}/{ref.name}"), None)


class Folder:
    def __init__(self, store: StateStore, nc: Client) -> None:
        self._store = store
        self._nc = nc
        self._rbac: RbacModel | None = None

    async def fold(self, seq: int, data: bytes) -> None:
        """Fold one message. Only transient store/bus failures escape (to be retried);
        whatever else goes wrong is the object's own failure (CONTRACT section 1)."""
        try:
            event = _decode_event(data)
            ref = ref_of(event.object)
        except (msgspec.DecodeError, msgspec.ValidationError, InvalidObject, RecursionError,
                UnicodeError) as exc:
            metrics.MALFORMED.labels(where="compiler").inc()
            metrics.EVENTS_COMPILED.labels(kind="unknown", outcome="malformed").inc()
            log.warning("event_malformed", seq=seq, error=str(exc)[:500])
            await self._store.advance(seq)
            return
        try:
            outcome = await self._fold(seq, event.type, event.object, ref)
        except Exception as exc:
            if is_transient(exc):
                raise
            outcome = await self._object_failed(seq, event.object, ref, exc)
        metrics.EVENTS_COMPILED.labels(kind=ref.kind, outcome=outcome).inc()

    async def _object_failed(
        self, seq: int, obj: dict[str, Any], ref: ObjectRef, exc: Exception
    ) -> str:
        """Make the object invalid: its previous version is withdrawn, its status says
        why, and the checkpoint moves past it so a restart never replays into it."""
        reason = f"could not be compiled or stored: {type(exc).__name__}: {str(exc)[:300]}"
        metrics.OBJECT_FAILURES.labels(kind=ref.kind).inc()
        log.error("object_failed", object=str(ref), seq=seq, error=reason,
                  exc_info=(type(exc), exc, exc.__traceback__))
        self.reset()  # in-memory models may hold half of this event: rebuild from Redis
        try:
            if ref.kind == "monitoraccesspolicy":
                await self._withdraw_policy(seq, obj, ref, reason)
            else:
                await self._fold(seq, "DELETED", obj, ref)
            return "failed"
        except Exception as second:
            if is_transient(second):
                raise
            # Not even the withdrawal can be stored: move on rather than stop everything.
            log.error("object_withdrawal_failed", object=str(ref), seq=seq,
                      error=f"{type(second).__name__}: {str(second)[:300]}")
            self.reset()
            await self._store.advance(seq)
            return "failed"

    async def _withdraw_policy(
        self, seq: int, obj: dict[str, Any], ref: ObjectRef, reason: str
    ) -> None:
        key = f"{ref.namespace}/{ref.name}"
        previous = await self._store.policy(key)
        record = invalid_policy(obj, reason)
        try:
            async with self._store.transaction(seq) as tx:
                tx.put_policy(key, previous, record, None if record is None else obj)
                tx.affected = policy_change(previous, record)
        except Exception as exc:
            if is_transient(exc):
                raise
            record = None  # even the invalid record cannot be stored: remove it
            async with self._store.transaction(seq) as tx:
                tx.put_policy(key, previous, None, None)
                tx.affected = policy_change(previous, None)
        if record is None:
            await self._publish_status(ref, status.failed(seq, reason))
        else:
            await self._report(ref, record, {}, seq)

    async def _fold(self, seq: int, event_type: str, obj: dict[str, Any], ref: ObjectRef) -> str:
        if ref.kind == "monitoraccesspolicy":
            return await self._fold_policy(seq, event_type, obj, ref)
        if ref.kind == "metricsource":
            return await self._fold_source(seq, event_type, obj, ref)
        if ref.kind in RBAC_KINDS:
            return await self._fold_rbac(seq, event_type, obj, ref)
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
        if ref.kind == "namespace":
            # Hub namespaces: what a search plan enumerates. Only a namespace appearing or
            # vanishing matters, and only to the subjects bound inside it.
            present = event_type != "DELETED"
            existed = await self._store.has_namespace(ref.name)
            model = await self._rbac_model()
            async with self._store.transaction(seq) as tx:
                tx.put_namespace(ref.name, present=present)
                if existed != present:
                    tx.affected = model.affected_by_namespace(ref.name)
            return "compiled"
        # Kinds compiled by later versions (AccessPolicy, ManagedClusterSet, CRDs) still
        # advance the revision.
        await self._store.advance(seq)
        return "ignored"

    def reset(self) -> None:
        """Forget in-memory models (the compiled state is being rebuilt)."""
        self._rbac = None

    async def _rbac_model(self) -> RbacModel:
        if self._rbac is None:
            model = RbacModel()
            for obj in await self._store.rbac_objects():
                _apply_rbac(model, obj, present=True)
            self._rbac = model
        return self._rbac

    async def _fold_rbac(
        self, seq: int, event_type: str, obj: dict[str, Any], ref: ObjectRef
    ) -> str:
        """Roles and bindings are stored as served (readers index them); the change record
        names the subjects whose answers it can alter."""
        model = await self._rbac_model()
        present = event_type != "DELETED"
        outcome = "compiled" if present else "deleted"
        try:
            parsed = parse_role(obj) if ref.kind in ROLE_KINDS else parse_binding(obj)
        except InvalidObject as exc:
            # Withdrawn whole: an invalid binding must not keep granting its old rules.
            log.warning("rbac_invalid", object=str(ref), error=exc.message)
            present, outcome = False, "invalid"
            parsed = None
        if ref.kind in ROLE_KINDS:
            role_key = RoleKey(ROLE_KINDS[ref.kind], ref.namespace, ref.name)
            affected = model.affected_by_role(
                role_key, parsed if present and isinstance(parsed, Role) else None)
        else:
            binding_key = (ref.kind, f"{ref.namespace}/{ref.name}")
            affected = model.affected_by_binding(
                binding_key, parsed if present and isinstance(parsed, Binding) else None)
        async with self._store.transaction(seq) as tx:
            tx.put_rbac(seq, str(ref), obj if present else None)
            tx.affected = affected
        _apply_rbac(model, obj, present=present)
        return outcome

    async def _fold_policy(
        self, seq: int, event_type: str, obj: dict[str, Any], ref: ObjectRef
    ) -> str:
        key = f"{ref.namespace}/{ref.name}"
        previous = await self._store.policy(key)
        sources = await self._store.sources()
        policy, affected = fold_policy(event_type, obj, previous, sources)
        async with self._store.transaction(seq) as tx:
            tx.put_policy(key, previous, policy, None if policy is None else obj)
            tx.affected = affected
        await self._report(ref, policy, sources, seq)
        if policy is None:
            return "deleted"
        return "compiled" if policy.valid else "invalid"

    async def _fold_source(
        self, seq: int, event_type: str, obj: dict[str, Any], ref: ObjectRef
    ) -> str:
        """A MetricSource change re-checks every policy naming its type(s) in the same
        transaction: a field filter can become valid or invalid with it."""
        key = f"{ref.namespace}/{ref.name}"
        declared = await self._store.declared_sources()
        previous = declared.pop(key, None)
        source: CompiledSource | None = None
        outcome = "deleted"
        if event_type != "DELETED":
            try:
                source = compile_source(obj)
                outcome = "compiled"
            except InvalidObject as exc:
                log.warning("metricsource_invalid", metricsource=key, error=exc.message)
                outcome = "invalid"
        if source is not None:
            declared[key] = source
        types = {s.type_name for s in (previous, source) if s is not None}
        sources = await self._store.sources()
        for type_name in types:
            # Several MetricSources may declare one type: the oldest is in force, and
            # deleting either leaves the other.
            in_force = winner(s for s in declared.values() if s.type_name == type_name)
            if in_force is None:
                sources.pop(type_name, None)
            else:
                sources[type_name] = in_force
        rechecked: list[tuple[ObjectRef, CompiledPolicy | None]] = []
        async with self._store.transaction(seq) as tx:
            tx.put_source(key, source)
            for type_name in sorted(types):
                tx.put_type_source(type_name, sources.get(type_name))
            for type_name in sorted(types):
                for pkey in await self._store.policies_naming(type_name):
                    raw = await self._store.policy_object(pkey)
                    before = await self._store.policy(pkey)
                    if raw is None:
                        continue
                    after, affected = fold_policy("MODIFIED", raw, before, sources)
                    if after != before:
                        tx.put_policy(pkey, before, after, raw)
                        tx.affected.users |= affected.users
                        tx.affected.groups |= affected.groups
                        rechecked.append((ref_of(raw), after))
        for policy_ref, policy in rechecked:
            await self._report(policy_ref, policy, sources, seq)
        return outcome

    async def _report(
        self,
        ref: ObjectRef,
        policy: CompiledPolicy | None,
        sources: dict[str, CompiledSource],
        seq: int,
    ) -> None:
        if policy is None:
            await self._publish_status(ref, status.deleted(seq))
            return
        await self._publish_status(ref, status.policy_status(policy, sources, now=time.time(),
                                                             revision=seq))
        if not policy.valid:
            log.warning("policy_invalid", policy=policy.key, seq=seq, error=policy.error)

    async def _publish_status(self, ref: ObjectRef, body: PolicyStatus) -> None:
        subject = f"clearance.status.{ref.kind}.{ref.namespace or '_'}.{ref.name}"
        try:
            await self._nc.publish(subject, _encode(body))
        except Exception as exc:
            log.warning("status_publish_failed", subject=subject, error=str(exc))
