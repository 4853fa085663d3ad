"""The compiled state a check reads, held in the decision process (the fast miss path).

A cache miss used to cost a Lua snapshot round trip per request, and the Redis client's
per-command work dominated it. A :class:`StateMirror` keeps, in memory, exactly the hashes
the snapshot script reads (compiled policies, Groups, cluster labels, effective
AccessPolicies, declared custom types; see ``changes.MIRRORED``) and derives the rest (the
policy indexes, Group memberships) the way the compiler writes them. A snapshot is then
computed here, with no round trip of its own.

Exactness. Every read starts with a *probe*: the checkpoint, build marker and system
revision, read in one MGET that all requests of one event-loop iteration share. A read is
answered from the mirror only when the mirror holds exactly the probed checkpoint of the
same build; otherwise the mirror catches up first, in one Lua script that reads, atomically,
the change records after its checkpoint, the current value of every mirrored field they
wrote (each record lists them, field ``w``) and the new checkpoint. A read therefore sees
a state at least as new as the store held when the request was being answered — the same
guarantee the per-request snapshot gave — and the cache's write fence names the mirror's
checkpoint, so an answer computed from it is cached only while it is still current.
A wiped or rebuilt store (``clr:built`` moved), a trimmed change log or a record written
before records listed their writes make the mirror reload the whole state, atomically.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import msgspec
import redis.asyncio as aioredis

from clearance_core.inherit import hierarchy
from clearance_core.inherit.merge import EffectivePolicy
from clearance_core.kube.principal import Identity
from clearance_core.monitor.evaluate import ClusterMatch, Matcher, match_cluster
from clearance_core.monitor.policy import CompiledPolicy
from clearance_core.questions.placement import NamespaceIndex
from clearance_runtime import health, keys
from clearance_runtime.coalesce import Coalescer
from clearance_runtime.inherit_store import decode_effective, location
from clearance_runtime.snapshot import Snapshot
from clearance_runtime.state import decode_policy

_EFFECTIVE_IN = keys.prefix(keys.effective_in)
_FLEET_FIELD = location(hierarchy.FLEET)[1]
_CLUSTER_FIELD = location(hierarchy.cluster(""))[1]  # + the cluster's name
_labels = msgspec.json.Decoder(dict[str, str]).decode
#: (checkpoint, build marker, system revision) as one probe read them.
#: Memoised cluster matches at most (policy x cluster pairs; about 100 bytes each).
MATCHES_KEPT = 1_000_000
_users = msgspec.json.Decoder(list[str]).decode

_HEAD = f"""
local built = redis.call('GET', '{keys.BUILT}') or false
local rev = redis.call('GET', '{keys.REV}') or '0'
local irev = redis.call('GET', '{keys.INVALIDATED_REV}') or '0'
"""

#: The whole mirrored state, atomically (at start-up, after a wipe, or when the change
#: log no longer reaches back to the mirror's checkpoint).
_LOAD = _HEAD + f"""
local effns = {{}}
local cursor = '0'
repeat
  local page = redis.call('SCAN', cursor, 'MATCH', '{_EFFECTIVE_IN}*', 'COUNT', 1000)
  cursor = page[1]
  for _, k in ipairs(page[2]) do
    table.insert(effns, k); table.insert(effns, redis.call('HGETALL', k))
  end
until cursor == '0'
return {{built, rev, irev,
  redis.call('HGETALL', '{keys.POLICIES}'), redis.call('HGETALL', '{keys.GROUPS}'),
  redis.call('HGETALL', '{keys.CLUSTERS}'), redis.call('HGETALL', '{keys.EFFECTIVE}'),
  redis.call('HKEYS', '{keys.SOURCES}'), redis.call('HKEYS', '{keys.ACCESS_POLICIES}'),
  effns}}
"""

#: ARGV: the mirror's checkpoint and build. The fields written since, with their values
#: now; {{'reload'}} when only a whole load can bring the mirror up to date.
_CATCH_UP = _HEAD + f"""
if built ~= ARGV[2] then return {{'reload'}} end
if rev == ARGV[1] then return {{rev, irev, {{}}}} end
local first = redis.call('XRANGE', '{keys.CHANGES}', '-', '+', 'COUNT', 1)
if #first == 0 then return {{'reload'}} end
if tonumber(string.match(first[1][1], '^(%d+)')) > tonumber(ARGV[1]) then
  return {{'reload'}}
end
local out, seen = {{}}, {{}}
for _, record in ipairs(redis.call('XRANGE', '{keys.CHANGES}', '(' .. ARGV[1] .. '-0', '+')) do
  local writes = nil
  for j = 1, #record[2], 2 do
    if record[2][j] == 'w' then writes = record[2][j + 1] end
  end
  if writes == nil then return {{'reload'}} end
  for _, pair in ipairs(cjson.decode(writes)) do
    local k, f = pair[1], pair[2]
    local fields = seen[k]
    if fields == nil then fields = {{}}; seen[k] = fields end
    if not fields[f] then
      fields[f] = true
      table.insert(out, k); table.insert(out, f)
      table.insert(out, redis.call('HGET', k, f) or false)
    end
  end
