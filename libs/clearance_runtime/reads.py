"""The decision service's read side: every read it makes of compiled state, and the only
place it reaches Redis through (besides the decision cache, :mod:`.cache`). The decision
service names no key and calls no Redis method; keys come from :mod:`.keys`.

- :meth:`Reads.snapshot` — one consistent read per check or principal view (the Lua
  script of :mod:`.snapshot`), with the principal's identity;
- :meth:`Reads.effective_groups` — the groups a review or a search is answered for: the
  same definition as a check's identity
  (:func:`clearance_core.principal.effective_groups`), from the same Group memberships;
- :meth:`Reads.rbac_index` — the RBAC index of the current state, rebuilt only when the
  compiler's RBAC revision moves; :func:`build_rbac_index` is the one place that knows
  how RBAC is stored;
- the system revision (and waiting for one), service health, status counters, a
  policy with its revision, MetricSources and the cluster inventory;
- ``Reads.inherited`` (:mod:`.inherit_reads`) — inherited AccessPolicies.

A read that fails because the store is unreachable raises one of ``STORE_OUTAGES``; the
decision service answers it with :func:`unavailable`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import msgspec
import redis.asyncio as aioredis
import redis.exceptions

from clearance_core.errors import InvalidObject, Unavailable
from clearance_core.metricsource import CompiledSource
from clearance_core.policy import CompiledPolicy
from clearance_core.principal import Identity, effective_groups, identity_of
from clearance_core.rbac import Binding, Role, parse_binding, parse_role
from clearance_core.rbac_index import RbacIndex
from clearance_core.wire import Principal
from clearance_runtime import health, keys, logs
from clearance_runtime.inherit_reads import InheritReads
from clearance_runtime.snapshot import Snapshot, SnapshotReader
from clearance_runtime.state import decode_policy, decode_source

__all__ = ["STORE_OUTAGES", "Counts", "Reads", "Snapshot", "build_rbac_index", "unavailable"]
log = logs.get(__name__)
_object = msgspec.json.Decoder(dict[str, Any])
_labels = msgspec.json.Decoder(dict[str, str])


# The client returns bytes (no decode_responses); redis-py's types also allow str.
def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


#: The failures that mean "the state store is unreachable": the request may be retried.
STORE_OUTAGES = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


def unavailable(exc: Exception) -> Unavailable:
    """A store outage as the request's error: ``unavailable``, never an allow."""
    return Unavailable(f"state store unavailable: {exc}")


class Counts(NamedTuple):
    """What ``clearance.v1.status`` reports besides health: read in one round trip."""

    revision: int
    policies: int
    hits: int
    misses: int


def build_rbac_index(objects: Iterable[bytes | str]) -> RbacIndex:
    """The RBAC index from the stored Roles, ClusterRoles and bindings (JSON objects).

    The one function that interprets how the compiler stores RBAC: a change of that
    format changes this function (and what :meth:`Reads.rbac_index` fetches) only."""
    roles: list[Role] = []
    bindings: list[Binding] = []
    for blob in objects:
        obj = _object.decode(blob)
        try:
            if obj.get("kind") in ("Role", "ClusterRole"):
                roles.append(parse_role(obj))
            else:
                bindings.append(parse_binding(obj))
        except InvalidObject as exc:  # the compiler already withdrew these
            log.warning("rbac_object_skipped", error=exc.message)
    return RbacIndex(roles, bindings)


