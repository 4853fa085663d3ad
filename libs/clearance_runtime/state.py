"""The compiled state in Redis: the compiler's writes (one atomic script per event).

Each commit writes the object's compiled value, its index entries, the checkpoint
``clr:rev`` and a change record on ``clr:changes`` atomically. A crash can therefore
never leave a half-applied policy, an index without its policy, or a change the
invalidator will not hear about; replaying an event at or below the checkpoint is a
no-op (the compiler skips it), so folding is idempotent.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import redis.asyncio as aioredis
import redis.exceptions

from clearance_core.fold import Affected
from clearance_core.inherit_index import InheritanceIndex
from clearance_core.metricsource import CompiledSource
from clearance_core.model import Model
from clearance_core.narrowing import Narrow
from clearance_core.policy import CompiledPolicy
from clearance_core.rbac import Binding, Role
from clearance_core.rbac_changes import RbacModel
from clearance_runtime import keys, rbac_store
from clearance_runtime.inherit_store import InheritWrites, stored

_policy_encoder = msgspec.msgpack.Encoder()
_policy_decoder = msgspec.msgpack.Decoder(CompiledPolicy)
_source_decoder = msgspec.msgpack.Decoder(CompiledSource)
_json = msgspec.json.Encoder()


class Scope(msgspec.Struct, kw_only=True):
    users: list[str] = []
    groups: list[str] = []
    clusters: list[str] = []
    all: bool = False
    #: Not empty: only the users' and groups' entries about these clusters.
    within: list[str] = []
    #: Not None: only the users' and groups' entries this narrowing drops (a policy or
    #: Group membership change: ``clearance_core.narrowing``).
    narrow: Narrow | None = None

    @classmethod
    def of(cls, affected: Affected) -> Scope:
        return cls(users=sorted(affected.users), groups=sorted(affected.groups),
                   clusters=sorted(affected.clusters), all=affected.all,
                   within=sorted(affected.within), narrow=affected.narrow)

    def __bool__(self) -> bool:
        return bool(self.users or self.groups or self.clusters or self.all)


class ChangeRecord(msgspec.Struct, kw_only=True):
    """What one event changed, for the invalidator (stored as stream fields): whose
    cached decisions to delete, and whom to announce on ``clearance.decisions.changed``
    (a RoleBinding change is announced — reviews change — but deletes no cached check)."""

    revision: int
    invalidate: Scope = msgspec.field(default_factory=Scope)
    announce: Scope = msgspec.field(default_factory=Scope)
    #: The event's kind ("" for a malformed one) and when it was published on the stream
    #: (ms since the epoch), for the invalidator's metrics by kind and event-to-effect time.
    kind: str = ""
    published_ms: int | None = None


def encode_policy(policy: CompiledPolicy) -> bytes:
    return _policy_encoder.encode(policy)


def decode_policy(blob: bytes) -> CompiledPolicy:
    return _policy_decoder.decode(blob)


def decode_source(blob: bytes) -> CompiledSource:
    return _source_decoder.decode(blob)


_decode_object = msgspec.json.Decoder(dict[str, Any]).decode
_decode_labels = msgspec.json.Decoder(dict[str, str]).decode
_decode_users = msgspec.json.Decoder(list[str]).decode


class LostSync(Exception):
    """Redis no longer holds the state this writer built (flushed, restored, or written
    by another compiler): restart from the checkpoint."""


_LOST_SYNC = "CLEARANCE_LOST_SYNC"

#: ARGV[1]: the expected checkpoint ("" = unfenced); then per command its length and
#: words. Checked and applied in one script, so no other writer can interleave.
_COMMIT = f"""
if ARGV[1] ~= '' then
  local current = redis.call('GET', '{keys.REV}') or '0'
  if current ~= ARGV[1] then
    return redis.error_reply('{_LOST_SYNC} at ' .. current .. ', expected ' .. ARGV[1])
  end
end
local i = 2
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  redis.call(unpack(ARGV, i + 1, i + n))
  i = i + n + 1
