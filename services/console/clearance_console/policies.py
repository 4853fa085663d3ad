"""Policies by state: what the console knows of every policy's status, from
``clearance.status.>`` events, ``clearance.v1.policy-status`` and (when the decision
service reports it) ``policies_by_state`` of ``clearance.v1.status``.

A MonitorAccessPolicy reports a ``state``; an AccessPolicy only RFC 0009 conditions. Both
are read into one of a few states an operator sorts by:

- ``Active``: in force (an AccessPolicy accepted and enforced, partially or not, or whose
  ``when`` condition could not be evaluated — its message says where);
- ``Invalid``: it takes no effect — does not compile, or its target does not exist;
- ``Unauthorized``: an AccessPolicy that takes no effect because its namespace may not
  write policies for its target (the message names the namespaces that may);
- ``Expired``: a MonitorAccessPolicy past its validity window;
- ``Overridden``: an accepted AccessPolicy none of whose rules is in force anywhere;
- ``Inactive``: a MonitorAccessPolicy disabled or not yet valid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STATES = ("Active", "Invalid", "Unauthorized", "Expired", "Overridden", "Inactive")
#: Status event subject token -> the kind ``clearance.v1.policy-status`` takes.
KINDS = {"monitoraccesspolicy": "MonitorAccessPolicy", "accesspolicy": "AccessPolicy"}


@dataclass
class PolicyView:
    kind: str
    namespace: str
    name: str
    state: str
    reason: str
    message: str
    warnings: list[str] = field(default_factory=list)
    revision: int = 0

    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.namespace, self.name)


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in status.get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition
    return None


def classify(kind: str, namespace: str, name: str, status: dict[str, Any]) -> PolicyView | None:
    """The view of one status body; None when it reports a deletion."""
    if status.get("state") == "Deleted":
        return None
    warnings = [str(w) for w in status.get("warnings") or []]
    revision = int(status.get("revision") or 0)
    view = PolicyView(kind, namespace, name, "Active", "", "", warnings, revision)
    if kind == "MonitorAccessPolicy":
        state = str(status.get("state") or "")
        view.state = {"Active": "Active", "Error": "Invalid", "Expired": "Expired",
                      "Inactive": "Inactive"}.get(state, "Invalid")
        view.message = str(status.get("message") or "")
        failing = [c for c in status.get("conditions") or []
                   if isinstance(c, dict) and c.get("status") != "True"]
        view.reason = str(failing[0].get("reason", "")) if failing else state
        return view
    accepted = _condition(status, "Accepted")
    enforced = _condition(status, "Enforced")
    if accepted is not None and accepted.get("status") != "True":
        view.state = "Unauthorized" if accepted.get("reason") == "Unauthorized" else "Invalid"
        view.reason = str(accepted.get("reason", ""))
        view.message = str(accepted.get("message", ""))
    elif enforced is not None:
        view.reason = str(enforced.get("reason", ""))
        view.message = str(enforced.get("message", ""))
        if enforced.get("status") == "False":
            view.state = "Overridden"
    elif accepted is not None:
        view.reason = str(accepted.get("reason", ""))
        view.message = str(accepted.get("message", ""))
    return view


def from_subject(subject: str) -> tuple[str, str, str] | None:
    """``clearance.status.<kind>.<namespace>.<name>`` -> (Kind, namespace, name). A
    namespace or name a subject cannot carry appears hashed (``_…``); the body does not
    name the object, so the hashed form is what the console shows."""
    parts = subject.split(".", 4)
    if len(parts) != 5 or parts[2] not in KINDS:
        return None
    return KINDS[parts[2]], parts[3], parts[4]


class Registry:
    """Every policy the console has heard of, with its latest status."""

    def __init__(self) -> None:
        self.views: dict[tuple[str, str, str], PolicyView] = {}
        #: Known to exist (from a listing) but whose status is not read yet.
        self.pending: set[tuple[str, str, str]] = set()

    def update(self, kind: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        key = (kind, namespace, name)
        self.pending.discard(key)
        view = classify(kind, namespace, name, status)
        if view is None:
            self.views.pop(key, None)
        else:
            self.views[key] = view

    def forget(self, kind: str, namespace: str, name: str) -> None:
        self.views.pop((kind, namespace, name), None)
        self.pending.discard((kind, namespace, name))

    def learn(self, kind: str, namespace: str, name: str) -> None:
        if (kind, namespace, name) not in self.views:
            self.pending.add((kind, namespace, name))

    def known(self) -> list[tuple[str, str, str]]:
        return sorted(set(self.views) | self.pending)

    def snapshot(self) -> dict[str, Any]:
        counts = dict.fromkeys(STATES, 0)
        rows = []
        for view in sorted(self.views.values(), key=lambda v: (STATES.index(v.state), v.key())):
            counts[view.state] += 1
            rows.append({"kind": view.kind, "namespace": view.namespace, "name": view.name,
                         "state": view.state, "reason": view.reason, "message": view.message,
                         "warnings": view.warnings, "revision": view.revision})
        return {"counts": counts, "policies": rows}


def names_in(by_state: Any) -> list[tuple[str, str, str]]:
    """Policies a ``policies_by_state`` value names, whatever its exact shape: a state's
    value may be a count (nothing to learn), a list of ``"ns/name"`` strings or of objects
    with ``kind``/``namespace``/``name``; a kind-keyed level above the states is read too."""
    found: list[tuple[str, str, str]] = []

    def walk(value: Any, kind: str) -> None:
        if isinstance(value, dict):
            if "name" in value and isinstance(value["name"], str):
                found.append((str(value.get("kind") or kind), str(value.get("namespace") or ""),
                              value["name"]))
                return
            for key, inner in value.items():
                walk(inner, KINDS.get(str(key).lower(), kind))
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, str) and "/" in item:
                    namespace, _, name = item.partition("/")
                    found.append((kind, namespace, name))
                else:
                    walk(item, kind)

    walk(by_state, "MonitorAccessPolicy")
    return [key for key in found if key[0] in KINDS.values()]
