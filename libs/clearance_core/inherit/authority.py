"""Who may write an inherited AccessPolicy for which target: the policy authority.

An override binds everyone below it only if nobody below can write one above it. So a
policy takes part only on targets its namespace may govern (on the hub, where policies
live), following how Open Cluster Management scopes a fleet:

* the **Fleet** and every target below it: the admin namespaces
  (``CLEARANCE_ADMIN_NAMESPACES``, default ``clearance-system``);
* a **ClusterSet** S and the clusters in it: a namespace holding a
  ManagedClusterSetBinding to S (OCM's way of letting a namespace use a set);
* a **Cluster** C and its namespaces: the hub namespace named C (OCM's cluster namespace);
* a **Namespace** C/N: the hub namespace named N (namespace sameness).

Governing is downward closed — whoever may govern a target may govern every target below
it — so a policy's authority is decided at its own target, once, and holds on its whole
scope. A ManagedClusterSetBinding binds only under its set's name (OCM refuses one whose
``metadata.name`` differs from ``spec.clusterSet``): a mismatched one binds nothing, and
the Unauthorized message of a policy that needed it says why.

Pure: the caller says which set a cluster is in and which namespaces are bound to a set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.words import LIST_LIMIT, listed

DEFAULT_ADMIN_NAMESPACES = ("clearance-system",)


def parse_namespaces(text: str) -> tuple[str, ...]:
    """``CLEARANCE_ADMIN_NAMESPACES``: comma-separated, blanks dropped, each once, sorted."""
    return tuple(sorted({part.strip() for part in text.split(",") if part.strip()}))


@dataclass(frozen=True)
class Authority:
    """The admin namespaces: they may write policies for any target."""

    admin: frozenset[str] = frozenset(DEFAULT_ADMIN_NAMESPACES)

    @classmethod
    def of(cls, namespaces: Iterable[str]) -> Authority:
        return cls(frozenset(namespaces))

    def token(self) -> str:
        """How the compiled state records which authority it was built with."""
        return ",".join(sorted(self.admin))

    def writers(self, target: Target, set_of: str | None) -> Writers:
        """Who may write policies for ``target``; ``set_of``: the (existing) ClusterSet
        of the target's cluster, for a Cluster or Namespace target."""
        admin = self.admin
        if target.kind == "ClusterSet":
            return Writers(admin, (), target.name)
        if target.kind == "Cluster":
            return Writers(admin, ((target.name, "the cluster's namespace"),), set_of)
        if target.kind == "Namespace" and target.cluster is not None:
            return Writers(admin, ((target.name, "the namespace of the same name"),
                                   (target.cluster, "the cluster's namespace")), set_of)
        return Writers(admin, (), None)


@dataclass(frozen=True)
class Writers:
    """The namespaces that may write policies for one target."""

    admin: frozenset[str]
    #: (namespace, why) named by the target itself.
    named: tuple[tuple[str, str], ...]
    #: A namespace with a ManagedClusterSetBinding to this set may too (None: no set).
    bound_set: str | None

    def allow(self, namespace: str, bound: Callable[[str, str], bool]) -> bool:
        """Whether ``namespace`` may write; ``bound(namespace, set)``: whether it holds a
        ManagedClusterSetBinding to that set."""
        if namespace in self.admin or any(namespace == name for name, _ in self.named):
            return True
        return self.bound_set is not None and bound(namespace, self.bound_set)

    def describe(self) -> str:
        admin = sorted(self.admin)
        parts = [f"the admin namespaces ({listed(admin[:LIST_LIMIT], len(admin))})"
                 if admin else "no admin namespace"]
        parts += [f"{name} ({why})" for name, why in self.named]
        if self.bound_set is not None:
            parts.append(f"a namespace with a ManagedClusterSetBinding to {self.bound_set}")
        return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]


def unauthorized(namespace: str, target: Target, writers: Writers,
                 mismatched: Iterable[str] = ()) -> str:
    """The ``Accepted`` message of a policy its namespace may not write; ``mismatched``:
    the names of the namespace's ManagedClusterSetBindings that name the set it would
    need but bind nothing (named otherwise than their set)."""
    text = (f"Policy namespace {namespace} may not govern {target}: only "
            f"{writers.describe()} may write policies for it")
    wrong = sorted(set(mismatched))
    if wrong and writers.bound_set is not None:
        shown = listed([f"{namespace}/{name}" for name in wrong[:3]], len(wrong))
        text += (f". ManagedClusterSetBinding {shown} binds nothing: a binding must be "
                 f"named as its spec.clusterSet ({writers.bound_set})")
    return text
