"""Targets of inherited AccessPolicies and the path from the Fleet down to each (README: Inherited).

Least to most specific: ``Fleet`` → ``ClusterSet`` → ``Cluster`` → ``Namespace``.

* The Fleet always exists; its one name is ``fleet``.
* A ClusterSet exists iff its ManagedClusterSet does; it is on a cluster's path iff the
  cluster's label ``cluster.open-cluster-management.io/clusterset`` names an existing set.
* A Cluster exists iff its ManagedCluster does.
* A Namespace (``cluster`` + ``name``) exists iff its cluster does. The namespaces of managed
  clusters are not in the inventory, so every name in an existing cluster is a target.

Which targets are *materialised* (kept with an effective policy, listed by ``reach`` and
``simulate``): the Fleet, every existing ClusterSet and Cluster, and every Namespace target
that a valid policy names and whose cluster exists. Any other namespace of an existing
cluster has no policy of its own on its path, so its effective policy is its cluster's:
:func:`derived_from` says where to read it, and the decision path falls back the same way
(Namespace, else Cluster, else Fleet).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# The target types are the wire's (one definition), re-exported for the core.
from clearance_api.wire.effective import KINDS, LEVEL, Target, TargetKind

__all__ = ["CLUSTERSET_LABEL", "FLEET", "FLEET_NAME", "KINDS", "LEVEL", "Inventory", "Target",
           "TargetKind", "cluster", "cluster_set", "decision_targets", "derived_from",
           "labels_set", "namespace"]

FLEET_NAME = "fleet"
CLUSTERSET_LABEL = "cluster.open-cluster-management.io/clusterset"


FLEET = Target(kind="Fleet", name=FLEET_NAME)


def cluster_set(name: str) -> Target:
    return Target(kind="ClusterSet", name=name)


def cluster(name: str) -> Target:
    return Target(kind="Cluster", name=name)


def namespace(cluster_name: str, name: str) -> Target:
    return Target(kind="Namespace", name=name, cluster=cluster_name)


@dataclass
class Inventory:
    """What the hierarchy is made of: ManagedClusters (with labels) and ManagedClusterSets."""

    clusters: dict[str, dict[str, str]] = field(default_factory=dict)
    cluster_sets: set[str] = field(default_factory=set)

    def copy(self) -> Inventory:
        return Inventory(dict(self.clusters), set(self.cluster_sets))

    def set_of(self, cluster_name: str) -> str | None:
        """The ClusterSet on the cluster's path: its label's set, if that set exists."""
        labels = self.clusters.get(cluster_name)
        if labels is None:
            return None
        label = labels.get(CLUSTERSET_LABEL)
        return label if label and label in self.cluster_sets else None

    def exists(self, target: Target) -> bool:
        if target.kind == "Fleet":
            return target.name == FLEET_NAME
        if target.kind == "ClusterSet":
            return target.name in self.cluster_sets
        if target.kind == "Cluster":
            return target.name in self.clusters
        return target.cluster is not None and target.cluster in self.clusters

    def path(self, target: Target) -> tuple[Target, ...] | None:
        """The targets from the Fleet down to ``target`` (least specific first), or None
        when ``target`` does not exist."""
        if not self.exists(target):
            return None
        if target.kind == "Fleet":
            return (FLEET,)
        if target.kind == "ClusterSet":
            return (FLEET, target)
        cluster_name = target.name if target.kind == "Cluster" else target.cluster
        assert cluster_name is not None
        steps = [FLEET]
        set_name = self.set_of(cluster_name)
        if set_name is not None:
            steps.append(cluster_set(set_name))
        steps.append(cluster(cluster_name))
        if target.kind == "Namespace":
            steps.append(target)
        return tuple(steps)


def derived_from(target: Target) -> Target | None:
    """Where the effective policy of a target that is not materialised is read: a Namespace
    no policy names has its cluster's effective policy (nothing else is on its path)."""
    if target.kind == "Namespace" and target.cluster is not None:
        return cluster(target.cluster)
    return None


def decision_targets(cluster_name: str, namespace_name: str | None) -> tuple[Target, ...]:
    """The targets a decision reads, first found wins: Namespace C/N, else Cluster C, else
    the Fleet (a cluster the inventory does not know has only the Fleet's policy)."""
    found: list[Target] = []
    if namespace_name:
        found.append(namespace(cluster_name, namespace_name))
    found.append(cluster(cluster_name))
    found.append(FLEET)
    return tuple(found)


def labels_set(labels: Mapping[str, str] | None) -> str | None:
    """The set a cluster's labels name (whether or not that set exists)."""
    if not labels:
        return None
    return labels.get(CLUSTERSET_LABEL) or None
