"""proto-schemas/asyncapi.json is a valid AsyncAPI 3.0.0 document that names every subject
and event of the contract, and its payload schemas accept what the services really send."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import msgspec
import pytest

from clearance_api import wire
from clearance_cli import asyncapi

ROOT = Path(__file__).resolve().parents[2]
DOC: dict[str, Any] = json.loads((ROOT / "proto-schemas" / "asyncapi.json").read_text())
#: The official JSON Schema of AsyncAPI 3.0.0 (from the @asyncapi/specs package, with its
#: licence), so the document is checked by the spec's own rules, not by ours.
SPEC = json.loads((ROOT / "tests/vendor/asyncapi/asyncapi-3.0.0.schema.json").read_text())


def test_the_document_is_valid_asyncapi_3() -> None:
    assert DOC["asyncapi"] == "3.0.0"
    validator = jsonschema.Draft7Validator(SPEC)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
              for e in validator.iter_errors(DOC)]
    assert errors == []


def test_the_validator_refuses_what_the_spec_refuses() -> None:
    """The vendored schema really checks (a 2.x-style channel is not 3.0.0)."""
    validator = jsonschema.Draft7Validator(SPEC)
    broken = {**DOC, "channels": {"check": {"address": "clearance.v1.check",
                                            "publish": {"message": {}}}}}
    assert not validator.is_valid(broken)
    assert not validator.is_valid({**DOC, "operations": {"x": {"action": "reply"}}})


def _resolve(ref: str) -> Any:
    node: Any = DOC
    for part in ref.removeprefix("#/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return _resolve(node["$ref"]) if isinstance(node, dict) and "$ref" in node else node


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return ([node["$ref"]] if "$ref" in node else []) + \
            [r for value in node.values() for r in _refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in _refs(value)]
    return []


def test_every_reference_resolves_inside_the_document() -> None:
    refs = _refs(DOC)
    assert len(refs) > 100
    for ref in refs:
        assert ref.startswith("#/"), ref
        _resolve(ref)


def test_every_request_subject_is_an_operation_with_its_reply() -> None:
    addresses = {c["address"]: cid for cid, c in DOC["channels"].items()}
    for subject, (request, reply) in wire.REQUESTS.items():
        operation = DOC["operations"][addresses[subject]]
        assert operation["action"] == "receive"
        assert _resolve(operation["messages"][0]["$ref"])["payload"]["$ref"] \
            == f"#/components/schemas/{request.__name__}"
        replies = [_resolve(m["$ref"])["name"] for m in operation["reply"]["messages"]]
        assert replies == [reply.__name__, "ErrorReply"]
        # a reply's messages are those of its channel, as the spec requires
        channel = _resolve(operation["reply"]["channel"]["$ref"])
        assert channel["address"] is None and set(channel["messages"]) == set(replies)


def test_every_event_channel_declares_its_parameters() -> None:
    events = {c["address"]: c for c in DOC["channels"].values() if c["address"]
              and c["address"] not in wire.REQUESTS}
    assert set(events) == {
        "clearance.events.{kind}.{id}", wire.SUBJECT_DECISIONS_CHANGED,
        "clearance.status.monitoraccesspolicy.{namespace}.{name}",
        "clearance.status.accesspolicy.{namespace}.{name}"}
    for address, channel in events.items():
        assert set(re.findall(r"{(\w+)}", address)) == set(channel.get("parameters", {}))
    assert "rolebinding" in events["clearance.events.{kind}.{id}"]["parameters"]["kind"]["enum"]


@pytest.mark.parametrize(("struct", "body"), [
    (wire.DecisionsChanged, {"revision": 7, "principals": {"users": ["ann"], "groups": []},
                             "all": False}),
    (wire.CheckResult, {"decision": "allow", "allowed": True, "reason": "r", "policy": "ns/p",
                        "permissions": ["view"], "filters": None, "cached": False,
                        "revision": 3}),
    (wire.ErrorReply, {"error": {"code": "stale", "message": "m"}, "request_id": "x"}),
    (wire.PolicyStatus, {"state": "Deleted", "message": "deleted", "revision": 9}),
])
def test_payload_schemas_accept_real_messages_and_refuse_others(
        struct: type[msgspec.Struct], body: dict[str, Any]) -> None:
    msgspec.json.decode(json.dumps(body), type=struct)  # it is a real message
    message = DOC["components"]["messages"][struct.__name__]
    schema = {**_resolve(message["payload"]["$ref"]), "components": DOC["components"]}
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid(body)
    bad = {"error": {"code": "denied", "message": "m"}} if struct is wire.ErrorReply \
        else {**body, "revision": "seven"}
    assert not validator.is_valid(bad)


def test_channel_ids_are_readable() -> None:
    assert asyncapi.channel_id("clearance.v1.effective.reach") == "effectiveReach"
    assert asyncapi.channel_id("clearance.v1.custom-types") == "customTypes"
    assert asyncapi.channel_id("clearance.v1.check") == "check"
