"""The kinds of objects on the event stream and how each is identified.

An object is identified by kind, namespace and name taken from the object itself
(CONTRACT section 1); the subject's ``<id>`` token is only a routing hint.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from clearance_core.errors import InvalidObject

#: Lower-case kind -> (API group/version, plural, namespaced). The watcher watches
#: exactly these; the stream carries them under ``clearance.events.<kind>.<id>``.
KINDS: dict[str, tuple[str, str, bool]] = {
    "monitoraccesspolicy": ("clusterpulse.io/v1alpha1", "monitoraccesspolicies", True),
    "metricsource": ("clusterpulse.io/v1alpha1", "metricsources", True),
    "accesspolicy": ("clearance.io/v1alpha1", "accesspolicies", True),
    "managedcluster": ("cluster.open-cluster-management.io/v1", "managedclusters", False),
    "managedclusterset": (
        "cluster.open-cluster-management.io/v1beta2", "managedclustersets", False,
    ),
    "role": ("rbac.authorization.k8s.io/v1", "roles", True),
    "clusterrole": ("rbac.authorization.k8s.io/v1", "clusterroles", False),
    "rolebinding": ("rbac.authorization.k8s.io/v1", "rolebindings", True),
    "clusterrolebinding": ("rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "group": ("user.openshift.io/v1", "groups", False),
    "namespace": ("v1", "namespaces", False),
    "customresourcedefinition": ("apiextensions.k8s.io/v1", "customresourcedefinitions", False),
}


class ObjectRef(msgspec.Struct, frozen=True, order=True):
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


def kind_of(obj: dict[str, Any]) -> str:
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind.lower() not in KINDS:
        raise InvalidObject(f"unsupported kind {kind!r}")
    return kind.lower()


def ref_of(obj: dict[str, Any]) -> ObjectRef:
    """Kind, namespace and name of a Kubernetes object (InvalidObject if absent)."""
    kind = kind_of(obj)
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise InvalidObject("metadata is required")
    name = meta.get("name")
    namespace = meta.get("namespace") or ""
    if not isinstance(name, str) or not name or not isinstance(namespace, str):
        raise InvalidObject("metadata.name (and metadata.namespace, if any) must be strings")
    return ObjectRef(kind, namespace, name)


def subject_token(obj: dict[str, Any], ref: ObjectRef) -> str:
    """``metadata.uid`` when it is NATS-safe, else a token derived from namespace/name."""
    uid = (obj.get("metadata") or {}).get("uid")
    if isinstance(uid, str) and uid and all(c.isalnum() or c in "-_" for c in uid):
        return uid
    digest = hashlib.sha256(f"{ref.namespace}/{ref.name}".encode()).hexdigest()[:24]
    return f"n-{digest}"


def event_subject(obj: dict[str, Any], ref: ObjectRef) -> str:
    return f"clearance.events.{ref.kind}.{subject_token(obj, ref)}"


def content_hash(obj: dict[str, Any]) -> str:
    return hashlib.sha256(msgspec.json.encode(obj, order="sorted")).hexdigest()[:16]
