"""The decision service's reads of inherited AccessPolicies (part of :mod:`.reads`, which
owns it as ``Reads.inherited``), from its mirror like every other read: effective
policies, conditions, and the simulation index.

* :meth:`InheritReads.effective` — one target's effective policy as the compiler stored
  it, with the hierarchy's existence rules (a Namespace no policy names has its
  cluster's policy, under its own name);
* :meth:`InheritReads.excluded` — the policies aimed at a target or above it on its
  path that take no part, and why;
* :meth:`InheritReads.simulation` — an :class:`InheritanceIndex` of the mirrored
  policies, inventory and bindings, with the compiler's admin namespaces, for
  ``simulate`` and ``reach``: rebuilt only when what it holds moved, so dry runs in a
  row cost the simulation alone.

Each read brings the mirror current first and then reads it without awaiting, so one
answer sees one state, at least as new as the store held when it was asked.
"""

from __future__ import annotations

import msgspec

from clearance_api.wire import ExcludedPolicy, StatusCondition
from clearance_core.inherit import hierarchy
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.index import InheritanceIndex
from clearance_core.inherit.merge import EffectivePolicy
from clearance_runtime.reading.mirror import StateMirror
from clearance_runtime.storage import keys
from clearance_runtime.storage.inherit_store import (
    decode_conditions,
    decode_excluded,
    excluded_key,
    stored,
)


class Simulation:
    """What ``simulate`` starts from: the index, and the errors of invalid policies."""

    def __init__(self, index: InheritanceIndex, invalid: dict[str, str]) -> None:
        self.index = index
        self.invalid = invalid


class InheritReads:
    def __init__(self, mirror: StateMirror) -> None:
        self._mirror = mirror
        self._simulation: Simulation | None = None
        self._version: tuple[bytes | None, int] | None = None

    def _exists(self, target: Target) -> bool:
        if target.kind == "Fleet":
            return target.name == hierarchy.FLEET_NAME
        if target.kind == "ClusterSet":
            return target.name in self._mirror.inherited.hash(keys.CLUSTER_SETS)
        if target.kind == "Namespace" and not target.name:
            return False
        cluster = target.name if target.kind == "Cluster" else target.cluster
        return cluster is not None and cluster in self._mirror.own_labels()

    async def effective(self, target: Target) -> EffectivePolicy | None:
        """None when the target does not exist."""
        await self._mirror.current()
        if not self._exists(target):
            return None
        # Stored for the targets with a policy of their own on their path; a Namespace
        # without one has its cluster's, any other target the Fleet's.
        found = self._mirror.effective_of(target)
        source = hierarchy.derived_from(target)
        if found is None and source is not None:
            found = self._mirror.effective_of(source)
        if found is None and target != hierarchy.FLEET:
            found = self._mirror.effective_of(hierarchy.FLEET)
        if found is None:
            return EffectivePolicy(target=target)  # no AccessPolicy on its path
        if found.target != target:  # derived: the cluster's rules, under its name
            found = msgspec.structs.replace(found, target=target)
        return found

    async def excluded(self, target: Target) -> list[ExcludedPolicy]:
        """The policies aimed at ``target`` or above it on its path that take no part:
        highest target first, then by name. A cluster's path includes the cluster set
        its label names even while that set does not exist (a policy aimed at it is then
        listed, ``TargetNotFound``)."""
        await self._mirror.current()
        steps = [hierarchy.FLEET]
        if target.kind == "ClusterSet":
            steps.append(target)
        elif target.kind != "Fleet":
            cluster = target.name if target.kind == "Cluster" else target.cluster
            labels = self._mirror.own_labels().get(cluster or "")
            set_name = hierarchy.labels_set(labels) if labels else None
            if set_name is not None:
                steps.append(hierarchy.cluster_set(set_name))
            steps.append(hierarchy.cluster(cluster or ""))
            if target.kind == "Namespace":
                steps.append(target)
        held = self._mirror.inherited
        return [decode_excluded(value) for step in steps
                for _, value in sorted(held.hash(excluded_key(step)).items())]

    async def conditions(self, key: str) -> list[StatusCondition] | None:
        """An AccessPolicy's conditions (None: the compiler knows no such policy)."""
        await self._mirror.current()
        found = self._mirror.inherited.hash(keys.ACCESS_STATUS).get(key)
        return None if found is None else decode_conditions(found)

    async def known(self, key: str) -> bool:
        """Whether an AccessPolicy ``ns/name`` exists (valid or invalid)."""
        await self._mirror.current()
        held = self._mirror.inherited
        return key in held.hash(keys.ACCESS_POLICIES) or key in held.hash(keys.ACCESS_INVALID)

    async def simulation(self) -> Simulation:
        """The index of the mirrored state (shared; callers must not mutate it)."""
        await self._mirror.current()
        version = (self._mirror.built, self._mirror.inherited.generation)
        if self._simulation is None or version != self._version:
            self._simulation, self._version = self._build(), version
        return self._simulation

    def _build(self) -> Simulation:
        held = self._mirror.inherited
        state = stored(held.hash(keys.ACCESS_POLICIES), held.hash(keys.ACCESS_INVALID), {},
                       held.hash(keys.BINDINGS))
        index = InheritanceIndex.build(
            state.policies.values(), self._mirror.own_labels(),
            set(held.hash(keys.CLUSTER_SETS)), allow_unset=held.allow_unset,
            authority=held.authority, bindings=state.bindings)
        return Simulation(index, state.invalid)
