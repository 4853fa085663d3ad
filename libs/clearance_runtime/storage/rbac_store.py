"""How compiled RBAC is stored, and the decision service's RBAC index kept from it.

In each RBAC event's commit the compiler (``changes.Transaction.put_rbac``) writes the
object's compiled form — the msgpack of its :mod:`clearance_core.rbac.rules` Struct — under
its object key in ``clr:rbac2`` (or deletes it: deleted or invalid); the event's change
record carries the same value to the decision services' mirrors (:mod:`.mirror`).

:class:`RbacMirror` is the mirror's RBAC part: the stored objects, and an
:class:`RbacIndex` over them built at the first review that needs it, then updated
object by object as records are applied — one binding changing costs a few dictionary
updates, not a rebuild of every object.
"""

from __future__ import annotations

import msgspec

from clearance_core.rbac.bindings import BindingId
from clearance_core.rbac.index import RbacIndex
from clearance_core.rbac.rules import Binding, Role, RoleKey, is_role_key
from clearance_runtime.process import logs, metrics

log = logs.get(__name__)
_encoder = msgspec.msgpack.Encoder()
_role = msgspec.msgpack.Decoder(Role).decode
_binding = msgspec.msgpack.Decoder(Binding).decode


def encode(value: Role | Binding) -> bytes:
    return _encoder.encode(value)


def decode(key: str, blob: bytes) -> Role | Binding:
    """The stored object under ``key`` (its kind is the key's first segment)."""
    return _role(blob) if is_role_key(key) else _binding(blob)


class RbacMirror:
    """The compiled RBAC objects of one state, and its index once asked for."""

    def __init__(self) -> None:
        self._objects: dict[str, Role | Binding] = {}
        #: None until a review asks: a process answering checks only never builds it.
        self._index: RbacIndex | None = None
        self._ids: dict[str, BindingId] = {}  # object key -> identity, of what is indexed

    def put(self, key: str, blob: bytes | None) -> None:
        """One stored object's new value (``None``: withdrawn)."""
        value = None if blob is None else _decoded(key, blob)
        if value is None:
            self._objects.pop(key, None)
        else:
            self._objects[key] = value
        if self._index is not None:
            self._reindex(self._index, key, value)

    def index(self) -> RbacIndex:
        """The index of the objects held (built now if never asked for)."""
        if self._index is None:
            roles = [v for v in self._objects.values() if isinstance(v, Role)]
            bindings = [v for v in self._objects.values() if isinstance(v, Binding)]
            self._index = RbacIndex(roles, bindings)
            self._ids = {key: (v.kind, v.namespace, v.name) for key, v in self._objects.items()}
            metrics.RBAC_INDEX_UPDATES.labels(how="rebuild").inc()
        return self._index

    def _reindex(self, index: RbacIndex, key: str, value: Role | Binding | None) -> None:
        new = None if value is None else (value.kind, value.namespace, value.name)
        old = self._ids.pop(key, None)
        if old is not None and old != new:  # a put of the same identity replaces it
            if is_role_key(key):
                index.remove_role(RoleKey(*old))
            else:
                index.remove_binding(old)
        if isinstance(value, Role):
            index.put_role(value)
        elif isinstance(value, Binding):
            index.put_binding(value)
        if new is not None:
            self._ids[key] = new
        metrics.RBAC_INDEX_UPDATES.labels(how="delta").inc()


def _decoded(key: str, blob: bytes) -> Role | Binding | None:
    try:
        return decode(key, blob)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        # Not written by this version's compiler: answer without it (fewer grants)
        # rather than fail every review.
        log.warning("rbac_object_unreadable", key=key, error=str(exc))
        return None
