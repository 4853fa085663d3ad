"""Hypothesis strategies for the fuzz suite: requests from the wire Structs, watched objects
from the CRD schemas (and small hand-written schemas for the Kubernetes kinds that have no
CRD here), both mixed with the hostile values of :mod:`tests.fuzz.hostile`.

The JSON Schemas come from the code itself — ``msgspec.json.schema`` of every request
Struct in ``clearance_api.wire.REQUESTS`` and the ``openAPIV3Schema`` of
``deploy/crds/*.yaml`` — so the fuzzers follow the contract as it changes. Two edits make
them useful for fuzzing: objects without listed extra properties get none (unknown fields
are ignored in requests and make an object invalid; the mutator plants hostile ones on
purpose), and lists are kept
short (the hostile pool has the long ones). Generated strings are random Unicode; half of
them are then swapped for names the example fleet knows (``VOCABULARY``), so requests reach
real policies, clusters and bindings instead of stopping at "unknown principal".
"""

from __future__ import annotations

import copy
import random
import types
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
import yaml
from hypothesis import strategies as st
from hypothesis.internal.conjecture import utils as _conjecture

from clearance_api.wire import REQUESTS
from clearance_core.folding.registry import WATCHED as KINDS
from tests.fuzz import hostile
from tests.fuzz.hostile import HostileEvent

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "deploy" / "crds"


class _LegacyMany:
    """``hypothesis-jsonschema`` 0.23.1 (its latest release) drives Hypothesis' private
    ``many`` helper with the old ``while elements.more(): ... elements.reject()``
    protocol; the pinned Hypothesis only has the context-manager/iterator form. This
    adapter speaks the old protocol over the new one, for that one module only."""

    def __init__(self, data: Any, **kwargs: Any) -> None:
        self._many = _conjecture.many(data, **kwargs)
        self._many.__enter__()
        self._steps = iter(self._many)

    def more(self) -> bool:
        try:
            next(self._steps)
        except StopIteration:
            self._many.__exit__(None, None, None)
            return False
        return True

    def reject(self, why: str | None = None) -> None:
        self._many.reject(why)


def _patch_hypothesis_jsonschema() -> None:
    from hypothesis_jsonschema import _from_schema  # noqa: PLC0415

    if not hasattr(_conjecture.many, "more"):
        _from_schema.cu = types.SimpleNamespace(many=_LegacyMany)  # type: ignore[attr-defined]


_patch_hypothesis_jsonschema()
from hypothesis_jsonschema import from_schema  # noqa: E402

#: Names the example fleet (examples/) and the fuzz fixtures know.
VOCABULARY = [
    "alice", "bob", "carol@example.com", "dave", "sam", "erin@example.com", "fuzz-user",
    "system:serviceaccount:monitoring:prometheus-bridge", "system:serviceaccount:shop:ci",
    "platform-team", "developers", "contractors", "security", "fuzz-group",
    "prod-us-east", "prod-eu-west", "staging-us-east", "dev-sandbox", "local-cluster",
    "cluster", "clusters", "pod", "pods", "node", "namespaces", "operators", "alerts",
    "events", "pvc", "certificate", "shop", "payments", "app-shop", "team-a", "app-secrets",
    "web-0", "web-debug", "get", "list", "create", "*", "pods/log", "secrets",
    "managedclusterviews", "view.open-cluster-management.io", "apps", "deployments", "",
    "storageClass", "phase", "gp3", "Pending", "MonitorAccessPolicy", "clusterpulse",
    "platform-full", "developers-non-prod", "view", "view_metrics", "/healthz", "/metrics",
]

