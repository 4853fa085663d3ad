"""Kubernetes' verbs and built-in resources, and how a review says a name no RBAC rule
uses (README: RBAC reviews).

A SubjectAccessReview's status has no warnings member, so ``review.subject`` says it in
the deny ``reason``: ``no RBAC rule names verb "lst"``, ``no RBAC rule names resource
"pdos"`` — only when denied, and only when no rule names it, even by ``*``. The command
line's ``can-i`` warns as kubectl does, on stderr: of a verb not among Kubernetes' verbs,
and of a resource that is no built-in Kubernetes resource and that the review says no
rule names.
"""

from __future__ import annotations

#: The verbs of resource requests (kubectl's list: the API verbs and RBAC's special ones).
RESOURCE_VERBS = frozenset({
    "get", "list", "watch", "create", "update", "patch", "delete", "deletecollection",
    "proxy", "use", "bind", "escalate", "impersonate", "approve", "sign", "attest", "*"})
#: The verbs of non-resource requests (HTTP methods, lower case).
NON_RESOURCE_VERBS = frozenset({"get", "put", "post", "head", "options", "delete", "patch",
                                "*"})

#: The resources of Kubernetes' built-in API groups (plural names; with subresources
#: written ``resource/subresource`` a review names the resource alone).
BUILTIN_RESOURCES = frozenset({
    # core
    "bindings", "componentstatuses", "configmaps", "endpoints", "events", "limitranges",
    "namespaces", "nodes", "persistentvolumeclaims", "persistentvolumes", "pods",
    "podtemplates", "replicationcontrollers", "resourcequotas", "secrets",
    "serviceaccounts", "services",
    # apps, batch, autoscaling, policy
    "controllerrevisions", "daemonsets", "deployments", "replicasets", "statefulsets",
    "cronjobs", "jobs", "horizontalpodautoscalers", "poddisruptionbudgets",
    # rbac, authentication, authorization, certificates
    "clusterrolebindings", "clusterroles", "rolebindings", "roles", "tokenreviews",
    "selfsubjectreviews", "localsubjectaccessreviews", "selfsubjectaccessreviews",
    "selfsubjectrulesreviews", "subjectaccessreviews", "certificatesigningrequests",
    # networking, discovery, coordination, events
    "ingressclasses", "ingresses", "networkpolicies", "endpointslices", "leases",
    # storage, node, scheduling, flowcontrol
    "csidrivers", "csinodes", "csistoragecapacities", "storageclasses",
    "volumeattachments", "runtimeclasses", "priorityclasses", "flowschemas",
    "prioritylevelconfigurations",
    # admissionregistration, apiextensions, apiregistration
    "mutatingwebhookconfigurations", "validatingwebhookconfigurations",
    "validatingadmissionpolicies", "validatingadmissionpolicybindings",
    "customresourcedefinitions", "apiservices",
})


def unnamed_verb(verb: str) -> str:
    """The deny reason's note for a verb no RBAC rule names."""
    return f'no RBAC rule names verb "{verb}"'


def unnamed_resource(resource: str) -> str:
    """The deny reason's note for a resource no RBAC rule names."""
    return f'no RBAC rule names resource "{resource}"'


def unknown_verb(verb: str, *, non_resource: bool = False) -> str | None:
    """kubectl's warning for a verb not among Kubernetes' (None: a known verb)."""
    known = NON_RESOURCE_VERBS if non_resource else RESOURCE_VERBS
    return None if verb in known else f"verb '{verb}' is not a known verb"


def unknown_resource(resource: str, reason: str) -> str | None:
    """The warning for a resource that is no built-in Kubernetes resource and that a
    review's ``reason`` says no rule names (None: neither)."""
    if resource in BUILTIN_RESOURCES or unnamed_resource(resource) not in reason:
        return None
    return (f"resource '{resource}' is neither a built-in Kubernetes resource nor named "
            "by any Role or ClusterRole rule")
