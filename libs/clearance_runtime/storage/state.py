"""The compiled state in Redis: where it stands, wiping it, loading it, committing to it.

Each commit writes the objects' compiled values, their index entries, the checkpoint
``clr:rev`` and one change record per event on ``clr:changes`` atomically, for one event
or a batch of them (:mod:`.commits`). A crash can therefore never leave a half-applied
policy, an index without its policy, or a change the invalidator will not hear about;
replaying an event at or below the checkpoint is a no-op (the compiler skips it), so
folding is idempotent.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import AsyncIterator

import redis.asyncio as aioredis

from clearance_core.folding.model import Model
from clearance_core.folding.rbac_changes import RbacModel
from clearance_core.inherit.authority import Authority
from clearance_core.inherit.index import InheritanceIndex
from clearance_runtime.storage import families, keys, rbac_store
from clearance_runtime.storage.changes import Transaction
from clearance_runtime.storage.commits import Batch, Committer
from clearance_runtime.storage.families import (
    decode_labels,
    decode_policy,
    decode_source,
    decode_users,
)
from clearance_runtime.storage.inherit_store import stored
from clearance_runtime.storage.replies import text

#: Keys per SCAN page (and per UNLINK) while wiping: each a short command, so decisions
#: and the cache are served between them.
WIPE_PAGE = 1000
#: Operational keys a wipe keeps: heartbeats (``clr:svc:*``) and cache statistics.
_KEPT_PREFIX = keys.service("").encode()
_KEPT = {keys.STATS.encode()}
#: The keys every reader decides by — the rebuild marker, the revisions, the change logs
#: and the cache's list of live entries — deleted together first, in one command: from
#: then on the store reads as lost (``health.rebuilding``) to every reader, as a flushed
#: one does, however far the scan has got.
_FENCE = (keys.BUILT, keys.REV, keys.INVALIDATED_REV, keys.CHANGES, keys.CACHE_ALL)


class StateStore:
    def __init__(self, redis: aioredis.Redis, *, allow_unset: bool = True,
                 authority: Authority | None = None) -> None:
        self._r = redis
        #: CLEARANCE_ALLOW_UNSET and CLEARANCE_ADMIN_NAMESPACES: effective policies depend
        #: on them, so a state built with other values is not this compiler's
        #: (``position`` reports it as not built).
        self._allow_unset = allow_unset
        self._authority = authority or Authority()
        self._committer = Committer(redis)

    async def position(self) -> tuple[int | None, bool]:
        """(checkpoint, built): ``built`` is False when the store was flushed or replaced
        since the compiled state was built — whatever checkpoint it holds then was
        written onto an empty store and the state under it is partial — or was built by a
        compiler that stored RBAC as JSON (``clr:rbac``) or in another layout
        (``keys.LAYOUT``), which this one cannot load, or
        with other admin namespaces (or before policy authority: it holds the effective
        policies of policies no namespace may have written)."""
        async with self._r.pipeline(transaction=False) as pipe:
            pipe.get(keys.REV)
            pipe.exists(keys.BUILT)
            pipe.get(keys.ALLOW_UNSET)
            pipe.exists(keys.RBAC_JSON)
            pipe.get(keys.ADMIN_NAMESPACES)
            pipe.get(keys.LAYOUT_KEY)
            raw, built, unset, legacy, admins, layout = await pipe.execute()
        same = (unset is None or unset == self._unset_flag) and \
            admins == self._authority.token().encode() and layout == keys.LAYOUT.encode()
        return (int(raw) if raw is not None else None), bool(built) and same and not legacy

    @property
    def _unset_flag(self) -> bytes:
        return b"1" if self._allow_unset else b"0"

    async def wipe(self, target: int) -> int:
        """Delete all derived state — compiled state, change records, the system
        revision, the decision cache — and start a build from the first event; decisions
        are unavailable until the system revision reaches ``target``. Heartbeats and
        cache statistics are operational, not derived: kept. Returns how many keys went.

        Three steps, none holding Valkey for long (a script scanning the keyspace would
        hold it — the cache included — for all of it): the keys readers decide by go
        first, in one command (``_FENCE``), so that every reader sees a lost store —
        nothing is served, mirrors and the RBAC follower drop what they hold, a slow
        cache store is refused by its fence — exactly as after a flush; then the rest,
        a SCAN page at a time; then the new marker and the settings the state is built
        with, in one command. Nothing can bring back what the scan passed: a cache store
        is fenced on the marker (gone), the invalidator moves the system revision only
        up to the checkpoint (gone), and compiled state is written only by the compiler
        holding the lease — the one wiping. Killed half way, the store still reads as
        lost, and the next start wipes again."""
        # The build's id makes two builds to the same target different states to every
        # reader that holds state (mirrors, the cache's write fence): the stream they
        # replay may have changed between them (only the latest message per object is
        # kept), so the same revision need not mean the same state.
        build = f"{target}:{secrets.token_hex(8)}"
        removed = int(await self._r.delete(*_FENCE))
        cursor = 0
        while True:
            cursor, page = await self._r.scan(cursor, match="clr:*", count=WIPE_PAGE)
            found = [k if isinstance(k, bytes) else k.encode() for k in page]
            doomed = [k for k in found if not k.startswith(_KEPT_PREFIX) and k not in _KEPT]
            if doomed:
                removed += int(await self._r.unlink(*doomed))
            if cursor == 0:
                break
        # The marker last: until it is set, the store reads as lost.
        await self._r.mset({keys.ALLOW_UNSET: self._unset_flag, keys.LAYOUT_KEY: keys.LAYOUT,
                            keys.ADMIN_NAMESPACES: self._authority.token(),
                            keys.BUILT: build})
        return removed

    async def load_model(self) -> Model:
        """The compiled state, for the compiler to hold in memory (one round trip)."""
        declared_families = families.declared()
        async with self._r.pipeline(transaction=True) as pipe:
            for hash_key in (keys.POLICIES, keys.POLICY_OBJECTS, keys.SOURCE_OBJECTS,
                             keys.SOURCES, keys.CLUSTERS, keys.GROUPS, keys.RBAC,
                             keys.ACCESS_POLICIES, keys.ACCESS_INVALID, keys.ACCESS_STATUS,
                             keys.BINDINGS, keys.EXCLUDED):
                pipe.hgetall(hash_key)
            pipe.smembers(keys.NAMESPACES)
            pipe.hkeys(keys.CLUSTER_SETS)
            for family in declared_families:
                pipe.hgetall(family.key)
            (policies, objects, declared, winners, clusters, groups, rbac, access, invalid,
             conditions, bindings, excluded, namespaces, sets, *held) = await pipe.execute()
        model = Model(
            sources={k.decode(): decode_source(v) for k, v in declared.items()},
            type_sources={k.decode(): decode_source(v) for k, v in winners.items()},
            clusters={k.decode(): decode_labels(v) for k, v in clusters.items()},
            groups={k.decode(): decode_users(v) for k, v in groups.items()},
            namespaces={m.decode() for m in namespaces},
            cluster_sets={m.decode() for m in sets},
            rbac=RbacModel.of({k.decode(): rbac_store.decode(k.decode(), v)
                               for k, v in rbac.items()}),
            # The kinds' declared families, as their fold left them.
            stored={family.name: {text(k): family.decode(v) for k, v in values.items()}
                    for family, values in zip(declared_families, held, strict=True)},
        )
        inherited = stored(access, invalid, conditions, bindings, excluded)
        # Effective policies are recomputed, not read: the same fold gives the same result.
        model.inherit = InheritanceIndex.build(
            inherited.policies.values(), model.clusters, model.cluster_sets,
            allow_unset=self._allow_unset, authority=self._authority,
            bindings=inherited.bindings)
        model.access_invalid = inherited.invalid
        model.access_status = inherited.conditions
        model.access_excluded = inherited.excluded
        model.access_invalid_target = {key: found.target
                                       for key, found in inherited.excluded.items()
                                       if key in inherited.invalid}
        for key, blob in policies.items():
            model.set_policy(key.decode(), decode_policy(blob), objects.get(key))
        return model

    async def advance(self, seq: int, *, kind: str = "",
                      published_ms: int | None = None) -> None:
        """An event that changes no state (malformed, or a kind not compiled) still moves
        the checkpoint and leaves an empty change record: the revision keeps moving."""
        async with self.transaction(seq, kind=kind, published_ms=published_ms):
            return

    async def epoch(self) -> bytes | None:
        """The build marker ``clr:built`` (which rebuild the state is in; None: lost)."""
        built = await self._r.get(keys.BUILT)
        return built.encode() if isinstance(built, str) else built

    async def takes_writes(self) -> None:
        """Return if the store takes a write now, else raise its error (an outage): asked
        before a commit the store refused is blamed on its object. The write is the
        compiler's heartbeat field, outside the fence and the compiled state."""
        await self._r.hset(keys.service("compiler"), "probe", str(time.time()))

    def expect(self, checkpoint: int | None) -> None:
        """Fence the next commit: it applies only while ``clr:rev`` still equals
        ``checkpoint`` (``None``: no fence). Each commit then moves the fence along."""
        self._committer.expected = checkpoint

    async def commit(self, batch: Batch) -> None:
        """Everything the batch's events change, committed atomically (one Lua script)
        with their change records and the checkpoint at the batch's last event.

        Fenced on the checkpoint: when ``clr:rev`` is no longer where this writer left it
        — Redis was flushed or restored mid-burst, or another compiler wrote meanwhile —
        nothing is written and :class:`~clearance_api.errors.LostSync` is raised, so
        the writer restarts from the checkpoint instead of folding onto state it did not
        build."""
        await self._committer.commit(batch)

    @contextlib.asynccontextmanager
    async def transaction(self, seq: int, *, kind: str = "",
                          published_ms: int | None = None) -> AsyncIterator[Transaction]:
        """One event committed on its own (a batch of one, :meth:`commit`); nothing is
        written if the block raises."""
        batch = Batch()
        with batch.event(seq, kind=kind, published_ms=published_ms) as tx:
            yield tx
        await self.commit(batch)
