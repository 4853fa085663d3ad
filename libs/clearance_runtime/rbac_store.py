"""How compiled RBAC is stored, and the decision service's RBAC index kept current from it.

In each RBAC event's commit the compiler (``changes.Transaction.put_rbac``) writes the
object's compiled form — the msgpack of its :mod:`clearance_core.rbac.rules` Struct — under
its object key in ``clr:rbac2`` (or deletes it: deleted or invalid), the revision
``clr:rbac:rev``, and an entry ``<rev>-0`` naming the key and the new value on the stream
``clr:rbac:log``, capped at about :data:`LOG_LENGTH` entries.

:class:`RbacFollower` applies the log entries after the revision its index reflects: one
binding changing costs one entry and a few dictionary updates, not a re-read and rebuild
of every object. It rebuilds from the hash only when it cannot know what changed — on
first use, after building from a store that held no RBAC (revision 0: no entry to anchor
on), when the log no longer holds the entry of its revision (behind by more than
:data:`LOG_LENGTH` changes: trimming removes only the oldest entries, so while that entry
is there every later one is too), or when the store was wiped for a rebuild
(``clr:built`` changed).
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import redis.asyncio as aioredis

from clearance_core.rbac.bindings import BindingId
from clearance_core.rbac.index import RbacIndex
from clearance_core.rbac.rules import Binding, Role, RoleKey, is_role_key
from clearance_runtime import keys, logs, metrics

log = logs.get(__name__)
#: Log entries kept (approximately: Redis trims whole nodes). A decision service further
#: behind than this rebuilds its index instead; 4,096 entries are about 1 MB.
LOG_LENGTH = 4096
_encoder = msgspec.msgpack.Encoder()
_role = msgspec.msgpack.Decoder(Role).decode
_binding = msgspec.msgpack.Decoder(Binding).decode


def encode(value: Role | Binding) -> bytes:
    return _encoder.encode(value)


def decode(key: str, blob: bytes) -> Role | Binding:
    """The stored object under ``key`` (its kind is the key's first segment)."""
    return _role(blob) if is_role_key(key) else _binding(blob)


def log_entry(seq: int, key: str, blob: bytes | None) -> tuple[Any, ...]:
    """The XADD command appending one change to the log (and trimming it)."""
    fields: tuple[Any, ...] = ("k", key) if blob is None else ("k", key, "v", blob)
    return ("XADD", keys.RBAC_LOG, "MAXLEN", "~", LOG_LENGTH, f"{seq}-0", *fields)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _revision(entry_id: bytes | str) -> int:
    return int(_text(entry_id).partition("-")[0])


class RbacFollower:
    """The RBAC index of the current state, for one decision service process."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self._r = redis
        self._index = RbacIndex()
        self._ids: dict[str, BindingId] = {}  # object key -> identity, of what is indexed
        self._applied: int | None = None  # the RBAC revision the index reflects
        self._built: Any = None  # clr:built when the index was built
        self._lock = asyncio.Lock()

    async def index(self) -> RbacIndex:
        """An index reflecting at least the RBAC revision stored when called (so at least
        every revision a request waited for).

        The index is updated in place, synchronously, between two awaits: an answer read
        from it in one synchronous step sees one revision. A store wiped and rebuilt
        (``clr:built`` changed) may pass the same revision with other events — the stream
        keeps only the latest messages per object, or was lost and refilled — so the
        revision alone does not say the index is current."""
        revision, built = await self._r.mget([keys.RBAC_REV, keys.BUILT])
        seen = (int(revision or 0), built)
        if seen == (self._applied, self._built):
            return self._index
        async with self._lock:
            if seen != (self._applied, self._built):
                await self._catch_up()
        return self._index

    async def _catch_up(self) -> None:
        if self._applied:
            async with self._r.pipeline(transaction=True) as pipe:
                pipe.get(keys.BUILT)
                pipe.xrange(keys.RBAC_LOG, min=f"{self._applied}-0")
                built, entries = await pipe.execute()
            if built == self._built and entries and _revision(entries[0][0]) == self._applied:
                for _, fields in entries[1:]:
                    self._apply(fields)
                metrics.RBAC_INDEX_UPDATES.labels(how="delta").inc(len(entries) - 1)
                self._applied = _revision(entries[-1][0])
                return
        await self._rebuild()

    def _apply(self, fields: dict[bytes, bytes]) -> None:
        key = _text(fields[b"k"])
        blob = fields.get(b"v")
        value = None if blob is None else self._decode(key, blob)
        new = None if value is None else (value.kind, value.namespace, value.name)
        old = self._ids.pop(key, None)
        if old is not None and old != new:  # a put of the same identity replaces it
            if is_role_key(key):
                self._index.remove_role(RoleKey(*old))
            else:
                self._index.remove_binding(old)
        if isinstance(value, Role):
            self._index.put_role(value)
        elif isinstance(value, Binding):
            self._index.put_binding(value)
        if new is not None:
            self._ids[key] = new

    async def _rebuild(self) -> None:
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.get(keys.BUILT)
            pipe.get(keys.RBAC_REV)
            pipe.hgetall(keys.RBAC)
            built, revision, rows = await pipe.execute()
        roles: list[Role] = []
        bindings: list[Binding] = []
        ids: dict[str, BindingId] = {}
        for raw_key, blob in rows.items():
            key = _text(raw_key)
            value = self._decode(key, blob)
            if isinstance(value, Role):
                roles.append(value)
            elif isinstance(value, Binding):
                bindings.append(value)
            else:
                continue
            ids[key] = (value.kind, value.namespace, value.name)
        self._index, self._ids = RbacIndex(roles, bindings), ids
        self._applied, self._built = int(revision or 0), built
        metrics.RBAC_INDEX_UPDATES.labels(how="rebuild").inc()

    @staticmethod
    def _decode(key: str, blob: bytes) -> Role | Binding | None:
        try:
            return decode(key, blob)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            # Not written by this version's compiler: answer without it (fewer grants)
            # rather than fail every review.
            log.warning("rbac_object_unreadable", key=key, error=str(exc))
            return None