end
return {{rev, irev, out}}
"""


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _pairs(flat: Sequence[Any]) -> list[tuple[str, Any]]:
    return [(_s(flat[i]), flat[i + 1]) for i in range(0, len(flat), 2)]


class StateMirror:
    """The mirrored state of one decision process. Reads are synchronous once current:
    nothing awaits between the probe's verdict and the snapshot, so no change can be
    applied halfway through one."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self._r = redis
        self._load_script = redis.register_script(_LOAD)
        self._catch_up_script = redis.register_script(_CATCH_UP)
        #: One probe read for every request of an event-loop iteration.
        self._probes: Coalescer[None, health.Probe] = Coalescer(self._read_probes, chunk=1 << 30)
        self._refreshing: asyncio.Future[None] | None = None
        #: Moves with every change applied (and every reload): a matcher from an older
        #: state computes instead (a memo newer than its snapshot must not answer it).
        self._generation = 0
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
        self.labels: dict[str, dict[str, str]] = {}
        self._effective: dict[str, bytes] = {}
        self._effective_in: dict[str, dict[str, bytes]] = {}
        self._declared: set[str] = set()
        #: The declared types and the inventory's names (sorted: suggestions for a
        #: cluster not in it), made when first read after they changed.
        self._declared_now: frozenset[str] | None = None
        self._inventory: tuple[str, ...] | None = None
        self._access: set[str] = set()
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
        rev, built, irev = await self._r.mget([keys.REV, keys.BUILT, keys.INVALIDATED_REV])
        return [health.Probe.of(rev, built, irev)] * len(waiting)

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
            found = await self._catch_up_script(args=[self.rev, self.built])
            if len(found) == 3:
                rev, irev, flat = found
                for i in range(0, len(flat), 3):
                    self._apply(_s(flat[i]), _s(flat[i + 1]), flat[i + 2])
                self.rev = _s(rev)
                self.catch_ups += 1
                error = health.rebuilding(int(irev), self.built)
                if error is not None:  # caught up with a rebuild that is not done yet
                    raise error
                return int(irev)
        return await self._load()

    async def _load(self) -> int:
        built, rev, irev, pol, grp, mc, eff, ms, ap, effns = await self._load_script()
        self._reset()
        for key, blob in _pairs(pol):
            self._apply(keys.POLICIES, key, blob)
        for key, blob in _pairs(grp):
            self._apply(keys.GROUPS, key, blob)
        for key, blob in _pairs(mc):
            self._apply(keys.CLUSTERS, key, blob)
        self._effective = {key: blob for key, blob in _pairs(eff)}
        self._declared = {_s(t) for t in ms}
        self._access = {_s(k) for k in ap}
        for hash_key, flat in _pairs(effns):
            self._effective_in[hash_key[len(_EFFECTIVE_IN):]] = dict(_pairs(flat))
        self.rev, self.built = _s(rev), built
        self.loads += 1
        error = health.rebuilding(int(irev), built)
        if error is not None:
            raise error
        return int(irev)

    def _apply(self, key: str, field: str, value: bytes | None) -> None:
        """One mirrored field's new value (``None``: deleted)."""
        self._generation += 1
        if key == keys.POLICIES:
            self._matches.pop(field, None)
            self._put_policy(field, None if value is None else decode_policy(value))
        elif key == keys.GROUPS:
            self._put_group(field, None if value is None else _users(value))
        elif key == keys.CLUSTERS:
            for per_cluster in self._matches.values():
                per_cluster.pop(field, None)
            if (value is None) == (field in self.labels):  # appears or vanishes
                self._inventory = None
            _put(self.labels, field, None if value is None else _labels(value))
        elif key == keys.EFFECTIVE:
            _put(self._effective, field, value)
            if field == _FLEET_FIELD:
                self._indexes.clear()
            elif field.startswith(_CLUSTER_FIELD):
                self._indexes.pop(field[len(_CLUSTER_FIELD):], None)
        elif key == keys.SOURCES:
            _toggle(self._declared, field, value is not None)
            self._declared_now = None
        elif key == keys.ACCESS_POLICIES:
            _toggle(self._access, field, value is not None)
        elif key.startswith(_EFFECTIVE_IN):
            cluster = key[len(_EFFECTIVE_IN):]
            targets = self._effective_in.setdefault(cluster, {})
            _put(targets, field, value)
            if not targets:
                del self._effective_in[cluster]
            index = self._indexes.get(cluster)
            if index is not None:
                index.put(field, None if value is None else self._decode(value))

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
        snapshot = Snapshot(
            compiled_revision=f"{self.rev}@{_s(self.built or b'')}",
            revision=revision,
            member_of=member,
            policies=policies,
            labels=labels,
            known_clusters=frozenset(labels),
            declared=self.declared(),
            # The names a suggestion is made from, only when one is needed.
            inventory=self.inventory() if len(labels) < len(wanted) else None,
            match=self._matcher(),
        )
        if self._access:
            self._inherited(snapshot, wanted, namespaces)
            if spread and self._effective_in:
                identity = Identity(username=username, email=email,
                                    groups=frozenset(all_groups))
                snapshot.differing = self._differing(identity, wanted)
        return snapshot

    def declared(self) -> frozenset[str]:
        """The custom types some MetricSource declares."""
        if self._declared_now is None:
            self._declared_now = frozenset(self._declared)
        return self._declared_now

    def inventory(self) -> tuple[str, ...]:
        """Every cluster of the inventory, sorted."""
        if self._inventory is None:
            self._inventory = tuple(sorted(self.labels))
        return self._inventory

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


def _toggle(members: set[str], name: str, present: bool) -> None:
    if present:
        members.add(name)
    else:
        members.discard(name)