class Reads:
    def __init__(self, redis: aioredis.Redis) -> None:
        self._r = redis
        self._snapshots = SnapshotReader(redis)
        #: Inherited AccessPolicies: effective policies, conditions, simulation index.
        self.inherited = InheritReads(redis)
        self._rbac = RbacIndex()
        self._rbac_version: bytes | str | None = None
        self._rbac_lock = asyncio.Lock()

    # The system revision and health ----------------------------------------------------

    async def revision(self) -> int:
        """The system revision: every event up to it is compiled, indexed and invalidated."""
        return await health.revision(self._r)

    async def ensure_whole(self) -> None:
        """``Unavailable`` while the compiled state is lost or being rebuilt (for the
        subjects whose reads do not already check it, as the snapshot and cache do)."""
        revision, built = await self._r.mget([keys.INVALIDATED_REV, keys.BUILT])
        error = health.rebuilding(int(revision or 0), built)
        if error is not None:
            raise error

    async def wait_for(self, minimum: int, timeout_ms: int | None) -> int:
        """Wait until the system revision reaches ``minimum`` (``Stale`` after the timeout).
        Always asked of Redis: a flushed store being rebuilt must not be mistaken for one
        that already reached the revision."""
        return await health.wait_for(self._r, minimum, timeout_ms)

    async def services(self) -> dict[str, tuple[int, bool]]:
        """name -> (revision, healthy) for every service that ever reported."""
        return await health.services(self._r)

    async def counts(self) -> Counts:
        async with self._r.pipeline(transaction=False) as pipe:
            pipe.get(keys.INVALIDATED_REV)
            pipe.hlen(keys.POLICIES)
            pipe.hmget(keys.STATS, ["hits", "misses"])
            revision, policies, (hits, misses) = await pipe.execute()
        return Counts(revision=int(revision or 0), policies=int(policies),
                      hits=int(hits or 0), misses=int(misses or 0))

    # Policies and MetricSources --------------------------------------------------------

    async def policy(self, key: str) -> tuple[CompiledPolicy | None, int]:
        """The compiled policy ``ns/name`` (None if unknown) and the system revision, read
        together."""
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.hget(keys.POLICIES, key)
            pipe.get(keys.INVALIDATED_REV)
            blob, revision = await pipe.execute()
        return (decode_policy(blob) if blob else None), int(revision or 0)

    async def sources(self) -> dict[str, CompiledSource]:
        """custom type -> the MetricSource in force for it."""
        rows = await self._r.hgetall(keys.SOURCES)
        return {_text(k): decode_source(_bytes(v)) for k, v in rows.items()}

    async def source(self, type_name: str) -> CompiledSource | None:
        blob = await self._r.hget(keys.SOURCES, type_name)
        return decode_source(blob) if isinstance(blob, bytes) else None

    async def inventory(self) -> dict[str, dict[str, str]]:
        """cluster -> labels, for every ManagedCluster."""
        rows = await self._r.hgetall(keys.CLUSTERS)
        return {_text(k): _labels.decode(v) for k, v in rows.items()}

    # Principals ------------------------------------------------------------------------

    async def snapshot(
        self, principal: Principal, *, clusters: Sequence[str] | None,
        namespaces: Sequence[str] | None = (),
    ) -> tuple[Snapshot, Identity]:
        """One consistent read of what decides for ``principal`` (its candidate policies,
        the labels of ``clusters``, ``None``: the whole inventory; the effective
        AccessPolicies of the Fleet, of those clusters and of their ``namespaces``,
        ``None``: all) and its identity."""
        asserted = effective_groups(principal.username, principal.groups, ())
        snapshot = await self._snapshots.read(
            username=principal.username, email=principal.email, groups=sorted(asserted),
            clusters=clusters, namespaces=namespaces)
        return snapshot, identity_of(principal, snapshot.member_of)

    async def effective_groups(
        self, username: str, given: Iterable[str], email: str | None = None
    ) -> list[str]:
        """Sorted: ``given`` + the Groups listing the username (or email) + SA groups."""
        names = [name for name in (username, email) if name]
        member = await self._r.sunion([keys.member_of(n) for n in names]) if names else set()
        return sorted(effective_groups(username, given, map(_text, member)))

    # RBAC ------------------------------------------------------------------------------

    async def rbac_index(self) -> RbacIndex:
        """The RBAC index of the current state, rebuilt only when ``clr:rbac:rev`` moves:
        answers cost an index lookup, not a scan of every binding."""
        version = await self._r.get(keys.RBAC_REV)
        if version == self._rbac_version:
            return self._rbac
        async with self._rbac_lock:
            if version != self._rbac_version:
                rows = await self._r.hgetall(keys.RBAC)
                self._rbac = build_rbac_index(rows.values())
                self._rbac_version = version
        return self._rbac
