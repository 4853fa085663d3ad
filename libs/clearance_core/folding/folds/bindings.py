"""ManagedClusterSetBinding (``cluster.open-cluster-management.io/v1beta2``): which hub
namespaces may use which cluster sets — here, write AccessPolicies for a ClusterSet and
the clusters in it (:mod:`clearance_core.inherit.authority`).

A binding binds its namespace to ``spec.clusterSet`` only when its ``metadata.name`` is
that set's name, as Open Cluster Management requires (it refuses any other binding).
One named otherwise is kept, binds nothing, and is counted ``invalid``; the
``Unauthorized`` status of every policy in its namespace that needed the set says so. A
binding without a namespace or without a ``spec.clusterSet`` string binds nothing either.

Each change becomes one index event (:func:`clearance_core.folding.folds.accesspolicies.follow`):
the policies of the binding's namespace that it moves in or out of authority take part
or stop, their targets are recomputed, their subjects' cached decisions go and their
statuses are published — a revoked binding takes effect like any policy change.
"""

from __future__ import annotations

from typing import Any

from clearance_api.errors import InvalidObject
from clearance_core.folding.folds import FoldEvent, FoldResult
from clearance_core.folding.folds.accesspolicies import follow
from clearance_core.folding.model import Model, Writes
from clearance_core.inherit.index import BindingChanged
from clearance_core.kube import strict

KIND = "managedclustersetbinding"


def cluster_set_of(obj: Any) -> str:
    """``spec.clusterSet`` (InvalidObject when it is not a non-empty string, or the
    binding has a field OCM's does not)."""
    strict.check_object(KIND, obj)
    spec = obj.get("spec") if isinstance(obj, dict) else None
    found = spec.get("clusterSet") if isinstance(spec, dict) else None
    if not isinstance(found, str) or not found:
        raise InvalidObject("spec.clusterSet must be a non-empty string")
    return found


def fold(model: Model, tx: Writes, event: FoldEvent) -> FoldResult:
    namespace, name = event.ref.namespace, event.ref.name
    set_name: str | None = None
    error: str | None = None
    if event.deleted:
        outcome = "deleted"
    elif not namespace:
        # A binding is namespaced: without one it binds nothing.
        outcome, error = "invalid", "metadata.namespace is required"
    else:
        try:
            set_name = cluster_set_of(event.obj)
        except InvalidObject as exc:
            outcome, error = "invalid", exc.message
        else:
            # Named otherwise than its set: OCM refuses it, so it binds nothing here
            # either (kept, so the policies that needed it can say why).
            outcome = "compiled" if set_name == name else "invalid"
            if set_name != name:
                error = (f"metadata.name must be its spec.clusterSet ({set_name!r}): "
                         "it binds nothing")
    tx.put_cluster_set_binding(namespace, name, set_name)
    change = BindingChanged(namespace, name, set_name)
    return FoldResult(outcome, follow(model, tx, change, event.seq), error=error)
