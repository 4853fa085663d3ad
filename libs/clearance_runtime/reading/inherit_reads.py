"""The decision service's reads of inherited AccessPolicies (part of :mod:`.reads`, which
owns it as ``Reads.inherited``): effective policies, conditions, and the simulation index.

* :meth:`InheritReads.effective` — one target's effective policy as stored by the
  compiler, with the hierarchy's existence rules (a Namespace no policy names has its
  cluster's policy, under its own name);
* :meth:`InheritReads.excluded` — the policies aimed at a target or above it on its
  path that take no part, and why;
* :meth:`InheritReads.simulation` — an :class:`InheritanceIndex` of the stored policies,
  inventory and bindings, with the compiler's admin namespaces, for ``simulate`` and
  ``reach``: rebuilt only when ``clr:ap:rev`` moves, so dry runs in a row cost the
  simulation alone.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import redis.asyncio as aioredis

from clearance_api.wire import ExcludedPolicy, StatusCondition
from clearance_core.inherit import hierarchy
from clearance_core.inherit.authority import Authority, parse_namespaces
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.index import InheritanceIndex
from clearance_core.inherit.merge import EffectivePolicy
from clearance_runtime.storage import keys
from clearance_runtime.storage.families import decode_labels
from clearance_runtime.storage.inherit_store import (
    decode_conditions,
    decode_effective,
    decode_excluded,
    excluded_key,
    location,
    stored,
)
from clearance_runtime.storage.replies import blob, text


class Simulation:
    """What ``simulate`` starts from: the index, and the errors of invalid policies."""

    def __init__(self, index: InheritanceIndex, invalid: dict[str, str]) -> None:
        self.index = index
        self.invalid = invalid


class InheritReads:
    def __init__(self, redis: aioredis.Redis) -> None:
        self._r = redis
        self._simulation: Simulation | None = None
        self._version: Any = None
        self._lock = asyncio.Lock()

    async def exists(self, target: Target) -> bool:
        if target.kind == "Fleet":
            return target.name == hierarchy.FLEET_NAME
        if target.kind == "ClusterSet":
            return bool(await self._r.sismember(keys.CLUSTER_SETS, target.name))
        if target.kind == "Namespace" and not target.name:
            return False
        cluster = target.name if target.kind == "Cluster" else target.cluster
        return cluster is not None and bool(await self._r.hexists(keys.CLUSTERS, cluster))

    async def effective(self, target: Target) -> EffectivePolicy | None:
        """None when the target does not exist."""
        if not await self.exists(target):
            return None
        # Stored for the targets with a policy of their own on their path; a Namespace
        # without one has its cluster's, any other target the Fleet's.
        found = await self._r.hget(*location(target))
        source = hierarchy.derived_from(target)
        if found is None and source is not None:
            found = await self._r.hget(*location(source))
        if found is None and target != hierarchy.FLEET:
            found = await self._r.hget(*location(hierarchy.FLEET))
        if found is None:
            return EffectivePolicy(target=target)  # no AccessPolicy on its path
        effective = decode_effective(blob(found))
        if effective.target != target:  # derived: the cluster's rules, under its name
            effective = msgspec.structs.replace(effective, target=target)
        return effective

    async def excluded(self, target: Target) -> list[ExcludedPolicy]:
        """The policies aimed at ``target`` or above it on its path that take no part:
        highest target first, then by name. A cluster's path includes the cluster set
        its label names even while that set does not exist (a policy aimed at it is then
        listed, ``TargetNotFound``)."""
        steps = [hierarchy.FLEET]
        if target.kind == "ClusterSet":
            steps.append(target)
        elif target.kind != "Fleet":
            cluster = target.name if target.kind == "Cluster" else target.cluster
            labels = await self._r.hget(keys.CLUSTERS, cluster or "")
            set_name = hierarchy.labels_set(decode_labels(labels)) if labels else None
            if set_name is not None:
                steps.append(hierarchy.cluster_set(set_name))
            steps.append(hierarchy.cluster(cluster or ""))
            if target.kind == "Namespace":
                steps.append(target)
        async with self._r.pipeline(transaction=False) as pipe:
            for step in steps:
                pipe.hgetall(excluded_key(step))
            found = await pipe.execute()
        return [decode_excluded(blob(value)) for entries in found
                for _, value in sorted(entries.items())]

    async def conditions(self, key: str) -> list[StatusCondition] | None:
        """An AccessPolicy's conditions (None: the compiler knows no such policy)."""
        found = await self._r.hget(keys.ACCESS_STATUS, key)
        return None if found is None else decode_conditions(blob(found))

    async def known(self, key: str) -> bool:
        """Whether an AccessPolicy ``ns/name`` exists (valid or invalid)."""
        async with self._r.pipeline(transaction=False) as pipe:
            pipe.hexists(keys.ACCESS_POLICIES, key)
            pipe.hexists(keys.ACCESS_INVALID, key)
            valid, invalid = await pipe.execute()
        return bool(valid or invalid)

    async def simulation(self) -> Simulation:
        """The index of the stored state (shared; callers must not mutate it)."""
        version = await self._r.get(keys.INHERIT_REV)
        cached = self._simulation
        if cached is not None and version == self._version:
            return cached
        async with self._lock:
            if self._simulation is None or version != self._version:
                self._simulation, self._version = await self._build()
        assert self._simulation is not None
        return self._simulation

    async def _build(self) -> tuple[Simulation, Any]:
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.get(keys.INHERIT_REV)
            pipe.hgetall(keys.ACCESS_POLICIES)
            pipe.hgetall(keys.ACCESS_INVALID)
            pipe.hgetall(keys.CLUSTERS)
            pipe.smembers(keys.CLUSTER_SETS)
            pipe.get(keys.ALLOW_UNSET)
            pipe.hgetall(keys.BINDINGS)
            pipe.get(keys.ADMIN_NAMESPACES)
            (version, policies, invalid, clusters, sets, unset, bindings,
             admins) = await pipe.execute()
        state = stored(policies, invalid, {}, bindings)
        inventory = {text(name): decode_labels(raw) for name, raw in clusters.items()}
        # The compiler's admin namespaces, as it recorded them when it built the state.
        authority = Authority.of(parse_namespaces(text(admins))) if admins else Authority()
        index = InheritanceIndex.build(
            state.policies.values(), inventory, {text(s) for s in sets},
            allow_unset=unset != b"0", authority=authority, bindings=state.bindings)
        return Simulation(index, state.invalid), version
