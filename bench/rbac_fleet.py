"""An RBAC fleet for the review benchmarks: 1,000 roles, 5,000 bindings, 2,000 namespaces."""

from __future__ import annotations

from typing import Any

RBAC = "rbac.authorization.k8s.io/v1"
VERBS = (["get", "list", "watch"], ["get"], ["create", "update", "delete"], ["*"])
RESOURCES = (["pods"], ["pods", "pods/log"], ["deployments"], ["configmaps", "secrets"],
             ["*"], ["services"])


def objects() -> list[dict[str, Any]]:
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
    for b in range(5000):
        namespace = f"ns{b % 2000}"
        if b < 500:
            kind, meta = "ClusterRoleBinding", {"name": f"crb{b}"}
            role = {"kind": "ClusterRole", "name": f"cr{b % 200}"}
        else:
            kind, meta = "RoleBinding", {"name": f"rb{b}", "namespace": namespace}
            role = ({"kind": "ClusterRole", "name": f"cr{b % 200}"} if b % 3 else
                    {"kind": "Role", "name": f"r{b % 800}"})
        out.append({"apiVersion": RBAC, "kind": kind, "metadata": meta,
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", **role},
                    "subjects": [{"kind": "User", "name": f"user-{b % 700}"},
                                 {"kind": "Group", "name": f"group-{b % 90}"}]})
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


def review(i: int) -> dict[str, Any]:
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": f"user-{i % 700}", "groups": [f"group-{i % 90}"],
                     "resourceAttributes": {"verb": ("get", "list", "delete")[i % 3],
                                            "resource": ("pods", "secrets", "services")[i % 3],
                                            "namespace": f"ns{i % 2000}"}}}


def who_can(i: int) -> dict[str, Any]:
    return {"verb": ("get", "list", "delete")[i % 3],
            "resource": ("pods", "secrets", "services")[i % 3], "namespace": f"ns{i % 2000}"}
