"""The decision cache in Redis, with exact invalidation indexes.

An entry is written only if the compiled state did not change while it was computed (a
Lua script compares ``clr:rev`` and ``clr:built`` with what its snapshot saw), so an
invalidation can never be overtaken by a slow writer — nor can an answer computed before
the store was flushed be written into the rebuilt state when the rebuild passes the same
revision again (a rebuild replays a stream that keeps only the latest version of each
object, so equal revisions need not mean equal states). Each entry is indexed under the username and
email, every effective group, its cluster and its principal; the invalidator deletes
exactly the entries of the indexes an event names — no keyspace scans.

Reads from concurrent requests are coalesced: all the lookups issued in one event-loop
iteration travel as a single MGET (together with the system revision and the rebuild
marker: no entry is served while the compiled state is lost or being rebuilt).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import msgspec
import redis.asyncio as aioredis
import redis.exceptions

from clearance_runtime import health, keys, metrics
from clearance_runtime.coalesce import Coalescer
from clearance_runtime.highwater import HighWater
from clearance_runtime.invalidation import INVALIDATE
from clearance_runtime.luapack import as_str

_pack = msgspec.msgpack.Encoder().encode


#: Stores per script call at most (each a few entries: a bound on one script's time).
STORE_CHUNK = 64

#: The server's time in milliseconds, in Lua.
_NOW_MS = "(function() local t = redis.call('TIME') " \
          "return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end)()"

# Memory layout (see keys.py): only cache entries carry a TTL, so under Valkey's
# ``volatile-*`` eviction they are the only keys that can be evicted. Index sets carry no
# TTL: an evicted index would leave live entries no invalidation can reach (a stale
# allow), while an evicted entry only leaves a dangling index member, which SWEEP removes.
# ARGV[1]: msgpack [[state, [[key, blob, ttl, [index...]]...]]...]: groups of entries
# computed from one state each (checkpoint@build). A group is written only if
# the compiled state is still that one (the fence, per group: stores of concurrent
# requests travel together, but each is fenced on the state it was computed from). One
# packed argument, not one per field: the Redis client's per-argument work was a
# visible part of a cache miss. ``clr:dci:all`` scores each entry with its expiry by the
# server's clock, the one its PX follows: the invalidator skips its work when that set
# is empty, and the "all" invalidation deletes what it lists, so it must list every live
# entry, whatever the clocks of the decision hosts say.
_PUT = f"""
local built = redis.call('GET', '{keys.BUILT}') or ''
local state = (redis.call('GET', '{keys.REV}') or '0') .. '@' .. built
local groups = cmsgpack.unpack(ARGV[1])
local now = {_NOW_MS}
local stored = {{}}
for _, group in ipairs(groups) do
  local written = 0
  if group[1] == state then
    for _, entry in ipairs(group[2]) do
      local key, ttl = entry[1], entry[3]
      redis.call('SET', key, entry[2], 'PX', ttl)
      redis.call('ZADD', '{keys.CACHE_ALL}', now + ttl, key)
      for _, index in ipairs(entry[4]) do
        redis.call('SADD', index, key)
      end
      written = written + 1
    end
  end
  table.insert(stored, written)
end
return stored
"""

#: Forgets the members of ``clr:dci:all`` whose entry has expired (by the server's clock,
#: as the entries' PX) and counts the rest.
_SIZE = f"""
redis.call('ZREMRANGEBYSCORE', '{keys.CACHE_ALL}', '-inf', {_NOW_MS})
return redis.call('ZCARD', '{keys.CACHE_ALL}')
"""


class Entry(msgspec.Struct, frozen=True):
    key: str
    blob: bytes
    ttl_ms: int
    indexes: tuple[str, ...]
    #: The next notBefore/notAfter of the policies the answer depends on (POSIX seconds).
    valid_until: float | None = None


def entry_key(digest: str) -> str:
    """The key of the cached decision with this digest."""
    return keys.cache_entry(digest)


def batch_key(digest: str) -> str:
    """The key of a whole batch's cached answers (see ``Decider``: one write a batch)."""
    return keys.cache_batch(digest)


def trace_key(digest: str) -> str:
    """The key of the cached explanation of the decision with this digest."""
    return keys.cache_trace(digest)


