"""Resource references as requests write them, normalised (CONTRACT section 2).

Built-in types may be named singular or plural; replies and ``filters`` keys use the
plural. ``cluster`` is required except for ``type: cluster``, where it defaults to
``name``.
"""

from __future__ import annotations

import hashlib

import msgspec

from clearance_core.errors import BadRequest
from clearance_core.wire import Principal, Resource

BUILTIN_PLURALS = {
    "cluster": "clusters",
    "node": "nodes",
    "namespace": "namespaces",
    "operator": "operators",
    "pod": "pods",
    "alert": "alerts",
    "event": "events",
}
_SINGULAR = {plural: singular for singular, plural in BUILTIN_PLURALS.items()}


def singular(type_name: str) -> str:
    """``pods`` -> ``pod``; custom type names are returned unchanged."""
    return _SINGULAR.get(type_name, type_name)


def plural(type_name: str) -> str:
    return BUILTIN_PLURALS.get(singular(type_name), type_name)


def cluster_of(resource: Resource) -> str:
    """The cluster a resource lives in, or BadRequest."""
    if singular(resource.type) == "cluster":
        cluster = resource.cluster or (resource.name if resource.name != "*" else None)
        if not cluster:
            raise BadRequest("resource: a cluster check needs resource.name (or cluster)")
        return cluster
    if not resource.cluster:
        raise BadRequest(f"resource.cluster is required for type {resource.type!r}")
    return resource.cluster


def check_principal(principal: Principal) -> None:
    if not principal.username:
        raise BadRequest("principal.username must not be empty")


# JSON, not msgpack: a request may carry any JSON number, and msgpack has no form for an
# integer beyond 64 bits (it would raise, and fail the request for want of a cache key).
# JSON writes non-finite floats as null, which is harmless here: filters compare both as
# an absent value, so the two requests have the same answer.
_digest_encoder = msgspec.json.Encoder(order="sorted")


def principal_digest(principal: Principal) -> str:
    """A collision-resistant name for (username, groups as a set, email)."""
    material = (principal.username, sorted(set(principal.groups)), principal.email)
    return hashlib.blake2b(_digest_encoder.encode(material), digest_size=16).hexdigest()


def decision_digest(principal_key: str, action: str, resource: Resource, cluster: str) -> str:
    """Cache key of one decision: the principal, the action, the normalised resource."""
    material = (
        principal_key,
        action,
        singular(resource.type),
        cluster,
        resource.name,
        resource.namespace,
        resource.labels,
        resource.fields,
    )
    return hashlib.blake2b(_digest_encoder.encode(material), digest_size=16).hexdigest()
