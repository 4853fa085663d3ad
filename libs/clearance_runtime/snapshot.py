"""One consistent read of compiled state per check (used through :mod:`.reads`).

A Lua script gathers, atomically, everything a decision needs for one principal: the
compiler's revision, the Groups listing the user, the candidate policies (from the user,
email, service-account and group indexes) and the labels of the clusters asked about.
While the compiled state is lost or being rebuilt it returns nothing, and the read is
``unavailable`` (see ``health.rebuilding``).
One round trip, and no torn read between a policy and its indexes.

The script names no key of its own: every key comes from :mod:`.keys`. It is given the
asserted and service-account groups and adds those of the Groups listing the user, only
to find every candidate policy; the identity itself is built by
:func:`clearance_core.kube.principal.effective_groups` from the memberships it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import msgspec
import redis.asyncio as aioredis

from clearance_core.inherit import hierarchy
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.merge import EffectivePolicy, EffectiveRule
from clearance_core.kube.principal import Identity
from clearance_core.monitor.evaluate import Matcher, match_cluster
from clearance_core.monitor.policy import CompiledPolicy
from clearance_core.questions.placement import NamespaceIndex
from clearance_runtime import health, keys
from clearance_runtime.inherit_store import decode_effective, location
from clearance_runtime.state import decode_policy

_MEMBER_OF = keys.prefix(keys.member_of)
_BY_USER = keys.prefix(keys.policy_by_user)
_BY_SA = keys.prefix(keys.policy_by_sa)
_BY_GROUP = keys.prefix(keys.policy_by_group)
_EFFECTIVE_IN = keys.prefix(keys.effective_in)
_FLEET_FIELD = location(hierarchy.FLEET)[1]
_CLUSTER_FIELD = location(hierarchy.cluster(""))[1]  # + the cluster's name

_SNAPSHOT = f"""
local irev = redis.call('GET', '{keys.INVALIDATED_REV}') or '0'
local built = redis.call('GET', '{keys.BUILT}')
if not built or tonumber(irev) < tonumber(string.match(built, '^%d+')) then
  return {{irev, built}}
end
-- The state's identity for the cache's write fence: checkpoint and build together.
local crev = (redis.call('GET', '{keys.REV}') or '0') .. '@' .. built
local username, email = ARGV[1], ARGV[2]
local ngroups = tonumber(ARGV[3])
local groups, gseen = {{}}, {{}}
for i = 1, ngroups do
  local g = ARGV[3 + i]
  if not gseen[g] then gseen[g] = true; table.insert(groups, g) end
end
local names = {{username}}
if email ~= '' then table.insert(names, email) end
local member = {{}}
for _, n in ipairs(names) do
  for _, g in ipairs(redis.call('SMEMBERS', '{_MEMBER_OF}' .. n)) do
    table.insert(member, g)
    if not gseen[g] then gseen[g] = true; table.insert(groups, g) end
  end
end
local pkeys, pseen = {{}}, {{}}
local function add(list)
  for _, k in ipairs(list) do
    if not pseen[k] then pseen[k] = true; table.insert(pkeys, k) end
  end
end
for _, n in ipairs(names) do add(redis.call('SMEMBERS', '{_BY_USER}' .. n)) end
add(redis.call('SMEMBERS', '{_BY_SA}' .. username))
for _, g in ipairs(groups) do add(redis.call('SMEMBERS', '{_BY_GROUP}' .. g)) end
local blobs = {{}}
if #pkeys > 0 then blobs = redis.call('HMGET', '{keys.POLICIES}', unpack(pkeys)) end
local labels = {{}}
local names_out = {{}}
local at = 4 + ngroups
if ARGV[at] == '*' then
  local all = redis.call('HGETALL', '{keys.CLUSTERS}')
  for i = 1, #all, 2 do
    table.insert(names_out, all[i]); table.insert(labels, all[i + 1])
  end
  at = at + 1
else
  local n = tonumber(ARGV[at])
  for i = at + 1, at + n do
    table.insert(names_out, ARGV[i])
    table.insert(labels, redis.call('HGET', '{keys.CLUSTERS}', ARGV[i]) or false)
  end
  at = at + n + 1
end
-- The declared custom types (AccessPolicy rules are not compiled against MetricSources,
-- and a warning names a type no one declares) and, when a cluster asked about is not in
-- the inventory, every cluster's name (a warning suggests the closest).
local declared = redis.call('HKEYS', '{keys.SOURCES}')
local inventory = false
for _, raw in ipairs(labels) do
  if not raw then inventory = redis.call('HKEYS', '{keys.CLUSTERS}') break end
