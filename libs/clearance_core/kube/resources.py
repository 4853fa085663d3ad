"""Resource references as requests write them, normalised (README: Principals).

Built-in types may be named singular or plural; replies and ``filters`` keys use the
plural. ``cluster`` is required except for ``type: cluster``, where it defaults to
``name``.
"""

from __future__ import annotations

import hashlib

import msgspec

from clearance_api.errors import BadRequest
from clearance_api.wire import Principal, Resource

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


#: Built-in types whose items live in no namespace. A decision on one of them reads the
#: cluster's target, never a Namespace target, whatever ``namespace`` the request names:
#: otherwise naming a namespace where the principal holds a grant would widen the answer
#: to the cluster object or its nodes.
CLUSTER_SCOPED = frozenset({"cluster", "node"})


def target_namespace(resource: Resource) -> str | None:
    """The namespace whose Namespace target governs ``resource`` (None: the cluster's);
    see :func:`home_namespace`."""
    return home_namespace(resource.type, resource.name, resource.namespace)


def home_namespace(type_name: str, name: str, namespace: str | None) -> str | None:
    """The namespace an item (or whole type, ``name`` ``*``) lives in, from how a request
    names it. A cluster or a node lives in no namespace; a namespace item lives in itself,
    so one named inside another namespace is ``bad_request`` rather than a question
    answered with that other namespace's rules; any other type lives in the namespace the
    request names (a whole type of ``namespaces`` asked with a namespace is asked about
    that one)."""
    kind = singular(type_name)
    if kind in CLUSTER_SCOPED:
        return None
    if kind == "namespace" and name != "*":
        if namespace is not None and namespace != name:
            raise BadRequest(
                f"namespace {name!r} is not inside namespace {namespace!r}: a namespace "
                "item is named by its name alone (omit its namespace, or give the same)")
        return name
    return namespace


def place_of(resource: Resource) -> tuple[str, str | None]:
    """(cluster, namespace of its target) — the checks every resource passes before
    it is looked up or decided (BadRequest otherwise)."""
    try:
        namespace = target_namespace(resource)
    except BadRequest as exc:
        raise BadRequest(f"resource: {exc.message}") from None
    return cluster_of(resource), namespace


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
