"""What the watcher writes to a policy's status subresource, from the compiler's status.

Pure: the watcher supplies the status the API shows now and the time, and sends the
merge patch :func:`patch` returns (None: nothing to write). The same compiler status
and the same live status always give the same answer, so two writers (a standby that
was paused while holding the lease) converge instead of fighting: the only time-valued
field, a condition's ``lastTransitionTime``, is kept from the live status while that
condition's ``status`` holds, as Kubernetes' conventions ask.

The printer columns (``kubectl get``) read ``.status.state`` and ``.status.message``. A
MonitorAccessPolicy's are ClusterPulse's (Active, Inactive, Error, Expired); an
AccessPolicy's come from its RFC 0009 conditions: the ``Accepted`` reason while it is not
accepted (Invalid, TargetNotFound, Unauthorized), else the ``Enforced`` reason (Enforced,
PartiallyEnforced, Overridden, Unknown), with that condition's message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from clearance_api.wire import PolicyStatus, StatusCondition

#: The fields of ``.status`` Clearance owns: a patch sets them all (null removes one).
OWNED = ("state", "message", "conditions", "warnings", "observedGeneration")


def summary(status: PolicyStatus) -> tuple[str, str]:
    """``(state, message)`` for the printer columns."""
    if status.state is not msgspec.UNSET:
        message = status.message if isinstance(status.message, str) else ""
        return status.state, message
    by_type = {c.type: c for c in status.conditions}
    accepted, enforced = by_type.get("Accepted"), by_type.get("Enforced")
    shown = accepted if accepted is not None and accepted.status != "True" else \
        enforced or accepted
    return (shown.reason, shown.message) if shown is not None else ("Unknown", "")


def desired(status: PolicyStatus, generation: int | None, live: Mapping[str, Any],
            now: str) -> dict[str, Any]:
    """The owned part of ``.status`` for the compiler's ``status`` of the object's
    ``generation``, given the ``live`` status (for the transition times) and ``now``
    (RFC 3339)."""
    state, message = summary(status)
    body: dict[str, Any] = {
        "state": state,
        "message": message,
        "conditions": [_condition(c, generation, live, now) for c in status.conditions],
    }
    if status.warnings:
        body["warnings"] = list(status.warnings)
    if generation is not None:
        body["observedGeneration"] = generation
    return body


def patch(want: Mapping[str, Any], live: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch's ``status`` that makes ``live`` show ``want``; None if it does."""
    if {k: live[k] for k in OWNED if k in live} == dict(want):
        return None
    return {**{k: None for k in OWNED if k in live and k not in want}, **want}


def _condition(c: StatusCondition, generation: int | None, live: Mapping[str, Any],
               now: str) -> dict[str, Any]:
    since = now
    for before in live.get("conditions") or []:
        if isinstance(before, dict) and before.get("type") == c.type:
            kept = before.get("lastTransitionTime")
            if before.get("status") == c.status and isinstance(kept, str) and kept:
                since = kept
            break
    out: dict[str, Any] = {"type": c.type, "status": c.status, "reason": c.reason,
                           "message": c.message, "lastTransitionTime": since}
    if generation is not None:
        out["observedGeneration"] = generation
    return out
