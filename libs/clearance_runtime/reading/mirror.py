"""The compiled state the decision service reads, held in its process: its one read model.

A :class:`StateMirror` keeps, in memory, the hashes of compiled state the decision
service answers from (compiled policies, Groups, cluster labels, effective
AccessPolicies, declared custom types, compiled RBAC, the inherited policies the
authoring views read (:mod:`.inherited_state`), and the families registered kinds
declare: every ``Family`` declared ``mirrored``, :mod:`.families`) and
derives the rest (the policy indexes, Group memberships, the RBAC index) the way the
compiler derives them. A snapshot is then computed here, with no round trip of its own.

Exactness. Every read starts with a *probe*: the checkpoint, build marker and system
revision, read in one MGET that all requests of one event-loop iteration share. A read is
answered from the mirror only when the mirror holds exactly the probed checkpoint of the
same build; otherwise the mirror catches up first, in one MULTI transaction that reads,
atomically, the change records after its checkpoint — each carrying the new values of
the fields its event wrote (``v``) — and the new checkpoint. A read therefore sees a
state at least as new as the store held when the request was being answered, and the
cache's write fence names the mirror's checkpoint, so an answer computed from it is
cached only while it is still current. A wiped or rebuilt store (``clr:built`` moved),
records trimmed past the mirror's checkpoint (the compiler keeps about
``changes.CHANGES_KEPT``), a record too large to carry its values, or one written before
records carried them make the mirror reload the whole state, atomically.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import msgspec
import redis.asyncio as aioredis
import redis.exceptions

from clearance_api.errors import Unavailable
from clearance_core.folding.families import Family
from clearance_core.inherit import hierarchy
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.merge import EffectivePolicy
from clearance_core.kube.principal import Identity
from clearance_core.monitor.evaluate import ClusterMatch, Matcher, match_cluster
from clearance_core.monitor.policy import CompiledPolicy
from clearance_core.questions.placement import NamespaceIndex
from clearance_runtime.process import health
from clearance_runtime.reading.inherited_state import InheritedState
from clearance_runtime.reading.snapshot import Snapshot
from clearance_runtime.storage import families, inherit_store, keys
from clearance_runtime.storage.changes import trimmed_past
from clearance_runtime.storage.coalesce import Coalescer
from clearance_runtime.storage.families import decode_labels, decode_policy, decode_users
from clearance_runtime.storage.highwater import HighWater
from clearance_runtime.storage.inherit_store import decode_effective, location
from clearance_runtime.storage.rbac_store import RbacMirror
from clearance_runtime.storage.replies import blob, text

_FLEET_FIELD = location(hierarchy.FLEET)[1]
_CLUSTER_FIELD = location(hierarchy.cluster(""))[1]  # + the cluster's name
#: Memoised cluster matches at most (policy x cluster pairs; about 100 bytes each).
MATCHES_KEPT = 1_000_000
#: Records a catch-up applies at most: a mirror further behind reloads (one read of the
#: state costs less than thousands of records, each with its values).
CATCH_UP_MAX = 2000
_values = msgspec.msgpack.Decoder(list[tuple[str, str, Any]]).decode


class StateMirror:
    """The mirrored state of one decision process. Reads are synchronous once current:
    nothing awaits between the probe's verdict and the snapshot, so no change can be
    applied halfway through one."""

    def __init__(self, redis: aioredis.Redis, highwater: HighWater | None = None) -> None:
        self._r = redis
        #: What this process has answered from: a store found behind it is refused.
        self.highwater = highwater if highwater is not None else HighWater()
        #: One probe read for every request of an event-loop iteration.
        self._probes: Coalescer[None, health.Probe] = Coalescer(self._read_probes, chunk=1 << 30)
        self._refreshing: asyncio.Future[None] | None = None
        #: Moves with every change applied (and every reload): a matcher from an older
        #: state computes instead (a memo newer than its snapshot must not answer it).
        self._generation = 0
        #: ((generation, checkpoint, build), compiled revision, matcher): what every
        #: snapshot of one state shares, made once for it.
        self._shared: tuple[tuple[int, str | None, bytes | None], str, Matcher] | None = None
        self._reset()
        #: Catch-ups and whole loads so far (tests and metrics read them).
        self.catch_ups = 0
        self.loads = 0

    def _reset(self) -> None:
        self._generation += 1
        self.rev: str | None = None
        self.built: bytes | None = None
        self.policies: dict[str, CompiledPolicy] = {}
        self._by_user: dict[str, set[str]] = {}
        self._by_sa: dict[str, set[str]] = {}
        self._by_group: dict[str, set[str]] = {}
        self._groups: dict[str, list[str]] = {}
        self._member_of: dict[str, set[str]] = {}
        #: cluster -> the labels checks read: the ManagedCluster's own (``_own``) with
        #: what declared families add to it (``_added``) merged over them.
        self.labels: dict[str, dict[str, str]] = {}
        self._own: dict[str, dict[str, str]] = {}
        self._added: dict[str, dict[tuple[str, str], Mapping[str, str]]] = {}
        #: The declared families' values: family name -> field -> decoded value.
        self.declared_values: dict[str, dict[str, Any]] = {}
        self._effective: dict[str, bytes] = {}
        self._effective_in: dict[str, dict[str, bytes]] = {}
        #: custom type -> the msgpack CompiledSource in force for it.
        self._sources: dict[str, bytes] = {}
        #: Compiled RBAC, and its index once a review asks for it.
        self.rbac = RbacMirror()
        #: The declared types and the inventory's names (sorted: suggestions for a
        #: cluster not in it), made when first read after they changed.
        self._declared_now: frozenset[str] | None = None
        self._inventory: tuple[str, ...] | None = None
        #: The inherited policies' families only the authoring views read.
        self.inherited = InheritedState()
        self._decoded: dict[bytes, EffectivePolicy] = {}
        #: cluster -> its Namespace targets by the subjects they answer otherwise than
        #: the cluster's target: built at the first read that needs it, kept current
        #: target by target, dropped when the cluster's (or the Fleet's) rules change.
        self._indexes: dict[str, NamespaceIndex] = {}
        #: policy key -> cluster -> which rule matches (``match_cluster``, memoised: a
        #: check evaluates the same policies against the same clusters again and again).
        #: Dropped with the policy, or for a cluster whose labels change.
        self._matches: dict[str, dict[str, ClusterMatch]] = {}
        self._memoised = 0

    # Keeping current ------------------------------------------------------------------

    async def current(self, probe: health.Probe | None = None) -> int:
        """Bring the mirror to (at least) the state the store holds now — or held when
        ``probe`` was read, if given (a cache lookup that just missed read it: reading
        it again would cost a round trip and guarantee nothing more to a request that
        arrived before it); the system revision. ``Unavailable`` while the state is
        lost or being rebuilt."""
        rev, built, irev = probe if probe is not None else await self._probe()
        error = health.rebuilding(irev, built)
        if error is not None:
            raise error
        while not self._reaches(rev, built):
            if self._refreshing is not None:  # one catch-up at a time: wait for it, and
                with contextlib.suppress(Exception):  # see whether it reached far enough
                    await asyncio.shield(self._refreshing)
                continue
            # A catch-up of our own reads the store as it is now: at least as new as the
            # probe. If the store was rebuilt since the probe, the mirror can never reach
            # the probe's build, and the state the catch-up found (checked whole) is the
            # answer: waiting for the probe's build would spin for ever.
            return await self._refresh()
        return irev

    def _reaches(self, rev: str, built: bytes | None) -> bool:
        return self.built == built and self.rev is not None and int(self.rev) >= int(rev)

    async def _probe(self) -> health.Probe:
        return await self._probes.submit(None)

    async def _read_probes(self, waiting: Sequence[None]) -> list[health.Probe]:
        floor = self.highwater.floor()
        rev, built, irev = await self._r.mget([keys.REV, keys.BUILT, keys.INVALIDATED_REV])
        probe = health.Probe.of(rev, built, irev)
        try:
            self.highwater.check(probe, floor)
        except Unavailable:
            # The store is behind this mirror (a failover to a lagging replica): load
            # it whole again once the store is past the mark, not from its change log.
            if self._refreshing is None and probe.built == self.built \
                    and self.rev is not None and int(probe.rev) < int(self.rev):
                self._reset()
            raise
        return [probe] * len(waiting)

    async def _refresh(self) -> int:
        refreshing = self._refreshing = asyncio.get_running_loop().create_future()
        try:
            irev = await self._catch_up()
        except BaseException as exc:
            refreshing.set_exception(exc)
            refreshing.exception()  # retrieved here: waiters check again, not re-raise
            raise
        else:
            refreshing.set_result(None)
            return irev
        finally:
            self._refreshing = None

    async def _catch_up(self) -> int:
        if self.rev is not None and self.built is not None:
            async with self._r.pipeline(transaction=True) as pipe:
                pipe.get(keys.BUILT)
                pipe.get(keys.REV)
                pipe.get(keys.INVALIDATED_REV)
                pipe.xinfo_stream(keys.CHANGES)
                pipe.xrange(keys.CHANGES, min=f"({self.rev}-0", count=CATCH_UP_MAX + 1)
                built, rev, irev, info, records = await pipe.execute(raise_on_error=False)
            for reply in (built, rev, irev, records):
                if isinstance(reply, Exception):
                    raise reply
            rev = text(rev or b"0")
            changes = self._changes(rev, info, records) if built == self.built else None
            if changes is not None:
                for blob in changes:
                    for key, field, value in _values(blob):
                        self._apply(key, field, value)
                self.rev = rev
                self.catch_ups += 1
                self.highwater.reached(self.built, int(self.rev))
                error = health.rebuilding(int(irev or 0), self.built)
                if error is not None:  # caught up with a rebuild that is not done yet
                    raise error
                return int(irev or 0)
        return await self._load()

    def _changes(self, rev: str, info: Any, records: list[Any]) -> list[bytes] | None:
        """The values of the records from the mirror's checkpoint to ``rev``, or None
        when only a whole load can bring the mirror there."""
        assert self.rev is not None
        if rev == self.rev:
            return []
        if isinstance(info, Exception) or trimmed_past(info) > int(self.rev):
            return None  # no stream, or trimmed past the checkpoint: changes unknown
        if len(records) > CATCH_UP_MAX:
            return None
        found = [fields.get(b"v") for _, fields in records]
        # A record too large to carry its values, or written before records did.
        return None if None in found else found

    async def _load(self) -> int:
        """The whole mirrored state, read atomically: the Namespace targets' hashes are
        found by SCAN first, under WATCH of the checkpoint and build, and read with
        everything else in one MULTI; a commit in between (the checkpoint moved) makes
        the transaction fail, and the load starts again."""
        mirrored = families.mirrored()
        async with self._r.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(keys.REV, keys.BUILT)
                    # The hashes of every mirrored family: a prefixed family's found by
                    # SCAN (one per cluster, say).
                    hashes: list[tuple[Family, str]] = []
                    for family in mirrored:
                        if family.prefix:
                            hashes.extend([(family, text(k)) async for k in pipe.scan_iter(
                                match=f"{family.key}*", count=1000)])
                        else:
                            hashes.append((family, family.key))
                    pipe.multi()  # type: ignore[no-untyped-call]
                    for key in (keys.BUILT, keys.REV, keys.INVALIDATED_REV,
                                keys.ALLOW_UNSET, keys.ADMIN_NAMESPACES):
                        pipe.get(key)
                    for family, key in hashes:
                        if family.presence_only:
                            pipe.hkeys(key)
                        else:
                            pipe.hgetall(key)
                    built, rev, irev, unset, admins, *found = await pipe.execute()
                    break
                except redis.exceptions.WatchError:
                    await pipe.reset()  # type: ignore[no-untyped-call]
        self._reset()
        self.inherited.built_with(unset, admins)
        for (family, key), reply in zip(hashes, found, strict=True):
            values = dict.fromkeys(reply, b"") if family.presence_only else reply
            for field, value in values.items():
                self._apply(key, text(field), value)
        self.rev, self.built = text(rev or b"0"), built
        self.loads += 1
        self.highwater.reached(built, int(self.rev))
        error = health.rebuilding(int(irev or 0), built)
        if error is not None:
            raise error
        return int(irev or 0)

    def _apply(self, key: str, field: str, value: bytes | str | None) -> None:
        """One mirrored field's new value (``None``: deleted), by its family."""
        self._generation += 1
        family = families.mirrored_as(key)
        if family is None:
            return  # a family no longer declared (a record older than this process)
        apply = _APPLY.get(family.name)
        if apply is not None:
            apply(self, key, field, value)
        else:
            self._apply_declared(family, field, value)

    def _apply_policy(self, key: str, field: str, value: bytes | str | None) -> None:
        self._matches.pop(field, None)
        self._put_policy(field, None if value is None else decode_policy(blob(value)))

    def _apply_group(self, key: str, field: str, value: bytes | str | None) -> None:
        self._put_group(field, None if value is None else decode_users(value))

    def _apply_cluster(self, key: str, field: str, value: bytes | str | None) -> None:
        _put(self._own, field, None if value is None else decode_labels(value))
        self._relabel(field)
        self.inherited.moved()  # a simulation index holds the inventory

    def _apply_effective(self, key: str, field: str, value: bytes | str | None) -> None:
        _put(self._effective, field, None if value is None else blob(value))
        if field == _FLEET_FIELD:
            self._indexes.clear()
        elif field.startswith(_CLUSTER_FIELD):
            self._indexes.pop(field[len(_CLUSTER_FIELD):], None)

    def _apply_source(self, key: str, field: str, value: bytes | str | None) -> None:
        _put(self._sources, field, None if value is None else blob(value))
        self._declared_now = None

    def _apply_inherited(self, key: str, field: str, value: bytes | str | None) -> None:
        self.inherited.put(key, field, value)

    def _apply_rbac(self, key: str, field: str, value: bytes | str | None) -> None:
        self.rbac.put(field, None if value is None else blob(value))

    def _apply_effective_in(self, key: str, field: str, value: bytes | str | None) -> None:
        cluster = key[len(inherit_store.EFFECTIVE_IN.key):]
        targets = self._effective_in.setdefault(cluster, {})
        found = None if value is None else blob(value)
        _put(targets, field, found)
        if not targets:
            del self._effective_in[cluster]
        index = self._indexes.get(cluster)
        if index is not None:
            index.put(field, None if found is None else self._decode(found))

    def _apply_declared(self, family: Family, field: str, value: bytes | str | None) -> None:
        """A family a registered kind declares: kept decoded, and what it adds to the
        labels checks read merged in."""
        held = self.declared_values.setdefault(family.name, {})
        old = held.pop(field, None)
        new = None if value is None else family.decode(blob(value))
        if new is not None:
            held[field] = new
        if family.labels is None:
            return
        touched = set()
        if old is not None:
            cluster, _ = family.labels(field, old)
            _unlink_added(self._added, cluster, (family.name, field))
            touched.add(cluster)
        if new is not None:
            cluster, labels = family.labels(field, new)
            self._added.setdefault(cluster, {})[family.name, field] = labels
            touched.add(cluster)
        for cluster in touched:
            self._relabel(cluster)

    def _relabel(self, cluster: str) -> None:
        """The labels checks read of ``cluster``: its own, with what declared families
        add merged over them — only for a cluster in the inventory (a family cannot make
        a cluster known)."""
        for per_cluster in self._matches.values():
            per_cluster.pop(cluster, None)
        own = self._own.get(cluster)
        if (own is None) == (cluster in self.labels):  # appears or vanishes
            self._inventory = None
        added = self._added.get(cluster)
        if own is not None and added:
            merged = dict(own)
            for _, extra in sorted(added.items()):  # as ``families.labels_with``
                merged.update(extra)
            own = merged
        _put(self.labels, cluster, own)

    def _put_policy(self, key: str, new: CompiledPolicy | None) -> None:
        old = self.policies.pop(key, None)
        for index, names in _indexes(self, old):
            for name in names:
                _unlink(index, name, key)
        if new is not None:
            self.policies[key] = new
            for index, names in _indexes(self, new):
                for name in names:
                    index.setdefault(name, set()).add(key)

    def _put_group(self, group: str, users: list[str] | None) -> None:
        for user in self._groups.pop(group, ()):
            _unlink(self._member_of, user, group)
        if users is not None:
            self._groups[group] = users
            for user in users:
                self._member_of.setdefault(user, set()).add(group)

    # Reading ----------------------------------------------------------------------------

    def snapshot(
        self, *, revision: int, username: str, email: str | None, groups: Sequence[str],
        clusters: Sequence[str] | None, namespaces: Sequence[str] | None,
        spread: bool = False,
    ) -> Snapshot:
        """What the snapshot script returns, from the mirror (call right after
        :meth:`current`, with no await in between); ``spread``: with the Namespace
        targets of those clusters that answer the principal otherwise than their
        cluster's (:attr:`Snapshot.differing`), from the indexes."""
        names = [username, email] if email else [username]
        member: list[str] = []
        all_groups = dict.fromkeys(groups)
        for name in names:
            for group in self._member_of.get(name, ()):
                member.append(group)
                all_groups.setdefault(group)
        found: dict[str, None] = {}
        for name in names:
            found.update(dict.fromkeys(self._by_user.get(name, ())))
        found.update(dict.fromkeys(self._by_sa.get(username, ())))
        for group in all_groups:
            found.update(dict.fromkeys(self._by_group.get(group, ())))
        policies = [self.policies[key] for key in found]
        wanted = list(self.labels) if clusters is None else clusters
        labels = {c: self.labels[c] for c in wanted if c in self.labels}
        state = (self._generation, self.rev, self.built)
        shared = self._shared
        if shared is None or shared[0] != state:
            shared = self._shared = (state, f"{self.rev}@{text(self.built or b'')}",
                                     self._matcher())
        snapshot = Snapshot(
            compiled_revision=shared[1],
            revision=revision,
            member_of=member,
            policies=policies,
            labels=labels,
            known_clusters=frozenset(labels),
            declared=self.declared(),
            # The names a suggestion is made from, only when one is needed.
            inventory=self.inventory() if len(labels) < len(wanted) else None,
            match=shared[2],
        )
        if self.inherited.hash(keys.ACCESS_POLICIES):  # any AccessPolicy at all
            self._inherited(snapshot, wanted, namespaces)
            if spread and self._effective_in:
                identity = Identity(username=username, email=email,
                                    groups=frozenset(all_groups))
                snapshot.differing = self._differing(identity, wanted)
        return snapshot

    def declared(self) -> frozenset[str]:
        """The custom types some MetricSource declares."""
        if self._declared_now is None:
            self._declared_now = frozenset(self._sources)
        return self._declared_now

    def sources(self) -> Mapping[str, bytes]:
        """custom type -> the msgpack CompiledSource in force for it (read, never keep)."""
        return self._sources

    def groups_of(self, names: Sequence[str]) -> set[str]:
        """The Groups listing any of ``names`` (a username, an email)."""
        found: set[str] = set()
        for name in names:
            found.update(self._member_of.get(name, ()))
        return found

    def inventory(self) -> tuple[str, ...]:
        """Every cluster of the inventory, sorted."""
        if self._inventory is None:
            self._inventory = tuple(sorted(self.labels))
        return self._inventory

    def effective_of(self, target: Target) -> EffectivePolicy | None:
        """A target's effective policy as the compiler stored it (None: none stored —
        only the targets a policy names or lies above are)."""
        hash_key, field = location(target)
        if hash_key == keys.EFFECTIVE:
            found = self._effective.get(field)
        else:
            found = self._effective_in.get(target.cluster or "", {}).get(field)
        return None if found is None else self._decode(found)

    def own_labels(self) -> Mapping[str, Mapping[str, str]]:
        """cluster -> the ManagedCluster's own labels (what declared families add left
        out: the inherited policies' cluster sets are chosen by these; read, never keep)."""
        return self._own

    @property
    def generation(self) -> int:
        """Moves with every change applied: a reader that awaited can tell whether the
        state it read is still the mirror's."""
        return self._generation

    def named(self) -> tuple[Collection[str], Collection[str], Collection[str]]:
        """(users, service accounts, groups) some MonitorAccessPolicy names: the keys of
        the policy indexes (call right after :meth:`current`; read, never keep)."""
        return self._by_user.keys(), self._by_sa.keys(), self._by_group.keys()

    def members(self) -> Mapping[str, Collection[str]]:
        """group -> the users (usernames or emails) its OpenShift Group lists (as
        :meth:`named`)."""
        return self._groups

    def _differing(self, identity: Identity, clusters: Sequence[str]
                   ) -> dict[str, dict[str, EffectivePolicy]]:
        found: dict[str, dict[str, EffectivePolicy]] = {}
        held = self._effective_in
        if len(clusters) > len(held):  # every cluster (a principal-wide view)
            wanted = set(clusters)
            clusters = [cluster for cluster in held if cluster in wanted]
        for cluster in clusters:
            if cluster not in held:
                continue
            concerning = self._index(cluster).concerning(identity)
            if concerning:
                found[cluster] = concerning
        return found

    def _index(self, cluster: str) -> NamespaceIndex:
        index = self._indexes.get(cluster)
        if index is None:
            own = self._effective.get(_CLUSTER_FIELD + cluster)
            fleet = self._effective.get(_FLEET_FIELD)
            base = own if own is not None else fleet
            index = self._indexes[cluster] = NamespaceIndex(
                {} if base is None else self._decode(base).rules,
                {namespace: self._decode(blob)
                 for namespace, blob in self._effective_in.get(cluster, {}).items()})
        return index

    def _matcher(self) -> Matcher:
        generation, policies, labels = self._generation, self.policies, self.labels

        def match(policy: CompiledPolicy, cluster: str, given: Mapping[str, str]
                  ) -> ClusterMatch:
            # The memo holds for the mirror's own policies and labels only.
            if (self._generation != generation or policies.get(policy.key) is not policy
                    or given is not labels.get(cluster, given)):
                return match_cluster(policy, cluster, given)
            per_cluster = self._matches.get(policy.key)
            if per_cluster is None:
                per_cluster = self._matches[policy.key] = {}
            elif cluster in per_cluster:
                return per_cluster[cluster]
            if self._memoised >= MATCHES_KEPT:
                self._matches.clear()
                self._memoised = 0
                per_cluster = self._matches[policy.key] = {}
            found = per_cluster[cluster] = match_cluster(policy, cluster, given)
            self._memoised += 1
            return found

        return match

    def _inherited(self, snapshot: Snapshot, clusters: Sequence[str],
                   namespaces: Sequence[str] | None) -> None:
        fleet = self._effective.get(_FLEET_FIELD)
        snapshot.fleet = None if fleet is None else self._decode(fleet)
        cluster_effective: dict[str, EffectivePolicy] = {}
        namespace_effective: dict[str, dict[str, EffectivePolicy]] = {}
        for cluster in clusters:
            blob = self._effective.get(_CLUSTER_FIELD + cluster)
            if blob is not None:
                cluster_effective[cluster] = self._decode(blob)
            targets = self._effective_in.get(cluster)
            if targets:
                chosen = targets if namespaces is None else {
                    ns: targets[ns] for ns in namespaces if ns in targets}
                if chosen:
                    namespace_effective[cluster] = {
                        ns: self._decode(b) for ns, b in chosen.items()}
        snapshot.cluster_effective = cluster_effective
        snapshot.namespace_effective = namespace_effective

    def _decode(self, blob: bytes) -> EffectivePolicy:
        # Memoised by the stored bytes object, whose hash Python computes once.
        found = self._decoded.get(blob)
        if found is None:
            if len(self._decoded) > 10000:
                self._decoded.clear()
            found = self._decoded[blob] = decode_effective(blob)
        return found