end
return 1
"""


#: The hashes a decision replica mirrors (:mod:`.mirror`): everything a check's snapshot
#: reads. Policy indexes and Group memberships are derived from them by the mirror.
MIRRORED = frozenset({keys.POLICIES, keys.GROUPS, keys.CLUSTERS, keys.EFFECTIVE,
                      keys.SOURCES, keys.ACCESS_POLICIES})
_EFFECTIVE_IN = keys.prefix(keys.effective_in)


def mirrored_writes(commands: list[tuple[Any, ...]]) -> list[tuple[str, str]]:
    """(hash, field) of every mirrored field the commands write, once each, in order: the
    change record's ``w`` field, which a mirror re-reads to follow the change exactly."""
    seen: dict[tuple[str, str], None] = {}
    for command in commands:
        if command[0] in ("HSET", "HDEL"):
            key = command[1]
            if key in MIRRORED or key.startswith(_EFFECTIVE_IN):
                seen[key, command[2]] = None
    return list(seen)


class _Recorder:
    """The write commands of one event, in order (the subset Transaction uses)."""

    def __init__(self) -> None:
        self.commands: list[tuple[Any, ...]] = []

    def set(self, key: str, value: Any) -> None:
        self.commands.append(("SET", key, value))

    def hset(self, key: str, field: str, value: Any) -> None:
        self.commands.append(("HSET", key, field, value))

    def hdel(self, key: str, field: str) -> None:
        self.commands.append(("HDEL", key, field))

    def sadd(self, key: str, member: str) -> None:
        self.commands.append(("SADD", key, member))

    def srem(self, key: str, member: str) -> None:
        self.commands.append(("SREM", key, member))


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
redis.call('SET', '{keys.ALLOW_UNSET}', ARGV[2])
return n
"""


class StateStore:
    def __init__(self, redis: aioredis.Redis, *, allow_unset: bool = True) -> None:
        self._r = redis
        #: CLEARANCE_ALLOW_UNSET: effective policies depend on it, so a state built with
        #: the other value is not this compiler's (``position`` reports it as not built).
        self._allow_unset = allow_unset
        self._expected: int | None = None
        self._commit = redis.register_script(_COMMIT)
        self._wipe = redis.register_script(_WIPE)

    async def position(self) -> tuple[int | None, bool]:
        """(checkpoint, built): ``built`` is False when the store was flushed or replaced
        since the compiled state was built — whatever checkpoint it holds then was
        written onto an empty store and the state under it is partial — or was built by a
        compiler that stored RBAC as JSON (``clr:rbac``), which this one cannot load."""
        async with self._r.pipeline(transaction=False) as pipe:
            pipe.get(keys.REV)
            pipe.exists(keys.BUILT)
            pipe.get(keys.ALLOW_UNSET)
            pipe.exists(keys.RBAC_JSON)
            raw, built, unset, legacy = await pipe.execute()
        same = unset is None or unset == self._unset_flag
        return (int(raw) if raw is not None else None), bool(built) and same and not legacy

    @property
    def _unset_flag(self) -> bytes:
        return b"1" if self._allow_unset else b"0"

    async def wipe(self, target: int) -> int:
        """Delete all derived state and start a build from the first event; decisions are
        unavailable until the system revision reaches ``target`` (atomic)."""
        # The build's id makes two builds to the same target different states to every
        # reader that holds state (mirrors, the cache's write fence): the stream they
        # replay may have changed between them (only the latest message per object is
        # kept), so the same revision need not mean the same state.
        build = f"{target}:{secrets.token_hex(8)}"
        return int(await self._wipe(args=[build, self._unset_flag]))

    async def load_model(self) -> Model:
        """The compiled state, for the compiler to hold in memory (one round trip)."""
        async with self._r.pipeline(transaction=True) as pipe:
            for hash_key in (keys.POLICIES, keys.POLICY_OBJECTS, keys.SOURCE_OBJECTS,
                             keys.SOURCES, keys.CLUSTERS, keys.GROUPS, keys.RBAC,
                             keys.ACCESS_POLICIES, keys.ACCESS_INVALID, keys.ACCESS_STATUS):
                pipe.hgetall(hash_key)
            pipe.smembers(keys.NAMESPACES)
            pipe.smembers(keys.CLUSTER_SETS)
            (policies, objects, declared, winners, clusters, groups, rbac, access, invalid,
             conditions, namespaces, sets) = await pipe.execute()
        model = Model(
            sources={k.decode(): decode_source(v) for k, v in declared.items()},
            type_sources={k.decode(): decode_source(v) for k, v in winners.items()},
            clusters={k.decode(): _decode_labels(v) for k, v in clusters.items()},
            groups={k.decode(): _decode_users(v) for k, v in groups.items()},
            namespaces={m.decode() for m in namespaces},
            cluster_sets={m.decode() for m in sets},
            rbac=RbacModel.of({k.decode(): rbac_store.decode(k.decode(), v)
                               for k, v in rbac.items()}),
        )
        inherited = stored(access, invalid, conditions)
        # Effective policies are recomputed, not read: the same fold gives the same result.
        model.inherit = InheritanceIndex.build(
            inherited.policies.values(), model.clusters, model.cluster_sets,
            allow_unset=self._allow_unset)
        model.access_invalid = inherited.invalid
        model.access_status = inherited.conditions
        for key, blob in policies.items():
            raw = objects.get(key)
            model.set_policy(key.decode(), decode_policy(blob),
                             None if raw is None else _decode_object(raw))
        return model

    async def advance(self, seq: int, *, kind: str = "",
                      published_ms: int | None = None) -> None:
        """An event that changes no state (malformed, or a kind not compiled) still moves
        the checkpoint and leaves an empty change record: the revision keeps moving."""
        async with self.transaction(seq, kind=kind, published_ms=published_ms):
            return

    def expect(self, checkpoint: int | None) -> None:
        """Fence the next commit: it applies only while ``clr:rev`` still equals
        ``checkpoint`` (``None``: no fence). Each commit then moves the fence along."""
        self._expected = checkpoint

    @contextlib.asynccontextmanager
    async def transaction(self, seq: int, *, kind: str = "",
                          published_ms: int | None = None) -> AsyncIterator[Transaction]:
        """Everything one event changes, committed atomically (one Lua script) with the
        checkpoint and the change record; nothing is written if the block raises.

        Fenced on the checkpoint: when ``clr:rev`` is no longer where this writer left it
        — Redis was flushed or restored mid-burst, or another compiler wrote meanwhile —
        nothing is written and :class:`LostSync` is raised, so the writer restarts from
        the checkpoint instead of folding onto state it did not build."""
        recorder = _Recorder()
        tx = Transaction(recorder, seq)
        yield tx
        record = ChangeRecord(revision=seq, invalidate=Scope.of(tx.invalidate),
                              announce=Scope.of(tx.announce), kind=kind,
                              published_ms=published_ms)
        recorder.set(keys.REV, seq)
        recorder.commands.append(("XADD", keys.CHANGES, f"{seq}-0", "r", _json.encode(record),
                                  "w", _json.encode(mirrored_writes(recorder.commands))))
        fence = "" if self._expected is None else str(self._expected)
        argv: list[Any] = [fence]
        for command in recorder.commands:
            argv.append(len(command))
            argv.extend(command)
        try:
            await self._commit(args=argv)
        except redis.exceptions.ResponseError as exc:
            if str(exc).startswith(_LOST_SYNC):
                raise LostSync(f"checkpoint moved: {exc}") from None
            raise
        if self._expected is not None:
            self._expected = seq


class Transaction(InheritWrites):
    """Queues the writes of one event (implements ``clearance_core.model.Writes``)."""

    _pipe: _Recorder

    def __init__(self, pipe: _Recorder, seq: int) -> None:
        self._pipe = pipe
        self._seq = seq
        self.announce = Affected()
        self.invalidate = Affected()

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

    def put_rbac(self, seq: int, key: str, value: Role | Binding | None) -> None:
        """A Role, ClusterRole or binding, compiled (``None``: deleted or invalid), with
        the RBAC revision and an entry on the RBAC change log: readers apply the entries
        after the revision they hold (:mod:`.rbac_store`)."""
        blob = None if value is None else rbac_store.encode(value)
        if blob is None:
            self._pipe.hdel(keys.RBAC, key)
        else:
            self._pipe.hset(keys.RBAC, key, blob)
        self._pipe.set(keys.RBAC_REV, seq)
        self._pipe.commands.append(rbac_store.log_entry(seq, key, blob))

    def put_cluster_set(self, name: str, *, present: bool) -> None:
        if present:
            self._pipe.sadd(keys.CLUSTER_SETS, name)
        else:
            self._pipe.srem(keys.CLUSTER_SETS, name)

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