def entry_indexes(
    names: Sequence[str], groups: Iterable[str], cluster: str, principal_digest: str, *,
    warned: bool = False,
) -> tuple[str, ...]:
    """The index sets an entry joins: its username and email, every effective group, its
    cluster and its principal — what the invalidator and ``cache.clear`` name — and,
    ``warned``, the answers whose warnings a change of names can alter: those warning of
    a cluster or a type Clearance does not know, and those about a custom type (dropped
    whenever a cluster or a declared type appears or goes)."""
    return (
        *(keys.cache_by_user(n) for n in names),
        *(keys.cache_by_group(g) for g in sorted(groups)),
        keys.cache_by_cluster(cluster),
        keys.cache_by_principal(principal_digest),
        *((keys.CACHE_WARNED,) if warned else ()),
    )


class Looked(NamedTuple):
    """What a lookup found: the system revision, each key's blob (None: not cached) and
    where the store stood when they were read."""

    revision: int
    blobs: list[bytes | None]
    probe: health.Probe


class DecisionCache:
    def __init__(self, redis: aioredis.Redis, *, ttl_seconds: int,
                 highwater: HighWater | None = None) -> None:
        self._r = redis
        #: No entry is served from a store behind what this process answered from.
        self._highwater = highwater if highwater is not None else HighWater()
        self.ttl_ms = ttl_seconds * 1000
        self._put = redis.register_script(_PUT)
        self._stores: Coalescer[tuple[str, Sequence[Entry]], int] = Coalescer(
            self._store_many, chunk=STORE_CHUNK)
        self._clear = redis.register_script(INVALIDATE)
        self._size = redis.register_script(_SIZE)
        # One MGET may carry every lookup of an iteration: no script holds the store.
        self._lookups: Coalescer[Sequence[str], Looked] = Coalescer(self._mget, chunk=1 << 30)
        self.hits = 0
        self.misses = 0

    @property
    def enabled(self) -> bool:
        return self.ttl_ms > 0

    async def lookup(self, cache_keys: Sequence[str]) -> Looked:
        """The system revision, the cached blobs and where the store stood — one MGET
        with the lookups issued in the same event-loop iteration (:mod:`.coalesce`)."""
        return await self._lookups.submit(cache_keys)

    async def _mget(self, batch: Sequence[Sequence[str]]) -> list[Looked]:
        flat = [keys.INVALIDATED_REV, keys.BUILT, keys.REV]
        for cache_keys in batch:
            flat.extend(cache_keys)
        floor = self._highwater.floor()
        values: list[Any] = await self._r.mget(flat)
        probe = health.Probe.of(values[2], values[1], values[0])
        self._highwater.check(probe, floor)
        failure = health.rebuilding(probe.revision, probe.built)
        if failure is not None:  # no entry is served while the state is not whole
            raise failure
        found, position = [], 3
        for cache_keys in batch:
            found.append(Looked(probe.revision, values[position : position + len(cache_keys)],
                                probe))
            position += len(cache_keys)
        return found

    async def store(self, compiled_revision: str, entries: Sequence[Entry]) -> int:
        """Cache entries computed from the state ``compiled_revision`` (checkpoint@build);
        how many were written (0 if the state moved since). Best effort: a store at its
        memory limit refuses the write, and the answer is still given, just not cached.
        Stores issued together travel in one script call (:mod:`.coalesce`)."""
        if not entries or not self.enabled:
            return 0
        return await self._stores.submit((compiled_revision, entries))

    async def _store_many(self, groups: Sequence[tuple[str, Sequence[Entry]]]) -> list[int]:
        packed = _pack([
            [state, [[e.key, as_str(e.blob), e.ttl_ms, e.indexes] for e in entries]]
            for state, entries in groups])
        try:
            return [int(n) for n in await self._put(args=[packed])]
        except redis.exceptions.ResponseError as exc:
            if not str(exc).startswith("OOM"):
                raise
            metrics.CACHE_STORE_REFUSED.inc()
            return [0] * len(groups)

    async def clear(self, principal_digest: str | None) -> int:
        """Drop one principal's entries, or every entry (``None``)."""
        if principal_digest is None:
            return int(await self._clear(keys=[], args=[0, "1"]))
        return int(await self._clear(keys=[keys.cache_by_principal(principal_digest)],
                                     args=[0, "0"]))

    async def flush_stats(self) -> None:
        """Add the hits and misses counted since the last flush to the shared totals."""
        hits, misses = self.hits, self.misses
        if hits or misses:
            self.hits = self.misses = 0
            await self._r.hincrby(keys.STATS, "hits", hits)
            await self._r.hincrby(keys.STATS, "misses", misses)

    async def entries(self) -> int:
        return int(await self._size())
