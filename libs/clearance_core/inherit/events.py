"""What the inheritance index is fed (:data:`Event`) and what it reports (:class:`Change`);
see :mod:`clearance_core.inherit.index`, which re-exports them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from clearance_core.inherit.accesspolicy import CompiledAccessPolicy
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.merge import EffectivePolicy


@dataclass(frozen=True)
class PolicyApplied:
    """A valid AccessPolicy was added or changed."""

    policy: CompiledAccessPolicy


@dataclass(frozen=True)
class PolicyRemoved:
    """An AccessPolicy was deleted, or became invalid (its previous version is withdrawn)."""

    key: str


@dataclass(frozen=True)
class ClusterChanged:
    """A ManagedCluster appeared, changed labels (``labels``) or vanished (``None``)."""

    name: str
    labels: Mapping[str, str] | None


@dataclass(frozen=True)
class ClusterSetChanged:
    """A ManagedClusterSet appeared (``present``) or vanished."""

    name: str
    present: bool


@dataclass(frozen=True)
class BindingChanged:
    """A ManagedClusterSetBinding appeared or changed (``cluster_set``: its
    ``spec.clusterSet``) or vanished (``None``; also one that cannot be read). It binds
    its namespace to the set only when it is named as the set is."""

    namespace: str
    name: str
    cluster_set: str | None

    @property
    def binds(self) -> bool:
        return bool(self.namespace) and self.cluster_set == self.name


Event = PolicyApplied | PolicyRemoved | ClusterChanged | ClusterSetChanged | BindingChanged


@dataclass
class Change:
    """What one event did: recompute results to persist, targets to delete, the policies
    on the touched targets' paths, and those of them whose conditions may have moved."""

    effective: dict[Target, EffectivePolicy] = field(default_factory=dict)
    removed: set[Target] = field(default_factory=set)
    #: The event's policy and every policy on the path of a touched target.
    policies: set[str] = field(default_factory=set)
    #: Those whose Accepted/Enforced conditions must be recomputed: the event's policy
    #: and every policy whose tally's version moved. A policy's conditions are a function
    #: of the policy and of what its tally's version follows (see
    #: :class:`~clearance_core.inherit.tally.Tally`), so no other policy's can move.
    moved: set[str] = field(default_factory=set)
    #: The effective policies the touched targets had before the event (absent: none).
    previous: dict[Target, EffectivePolicy] = field(default_factory=dict)
