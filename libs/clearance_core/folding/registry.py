"""Every kind Clearance reads, in one list: the seam a new kind enters through.

Each :class:`KindSpec` says where the kind is served (API group/version, plural,
namespaced: the watcher watches exactly these and its RBAC in ``deploy/`` grants exactly
these), how the compiler folds it (``fold``; ``None`` for kinds that are carried on
the stream but compiled by no fold yet, which still advance the revision), how it
withdraws an object that failed (``withdraw``), whether Clearance writes its status,
whether its fold runs off the event loop, and the stored families it declares
(``clearance_core.folding.families``: the compiler's transaction, its model load and the
decision service's mirror follow them with no code of their own). Adding a kind means
one core module with its fold (and its families), plus one entry here — or, for a kind
defined outside the library, :func:`register`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from clearance_core.folding.families import Family
from clearance_core.folding.folds import (
    Fold,
    FoldEvent,
    FoldResult,
    accesspolicies,
    bindings,
    inventory,
    metricsources,
    policies,
    rbac,
)
from clearance_core.folding.model import Model, Writes

#: Withdraw an object whose fold failed unexpectedly, with the reason (a kind without
#: one is folded as deleted).
Withdraw = Callable[[Model, Writes, FoldEvent, str], FoldResult]
#: Whether an event's fold runs on the compiler's worker thread (it can take long
#: enough to hold the event loop: the lease must go on being renewed).
OffLoop = Callable[[Model], bool]


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
    withdraw: Withdraw | None = None
    off_loop: OffLoop | None = None
    #: The stored families this kind writes that the library does not declare itself
    #: (``families.store`` writes them; the runtime stores, loads and mirrors them).
    families: tuple[Family, ...] = ()
    #: The Kubernetes ``kind`` as its objects spell it ("" : ``kind`` as given).
    name: str = ""

    @property
    def title(self) -> str:
        """The kind as its objects spell it (``MonitorAccessPolicy``)."""
        return self.name or self.kind

    @property
    def group(self) -> str:
        """The API group ("" for the core group)."""
        return self.api_version.rpartition("/")[0]


_RBAC = "rbac.authorization.k8s.io/v1"
_OCM = "cluster.open-cluster-management.io"


def _always(model: Model) -> bool:
    return True


def _with_access_policies(model: Model) -> bool:
    """Once any AccessPolicy exists, a cluster, set or binding event can move policies
    in or out of every target of a set (without one, these folds are quick, and the
    thread's ~70 us would add half a second to a rebuild's 7,400 clusters)."""
    return bool(model.inherit.policies)


SPECS: tuple[KindSpec, ...] = (
    KindSpec("monitoraccesspolicy", "clusterpulse.io/v1alpha1", "monitoraccesspolicies",
             True, policies.fold, writes_status=True, withdraw=policies.withdraw,
             name="MonitorAccessPolicy"),
    KindSpec("metricsource", "clusterpulse.io/v1alpha1", "metricsources", True,
             metricsources.fold, name="MetricSource"),
    KindSpec("accesspolicy", "clearance.io/v1alpha1", "accesspolicies", True,
             accesspolicies.fold, writes_status=True, withdraw=accesspolicies.withdraw,
             off_loop=_always, name="AccessPolicy"),
    KindSpec("managedcluster", f"{_OCM}/v1", "managedclusters", False,
             inventory.fold_cluster_event, off_loop=_with_access_policies,
             name="ManagedCluster"),
    KindSpec("managedclusterset", f"{_OCM}/v1beta2", "managedclustersets", False,
             inventory.fold_cluster_set, off_loop=_with_access_policies,
             name="ManagedClusterSet"),
    KindSpec("managedclustersetbinding", f"{_OCM}/v1beta2", "managedclustersetbindings",
             True, bindings.fold, off_loop=_with_access_policies,
             name="ManagedClusterSetBinding"),
    KindSpec("role", _RBAC, "roles", True, rbac.fold, name="Role"),
    KindSpec("clusterrole", _RBAC, "clusterroles", False, rbac.fold, name="ClusterRole"),
    KindSpec("rolebinding", _RBAC, "rolebindings", True, rbac.fold, name="RoleBinding"),
    KindSpec("clusterrolebinding", _RBAC, "clusterrolebindings", False, rbac.fold,
             name="ClusterRoleBinding"),
    KindSpec("group", "user.openshift.io/v1", "groups", False, inventory.fold_group_event,
             name="Group"),
    KindSpec("namespace", "v1", "namespaces", False, rbac.fold_namespace, name="Namespace"),
    KindSpec("customresourcedefinition", "apiextensions.k8s.io/v1",
             "customresourcedefinitions", False, name="CustomResourceDefinition"),
)
REGISTRY: dict[str, KindSpec] = {spec.kind: spec for spec in SPECS}
#: kind -> (API group/version, plural, namespaced): what the watcher lists and watches.
WATCHED: dict[str, tuple[str, str, bool]] = {
    spec.kind: (spec.api_version, spec.plural, spec.namespaced) for spec in SPECS}
#: The kinds whose status Clearance writes back to the Kubernetes API.
STATUS_WRITTEN: set[str] = {spec.kind for spec in SPECS if spec.writes_status}


#: Moves with every register/unregister: what the runtime derives from the declarations
#: (which hashes are mirrored) is derived again.
_generation = [0]


def generation() -> int:
    return _generation[0]


def register(spec: KindSpec) -> None:
    """Add a kind defined outside the library (call before the services start: they
    read the registry as they watch, fold, load and mirror). A kind already registered
    under that name is refused: two folds of one kind cannot both be right."""
    if spec.kind in REGISTRY:
        raise ValueError(f"kind {spec.kind!r} is already registered")
    if spec.title.lower() != spec.kind:
        raise ValueError(f"kind {spec.kind!r} is spelled {spec.title!r} by its objects")
    known = {family.key for family in declared_families()}
    for family in spec.families:
        if family.key in known:
            raise ValueError(f"family {family.name!r}: hash {family.key!r} is taken")
        if not family.key.startswith("clr:"):
            # Every derived key lives under clr:, which a rebuild wipes whole: a family
            # elsewhere would outlive the state it was derived with.
            raise ValueError(f"family {family.name!r}: hash {family.key!r} is not under clr:")
    REGISTRY[spec.kind] = spec
    WATCHED[spec.kind] = (spec.api_version, spec.plural, spec.namespaced)
    if spec.writes_status:
        STATUS_WRITTEN.add(spec.kind)
    _generation[0] += 1


def unregister(kind: str) -> None:
    """Remove a kind :func:`register` added (tests); the library's own stay."""
    if any(spec.kind == kind for spec in SPECS):
        raise ValueError(f"kind {kind!r} is the library's own")
    REGISTRY.pop(kind, None)
    WATCHED.pop(kind, None)
    STATUS_WRITTEN.discard(kind)
    _generation[0] += 1


def declared_families() -> list[Family]:
    """The families the registered kinds declare (each once, in registration order)."""
    found: dict[str, Family] = {}
    for spec in REGISTRY.values():
        for family in spec.families:
            found.setdefault(family.name, family)
    return list(found.values())
