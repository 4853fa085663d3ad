"""The compiled state in Redis: the compiler's writes (one MULTI per event).

Each commit writes the object's compiled value, its index entries, the checkpoint
``clr:rev`` and a change record on ``clr:changes`` atomically. A crash can therefore
never leave a half-applied policy, an index without its policy, or a change the
invalidator will not hear about; replaying an event at or below the checkpoint is a
no-op (the compiler skips it), so folding is idempotent.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import redis.asyncio as aioredis

from clearance_core.fold import Affected
from clearance_core.metricsource import CompiledSource
from clearance_core.policy import CompiledPolicy
from clearance_runtime import keys

_policy_encoder = msgspec.msgpack.Encoder()
_policy_decoder = msgspec.msgpack.Decoder(CompiledPolicy)
_source_decoder = msgspec.msgpack.Decoder(CompiledSource)
_json = msgspec.json.Encoder()


class ChangeRecord(msgspec.Struct, kw_only=True):
    """What one event changed, for the invalidator (stored as stream fields)."""

    revision: int
    users: list[str] = []
    groups: list[str] = []
    clusters: list[str] = []
    all: bool = False


def encode_policy(policy: CompiledPolicy) -> bytes:
    return _policy_encoder.encode(policy)


def decode_policy(blob: bytes) -> CompiledPolicy:
    return _policy_decoder.decode(blob)


def decode_source(blob: bytes) -> CompiledSource:
    return _source_decoder.decode(blob)


#: Deletes every derived key — compiled state, change records, the system revision, the
#: decision cache — and marks the store as being built from the stream's first event up
#: to ARGV[1] (decisions wait for the system revision to get there), in one atomic step.
#: Heartbeats and cache statistics are operational, not derived: kept.
_WIPE = f"""
local cursor, n = '0', 0
repeat
  local page = redis.call('SCAN', cursor, 'MATCH', 'clr:*', 'COUNT', 1000)
  cursor = page[1]
  for _, k in ipairs(page[2]) do
    if string.sub(k, 1, 8) ~= 'clr:svc:' and k ~= '{keys.STATS}' then
      n = n + redis.call('UNLINK', k)
    end
  end