end
-- Inherited AccessPolicies: the Fleet's, each cluster's and the namespace targets asked
-- for ('*': all of the cluster's), only while some AccessPolicy is in force.
local fleet, ceff, neff = false, {{}}, {{}}
if redis.call('EXISTS', '{keys.ACCESS_POLICIES}') == 1 then
  fleet = redis.call('HGET', '{keys.EFFECTIVE}', '{_FLEET_FIELD}') or false
  local wanted = {{}}
  for i = at, #ARGV do table.insert(wanted, ARGV[i]) end
  for i, c in ipairs(names_out) do
    ceff[i] = redis.call('HGET', '{keys.EFFECTIVE}', '{_CLUSTER_FIELD}' .. c) or false
    local key = '{_EFFECTIVE_IN}' .. c
    if wanted[1] == '*' then
      neff[i] = redis.call('HGETALL', key)
    else
      local found = {{}}
      if #wanted > 0 then
        local values = redis.call('HMGET', key, unpack(wanted))
        for j, v in ipairs(values) do
          if v then table.insert(found, wanted[j]); table.insert(found, v) end
        end
      end
      neff[i] = found
    end
  end
end
return {{crev, irev, member, blobs, names_out, labels, fleet, ceff, neff, declared,
  inventory}}
"""

_labels = msgspec.json.Decoder(dict[str, str])


def _str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


_NO_RULES: dict[str, EffectiveRule] = {}


class Snapshot(msgspec.Struct, kw_only=True):
    compiled_revision: str
    revision: int
    member_of: list[str]
    policies: list[CompiledPolicy]
    labels: dict[str, dict[str, str]]
    known_clusters: frozenset[str]
    #: Effective AccessPolicies read: the Fleet's, per cluster, per cluster and namespace.
    fleet: EffectivePolicy | None = None
    cluster_effective: dict[str, EffectivePolicy] = {}
    namespace_effective: dict[str, dict[str, EffectivePolicy]] = {}
    #: Custom types some MetricSource declares.
    declared: frozenset[str] = frozenset()
    #: Every cluster of the inventory, sorted, when a cluster asked about is not in it
    #: (a warning suggests the closest: ``clearance_core.questions.unknown_names``); else None.
    inventory: Sequence[str] | None = None
    #: Which rule of a policy matches a cluster, memoised by a mirror (exact for this
    #: snapshot's policies and labels).
    match: Matcher = match_cluster

    #: Per cluster, the Namespace targets that answer this snapshot's principal
    #: otherwise than the cluster's target (read when asked with ``spread``).
    differing: dict[str, dict[str, EffectivePolicy]] = {}

    def inherited(self, cluster: str, namespace: str | None
                  ) -> tuple[Target | None, Mapping[str, EffectiveRule]]:
        """The effective rules a decision in ``cluster`` (``namespace``) reads, and whose
        they are: Namespace C/N, else Cluster C, else the Fleet (README: Inherited)."""
        if namespace is not None:
            found = self.namespace_effective.get(cluster, {}).get(namespace) or \
                self.differing.get(cluster, {}).get(namespace)
            if found is not None:
                return found.target, found.rules
        return self.cluster_rules(cluster)

    def cluster_rules(self, cluster: str
                      ) -> tuple[Target | None, Mapping[str, EffectiveRule]]:
        """The effective rules of the cluster's target, and whose they are."""
        found = self.cluster_effective.get(cluster)
        if found is not None:
            return found.target, found.rules
        if self.fleet is None:
            return None, _NO_RULES  # no AccessPolicy on the path
        if cluster not in self.known_clusters:
            return self.fleet.target, self.fleet.rules  # no Cluster target: the Fleet's
        # A known cluster with no policy of its own on its path: its effective policy is
        # the Fleet's (not stored twice), but the decision is about the Cluster target.
        # Which targets are stored must not show in an answer: a policy for someone else
        # at this cluster stores it without touching this principal's cached answers.
        return hierarchy.cluster(cluster), self.fleet.rules

    def namespace_targets(self, cluster: str) -> dict[str, EffectivePolicy]:
        """The cluster's Namespace targets that answer this principal otherwise than the
        cluster's target, by namespace (sorted); read only with ``spread``."""
        return self.differing.get(cluster, {})

    def spread_over(self, identity: Identity, clusters: Iterable[str],
                    namespace_targets: Callable[[str], Mapping[str, EffectivePolicy]]
                    ) -> None:
        """Fill :attr:`differing` for ``clusters`` from every Namespace target of each
        (``namespace_targets``), indexed here for this one read (the mirror keeps its
        indexes instead)."""
        found: dict[str, dict[str, EffectivePolicy]] = {}
        for cluster in clusters:
            targets = namespace_targets(cluster)
            if targets:
                index = NamespaceIndex(self.cluster_rules(cluster)[1], targets)
                concerning = index.concerning(identity)
                if concerning:
                    found[cluster] = concerning
        self.differing = found


class SnapshotReader:
    def __init__(self, redis: aioredis.Redis) -> None:
        self._script = redis.register_script(_SNAPSHOT)
        self._decoded: dict[bytes, CompiledPolicy] = {}
        self._effective: dict[bytes, EffectivePolicy] = {}

    def _effective_of(self, blob: bytes) -> EffectivePolicy:
        found = self._effective.get(blob)
        if found is None:
            if len(self._effective) > 10000:
                self._effective.clear()
            found = self._effective[blob] = decode_effective(blob)
        return found

    def _policy(self, blob: bytes) -> CompiledPolicy:
        # Decoded policies are memoised by their bytes: unchanged policies cost nothing.
        policy = self._decoded.get(blob)
        if policy is None:
            if len(self._decoded) > 10000:
                self._decoded.clear()
            policy = self._decoded[blob] = decode_policy(blob)
        return policy

    async def read(
        self,
        *,
        username: str,
        email: str | None,
        groups: Sequence[str],
        clusters: Sequence[str] | None,
        namespaces: Sequence[str] | None = (),
        spread: bool = False,
    ) -> Snapshot:
        """``clusters=None``: every cluster of the inventory; ``namespaces``: the
        Namespace targets to read in each (``None``: all of them); ``spread``: also find
        the Namespace targets that answer the principal otherwise than their cluster's
        (:attr:`Snapshot.differing`). This script has no index of them: it reads every
        Namespace target of those clusters (the mirror, the default, does not)."""
        if spread:
            namespaces = None
        wanted: list[str | int] = ["*"] if clusters is None else [len(clusters), *clusters]
        argv: list[str | int] = [username, email or "", len(groups), *groups, *wanted,
                                 *(["*"] if namespaces is None else namespaces)]
        found = await self._script(args=argv)
        if len(found) == 2:  # lost or being rebuilt
            error = health.rebuilding(int(found[0]), found[1])
            assert error is not None
            raise error
        (crev, irev, member, blobs, names, labels, fleet, ceff, neff, declared,
         inventory) = found
        policies = [self._policy(b) for b in blobs if b]
        cluster_labels: dict[str, dict[str, str]] = {}
        cluster_effective: dict[str, EffectivePolicy] = {}
        namespace_effective: dict[str, dict[str, EffectivePolicy]] = {}
        for i, (name, raw) in enumerate(zip(names, labels, strict=True)):
            key = name.decode() if isinstance(name, bytes) else str(name)
            if raw:
                cluster_labels[key] = _labels.decode(raw)
            if i < len(ceff) and ceff[i]:
                cluster_effective[key] = self._effective_of(ceff[i])
            if i < len(neff) and neff[i]:
                pairs = neff[i]
                namespace_effective[key] = {
                    _str(pairs[j]): self._effective_of(pairs[j + 1])
                    for j in range(0, len(pairs), 2)}
        snapshot = Snapshot(
            fleet=self._effective_of(fleet) if fleet else None,
            cluster_effective=cluster_effective,
            namespace_effective=namespace_effective,
            declared=frozenset(_str(t) for t in declared),
            inventory=sorted(_str(c) for c in inventory) if inventory else None,
            compiled_revision=crev.decode() if isinstance(crev, bytes) else str(crev),
            revision=int(irev),
            member_of=[m.decode() if isinstance(m, bytes) else m for m in member],
            policies=policies,
            labels=cluster_labels,
            known_clusters=frozenset(cluster_labels),
        )
        if spread and namespace_effective:
            identity = Identity(username=username, email=email,
                                groups=frozenset([*groups, *snapshot.member_of]))
            snapshot.spread_over(identity, namespace_effective,
                                 lambda cluster: namespace_effective.get(cluster, {}))
        return snapshot
