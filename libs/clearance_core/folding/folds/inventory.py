"""The fleet inventory and who belongs where: ManagedClusters, ManagedClusterSets,
OpenShift Groups — each change concerning exactly the answers it can alter.

- A ManagedCluster: checks about it read its labels only through ``matchLabels``
  selectors, so a change invalidates the subjects of the MonitorAccessPolicies whose
  match of that cluster it changes (none, for a policy selecting by names). Its appearing
  or vanishing is announced to everyone (``clearance.v1.permissions`` lists the whole
  inventory). It may also move the cluster (and its namespaces) between cluster sets, or
  make its targets appear or vanish, for inherited policies.
- A ManagedClusterSet: its existence (a cluster's set label only counts for a set that
  exists, for inherited policies); no MonitorAccessPolicy answer depends on it.
- A Group: the users added or removed — only when some policy or AccessPolicy rule names
  the group (invalidated and announced) or some binding does (announced: reviews).
Cluster and set changes feed the inheritance index
(:func:`clearance_core.folding.folds.accesspolicies.follow`).
"""

from __future__ import annotations

from collections.abc import Mapping

from clearance_api.errors import InvalidObject
from clearance_core.folding import narrowing
from clearance_core.folding.fold import Affected, fold_cluster, fold_group
from clearance_core.folding.folds import FoldEvent, FoldResult
from clearance_core.folding.folds.accesspolicies import follow
from clearance_core.folding.model import Model, Writes
from clearance_core.inherit.index import ClusterChanged, ClusterSetChanged
from clearance_core.monitor.evaluate import match_cluster


def fold_cluster_event(model: Model, tx: Writes, event: FoldEvent) -> FoldResult:
    name = event.ref.name
    previous = model.clusters.get(name)
    outcome = "deleted" if event.deleted else "compiled"
    error: str | None = None
    try:
        labels, changed = fold_cluster(event.type, name, event.obj, previous)
    except InvalidObject as exc:
        labels, changed = fold_cluster("DELETED", name, event.obj, previous)
        outcome, error = "invalid", exc.message
    tx.put_cluster(name, labels)
    # Appearing or vanishing: every entry about the cluster goes (below), so which
    # policies' label matches moved need not be worked out.
    whole = previous is None or labels is None
    if changed:
        selecting = Affected() if whole else \
            labels_change(model, name, previous or {}, labels or {})
        tx.invalidate = selecting
        # Appearing or vanishing changes every principal's inventory-wide answers.
        tx.announce = changed if (previous is None) != (labels is None) else selecting.copy()
    if labels is None:
        model.clusters.pop(name, None)
    else:
        model.clusters[name] = labels
    result = FoldResult(outcome, follow(model, tx, ClusterChanged(name, labels), event.seq),
                        error=error)
    # Whatever it changed (labels, set membership, targets), only answers about this
    # cluster and its namespaces can differ: entries about other clusters stay.
    if tx.invalidate.all or whole:
        # A vanished cluster's entries all go: narrowed invalidations (policy and Group
        # changes) keep entries about clusters outside their list, and list only the
        # inventory's (``clearance_core.folding.narrowing``). So do an appearing cluster's: they
        # were answered while it was outside the inventory (no labels, no cluster set, no
        # AccessPolicy targets of its own; a namespace there read the Fleet's rules), and
        # any of that may now read otherwise — for subjects no change names.
        tx.invalidate.all = False
        tx.invalidate.clusters.add(name)
    if (previous is None) != (labels is None):
        # The inventory's names changed: answers about a cluster outside it warned, and
        # suggested the closest name (README: Warnings).
        tx.invalidate.unknown = True
    tx.invalidate.within = {name}
    return result


def labels_change(model: Model, name: str, before: Mapping[str, str],
                  after: Mapping[str, str]) -> Affected:
    """The subjects of the policies whose match of the cluster differs between two label
    sets (which rule matches, and by which selector field: the trace says so)."""
    affected = Affected()
    changed = {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
    if not changed:
        return affected
    for policy in model.policies_selecting_by_labels():
        # matchLabels reads only its own keys: a policy none of whose selectors names a
        # changed key matches as before (and skipping it skips two full matches, the
        # largest part of folding a label change at 2,000 policies).
        if all(changed.isdisjoint(rule.selector.labels) for rule in policy.rules
               if rule.selector.labels):
            continue
        if match_cluster(policy, name, before) != match_cluster(policy, name, after):
            affected.add_policy_subjects(policy)
    return affected


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
    error: str | None = None
    try:
        users, affected = fold_group(event.type, event.obj, previous)
    except InvalidObject as exc:
        users, affected = fold_group("DELETED", event.obj, previous)
        outcome, error = "invalid", exc.message
    tx.put_group(name, previous, users)
    if affected:
        decides = model.group_decides(name)
        if decides:
            tx.invalidate = affected.copy()
            if event.precise and not model.rules_name_group(name):
                tx.invalidate.narrow = narrowing.membership_change(
                    model.clusters, model.policies_naming_group(name))
        if decides or model.rbac.binds_group(name):
            # Reviews read the bindings naming it: announced, though no check changes.
            tx.announce = affected
    if users is None:
        model.groups.pop(name, None)
    else:
        model.groups[name] = users
    return FoldResult(outcome, error=error)