until cursor == '0'
redis.call('SET', '{keys.BUILT}', ARGV[1])
return n
"""


class StateStore:
    def __init__(self, redis: aioredis.Redis) -> None:
        self._r = redis
        self._wipe = redis.register_script(_WIPE)

    async def checkpoint(self) -> int | None:
        """The last folded sequence, or None when Redis holds no compiled state at all."""
        raw = await self._r.get(keys.REV)
        return int(raw) if raw is not None else None

    async def position(self) -> tuple[int | None, bool]:
        """(checkpoint, built): ``built`` is False when the store was flushed or replaced
        since the compiled state was built — whatever checkpoint it holds then was
        written onto an empty store and the state under it is partial."""
        async with self._r.pipeline(transaction=False) as pipe:
            pipe.get(keys.REV)
            pipe.exists(keys.BUILT)
            raw, built = await pipe.execute()
        return (int(raw) if raw is not None else None), bool(built)

    async def wipe(self, target: int) -> int:
        """Delete all derived state and start a build from the first event; decisions are
        unavailable until the system revision reaches ``target`` (atomic)."""
        return int(await self._wipe(args=[target]))

    async def policy(self, key: str) -> CompiledPolicy | None:
        blob = await self._r.hget(keys.POLICIES, key)
        return decode_policy(blob) if isinstance(blob, bytes) else None

    async def policy_object(self, key: str) -> dict[str, Any] | None:
        raw = await self._r.hget(keys.POLICY_OBJECTS, key)
        return msgspec.json.decode(raw, type=dict[str, Any]) if raw else None

    async def policies_naming(self, type_name: str) -> list[str]:
        members = await self._r.smembers(keys.policy_by_type(type_name))
        return sorted(m.decode() if isinstance(m, bytes) else str(m) for m in members)

    async def sources(self) -> dict[str, CompiledSource]:
        rows: dict[bytes, bytes] = await self._r.hgetall(keys.SOURCES)  # type: ignore[assignment]
        return {k.decode(): decode_source(v) for k, v in rows.items()}

    async def declared_sources(self) -> dict[str, CompiledSource]:
        """Every valid MetricSource by ``ns/name`` (several may declare one type)."""
        rows: dict[bytes, bytes] = await self._r.hgetall(  # type: ignore[assignment]
            keys.SOURCE_OBJECTS)
        return {k.decode(): decode_source(v) for k, v in rows.items()}

    async def rbac_objects(self) -> list[dict[str, Any]]:
        rows: dict[bytes, bytes] = await self._r.hgetall(keys.RBAC)  # type: ignore[assignment]
        return [msgspec.json.decode(v, type=dict[str, Any]) for v in rows.values()]

    async def rbac_object(self, key: str) -> dict[str, Any] | None:
        raw = await self._r.hget(keys.RBAC, key)
        return msgspec.json.decode(raw, type=dict[str, Any]) if raw else None

    async def has_namespace(self, name: str) -> bool:
        return bool(await self._r.sismember(keys.NAMESPACES, name))

    async def cluster(self, name: str) -> dict[str, str] | None:
        raw = await self._r.hget(keys.CLUSTERS, name)
        return msgspec.json.decode(raw, type=dict[str, str]) if raw else None

    async def group(self, name: str) -> list[str] | None:
        raw = await self._r.hget(keys.GROUPS, name)
        return msgspec.json.decode(raw, type=list[str]) if raw else None

    async def advance(self, seq: int) -> None:
        """An event that changes no state (malformed, or a kind not compiled) still moves
        the checkpoint and leaves an empty change record: the revision keeps moving."""
        async with self.transaction(seq):
            return

    @contextlib.asynccontextmanager
    async def transaction(self, seq: int) -> AsyncIterator[Transaction]:
        """Everything one event changes, committed in one MULTI with the checkpoint and
        the change record (nothing is written if the block raises)."""
        async with self._r.pipeline(transaction=True) as pipe:
            tx = Transaction(pipe)
            yield tx
            pipe.set(keys.REV, seq)
            record = ChangeRecord(
                revision=seq,
                users=sorted(tx.affected.users),
                groups=sorted(tx.affected.groups),
                clusters=sorted(tx.affected.clusters),
                all=tx.affected.all,
            )
            pipe.xadd(keys.CHANGES, {"r": _json.encode(record)}, id=f"{seq}-0")
            await pipe.execute()


class Transaction:
    """Queues the writes of one event; ``affected`` accumulates whose answers change."""

    def __init__(self, pipe: Any) -> None:
        self._pipe = pipe
        self.affected = Affected()

    def put_policy(
        self,
        key: str,
        previous: CompiledPolicy | None,
        new: CompiledPolicy | None,
        obj: dict[str, Any] | None,
    ) -> None:
        old_idx, new_idx = _index_keys(previous), _index_keys(new)
        for index_key in old_idx - new_idx:
            self._pipe.srem(index_key, key)
        for index_key in new_idx - old_idx:
            self._pipe.sadd(index_key, key)
        if new is None:
            self._pipe.hdel(keys.POLICIES, key)
        else:
            self._pipe.hset(keys.POLICIES, key, encode_policy(new))
        if obj is None:
            self._pipe.hdel(keys.POLICY_OBJECTS, key)
        else:
            self._pipe.hset(keys.POLICY_OBJECTS, key, _json.encode(obj))

    def put_source(self, key: str, new: CompiledSource | None) -> None:
        """One MetricSource as declared (``None``: deleted or invalid)."""
        if new is None:
            self._pipe.hdel(keys.SOURCE_OBJECTS, key)
        else:
            self._pipe.hset(keys.SOURCE_OBJECTS, key, _policy_encoder.encode(new))

    def put_type_source(self, type_name: str, winner: CompiledSource | None) -> None:
        """The MetricSource in force for a type (``None``: no MetricSource declares it)."""
        if winner is None:
            self._pipe.hdel(keys.SOURCES, type_name)
        else:
            self._pipe.hset(keys.SOURCES, type_name, _policy_encoder.encode(winner))

    def put_cluster(self, name: str, labels: dict[str, str] | None) -> None:
        if labels is None:
            self._pipe.hdel(keys.CLUSTERS, name)
        else:
            self._pipe.hset(keys.CLUSTERS, name, _json.encode(labels))

    def put_rbac(self, seq: int, key: str, obj: dict[str, Any] | None) -> None:
        """Roles, ClusterRoles and bindings are kept as served; readers build their index
        from them when ``clr:rbac:rev`` moves."""
        if obj is None:
            self._pipe.hdel(keys.RBAC, key)
        else:
            self._pipe.hset(keys.RBAC, key, _json.encode(obj))
        self._pipe.set(keys.RBAC_REV, seq)

    def put_namespace(self, name: str, *, present: bool) -> None:
        if present:
            self._pipe.sadd(keys.NAMESPACES, name)
        else:
            self._pipe.srem(keys.NAMESPACES, name)

    def put_group(self, name: str, previous: list[str] | None, users: list[str] | None) -> None:
        old, new = set(previous or ()), set(users or ())
        for user in old - new:
            self._pipe.srem(keys.member_of(user), name)
        for user in new - old:
            self._pipe.sadd(keys.member_of(user), name)
        if users is None:
            self._pipe.hdel(keys.GROUPS, name)
        else:
            self._pipe.hset(keys.GROUPS, name, _json.encode(users))


def _index_keys(policy: CompiledPolicy | None) -> set[str]:
    if policy is None:
        return set()
    return (
        {keys.policy_by_user(u) for u in policy.users}
        | {keys.policy_by_sa(sa) for sa in policy.service_accounts}
        | {keys.policy_by_group(g) for g in policy.groups}
        | {keys.policy_by_type(t) for t in policy.custom_types}
    )
