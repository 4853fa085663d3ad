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
:func:`clearance_core.principal.effective_groups` from the memberships it returns.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import redis.asyncio as aioredis

from clearance_core.policy import CompiledPolicy
from clearance_runtime import health, keys
from clearance_runtime.state import decode_policy

_MEMBER_OF = keys.prefix(keys.member_of)
_BY_USER = keys.prefix(keys.policy_by_user)
_BY_SA = keys.prefix(keys.policy_by_sa)
_BY_GROUP = keys.prefix(keys.policy_by_group)

_SNAPSHOT = f"""
local crev = redis.call('GET', '{keys.REV}') or '0'
local irev = redis.call('GET', '{keys.INVALIDATED_REV}') or '0'
local built = redis.call('GET', '{keys.BUILT}')
if not built or tonumber(irev) < tonumber(built) then return {{irev, built}} end
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
if ARGV[4 + ngroups] == '*' then
  local all = redis.call('HGETALL', '{keys.CLUSTERS}')
  for i = 1, #all, 2 do
    table.insert(names_out, all[i]); table.insert(labels, all[i + 1])
  end
else
  for i = 4 + ngroups, #ARGV do
    table.insert(names_out, ARGV[i])
    table.insert(labels, redis.call('HGET', '{keys.CLUSTERS}', ARGV[i]) or false)
  end
end
return {{crev, irev, member, blobs, names_out, labels}}
"""

_labels = msgspec.json.Decoder(dict[str, str])


class Snapshot(msgspec.Struct, kw_only=True):
    compiled_revision: str
    revision: int
    member_of: list[str]
    policies: list[CompiledPolicy]
    labels: dict[str, dict[str, str]]
    known_clusters: frozenset[str]


class SnapshotReader:
    def __init__(self, redis: aioredis.Redis) -> None:
        self._script = redis.register_script(_SNAPSHOT)
        self._decoded: dict[bytes, CompiledPolicy] = {}

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
    ) -> Snapshot:
        """``clusters=None``: every cluster of the inventory."""
        wanted = ["*"] if clusters is None else list(clusters)
        argv: list[str | int] = [username, email or "", len(groups), *groups, *wanted]
        found = await self._script(args=argv)
        if len(found) == 2:  # lost or being rebuilt
            error = health.rebuilding(int(found[0]), found[1])
            assert error is not None
            raise error
        crev, irev, member, blobs, names, labels = found
        policies = [self._policy(b) for b in blobs if b]
        cluster_labels: dict[str, dict[str, str]] = {}
        for name, raw in zip(names, labels, strict=True):
            if raw:
                key = name.decode() if isinstance(name, bytes) else str(name)
                cluster_labels[key] = _labels.decode(raw)
        return Snapshot(
            compiled_revision=crev.decode() if isinstance(crev, bytes) else str(crev),
            revision=int(irev),
            member_of=[m.decode() if isinstance(m, bytes) else m for m in member],
            policies=policies,
            labels=cluster_labels,
            known_clusters=frozenset(cluster_labels),
        )