def _indexes(mirror: StateMirror, policy: CompiledPolicy | None
             ) -> list[tuple[dict[str, set[str]], Sequence[str]]]:
    """The policy indexes a policy joins (as ``changes._index_keys`` writes them)."""
    if policy is None:
        return []
    return [(mirror._by_user, policy.users), (mirror._by_sa, policy.service_accounts),
            (mirror._by_group, policy.groups)]


def _unlink(index: dict[str, set[str]], name: str, member: str) -> None:
    members = index.get(name)
    if members is not None:
        members.discard(member)
        if not members:
            del index[name]


def _put(mapping: dict[str, Any], key: str, value: Any) -> None:
    if value is None:
        mapping.pop(key, None)
    else:
        mapping[key] = value


def _unlink_added(added: dict[str, dict[tuple[str, str], Mapping[str, str]]], cluster: str,
                  source: tuple[str, str]) -> None:
    found = added.get(cluster)
    if found is not None:
        found.pop(source, None)
        if not found:
            del added[cluster]


#: How the mirror applies a value of each of the library's mirrored families (the
#: families registered kinds declare: ``StateMirror._apply_declared``).
_APPLY: dict[str, Callable[[StateMirror, str, str, bytes | str | None], None]] = {
    families.POLICIES.name: StateMirror._apply_policy,
    families.GROUPS.name: StateMirror._apply_group,
    families.CLUSTERS.name: StateMirror._apply_cluster,
    families.SOURCES.name: StateMirror._apply_source,
    families.RBAC.name: StateMirror._apply_rbac,
    inherit_store.EFFECTIVE.name: StateMirror._apply_effective,
    inherit_store.EFFECTIVE_IN.name: StateMirror._apply_effective_in,
    **{family.name: StateMirror._apply_inherited for family in (
        inherit_store.ACCESS_POLICIES, inherit_store.ACCESS_INVALID,
        inherit_store.ACCESS_STATUS, inherit_store.BINDINGS, inherit_store.CLUSTER_SETS,
        inherit_store.EXCLUDED_AT)},
}
