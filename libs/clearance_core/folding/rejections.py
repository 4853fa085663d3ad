"""Objects the watcher could not publish, and the tombstones that stand in for them.

Some objects can never be put on the stream: one whose event is larger than the NATS
server's ``max_payload``, one whose name or namespace is longer than Kubernetes allows
(:func:`clearance_core.folding.kinds.over_limits`), one the server refuses for good. The watcher
cannot publish the object, but it must not stay silent either: an earlier, valid version
would otherwise stay in force with nothing to say that the object changed.

So the watcher publishes a **tombstone** in its place: the object's identity (kind, name,
namespace, a safe uid, its generation) and the reason, in the reserved annotation
:data:`ANNOTATION`. The compiler treats a tombstone like any object that does not compile:
the previous version is withdrawn whole and the object's status says why (for an
AccessPolicy, ``Accepted`` False ``Invalid`` with the reason). This is the rule for every
invalid object, and it fails closed for Allow rules; note that it withdraws a Deny rule
too, exactly as a Deny policy with a typo is withdrawn.

A producer may set the annotation on an object of its own: that object is then rejected
with the producer's text as the reason. It can only ever withdraw that one object.
"""

from __future__ import annotations

from typing import Any

from clearance_core.folding.kinds import MAX_UID, ObjectRef, safe_uid

ANNOTATION = "clearance.io/rejected"
#: Longest reason kept (the tombstone must stay small whatever the rejected object held).
MAX_REASON = 1000
_SHORT = 256  # apiVersion, kind, resourceVersion: kept only when at most this long


def _short(value: Any) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= _SHORT else None


def tombstone(obj: dict[str, Any], ref: ObjectRef, reason: str) -> dict[str, Any]:
    """The small object published in place of ``obj``, which the watcher rejected."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    kept: dict[str, Any] = {"name": ref.name}
    if ref.namespace:
        kept["namespace"] = ref.namespace
    uid = safe_uid(obj)
    if uid is not None and len(uid) <= MAX_UID:
        kept["uid"] = uid
    generation = meta.get("generation")
    if type(generation) is int and 0 <= generation < 2**63:
        kept["generation"] = generation
    version = _short(meta.get("resourceVersion"))
    if version is not None:
        kept["resourceVersion"] = version
    text = " ".join(reason.split())
    if len(text) > MAX_REASON:
        text = text[:MAX_REASON] + "…"
    kept["annotations"] = {ANNOTATION: text}
    found: dict[str, Any] = {"kind": _short(obj.get("kind")) or ref.kind}
    api_version = _short(obj.get("apiVersion"))
    if api_version is not None:
        found["apiVersion"] = api_version
    found["metadata"] = kept
    return found


def reason_of(obj: Any) -> str | None:
    """The reason if ``obj`` is a tombstone (or carries the reserved annotation)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    notes = meta.get("annotations") if isinstance(meta, dict) else None
    reason = notes.get(ANNOTATION) if isinstance(notes, dict) else None
    if reason is None:
        return None
    text = reason if isinstance(reason, str) else "the rejection annotation is not a string"
    return f"rejected by the watcher: {text[:MAX_REASON]}"
