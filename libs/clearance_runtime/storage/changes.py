"""The writes of one event and its change record: what a fold asks the store to do.

A :class:`Transaction` records, in order, the Redis commands one event's fold implies
(``clearance_core.folding.model.Writes``) and whom the change concerns; :meth:`Transaction.seal`
appends the event's change record (``clr:changes``, id ``<revision>-0``), which the
cache-invalidator and the decision replicas' mirrors follow: it says whom the change
concerns (``r``) and carries the new value of every mirrored field the event wrote
(``v``), so a mirror applies it without reading the store back. Committing is
:mod:`.commits`' concern: the sealed commands of many events go to Redis in one fenced
script call.
"""

from __future__ import annotations

from typing import Any

import msgspec

from clearance_core.folding.families import Family
from clearance_core.folding.fold import Affected
from clearance_core.monitor.metricsource import CompiledSource
from clearance_core.monitor.policy import CompiledPolicy
from clearance_core.rbac.rules import Binding, Role
from clearance_runtime.storage import families, inherit_store, keys, rbac_store
from clearance_runtime.storage.inherit_store import InheritWrites
from clearance_runtime.storage.luapack import as_str
from clearance_runtime.storage.replies import text

_msgpack = msgspec.msgpack.Encoder()


class ChangeRecord(msgspec.Struct, kw_only=True):
    """What one event changed, for the invalidator (stored as stream fields): whose
    cached decisions to delete, and whom to announce on ``clearance.decisions.changed``
    (a RoleBinding change is announced — reviews change — but deletes no cached check).

    One record, one Struct: the fold's two audiences are the core's ``Affected`` as they
    are — written by the compiler (their sets sorted by the encoder, ``_record_json``)
    and read back by the invalidator."""

    revision: int
    invalidate: Affected = msgspec.field(default_factory=Affected)
    announce: Affected = msgspec.field(default_factory=Affected)
    #: The event's kind ("" for a malformed one) and when it was published on the stream
    #: (ms since the epoch), for the invalidator's metrics by kind and event-to-effect time.
    kind: str = ""
    published_ms: int | None = None


_record_json = msgspec.json.Encoder(order="deterministic").encode


def is_mirrored(key: str) -> bool:
    """Whether a mirror follows the hash ``key`` (``families``: the declared ones)."""
    return families.mirrored_as(key) is not None


#: A record's values at most (bytes, encoded): a change carrying more (a Group of
#: hundreds of thousands of users, an AccessPolicy reaching every cluster) leaves them
#: out, and a mirror reading such a record reloads instead. Records are kept in the
#: stream for a while (``CHANGES_KEPT``): this bounds what they cost.
VALUES_MAX_BYTES = 1 << 20
#: Change records kept (approximately: Valkey trims whole nodes), counted in revisions
#: back from the newest: a mirror or invalidator further behind finds its records gone.
CHANGES_KEPT = 10_000
def trimmed_past(info: dict[str, Any]) -> int:
    """From the change stream's XINFO STREAM, the revision up to which records may be
    gone (0: none ever was). Trimming removes the oldest records only, so when any went
    (more added than held), every record before the first held may be gone; one after
    it cannot be. (Valkey's ``max-deleted-entry-id`` counts XDEL only, not trims, and
    revisions skip numbers — the events stream keeps the latest message per object — so
    the first record held alone does not say whether one before it went.)"""
    if int(info.get("entries-added") or 0) <= int(info.get("length") or 0):
        return 0
    first = info.get("first-entry")
    if first:
        return _id_revision(first[0]) - 1
    return _id_revision(info.get("last-generated-id") or b"0-0")