#: Small schemas for the watched Kubernetes kinds that have no CRD in deploy/crds
#: (their shape is what the Kubernetes API serves; only the fields Clearance reads).
_STRINGS = {"type": "array", "items": {"type": "string"}, "maxItems": 4}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 3}
_POLICY_RULE = {
    "type": "object",
    "properties": {"apiGroups": _STRINGS, "resources": _STRINGS, "verbs": _STRINGS,
                   "resourceNames": _STRINGS, "nonResourceURLs": _STRINGS},
}
_RBAC_SUBJECT = {
    "type": "object",
    "properties": {"kind": {"enum": ["User", "Group", "ServiceAccount", "Other"]},
                   "name": {"type": "string"}, "namespace": {"type": "string"},
                   "apiGroup": {"type": "string"}},
    "required": ["kind", "name"],
}
_ROLE_REF = {
    "type": "object",
    "properties": {"apiGroup": {"const": "rbac.authorization.k8s.io"},
                   "kind": {"enum": ["Role", "ClusterRole"]}, "name": {"type": "string"}},
    "required": ["kind", "name"],
}
BODY_SCHEMAS: dict[str, dict[str, Any]] = {
    "managedcluster": {"type": "object", "properties": {"spec": {"type": "object"}}},
    "managedclusterset": {"type": "object", "properties": {"spec": {
        "type": "object", "properties": {"clusterSelector": {"type": "object", "properties": {
            "selectorType": {"enum": ["ExclusiveClusterSetLabel", "LabelSelector"]},
            "labelSelector": {"type": "object",
                              "properties": {"matchLabels": _LABELS}}}}}}}},
    "managedclustersetbinding": {"type": "object", "properties": {"spec": {
        "type": "object", "properties": {"clusterSet": {"type": "string"}}}}},
    "role": {"type": "object", "properties": {
        "rules": {"type": "array", "items": _POLICY_RULE, "maxItems": 3}}},
    "clusterrole": {"type": "object", "properties": {
        "rules": {"type": "array", "items": _POLICY_RULE, "maxItems": 3},
        "aggregationRule": {"type": "object", "properties": {"clusterRoleSelectors": {
            "type": "array", "maxItems": 2,
            "items": {"type": "object", "properties": {"matchLabels": _LABELS}}}}}}},
    "rolebinding": {"type": "object", "properties": {
        "roleRef": _ROLE_REF, "subjects": {"type": "array", "items": _RBAC_SUBJECT,
                                           "maxItems": 3}}},
    "clusterrolebinding": {"type": "object", "properties": {
        "roleRef": _ROLE_REF, "subjects": {"type": "array", "items": _RBAC_SUBJECT,
                                           "maxItems": 3}}},
    "group": {"type": "object", "properties": {"users": _STRINGS}},
    "namespace": {"type": "object", "properties": {"spec": {"type": "object"}}},
    "customresourcedefinition": {"type": "object", "properties": {"spec": {
        "type": "object", "properties": {"group": {"type": "string"}, "names": {
            "type": "object", "properties": {"kind": {"type": "string"},
                                             "plural": {"type": "string"}}}}}}},
}
#: Kubernetes kind names, for the ``kind`` field of generated objects.
KIND_NAMES = {
    "monitoraccesspolicy": "MonitorAccessPolicy", "metricsource": "MetricSource",
    "accesspolicy": "AccessPolicy", "managedcluster": "ManagedCluster",
    "managedclusterset": "ManagedClusterSet",
    "managedclustersetbinding": "ManagedClusterSetBinding", "role": "Role",
    "clusterrole": "ClusterRole",
    "rolebinding": "RoleBinding", "clusterrolebinding": "ClusterRoleBinding",
    "group": "Group", "namespace": "Namespace",
    "customresourcedefinition": "CustomResourceDefinition",
}
EVENT_KINDS = tuple(KINDS)
#: Objects the fuzzers create are named from these pools, so later ones replace,
#: modify and delete earlier ones instead of only piling up.
OBJECT_NAMES = ["fuzz-a", "fuzz-b", "fuzz-c", "fuzz-d"]
OBJECT_NAMESPACES = ["fuzz", "fuzz-other", "clusterpulse", "shop"]


