"""Builders for Kubernetes RBAC objects: compact strings like the Go tests'
``newRule("get,list", "", "pods", "")`` (``rule``, ``cr``, ``crb``, ``rb``, ``role``), and
the spelled-out ``cluster_role`` and ``binding``."""

from __future__ import annotations

from typing import Any

V1 = "rbac.authorization.k8s.io/v1"
RBAC = V1



def rule(verbs: str = "*", groups: str = "", resources: str = "", names: str = "",
         urls: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"verbs": verbs.split(",")}
    if resources:
        out["apiGroups"] = groups.split(",")
        out["resources"] = resources.split(",")
    if names:
        out["resourceNames"] = names.split(",")
    if urls:
        out["nonResourceURLs"] = urls.split(",")
    return out


def cr(name: str, *rules: dict[str, Any], labels: dict[str, str] | None = None,
       aggregate: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": V1, "kind": "ClusterRole",
                           "metadata": {"name": name, "labels": labels or {}},
                           "rules": list(rules)}
    if aggregate is not None:
        obj["aggregationRule"] = {"clusterRoleSelectors": aggregate}
    return obj


def role(ns: str, name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": V1, "kind": "Role", "metadata": {"name": name, "namespace": ns},
            "rules": list(rules)}


def subjects(specs: tuple[str, ...]) -> list[dict[str, str]]:
    """``User:alice``, ``Group:g``, ``ServiceAccount:name`` or ``ServiceAccount:ns/name``."""
    out = []
    for spec in specs:
        kind, name = spec.split(":", 1)
        subject = {"kind": kind, "name": name}
        if kind == "ServiceAccount" and "/" in name:
            subject["namespace"], subject["name"] = name.split("/")
        out.append(subject)
    return out


def crb(name: str, role_name: str, *specs: str) -> dict[str, Any]:
    return {"apiVersion": V1, "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role_name},
            "subjects": subjects(specs)}


def rb(ns: str, name: str, ref: str, *specs: str) -> dict[str, Any]:
    """``ref`` is ``Role:name`` or ``ClusterRole:name``."""
    kind, role_name = ref.split(":")
    return {"apiVersion": V1, "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind,
                        "name": role_name},
            "subjects": subjects(specs)}


def cluster_role(name: str, rules: list[dict[str, Any]], **labels: str) -> dict[str, Any]:
    return {"apiVersion": RBAC, "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels}, "rules": rules}


def binding(kind: str, name: str, role: tuple[str, str], subjects: list[dict[str, str]],
            namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": RBAC, "kind": kind, "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role[0],
                        "name": role[1]},
            "subjects": subjects}
