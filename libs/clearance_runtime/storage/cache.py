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
from typing import NamedTuple

import msgspec
import redis.asyncio as aioredis
import redis.exceptions

from clearance_runtime.process import health, metrics
from clearance_runtime.storage import keys, scripts
from clearance_runtime.storage.coalesce import Coalescer
from clearance_runtime.storage.direct import DirectMget
from clearance_runtime.storage.highwater import HighWater
from clearance_runtime.storage.invalidation import Invalidation
from clearance_runtime.storage.luapack import as_str

_pack = msgspec.msgpack.Encoder().encode


#: Stores per script call at most (each a few entries: a bound on one script's time).
STORE_CHUNK = 64

# Memory layout (see keys.py): only cache entries carry a TTL, so under Valkey's
# ``volatile-*`` eviction they are the only keys that can be evicted. Index sets carry no
# TTL: an evicted index would leave live entries no invalidation can reach (a stale
# allow), while an evicted entry only leaves a dangling index member, which the sweep
# removes. The store is ``lua/cache_put.lua`` (fenced per group on the state its entries
# were computed from), the count ``lua/cache_size.lua``.


def put_input(groups: Sequence[tuple[str, Sequence[Entry]]]) -> tuple[list[str], bytes]:
    """``cache_put``'s KEYS and ARGV[1] for groups of entries (state, entries): the fixed
    keys, then each entry's key and index sets in turn; the entries — blob, TTL, how
    many index sets — packed in one msgpack argument."""
    script_keys = [keys.BUILT, keys.REV, keys.CACHE_ALL]
    packed = []
    for state, entries in groups:
        written = []
        for e in entries:
            script_keys.append(e.key)
            script_keys += e.indexes
            written.append((as_str(e.blob), e.ttl_ms, len(e.indexes)))
        packed.append((state, written))
    return script_keys, _pack(packed)


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
    """What a lookup found: the system revision, each key's blob (None: not cached),
    where the store stood when they were read, and the cache's position then."""

    revision: int
    blobs: list[bytes | None]
    probe: health.Probe
    #: (system revision, build, invalidation epoch): while a later lookup reads the same,
    #: no invalidation has run in between (``lua/invalidate.lua``: every call that names
    #: entries moves the epoch), so a reply read from an entry then is still the reply.
    position: tuple[int, bytes | None, bytes | None]


class DecisionCache:
    def __init__(self, redis: aioredis.Redis, *, ttl_seconds: int,
                 highwater: HighWater | None = None) -> None:
        self._r = redis
        #: No entry is served from a store behind what this process answered from.
        self._highwater = highwater if highwater is not None else HighWater()
        self.ttl_ms = ttl_seconds * 1000
        self._put = scripts.register(redis, "cache_put")
        self._stores: Coalescer[tuple[str, Sequence[Entry]], int] = Coalescer(
            self._store_many, chunk=STORE_CHUNK)
        self._invalidation = Invalidation(redis)
        self._size = scripts.register(redis, "cache_size")
        # One MGET may carry every lookup of an iteration: no script holds the store.
        self._direct = DirectMget(redis)
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

    async def lookup_now(self, cache_keys: Sequence[str]) -> Looked:
        """:meth:`lookup` in an MGET of its own, sent at once: for a caller that already
        gathers every lookup of an event-loop iteration (the check responder's batch),
        the coalescing's extra loop iteration, future and task are cost without gain."""
        return (await self._mget([cache_keys]))[0]

    async def _mget(self, batch: Sequence[Sequence[str]]) -> list[Looked]:
        flat = [keys.INVALIDATED_REV, keys.BUILT, keys.REV, keys.INVALIDATED_EPOCH]
        for cache_keys in batch:
            flat.extend(cache_keys)
        floor = self._highwater.floor()
        values = await self._direct.mget(flat)
        probe = health.Probe.of(values[2], values[1], values[0])
        self._highwater.check(probe, floor)
        failure = health.rebuilding(probe.revision, probe.built)
        if failure is not None:  # no entry is served while the state is not whole
            raise failure
        found, at = [], 4
        position = (probe.revision, probe.built, values[3])
        for cache_keys in batch:
            found.append(Looked(probe.revision, values[at : at + len(cache_keys)], probe,
                                position))
            at += len(cache_keys)
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
        script_keys, packed = put_input(groups)
        try:
            return [int(n) for n in await self._put(keys=script_keys, args=[packed])]
        except redis.exceptions.ResponseError as exc:
            if not str(exc).startswith("OOM"):
                raise
            metrics.CACHE_STORE_REFUSED.inc()
            return [0] * len(groups)

    async def clear(self, principal_digest: str | None) -> int:
        """Drop one principal's entries, or every entry (``None``)."""
        # Revision "0": a clear moves no revision.
        if principal_digest is None:
            counts = await self._invalidation.apply([("i", [], ["0", "1"])])
        else:
            counts = await self._invalidation.apply(
                [("i", [keys.cache_by_principal(principal_digest)], ["0", "0"])])
        return int(counts[0])

    async def flush_stats(self) -> None:
        """Add the hits and misses counted since the last flush to the shared totals."""
        hits, misses = self.hits, self.misses
        if hits or misses:
            self.hits = self.misses = 0
            await self._r.hincrby(keys.STATS, "hits", hits)
            await self._r.hincrby(keys.STATS, "misses", misses)

    async def entries(self) -> int:
        return int(await self._size(keys=[keys.CACHE_ALL]))
