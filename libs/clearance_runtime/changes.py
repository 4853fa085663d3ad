"""The writes of one event and its change record: what a fold asks the store to do.

A :class:`Transaction` records, in order, the Redis commands one event's fold implies
(``clearance_core.folding.model.Writes``) and whom the change concerns; :meth:`Transaction.seal`
appends the event's change record (``clr:changes``, id ``<revision>-0``), which the
cache-invalidator and the decision replicas' mirrors follow. Committing is
:mod:`.commits`' concern: the sealed commands of many events go to Redis in one fenced
script call.
"""

from __future__ import annotations

from typing import Any

import msgspec

from clearance_core.folding.fold import Affected
from clearance_core.folding.narrowing import Narrow
from clearance_core.monitor.metricsource import CompiledSource
from clearance_core.monitor.policy import CompiledPolicy
from clearance_core.rbac.rules import Binding, Role
from clearance_runtime import keys, rbac_store
from clearance_runtime.inherit_store import InheritWrites
from clearance_runtime.luapack import as_str

_msgpack = msgspec.msgpack.Encoder()
_json = msgspec.json.Encoder()


class Scope(msgspec.Struct, kw_only=True):
    users: list[str] = []
    groups: list[str] = []
    clusters: list[str] = []
    all: bool = False
    #: Not empty: only the users' and groups' entries about these clusters.
    within: list[str] = []
    #: Not None: only the users' and groups' entries this narrowing drops (a policy or
    #: Group membership change: ``clearance_core.folding.narrowing``).
    narrow: Narrow | None = None
    #: The cached answers that warn of an unknown cluster or type go.
    unknown: bool = False

    def __bool__(self) -> bool:
        return bool(self.users or self.groups or self.clusters or self.all or self.unknown)


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


class _RecordOut(msgspec.Struct, kw_only=True):
    """A :class:`ChangeRecord` as the compiler writes it: the fold's ``Affected`` sets
    as they are (fields named and ordered as :class:`Scope`'s), sorted by the encoder
    (``_record_json``). Building a Scope of sorted lists for each was a visible part of
    folding a backlog."""

    revision: int
    invalidate: Affected
    announce: Affected
    kind: str
    published_ms: int | None


_record_json = msgspec.json.Encoder(order="deterministic").encode


def _json_text(value: Any) -> str:
    """``value`` as JSON, as a command word: JSON is UTF-8 text, so it travels as a str,
    with no msgpack head to build for it (``word``)."""
    return _json.encode(value).decode()


#: The hashes a decision replica mirrors (:mod:`.mirror`): everything a check's snapshot
#: reads. Policy indexes and Group memberships are derived from them by the mirror.
MIRRORED = frozenset({keys.POLICIES, keys.GROUPS, keys.CLUSTERS, keys.EFFECTIVE,
                      keys.SOURCES, keys.ACCESS_POLICIES})
_EFFECTIVE_IN = keys.prefix(keys.effective_in)
_MEMBER_OF = keys.prefix(keys.member_of)


def is_mirrored(key: str) -> bool:
    """Whether a mirror follows the hash ``key``."""
    return key in MIRRORED or key.startswith(_EFFECTIVE_IN)


def word(value: Any) -> Any:
    """A command word as the commit script's ``cmsgpack`` reads it: Lua's cmsgpack knows
    no bin type, hence a blob as a msgpack *str* (any bytes fit in a Lua string), and a
    number as its decimal text (a Lua number prints large integers in exponent form)."""
    if type(value) is bytes:
        return as_str(value)
    if type(value) is int:
        return str(value)
    if type(value) is float:
        return repr(value)  # as redis-py sends one
    return value


class _Recorder:
    """The write commands of one event, in order (the subset Transaction uses), their
    words ready for the commit script (:func:`word`; keys, fields and members are
    text). Each command's key is kept apart, in ``keys`` (the script takes every key in
    its KEYS, and the commands without them): recorded so, no command is rebuilt to
    take its key out (rebuilding each was a visible part of a rebuild's commits)."""

    def __init__(self) -> None:
        #: The key of each command, in the same order.
        self.keys: list[str] = []
        #: Each command without its key: its name, then its other words.
        self.commands: list[tuple[Any, ...]] = []
        #: (hash, field) of every mirrored field written, once each, in order: the
        #: change record's ``w`` field, which a mirror re-reads to follow the change.
        self.mirrored: dict[tuple[str, str], None] = {}

    def set(self, key: str, value: Any) -> None:
        self.keys.append(key)
        self.commands.append(("SET", word(value)))

    def hset(self, key: str, field: str, value: Any) -> None:
        self.keys.append(key)
        self.commands.append(("HSET", field, word(value)))
        if is_mirrored(key):
            self.mirrored[key, field] = None

    def hdel(self, key: str, field: str) -> None:
        self.keys.append(key)
        self.commands.append(("HDEL", field))
        if is_mirrored(key):
            self.mirrored[key, field] = None

    def sadd(self, key: str, member: str) -> None:
        self.keys.append(key)
        self.commands.append(("SADD", member))

    def srem(self, key: str, member: str) -> None:
        self.keys.append(key)
        self.commands.append(("SREM", member))


