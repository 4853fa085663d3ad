"""The fleet inventory and who belongs where: ManagedClusters, ManagedClusterSets,
OpenShift Groups.

- A ManagedCluster: its labels (policies select by them; inherited policies read the
  cluster-set label). Any change of existence or labels concerns every answer about it;
  it may also move the cluster (and its namespaces) between cluster sets, and make its
  targets appear or vanish, for inherited policies.
- A ManagedClusterSet: its existence (a cluster's set label only counts for a set that
  exists, for inherited policies); no MonitorAccessPolicy answer depends on it.
Both feed the inheritance index (:func:`clearance_core.folds.accesspolicies.follow`).
- A Group: the users added or removed.
"""

from __future__ import annotations

from clearance_core.errors import InvalidObject
from clearance_core.fold import fold_cluster, fold_group
from clearance_core.folds import FoldEvent, FoldResult
from clearance_core.folds.accesspolicies import follow
from clearance_core.inherit_index import ClusterChanged, ClusterSetChanged
from clearance_core.model import Model, Writes


def fold_cluster_event(model: Model, tx: Writes, event: FoldEvent) -> FoldResult:
    name = event.ref.name
    previous = model.clusters.get(name)
    outcome = "deleted" if event.deleted else "compiled"
    try:
        labels, affected = fold_cluster(event.type, name, event.obj, previous)
    except InvalidObject:
        labels, affected = fold_cluster("DELETED", name, event.obj, previous)
        outcome = "invalid"
    tx.put_cluster(name, labels)
    tx.announce, tx.invalidate = affected, affected.copy()
    if labels is None:
        model.clusters.pop(name, None)
    else:
        model.clusters[name] = labels
    return FoldResult(outcome, follow(model, tx, ClusterChanged(name, labels), event.seq))


def fold_cluster_set(model: Model, tx: Writes, event: FoldEvent) -> FoldResult:
    present = not event.deleted
    tx.put_cluster_set(event.ref.name, present=present)
    if present:
        model.cluster_sets.add(event.ref.name)
    else:
        model.cluster_sets.discard(event.ref.name)
    statuses = follow(model, tx, ClusterSetChanged(event.ref.name, present), event.seq)
    return FoldResult("compiled" if present else "deleted", statuses)


def fold_group_event(model: Model, tx: Writes, event: FoldEvent) -> FoldResult:
    name = event.ref.name
    previous = model.groups.get(name)
    outcome = "deleted" if event.deleted else "compiled"
    try:
        users, affected = fold_group(event.type, event.obj, previous)
    except InvalidObject:
        users, affected = fold_group("DELETED", event.obj, previous)
        outcome = "invalid"
    tx.put_group(name, previous, users)
    tx.announce, tx.invalidate = affected, affected.copy()
    if users is None:
        model.groups.pop(name, None)
    else:
        model.groups[name] = users
    return FoldResult(outcome)
