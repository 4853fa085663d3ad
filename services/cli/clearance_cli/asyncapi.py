"""The AsyncAPI 3.0.0 document of Clearance, as the decision service and the pipeline
see it: every request/reply subject (an operation the service receives, with its reply
on the requester's inbox), the event stream it consumes and the events it publishes.

Payloads reference ``#/components/schemas/<Struct>``: the same schemas, generated in the
same call, as ``proto-schemas/<Struct>.schema.json``. A test validates the document
against the official AsyncAPI 3.0.0 JSON Schema (``tests/vendor/asyncapi/``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from clearance_api import wire
from clearance_core.folding import registry

VERSION = "3.0.0"
#: Request subjects share this prefix; the rest of the subject names its channel.
_PREFIX = "clearance.v1."
_NAMESPACE = {"description": "A Kubernetes namespace (one token); `_` stands for no "
                             "namespace, and any other namespace than a DNS label is `_` "
                             "followed by a hash of it."}
_NAME = {"description": "A name, dots and all; one a subject cannot carry as it is "
                        "(whitespace, `*`, `>`, `_`, over 253 characters) is `_` followed "
                        "by a hash of it."}

#: The application's own events: (channel id, address, parameters, message Struct,
#: action, summary). ``receive``: Clearance consumes it; ``send``: Clearance publishes it.
EVENTS: list[tuple[str, str, dict[str, Any], type[msgspec.Struct], str, str]] = [
    ("events", "clearance.events.{kind}.{id}", {
        "kind": {"description": "The lower-case kind of the object.",
                 "enum": sorted(spec.kind.lower() for spec in registry.SPECS)},
        "id": {"description": "The object's `metadata.uid`, or `n-<hash>` of "
                              "namespace/name when it has none a subject can carry."},
    }, wire.Event, "receive",
     "JetStream stream CLEARANCE_EVENTS: one message per change of a watched object; any "
     "producer may append."),
    ("decisionsChanged", wire.SUBJECT_DECISIONS_CHANGED, {}, wire.DecisionsChanged, "send",
     "Published after each event that can alter answers: the users and groups it names "
     "(or `all`), for clients that cache decisions."),
    ("monitorAccessPolicyStatus", "clearance.status.monitoraccesspolicy.{namespace}.{name}",
     {"namespace": _NAMESPACE, "name": _NAME}, wire.PolicyStatus, "send",
     "A MonitorAccessPolicy's status whenever the compiler folds or re-checks it "
     "(`state: Deleted` when it goes)."),
    ("accessPolicyStatus", "clearance.status.accesspolicy.{namespace}.{name}",
     {"namespace": _NAMESPACE, "name": _NAME}, wire.PolicyStatus, "send",
     "An AccessPolicy's conditions whenever they change (`state: Deleted` when it goes)."),
]


def channel_id(subject: str) -> str:
    """``clearance.v1.effective.reach`` -> ``effectiveReach``: an id the spec accepts."""
    words = subject.removeprefix(_PREFIX).replace("-", ".").split(".")
    return words[0] + "".join(w[:1].upper() + w[1:] for w in words[1:])


def render(summaries: dict[str, str], components: dict[str, Any]) -> dict[str, Any]:
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}

    def message(struct: type[msgspec.Struct]) -> dict[str, str]:
        name = struct.__name__
        messages[name] = {"name": name, "title": name,
                          "summary": (struct.__doc__ or name).strip().splitlines()[0],
                          "contentType": "application/json",
                          "payload": {"$ref": f"#/components/schemas/{name}"}}
        return {"$ref": f"#/components/messages/{name}"}

    for subject, (request, reply) in wire.REQUESTS.items():
        cid = channel_id(subject)
        channels[cid] = {"address": subject, "title": subject, "description": summaries[subject],
                         "messages": {request.__name__: message(request)}}
        replies = {reply.__name__: message(reply), wire.ErrorReply.__name__:
                   message(wire.ErrorReply)}
        channels[f"{cid}Reply"] = {
            "address": None, "title": f"{subject} reply",
            "description": "The requester's inbox (the request's NATS reply subject, "
                           "under an inbox prefix: a request with any other reply subject "
                           f"is not answered): the {reply.__name__}, or an ErrorReply; an "
                           "error never implies access.",
            "messages": replies}
        operations[cid] = {
            "action": "receive", "title": subject, "summary": summaries[subject],
            "channel": {"$ref": f"#/channels/{cid}"},
            "messages": [{"$ref": f"#/channels/{cid}/messages/{request.__name__}"}],
            "reply": {"channel": {"$ref": f"#/channels/{cid}Reply"},
                      "messages": [{"$ref": f"#/channels/{cid}Reply/messages/{name}"}
                                   for name in replies]}}
    for cid, address, parameters, struct, action, summary in EVENTS:
        channels[cid] = {"address": address, "title": address, "description": summary,
                         "messages": {struct.__name__: message(struct)}}
        if parameters:
            channels[cid]["parameters"] = parameters
        operations[cid] = {
            "action": action, "title": address, "summary": summary,
            "channel": {"$ref": f"#/channels/{cid}"},
            "messages": [{"$ref": f"#/channels/{cid}/messages/{struct.__name__}"}]}
    return {
        "asyncapi": VERSION,
        "info": {"title": "Clearance", "version": "v1",
                 "description": "Access decisions over NATS. Generated from the msgspec "
                                "Structs in libs/clearance_api/wire/; do not edit."},
        "defaultContentType": "application/json",
        "servers": {
            "embedded": {"host": "127.0.0.1:4222", "protocol": "nats",
                         "description": "The NATS server `clearance up` starts."},
            "deployment": {"host": "{host}:{port}", "protocol": "nats",
                           "description": "A deployment's NATS (deploy/): subjects are "
                                          "allowed per role by its accounts.",
                           "variables": {"host": {"default": "nats"},
                                         "port": {"default": "4222"}}},
        },
        "channels": channels,
        "operations": operations,
        "components": {"schemas": components, "messages": dict(sorted(messages.items()))},
    }