class Transaction(InheritWrites):
    """Queues the writes of one event (implements ``clearance_core.folding.model.Writes``)."""

    _pipe: _Recorder

    def __init__(self, seq: int) -> None:
        self._pipe = _Recorder()
        self.seq = seq
        self.announce = Affected()
        self.invalidate = Affected()

    @property
    def commands(self) -> list[tuple[Any, ...]]:
        """The commands recorded so far, without their keys (:attr:`keys`)."""
        return self._pipe.commands

    @property
    def keys(self) -> list[str]:
        """The key of each command, in order."""
        return self._pipe.keys

    def seal(self, *, kind: str = "", published_ms: int | None = None
             ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """The event's commands, its change record appended (with the mirrored fields
        they write): everything to commit for it but the checkpoint. As (the key of each
        command, each command without its key)."""
        record = _RecordOut(revision=self.seq, invalidate=self.invalidate,
                            announce=self.announce, kind=kind, published_ms=published_ms)
        self._pipe.keys.append(keys.CHANGES)
        self._pipe.commands.append(("XADD", f"{self.seq}-0", "r",
                                    _record_json(record).decode(),
                                    "w", _json_text(list(self._pipe.mirrored))))
        return self._pipe.keys, self._pipe.commands

    def put_policy(
        self,
        key: str,
        previous: CompiledPolicy | None,
        new: CompiledPolicy | None,
        obj: bytes | None,
    ) -> None:
        old_idx, new_idx = _index_keys(previous), _index_keys(new)
        for index_key in old_idx - new_idx:
            self._pipe.srem(index_key, key)
        for index_key in new_idx - old_idx:
            self._pipe.sadd(index_key, key)
        if new is None:
            self._pipe.hdel(keys.POLICIES, key)
        else:
            self._pipe.hset(keys.POLICIES, key, _msgpack.encode(new))
        if obj is None:
            self._pipe.hdel(keys.POLICY_OBJECTS, key)
        else:
            self._pipe.hset(keys.POLICY_OBJECTS, key, obj.decode())  # JSON text, as _json_text

    def put_source(self, key: str, new: CompiledSource | None) -> None:
        """One MetricSource as declared (``None``: deleted or invalid)."""
        if new is None:
            self._pipe.hdel(keys.SOURCE_OBJECTS, key)
        else:
            self._pipe.hset(keys.SOURCE_OBJECTS, key, _msgpack.encode(new))

    def put_type_source(self, type_name: str, winner: CompiledSource | None) -> None:
        """The MetricSource in force for a type (``None``: no MetricSource declares it)."""
        if winner is None:
            self._pipe.hdel(keys.SOURCES, type_name)
        else:
            self._pipe.hset(keys.SOURCES, type_name, _msgpack.encode(winner))

    def put_cluster(self, name: str, labels: dict[str, str] | None) -> None:
        if labels is None:
            self._pipe.hdel(keys.CLUSTERS, name)
        else:
            self._pipe.hset(keys.CLUSTERS, name, _json_text(labels))

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
        name, log_key, *words = rbac_store.log_entry(seq, key, blob)
        self._pipe.keys.append(log_key)
        self._pipe.commands.append((name, *map(word, words)))

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
        # One command per member: built in place (a Group lists thousands), each left
        # and each joined the same command, on its member's key.
        left, joined = [*(old - new)], [*(new - old)]
        self._pipe.keys += [f"{_MEMBER_OF}{user}" for user in left]
        self._pipe.keys += [f"{_MEMBER_OF}{user}" for user in joined]
        self._pipe.commands += [("SREM", name)] * len(left)
        self._pipe.commands += [("SADD", name)] * len(joined)
        if users is None:
            self._pipe.hdel(keys.GROUPS, name)
        else:
            self._pipe.hset(keys.GROUPS, name, _json_text(users))


def _index_keys(policy: CompiledPolicy | None) -> set[str]:
    if policy is None:
        return set()
    return (
        {keys.policy_by_user(u) for u in policy.users}
        | {keys.policy_by_sa(sa) for sa in policy.service_accounts}
        | {keys.policy_by_group(g) for g in policy.groups}
        | {keys.policy_by_type(t) for t in policy.custom_types}
    )
