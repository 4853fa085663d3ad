"""Every kind Clearance reads, in one list: the seam a new kind enters through.

Each :class:`KindSpec` says where the kind is served (API group/version, plural,
namespaced: the watcher watches exactly these and its RBAC in ``deploy/`` grants exactly
these) and how the compiler folds it (``fold``; ``None`` for kinds that are carried on
the stream but compiled by no fold yet, which still advance the revision). Adding a kind
means one core module with its fold, plus one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass

from clearance_core.folding.folds import (
    Fold,
    accesspolicies,
    bindings,
    inventory,
    metricsources,
    policies,
    rbac,
)


@dataclass(frozen=True)
class KindSpec:
    kind: str  # lower-case Kubernetes kind: the stream's <kind> token
    api_version: str
    plural: str
    namespaced: bool
    fold: Fold | None = None
    #: Clearance writes the status subresource of these objects (the watcher, from the
    #: compiler's statuses); a change to an object's status alone is not an event.
    writes_status: bool = False

    @property
    def group(self) -> str:
        """The API group ("" for the core group)."""
        return self.api_version.rpartition("/")[0]


_RBAC = "rbac.authorization.k8s.io/v1"
_OCM = "cluster.open-cluster-management.io"
SPECS: tuple[KindSpec, ...] = (
    KindSpec("monitoraccesspolicy", "clusterpulse.io/v1alpha1", "monitoraccesspolicies",
             True, policies.fold, writes_status=True),
    KindSpec("metricsource", "clusterpulse.io/v1alpha1", "metricsources", True,
             metricsources.fold),
    KindSpec("accesspolicy", "clearance.io/v1alpha1", "accesspolicies", True,
             accesspolicies.fold, writes_status=True),
    KindSpec("managedcluster", f"{_OCM}/v1", "managedclusters", False,
             inventory.fold_cluster_event),
    KindSpec("managedclusterset", f"{_OCM}/v1beta2", "managedclustersets", False,
             inventory.fold_cluster_set),
    KindSpec("managedclustersetbinding", f"{_OCM}/v1beta2", "managedclustersetbindings",
             True, bindings.fold),
    KindSpec("role", _RBAC, "roles", True, rbac.fold),
    KindSpec("clusterrole", _RBAC, "clusterroles", False, rbac.fold),
    KindSpec("rolebinding", _RBAC, "rolebindings", True, rbac.fold),
    KindSpec("clusterrolebinding", _RBAC, "clusterrolebindings", False, rbac.fold),
    KindSpec("group", "user.openshift.io/v1", "groups", False, inventory.fold_group_event),
    KindSpec("namespace", "v1", "namespaces", False, rbac.fold_namespace),
    KindSpec("customresourcedefinition", "apiextensions.k8s.io/v1",
             "customresourcedefinitions", False),
)
REGISTRY: dict[str, KindSpec] = {spec.kind: spec for spec in SPECS}
#: kind -> (API group/version, plural, namespaced): what the watcher lists and watches.
WATCHED: dict[str, tuple[str, str, bool]] = {
    spec.kind: (spec.api_version, spec.plural, spec.namespaced) for spec in SPECS}
#: The kinds whose status Clearance writes back to the Kubernetes API.
STATUS_WRITTEN: frozenset[str] = frozenset(spec.kind for spec in SPECS if spec.writes_status)
