"""An RBAC fleet for the review benchmarks: 1,000 roles, 5,000 bindings, 2,000 namespaces
(and the same shape at 50,000 bindings for who-can at scale: ``objects(BINDINGS_AT_SCALE)``)."""

from __future__ import annotations

from typing import Any

RBAC = "rbac.authorization.k8s.io/v1"
VERBS = (["get", "list", "watch"], ["get"], ["create", "update", "delete"], ["*"])
RESOURCES = (["pods"], ["pods", "pods/log"], ["deployments"], ["configmaps", "secrets"],
             ["*"], ["services"])
BINDINGS = 5000
BINDINGS_AT_SCALE = 50_000
#: The first 500 bindings are ClusterRoleBindings, at any scale (a cluster has a few
#: hundred; its RoleBindings grow with its namespaces and teams).
CLUSTER_BINDINGS = 500


def users(bindings: int = BINDINGS) -> int:
    """How many distinct users the bindings name: 700 at 5,000 bindings, 7,000 at 50,000."""
    return max(700, bindings * 7 // 50)


def groups(bindings: int = BINDINGS) -> int:
    """How many distinct groups: 90 at 5,000 bindings, 900 at 50,000."""
    return max(90, bindings * 9 // 500)


def objects(bindings: int = BINDINGS) -> list[dict[str, Any]]:
    """The 1,000 roles, then ``bindings`` bindings naming ``users(bindings)`` users and
    ``groups(bindings)`` groups."""
    return [*roles(), *bound(bindings)]


def roles() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r in range(200):
        out.append({"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": f"cr{r}"},
                    "rules": [{"apiGroups": ["", "apps"], "resources": RESOURCES[r % 6],
                               "verbs": VERBS[r % 4]}]})
    for r in range(800):
        out.append({"apiVersion": RBAC, "kind": "Role",
                    "metadata": {"name": f"r{r}", "namespace": f"ns{r % 2000}"},
                    "rules": [{"apiGroups": [""], "resources": RESOURCES[r % 6],
                               "verbs": VERBS[(r + 1) % 4]}]})
    return out


def bound(bindings: int = BINDINGS) -> list[dict[str, Any]]:
    """The fleet's ``bindings`` ClusterRoleBindings and RoleBindings."""
    n_users, n_groups = users(bindings), groups(bindings)
    out: list[dict[str, Any]] = []
    for b in range(bindings):
        namespace = f"ns{b % 2000}"
        if b < CLUSTER_BINDINGS:
            kind, meta = "ClusterRoleBinding", {"name": f"crb{b}"}
            role = {"kind": "ClusterRole", "name": f"cr{b % 200}"}
        else:
            kind, meta = "RoleBinding", {"name": f"rb{b}", "namespace": namespace}
            role = ({"kind": "ClusterRole", "name": f"cr{b % 200}"} if b % 3 else
                    {"kind": "Role", "name": f"r{b % 800}"})
        out.append({"apiVersion": RBAC, "kind": kind, "metadata": meta,
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", **role},
                    "subjects": [{"kind": "User", "name": f"user-{b % n_users}"},
                                 {"kind": "Group", "name": f"group-{b % n_groups}"}]})
    return out


def hub() -> dict[str, Any]:
    return {"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": "local-cluster", "labels": {"local-cluster": "true"}}}


def search_items(n: int) -> list[dict[str, Any]]:
    """Hub and managed-cluster results, the way ACM search returns them."""
    kinds = (("", "pods", "Pod"), ("apps", "deployments", "Deployment"),
             ("", "secrets", "Secret"), ("", "services", "Service"))
    out = []
    for i in range(n):
        group, resource, kind = kinds[i % 4]
        out.append({"cluster": "local-cluster" if i % 2 else f"c{i % 200}", "group": group,
                    "resource": resource, "kind": kind, "namespace": f"ns{i % 2000}",
                    "name": f"{resource}-{i}"})
    return out


def review(i: int, bindings: int = BINDINGS) -> dict[str, Any]:
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": f"user-{i % users(bindings)}",
                     "groups": [f"group-{i % groups(bindings)}"],
                     "resourceAttributes": {"verb": ("get", "list", "delete")[i % 3],
                                            "resource": ("pods", "secrets", "services")[i % 3],
                                            "namespace": f"ns{i % 2000}"}}}


def who_can(i: int) -> dict[str, Any]:
    return {"verb": ("get", "list", "delete")[i % 3],
            "resource": ("pods", "secrets", "services")[i % 3], "namespace": f"ns{i % 2000}"}
