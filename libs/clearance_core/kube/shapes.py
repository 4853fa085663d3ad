"""The fields of the kinds Clearance reads but does not define, for the strict checker
(:mod:`clearance_core.kube.strict`), in the same OpenAPI structure as the generated
:mod:`clearance_core.kube.crd_shapes`.

Each is what the owner's own schema accepts — an object Kubernetes (or OpenShift, or Open
Cluster Management) would store must never be invalid here — and only for the parts
Clearance reads:

* Roles and ClusterRoles (``rbac.authorization.k8s.io/v1``): ``rules`` (PolicyRule) and a
  ClusterRole's ``aggregationRule`` (``clusterRoleSelectors``, metav1.LabelSelector);
* RoleBindings and ClusterRoleBindings: ``roleRef`` (RoleRef: ``apiGroup``, ``kind``,
  ``name``) and ``subjects`` (Subject: ``kind``, ``apiGroup``, ``name``, ``namespace``);
* Groups (``user.openshift.io/v1``): ``users`` (no spec);
* ManagedClusterSetBindings (``cluster.open-cluster-management.io/v1beta2``): ``spec``,
  whose only field is ``clusterSet``.

ManagedClusters, ManagedClusterSets and hub Namespaces are not checked: Clearance reads
only their metadata (labels, existence), and their spec is theirs.
"""

from __future__ import annotations

from typing import Any

_STRINGS: dict[str, Any] = {}
_TOP: dict[str, Any] = {"apiVersion": {}, "kind": {}, "metadata": {}}

#: rbac/v1 PolicyRule.
_POLICY_RULE = {"properties": {name: _STRINGS for name in (
    "apiGroups", "resources", "resourceNames", "nonResourceURLs", "verbs")}}
#: meta/v1 LabelSelector.
_LABEL_SELECTOR = {"properties": {
    "matchLabels": {"additionalProperties": {}},
    "matchExpressions": {"items": {"properties": {"key": {}, "operator": {}, "values": {}}}},
}}
_RULES = {"items": _POLICY_RULE}
_BINDING = {"properties": {
    **_TOP,
    "roleRef": {"properties": {"apiGroup": {}, "kind": {}, "name": {}}},
    "subjects": {"items": {"properties": {"kind": {}, "apiGroup": {}, "name": {},
                                          "namespace": {}}}},
}}

SCHEMAS: dict[str, dict[str, Any]] = {
    "role": {"properties": {**_TOP, "rules": _RULES}},
    "clusterrole": {"properties": {
        **_TOP, "rules": _RULES,
        "aggregationRule": {"properties": {"clusterRoleSelectors": {"items": _LABEL_SELECTOR}}},
    }},
    "rolebinding": _BINDING,
    "clusterrolebinding": _BINDING,
    "group": {"properties": {**_TOP, "users": {}}},
    "managedclustersetbinding": {"properties": {
        **_TOP, "spec": {"properties": {"clusterSet": {}}}, "status": {}}},
}
