"""How an object on the event stream is identified (the kinds are in ``registry``).

An object is identified by kind, namespace and name taken from the object itself
(README: Events); the subject's ``<id>`` token is only a routing hint.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import msgspec

from clearance_api.errors import InvalidObject


class ObjectRef(msgspec.Struct, frozen=True, order=True):
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


#: The registry's kinds, by the ``kind`` a producer writes (any case): filled on first
#: use, because the registry's folds name objects by ObjectRef (an import at the top
#: would be circular).
_KINDS: dict[str, str] = {}


def kind_of(obj: dict[str, Any]) -> str:
    kind = obj.get("kind")
    if type(kind) is str and (known := _KINDS.get(kind)) is not None:
        return known
    from clearance_core.folding.registry import REGISTRY  # noqa: PLC0415 - see _KINDS

    if not isinstance(kind, str) or kind.lower() not in REGISTRY:
        raise InvalidObject(f"unsupported kind {kind!r}")
    if len(_KINDS) < 4 * len(REGISTRY):  # bounded: every case of a name is a new key
        _KINDS[kind] = kind.lower()
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


#: Kubernetes' limits: a name is at most a DNS subdomain (253), a namespace a DNS label
#: (63); a uid is a UUID (36), and one longer than this is not a Kubernetes uid.
MAX_NAME, MAX_NAMESPACE, MAX_UID = 253, 63, 128
_UID = re.compile(r"[A-Za-z0-9_-]+")


def safe_uid(obj: dict[str, Any]) -> str | None:
    """``metadata.uid`` if a subject token (and a message id) can carry it as it is:
    ASCII letters, digits, ``-`` and ``_``, at most :data:`MAX_UID` characters."""
    uid = (obj.get("metadata") or {}).get("uid")
    if isinstance(uid, str) and 0 < len(uid) <= MAX_UID and _UID.fullmatch(uid):
        return uid
    return None


def subject_token(obj: dict[str, Any], ref: ObjectRef) -> str:
    """``metadata.uid`` when it is NATS-safe, else a token derived from namespace/name.

    An unsafe or over-long uid counts as absent: a 5,000-character uid made a subject
    NATS refused by closing the connection (its control line is limited to 4 KB)."""
    uid = safe_uid(obj)
    if uid is not None:
        return uid
    digest = hashlib.sha256(f"{ref.namespace}/{ref.name}".encode()).hexdigest()[:24]
    return f"n-{digest}"


def over_limits(ref: ObjectRef) -> str | None:
    """Why an object's name or namespace is beyond what Kubernetes allows (None: it is
    not). The watcher rejects such an object: no API server serves one."""
    if len(ref.name) > MAX_NAME:
        return f"metadata.name is {len(ref.name):,} characters; the limit is {MAX_NAME}"
    if len(ref.namespace) > MAX_NAMESPACE:
        return (f"metadata.namespace is {len(ref.namespace):,} characters; the limit is "
                f"{MAX_NAMESPACE}")
    return None


def status_subject(ref: ObjectRef) -> str:
    """``clearance.status.<kind>.<namespace>.<name>``: one subject per object, never the
    same for two (a status is written back to the object its subject names).

    The namespace is exactly one token: ``_`` for none, the namespace itself when it is a
    Kubernetes namespace name (a DNS label: no dot, no ``_``), else ``_`` and a hash of
    it. The name is the rest of the subject: itself when a subject carries it as it is
    (dotted names stay readable; ``clearance.status.>`` still matches) and it holds no
    ``_``, else ``_`` and a hash of it. A hashed form starts with ``_``, which neither a
    namespace nor a name carried as it is can, so the namespace token ends at the first
    dot after the kind, and no object's subject is another's.
    """
    return f"clearance.status.{ref.kind}.{_namespace_token(ref.namespace)}.{_name_part(ref.name)}"


#: A Kubernetes namespace name (RFC 1123 label): lower-case letters, digits and ``-``.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
#: A name carried as it is: ASCII letters, digits and ``-:@``, dot-separated parts none of
#: them empty. Its length (at most 253, a DNS subdomain's) is checked first: NATS closes a
#: connection whose control line passes 4 KB.
_NAME = re.compile(r"[A-Za-z0-9:@-]+(\.[A-Za-z0-9:@-]+)*")


def _namespace_token(namespace: str) -> str:
    if not namespace:
        return "_"
    if _DNS_LABEL.fullmatch(namespace) is not None:
        return namespace
    return _hashed(namespace)


def _name_part(name: str) -> str:
    if 0 < len(name) <= 253 and _NAME.fullmatch(name) is not None:
        return name
    return _hashed(name)


def _hashed(text: str) -> str:
    """``_`` and 128 bits of the text's SHA-256: one token, unlike any carried as it is."""
    return "_" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def event_subject(obj: dict[str, Any], ref: ObjectRef) -> str:
    return f"clearance.events.{ref.kind}.{subject_token(obj, ref)}"


def content_hash(obj: dict[str, Any]) -> str:
    return hashlib.sha256(msgspec.json.encode(obj, order="sorted")).hexdigest()[:16]
