"""The decision service's read side: every read it makes of compiled state, and the only
place it reaches Redis through (besides the decision cache, :mod:`.cache`). The decision
service names no key and calls no Redis method; keys come from :mod:`.keys`.

- :meth:`Reads.snapshot` — one consistent read per check or principal view, with the
  principal's identity, from the in-memory mirror of the compiled state (:mod:`.mirror`,
  kept current from the change records): the decision service's one read model;
- :meth:`Reads.state_view` — the whole compiled state at one revision, for a question
  about every principal at once (``who-can-see``): who the indexes name, and each one's
  snapshot exactly as :meth:`Reads.snapshot` reads it;
- :meth:`Reads.effective_groups` — the groups a review or a search is answered for: the
  same definition as a check's identity
  (:func:`clearance_core.kube.principal.effective_groups`), from the same Group memberships;
- :meth:`Reads.rbac_index` — the RBAC index of the current state, the mirror's
  (:mod:`.rbac_store`, the one place that knows how RBAC is stored); :meth:`Reads.rbac`
  — the same index with that state's Group memberships and system revision, from one
  probe (a review's one read);
- the system revision (and waiting for one), service health, status counters, a
  policy with its revision, MetricSources and the cluster inventory;
- ``Reads.inherited`` (:mod:`.inherit_reads`) — inherited AccessPolicies.

A read that fails because the store is unreachable raises one of ``STORE_OUTAGES``; the
decision service answers it with :func:`unavailable`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import redis.asyncio as aioredis

from clearance_api.errors import Unavailable
from clearance_api.wire import Principal
from clearance_core.kube.principal import Identity, effective_groups, identity_of
from clearance_core.monitor.metricsource import CompiledSource
from clearance_core.monitor.policy import CompiledPolicy
from clearance_core.rbac.index import RbacIndex
from clearance_runtime.process import health, outages
from clearance_runtime.reading.inherit_reads import InheritReads
from clearance_runtime.reading.mirror import StateMirror
from clearance_runtime.reading.snapshot import Snapshot
from clearance_runtime.storage import keys
from clearance_runtime.storage.families import decode_source
from clearance_runtime.storage.highwater import HighWater

__all__ = ["STORE_OUTAGES", "Counts", "RbacState", "Reads", "Snapshot", "StateView",
           "unavailable"]
#: The failures that mean "the state store is unreachable" (or failing over: a replica's
#: READONLY, a server still loading): the request may be retried.
STORE_OUTAGES = outages.OUTAGE_TYPES


def unavailable(exc: Exception) -> Unavailable:
    """A store outage as the request's error: ``unavailable``, never an allow."""
    return Unavailable(f"state store unavailable: {exc}")


class Counts(NamedTuple):
    """What ``clearance.v1.status`` reports besides health: read in one round trip."""

    revision: int
    policies: int
    hits: int
    misses: int
    #: kind -> state -> policies, as the active compiler last published it (None: none yet).
    policies_by_state: dict[str, dict[str, int]] | None = None