def _id_revision(entry_id: bytes | str) -> int:
    return int(text(entry_id).partition("-")[0])


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
    """The write commands of one event, in order (the subset Transaction uses), as the
    commit script takes them: the key of each in ``keys`` (its KEYS) and the command
    without it in ``commands`` (its packed argument), their words ready for it
    (:func:`word`; keys, fields and members are text). A batch's event appends straight
    to the batch's two lists (:mod:`.commits`): copying each command again without its
    key, and the lists, was a visible part of folding a backlog."""

    def __init__(self, keys: list[str], commands: list[tuple[Any, ...]]) -> None:
        self.keys = keys
        self.commands = commands
        #: (hash, field) -> the new value (None: deleted) of every mirrored field
        #: written, the last write's, in the order first written: the change record's
        #: ``v`` field, which a mirror applies to follow the change.
        self.mirrored: dict[tuple[str, str], Any] = {}

    def set(self, key: str, value: Any) -> None:
        self.keys.append(key)
        self.commands.append(("SET", word(value)))

    def hset(self, key: str, field: str, value: Any) -> None:
        self.keys.append(key)
        self.commands.append(("HSET", field, word(value)))
        family = families.mirrored_as(key)
        if family is not None:
            self.mirrored[key, field] = b"" if family.presence_only else value

    def hdel(self, key: str, field: str) -> None:
        self.keys.append(key)
        self.commands.append(("HDEL", field))
        if families.mirrored_as(key) is not None:
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

    def __init__(self, seq: int, keys: list[str] | None = None,
                 commands: list[tuple[Any, ...]] | None = None) -> None:
        """``keys`` and ``commands``: the lists to record into (a batch's: see
        :class:`_Recorder`); new ones if not given."""
        self._pipe = _Recorder([] if keys is None else keys,
                               [] if commands is None else commands)
        self.seq = seq
        self.announce = Affected()
        self.invalidate = Affected()

    @property
    def keys(self) -> list[str]:
        """The key of each command recorded, in order."""
        return self._pipe.keys

    @property
    def commands(self) -> list[tuple[Any, ...]]:
        """Each command recorded, without its key (``keys``), in order."""
        return self._pipe.commands

    def seal(self, *, kind: str = "", published_ms: int | None = None) -> None:
        """Record the event's change record after its commands (with the new values of
        the mirrored fields they write, unless over :data:`VALUES_MAX_BYTES`): then they
        are everything to commit for it but the checkpoint."""
        record = ChangeRecord(revision=self.seq, invalidate=self.invalidate,
                              announce=self.announce, kind=kind, published_ms=published_ms)
        # The writer bounds the stream: records older than CHANGES_KEPT revisions go
        # (approximately, whole nodes at a time). A reader further behind finds them
        # trimmed (the stream's max-deleted-entry-id passed its revision) and reloads
        # (a mirror) or drops every cached answer (the invalidator).
        trim = ("MINID", "~", str(self.seq - CHANGES_KEPT)) if self.seq > CHANGES_KEPT else ()
        self._pipe.keys.append(keys.CHANGES)
        self._pipe.commands.append(("XADD", *trim, f"{self.seq}-0", "r",
                                    _record_json(record).decode(),
                                    *_values(self._pipe.mirrored)))

    def put(self, family: Family, field: str, value: Any, *, key: str | None = None) -> None:
        """One field of a family (``value`` None: deleted), encoded as it declares; a
        mirrored family's new value joins the change record. ``key``: which of a
        prefixed family's hashes (one per cluster, say)."""
        hash_key = family.key if key is None else key
        if value is None:
            self._pipe.hdel(hash_key, field)
        else:
            self._pipe.hset(hash_key, field, family.encode(value))

    def put_policy(
        self,
        key: str,
        previous: CompiledPolicy | None,
        new: CompiledPolicy | None,
        obj: bytes | None,
    ) -> None:
        # No index sets: the decision service's mirror derives the policy indexes from
        # the policies the change records carry, and nothing else reads them.
        self.put(families.POLICIES, key, new)
        self.put(families.POLICY_OBJECTS, key, obj)  # JSON text

    def put_source(self, key: str, new: CompiledSource | None) -> None:
        """One MetricSource as declared (``None``: deleted or invalid)."""
        self.put(families.SOURCE_OBJECTS, key, new)

    def put_type_source(self, type_name: str, winner: CompiledSource | None) -> None:
        """The MetricSource in force for a type (``None``: no MetricSource declares it)."""
        self.put(families.SOURCES, type_name, winner)

    def put_cluster(self, name: str, labels: dict[str, str] | None) -> None:
        self.put(families.CLUSTERS, name, labels)

    def put_rbac(self, seq: int, key: str, value: Role | Binding | None) -> None:
        """A Role, ClusterRole or binding, compiled (``None``: deleted or invalid); the
        change record carries it to the decision services' mirrors (:mod:`.mirror`)."""
        self.put(families.RBAC, key, None if value is None else rbac_store.encode(value))

    def put_cluster_set(self, name: str, *, present: bool) -> None:
        self.put(inherit_store.CLUSTER_SETS, name, "" if present else None)

    def put_namespace(self, name: str, *, present: bool) -> None:
        if present:
            self._pipe.sadd(keys.NAMESPACES, name)
        else:
            self._pipe.srem(keys.NAMESPACES, name)

    def put_group(self, name: str, previous: list[str] | None, users: list[str] | None) -> None:
        # The users' memberships are derived by the mirror (nothing else reads them).
        self.put(families.GROUPS, name, users)


def _values(mirrored: dict[tuple[str, str], Any]) -> tuple[Any, ...]:
    """The record's ``v`` field: msgpack ``[[hash, field, value or nil], ...]``; none
    when too large (a mirror then reloads)."""
    blob = _msgpack.encode([(key, field, value) for (key, field), value in mirrored.items()])
    return ("v", as_str(blob)) if len(blob) <= VALUES_MAX_BYTES else ()