def tighten(schema: Any, *, max_items: int = 3) -> Any:
    """The schema with no unlisted properties on listed objects and short arrays."""
    if isinstance(schema, list):
        return [tighten(s, max_items=max_items) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties":  # property names, not keywords: keep them all
            out[key] = {name: tighten(sub, max_items=max_items) for name, sub in value.items()}
        elif key not in ("default", "description", "title", "format"):
            out[key] = tighten(value, max_items=max_items)
    if schema.get("format") == "date-time":
        out["format"] = "date-time"
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if out.get("type") == "array" and "maxItems" not in out:
        out["maxItems"] = max_items
    if out.get("type") == "object" and "properties" not in out and "maxProperties" not in out:
        out["maxProperties"] = 3
    return out


def request_schema(subject: str) -> dict[str, Any]:
    struct = REQUESTS[subject][0]
    return dict(tighten(msgspec.json.schema(struct)))


@cache
def crd_spec_schemas() -> dict[str, dict[str, Any]]:
    """Lower-case kind -> the CRD's ``spec`` schema (tightened), from deploy/crds."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
            continue
        kind = crd["spec"]["names"]["kind"].lower()
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        found[kind] = tighten(schema["properties"]["spec"])
    return found


#: Fields whose values are enumerations: left as generated (a random name there would
#: only ever be a ``bad_request``; the mutator still plants hostile values in them).
ENUM_FIELDS = frozenset({"action", "effect", "visibility", "default", "strategy", "function",
                         "operator", "selectorType"})


def ground(doc: Any, rnd: random.Random, *, rate: float = 0.5) -> Any:
    """Swap about ``rate`` of the string values for names the fleet knows."""
    if isinstance(doc, dict):
        return {k: v if k in ENUM_FIELDS else ground(v, rnd, rate=rate)
                for k, v in doc.items()}
    if isinstance(doc, list):
        return [ground(v, rnd, rate=rate) for v in doc]
    if isinstance(doc, str) and rnd.random() < rate:
        return rnd.choice(VOCABULARY)
    return doc


@cache
def valid_requests(subject: str) -> st.SearchStrategy[dict[str, Any]]:
    """Schema-valid request documents for ``subject`` (grounded in the fleet's names)."""
    return st.tuples(from_schema(request_schema(subject)), st.randoms(use_true_random=False)
                     ).map(lambda t: ground(t[0], t[1]))


def _bounded_wait(doc: Any) -> Any:
    """A ``min_revision`` the system has not reached makes a request wait ``timeout_ms``
    (the caller's choice, no cap): keep such waits shorter than the fuzzer's patience,
    so a missing reply always means the service failed to answer."""
    if isinstance(doc, dict) and isinstance(doc.get("min_revision"), int) \
            and not isinstance(doc.get("min_revision"), bool) and doc["min_revision"] > 0:
        timeout = doc.get("timeout_ms")
        if timeout is None or (isinstance(timeout, int) and timeout > 300):
            doc["timeout_ms"] = 300
    return doc


def hostile_request(doc: dict[str, Any], rnd: random.Random, *, big: float = 0.03,
                    whole: float = 0.05) -> bytes:
    """One hostile body made from a valid request document (``doc`` is not changed)."""
    if rnd.random() < whole:
        return rnd.choice(hostile.WHOLE_BODIES)
    mutated = hostile.mutate(doc, rnd, big=big) if rnd.random() < 0.9 else copy.deepcopy(doc)
    return hostile.encode(_bounded_wait(mutated))


def hostile_requests(subject: str) -> st.SearchStrategy[bytes]:
    """Request bodies for ``subject``: valid documents with hostile edits, or bodies that
    are not a JSON object at all."""
    return st.tuples(valid_requests(subject), st.randoms(use_true_random=False)).map(
        lambda t: hostile_request(t[0], t[1]))


# Watched objects ----------------------------------------------------------------------


def _metadata(rnd: random.Random, kind: str) -> dict[str, Any]:
    namespaced = KINDS[kind][2]
    meta: dict[str, Any] = {"name": rnd.choice(OBJECT_NAMES),
                            "uid": f"fuzz-{rnd.getrandbits(48):012x}",
                            "resourceVersion": str(rnd.getrandbits(20))}
    if namespaced:
        meta["namespace"] = rnd.choice(OBJECT_NAMESPACES)
    if rnd.random() < 0.5:
        meta["labels"] = {rnd.choice(["environment", "region", "fuzz", "rbac.fuzz/agg"]):
                          rnd.choice(["production", "staging", "true", "x"])}
    return meta


def shape_object(kind: str, body: dict[str, Any], rnd: random.Random) -> dict[str, Any]:
    """A Kubernetes object of ``kind`` around a generated body (a CRD spec, or the fields
    of a built-in kind), with identity from the fuzz pools."""
    group_version = KINDS[kind][0]
    obj: dict[str, Any] = {"apiVersion": group_version, "kind": KIND_NAMES[kind],
                           "metadata": _metadata(rnd, kind)}
    if kind in crd_spec_schemas():
        obj["spec"] = body
    else:
        obj.update(body)
    if kind == "monitoraccesspolicy" and isinstance(body.get("identity"), dict) \
            and rnd.random() < 0.7:
        # Mostly about the probe principal, so the probes after a burst evaluate it.
        body["identity"]["subjects"] = rnd.choice([
            {"users": ["fuzz-user"]}, {"groups": ["fuzz-group"]},
            {"serviceAccounts": [{"name": "fuzz", "namespace": "fuzz"}]}])
    if kind == "managedcluster":
        obj["metadata"]["name"] = rnd.choice(["fuzz-cluster-a", "fuzz-cluster-b"])
    if kind == "managedclustersetbinding" and rnd.random() < 0.5:
        # Often a binding that binds (named as its set), so policies move in and out.
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            spec["clusterSet"] = obj["metadata"]["name"]
    return obj


@cache
def object_bodies(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    schema = crd_spec_schemas().get(kind) or tighten(BODY_SCHEMAS[kind])
    return from_schema(schema)


def valid_objects(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.tuples(object_bodies(kind), st.randoms(use_true_random=False)).map(
        lambda t: shape_object(kind, ground(t[0], t[1], rate=0.3), t[1]))


def hostile_event(kind: str, obj: dict[str, Any], rnd: random.Random, *, big: float = 0.03,
                  whole: float = 0.04) -> HostileEvent:
    """An event about ``obj``: ADDED/MODIFIED/DELETED with hostile edits anywhere in the
    envelope or the object, sometimes under another kind's subject, sometimes not JSON."""
    token = obj["metadata"].get("uid") or "fuzz"
    subject_kind = kind if rnd.random() < 0.9 else rnd.choice(EVENT_KINDS)
    subject = f"clearance.events.{subject_kind}.{token}"
    if rnd.random() < whole:
        return HostileEvent(kind, subject, rnd.choice(hostile.WHOLE_BODIES))
    event: dict[str, Any] = {"type": rnd.choice(["ADDED", "MODIFIED", "MODIFIED", "DELETED"]),
                             "object": obj}
    if rnd.random() < 0.85:
        event = hostile.mutate(event, rnd, big=big, edits=rnd.randint(1, 4))
    return HostileEvent(kind, subject, hostile.encode(event))


def hostile_events(kinds: tuple[str, ...] = EVENT_KINDS) -> st.SearchStrategy[HostileEvent]:
    return st.sampled_from(kinds).flatmap(
        lambda kind: st.tuples(valid_objects(kind), st.randoms(use_true_random=False)).map(
            lambda t: hostile_event(kind, t[0], t[1])))