class Reads:
    def __init__(self, redis: aioredis.Redis) -> None:
        self._r = redis
        #: What this process has answered from (:mod:`.highwater`): shared by the
        #: mirror, the cache (``DecisionCache(highwater=...)``) and ``ensure_whole``.
        self.highwater = HighWater()
        #: The compiled state, in memory, kept current from the change records
        #: (:mod:`.mirror`): every read of it below goes through the mirror.
        self.mirror = StateMirror(redis, self.highwater)
        #: Inherited AccessPolicies: effective policies, conditions, simulation index.
        self.inherited = InheritReads(self.mirror)

    # The system revision and health ----------------------------------------------------

    async def revision(self) -> int:
        """The system revision: every event up to it is compiled, indexed and invalidated."""
        return await health.revision(self._r)

    async def ensure_whole(self) -> None:
        """``Unavailable`` while the compiled state is lost or being rebuilt (for the
        subjects whose reads do not already check it, as the snapshot and cache do)."""
        floor = self.highwater.floor()
        revision, built, rev = await self._r.mget([keys.INVALIDATED_REV, keys.BUILT,
                                                   keys.REV])
        error = health.rebuilding(int(revision or 0), built)
        if error is not None:
            raise error
        self.highwater.check(health.Probe.of(rev, built, revision), floor)

    async def behind(self) -> str | None:
        """Why the store is behind this process's high-water mark (None: it is not), for
        readiness: a replica whose every read would be refused is taken out of service."""
        revision, built, rev = await self._r.mget([keys.INVALIDATED_REV, keys.BUILT,
                                                   keys.REV])
        return self.highwater.behind(health.Probe.of(rev, built, revision))

    async def wait_for(self, minimum: int, timeout_ms: int | None) -> int:
        """Wait until the system revision reaches ``minimum`` (``Stale`` after the timeout).
        Always asked of Redis: a flushed store being rebuilt must not be mistaken for one
        that already reached the revision."""
        return await health.wait_for(self._r, minimum, timeout_ms)

    async def services(self) -> dict[str, health.ServiceHealth]:
        """name -> its health, for every service that ever reported."""
        return await health.services(self._r)

    async def counts(self) -> Counts:
        async with self._r.pipeline(transaction=False) as pipe:
            pipe.get(keys.INVALIDATED_REV)
            pipe.hlen(keys.POLICIES)
            pipe.hmget(keys.STATS, ["hits", "misses"])
            pipe.get(keys.CENSUS)
            revision, policies, (hits, misses), census = await pipe.execute()
        return Counts(revision=int(revision or 0), policies=int(policies),
                      hits=int(hits or 0), misses=int(misses or 0),
                      policies_by_state=health.read_census(census))

    # Policies and MetricSources --------------------------------------------------------

    async def policy(self, key: str) -> tuple[CompiledPolicy | None, int]:
        """The compiled policy ``ns/name`` (None if unknown) and the system revision, read
        together."""
        revision = await self.mirror.current()
        return self.mirror.policies.get(key), revision

    async def sources(self) -> dict[str, CompiledSource]:
        """custom type -> the MetricSource in force for it."""
        await self.mirror.current()
        return {name: decode_source(blob) for name, blob in self.mirror.sources().items()}

    async def source(self, type_name: str) -> CompiledSource | None:
        await self.mirror.current()
        blob = self.mirror.sources().get(type_name)
        return None if blob is None else decode_source(blob)

    async def inventory(self) -> dict[str, dict[str, str]]:
        """cluster -> labels, for every ManagedCluster."""
        await self.mirror.current()
        return {name: dict(labels) for name, labels in self.mirror.labels.items()}

    # Principals ------------------------------------------------------------------------

    async def snapshot(
        self, principal: Principal, *, clusters: Sequence[str] | None,
        namespaces: Sequence[str] | None = (), spread: bool = False,
    ) -> tuple[Snapshot, Identity]:
        """One consistent read of what decides for ``principal`` (its candidate policies,
        the labels of ``clusters``, ``None``: the whole inventory; the effective
        AccessPolicies of the Fleet, of those clusters and of their ``namespaces``,
        ``None``: all; with ``spread``, the Namespace targets of those clusters that
        answer the principal otherwise than their cluster's) and its identity."""
        return self.snapshot_now(principal, await self.mirror.current(),
                                 clusters=clusters, namespaces=namespaces, spread=spread)

    async def current(self, probe: health.Probe | None = None) -> int:
        """Bring the mirror up to the store's state (the system revision), as of
        ``probe`` if given."""
        return await self.mirror.current(probe)

    def snapshot_now(
        self, principal: Principal, revision: int, *, clusters: Sequence[str] | None,
        namespaces: Sequence[str] | None = (), spread: bool = False,
    ) -> tuple[Snapshot, Identity]:
        """:meth:`snapshot` from the mirror as it stands, right after :meth:`current`
        returned ``revision`` (with no await in between)."""
        return _snapshot_of(self.mirror, principal, revision, clusters=clusters,
                            namespaces=namespaces, spread=spread)

    async def effective_groups(
        self, username: str, given: Iterable[str], email: str | None = None
    ) -> list[str]:
        """Sorted: ``given`` + the Groups listing the username (or email) + SA groups."""
        await self.mirror.current()
        member = self.mirror.groups_of([name for name in (username, email) if name])
        return sorted(effective_groups(username, given, member))

    async def state_view(self) -> StateView:
        """The whole compiled state at one revision, for a question about every principal
        at once (``who-can-see``): the mirror brought current."""
        return StateView(self.mirror, await self.mirror.current())

    # RBAC ------------------------------------------------------------------------------

    async def rbac_index(self) -> RbacIndex:
        """The RBAC index of the current state — the mirror's, at least as new as the
        state stored when called, so at least any revision a request waited for. It is
        updated in place, synchronously, between two awaits: an answer read from it in
        one synchronous step sees one state."""
        await self.mirror.current()
        return self.mirror.rbac.index()

    async def rbac(self) -> RbacState:
        """What a review reads, from one state: the mirror brought current by one probe
        (shared by the requests of an event-loop iteration; it also refuses a state that
        is lost, being rebuilt or behind this process, as :meth:`ensure_whole` does), its
        RBAC index and Group memberships, and the system revision that probe read. A
        review asked each of these apart before — four round trips to the store per
        review, where this is a share of one (docs/performance.md)."""
        revision = await self.mirror.current()
        return RbacState(self.mirror.rbac.index(), revision, self.mirror)


