"""proto-schemas/: JSON Schema for every wire message and an AsyncAPI 3.0.0 document
(``asyncapi.py``), generated from the msgspec Structs in :mod:`clearance_api.wire`
(``--check`` fails on drift)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from clearance_api import wire
from clearance_cli import asyncapi

#: What each request/reply subject of ``wire.REQUESTS`` is for (a subject missing here
#: fails at import: every subject served is documented).
SUMMARIES: dict[str, str] = {
    wire.SUBJECT_CHECK: "One access decision (allow, deny, partial) with optional explanation.",
    wire.SUBJECT_BATCH: "Many decisions for one principal, answered in order.",
    wire.SUBJECT_STATUS: "System revision, service health, policy count, cache statistics.",
    wire.SUBJECT_FILTER: "The visible part of a list, in input order, with recomputed "
                         "aggregations.",
    wire.SUBJECT_METRICS: "Cluster metrics recomputed from the namespaces and nodes the "
                          "principal may see.",
    wire.SUBJECT_CUSTOM_TYPES: "Custom resource types the principal can see somewhere (or in "
                               "one cluster).",
    wire.SUBJECT_REVIEW_SUBJECT: "A SubjectAccessReview in; the same object with status "
                                 "{allowed, reason, evaluationError?} out.",
    wire.SUBJECT_REVIEW_RULES: "The RBAC rules that apply to a user in a namespace "
                               "(SelfSubjectRulesReview shape).",
    wire.SUBJECT_REVIEW_RESOURCE: "Who can: every user and group a binding lets do the "
                                  "request.",
    wire.SUBJECT_SEARCH_FILTER: "ACM search results filtered by RBAC (hub) and "
                                "managedclusterviews (managed).",
    wire.SUBJECT_SEARCH_PLAN: "The same rules as a query plan with SQL for the ACM search "
                              "schema.",
    wire.SUBJECT_POLICY_STATUS: "A MonitorAccessPolicy's state, message, conditions and "
                                "warnings; an AccessPolicy's Accepted and Enforced "
                                "conditions.",
    wire.SUBJECT_EFFECTIVE: "The effective AccessPolicy of a target: each rule in force "
                            "with its source policy and block.",
    wire.SUBJECT_EFFECTIVE_REACH: "Every target whose effective policy holds an "
                                  "AccessPolicy's rules (or one rule).",
    wire.SUBJECT_EFFECTIVE_SIMULATE: "A dry run: per-target rule changes and status changes "
                                     "an AccessPolicy apply or delete would make.",
    wire.SUBJECT_PERMISSIONS: "What the principal may do on every cluster of the inventory.",
    wire.SUBJECT_POLICIES: "Every MonitorAccessPolicy naming the principal, in evaluation "
                           "order.",
    wire.SUBJECT_CACHE_CLEAR: "Drop the cached decisions of one principal, or all of them.",
    wire.SUBJECT_WHO_CAN_SEE: "Who can see a cluster, a namespace or a type there: every "
                              "subject a policy or binding names, with its decision and "
                              "deciding policy, and what everyone else gets.",
}

#: (subject, request or message Struct, reply Struct or None, summary)
CHANNELS: list[tuple[str, type[msgspec.Struct], type[msgspec.Struct] | None, str]] = [
    *((subject, request, reply, SUMMARIES[subject])
      for subject, (request, reply) in wire.REQUESTS.items()),
    ("clearance.events.{kind}.{id}", wire.Event, None,
     "JetStream stream CLEARANCE_EVENTS: one message per change of a watched object."),
    (wire.SUBJECT_DECISIONS_CHANGED, wire.DecisionsChanged, None,
     "Published after each event that can alter cached decisions."),
]
ERROR = wire.ErrorReply


def _dump(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


def render() -> dict[str, str]:
    files: dict[str, str] = {}
    structs: list[Any] = []
    for _, message, reply, _ in CHANNELS:
        structs.append(message)
        if reply is not None:
            structs.append(reply)
    structs.append(ERROR)
    schemas, components = msgspec.json.schema_components(
        structs, ref_template="#/components/schemas/{name}"
    )
    for struct, schema in zip(structs, schemas, strict=True):
        files[f"{struct.__name__}.schema.json"] = _dump(
            {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema,
             "components": {"schemas": components}}
        )
    files["asyncapi.json"] = _dump(asyncapi.render(SUMMARIES, components))
    return files


def main(out: Path, *, check: bool) -> int:
    files = render()
    if check:
        drift = [name for name, text in files.items()
                 if not (out / name).exists() or (out / name).read_text() != text]
        extra = [p.name for p in out.glob("*.json") if p.name not in files]
        if drift or extra:
            print(f"proto-schemas/ is out of date ({', '.join(drift + extra)}): "
                  "run `clearance schemas`", file=sys.stderr)
            return 1
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out / name).write_text(text)
    for path in out.glob("*.json"):
        if path.name not in files:
            path.unlink()
    return 0