def _snapshot_of(mirror: StateMirror, principal: Principal, revision: int, *,
                 clusters: Sequence[str] | None, namespaces: Sequence[str] | None,
                 spread: bool = False) -> tuple[Snapshot, Identity]:
    asserted = effective_groups(principal.username, principal.groups, ())
    snapshot = mirror.snapshot(
        revision=revision, username=principal.username, email=principal.email,
        groups=sorted(asserted), clusters=clusters, namespaces=namespaces, spread=spread)
    return snapshot, identity_of(principal, snapshot.member_of)


@dataclass(frozen=True, slots=True)
class RbacState:
    """The RBAC of one state (:meth:`Reads.rbac`): valid until the caller's next await,
    which may let a catch-up change the mirror in place — read it in one synchronous
    step."""

    index: RbacIndex
    #: The system revision the probe read: every event up to it is in ``index`` (the
    #: mirror holds at least the checkpoint read with it, which is never behind it).
    revision: int
    mirror: StateMirror

    def effective_groups(self, username: str, given: Iterable[str],
                         email: str | None = None) -> list[str]:
        """As :meth:`Reads.effective_groups`, from this state's Group memberships."""
        member = self.mirror.groups_of([name for name in (username, email) if name])
        return sorted(effective_groups(username, given, member))

    def inventory(self) -> dict[str, dict[str, str]]:
        """As :meth:`Reads.inventory`, from this state."""
        return {name: dict(labels) for name, labels in self.mirror.labels.items()}


class StateView:
    """The compiled state at one revision. With the decision service's own mirror it
    holds until the mirror's next catch-up, which an await may let in: a reader that
    awaits between reads asks :attr:`moved` before trusting what it read. Snapshots
    taken from it stay as they were taken."""

    def __init__(self, mirror: StateMirror, revision: int) -> None:
        self._mirror = mirror
        self._generation = mirror.generation
        #: The system revision the state reflects (a reply's ``revision``).
        self.revision = revision

    @property
    def moved(self) -> bool:
        """Whether the mirror changed since the view was taken (its reads are then of
        another state)."""
        return self._mirror.generation != self._generation

    def knows(self, cluster: str) -> bool:
        """Whether the inventory holds the cluster (a ManagedCluster)."""
        return cluster in self._mirror.labels

    def named(self) -> tuple[Collection[str], Collection[str], Collection[str]]:
        """(users, service accounts, groups) some MonitorAccessPolicy names."""
        return self._mirror.named()

    def members(self) -> Mapping[str, Collection[str]]:
        """group -> the users its OpenShift Group lists."""
        return self._mirror.members()

    def declared(self) -> frozenset[str]:
        """The custom types some MetricSource declares."""
        return self._mirror.declared()

    def snapshot(self, principal: Principal, *, clusters: Sequence[str] | None,
                 namespaces: Sequence[str] | None = (),
                 spread: bool = False) -> tuple[Snapshot, Identity]:
        """Exactly what :meth:`Reads.snapshot` reads for ``principal``, at this state
        (``spread``: with the Namespace targets that concern it, as a check needs for a
        question that names no namespace)."""
        return _snapshot_of(self._mirror, principal, self.revision, clusters=clusters,
                            namespaces=namespaces, spread=spread)
