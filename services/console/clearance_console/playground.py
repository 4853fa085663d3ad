"""The playground's questions, each answered from public request subjects:

- who can see a cluster, a namespace of it or a type there: ``who-can-see`` — every
  subject a policy or binding names, allowed and denied, with the deciding policy, and
  what everyone else gets (complete: the decision service enumerates them from its
  indexes);
- what can user U see: ``permissions`` (every cluster and its actions), ``custom-types``,
  and ``check.batch`` over every cluster: the cluster, each type as a whole, and each
  type in every Namespace target an AccessPolicy the console knows reaches
  (``effective.reach``), so a cluster the user sees only part of is not shown denied;
- explain one decision: ``check`` with ``explain: true``;
- the effective policy of a target: ``effective``;
- a dry run of a pasted AccessPolicy: ``effective.simulate``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import yaml

from clearance_api.errors import BadRequest
from clearance_api.wire import (
    SUBJECT_BATCH,
    SUBJECT_CHECK,
    SUBJECT_CUSTOM_TYPES,
    SUBJECT_EFFECTIVE,
    SUBJECT_EFFECTIVE_REACH,
    SUBJECT_EFFECTIVE_SIMULATE,
    SUBJECT_PERMISSIONS,
    SUBJECT_WHO_CAN_SEE,
)
from clearance_api.wire.limits import MAX_CHECKS
from clearance_console.bus import Bus
from clearance_core.monitor.filters import BUILTIN_TYPES
from clearance_runtime.edges import safeyaml

#: Aliases and expanded nodes a pasted policy may have: a policy uses none or a few, and
#: an alias bomb (a few hundred bytes expanding to billions of nodes) is refused at once.
MOST_ALIASES = 50
MOST_EXPANSION = 20_000
#: Requests in flight at once for one question.
PARALLEL_CHECKS = 32
#: Seconds to wait for a who-can-see answer (thousands of subjects take a second or two)
#: or a user's batch of checks.
WHO_CAN_SEE_WAIT = 30.0


class PlaygroundError(BadRequest):
    """A question the console cannot send as asked (the page shows the message)."""


def principal_of(body: dict[str, Any]) -> dict[str, Any]:
    username = str(body.get("username") or "").strip()
    if not username:
        raise PlaygroundError("a username is needed")
    groups = body.get("groups") or []
    if isinstance(groups, str):
        groups = [g.strip() for g in groups.split(",") if g.strip()]
    principal: dict[str, Any] = {"username": username, "groups": [str(g) for g in groups]}
    if body.get("email"):
        principal["email"] = str(body["email"]).strip()
    return principal


async def who_can_see(bus: Bus, body: dict[str, Any]) -> dict[str, Any]:
    cluster = str(body.get("cluster") or "").strip()
    if not cluster:
        raise PlaygroundError("a cluster is needed")
    question: dict[str, Any] = {"cluster": cluster,
                                "action": str(body.get("action") or "view")}
    for field in ("type", "namespace"):
        if str(body.get(field) or "").strip():
            question[field] = str(body[field]).strip()
    reply = await bus.request(SUBJECT_WHO_CAN_SEE, question, wait=WHO_CAN_SEE_WAIT)
    if "error" in reply:
        return {"question": question, "error": reply["error"]}
    subjects = reply.get("subjects") or []
    counts = {decision: sum(1 for s in subjects if s.get("decision") == decision)
              for decision in ("allow", "partial", "deny")}
    return {"question": question, "what": _what(question), "subjects": subjects,
            "others": reply.get("others"), "counts": counts,
            "revision": reply.get("revision")}


def _what(question: dict[str, Any]) -> str:
    """The question in words, for the page's summary."""
    where = question["cluster"]
    if "type" not in question:
        return f"namespace {question['namespace']} of {where}" if "namespace" in question \
            else where
    if "namespace" in question:
        where = f"{where}/{question['namespace']}"
    return f"{question['type']} in {where}"


async def namespace_targets(bus: Bus) -> dict[str, list[str]]:
    """cluster -> the Namespace targets an AccessPolicy the console knows reaches (those
    are the only namespaces whose rules differ from their cluster's)."""
    known = [(ns, name) for kind, ns, name in bus.live.policies.known()
             if kind == "AccessPolicy"]
    found: dict[str, set[str]] = {}
    for start in range(0, len(known), PARALLEL_CHECKS):
        replies = await asyncio.gather(*(
            bus.request(SUBJECT_EFFECTIVE_REACH, {"kind": "AccessPolicy", "namespace": ns,
                                                  "name": name})
            for ns, name in known[start:start + PARALLEL_CHECKS]))
        for reply in replies:
            for target in reply.get("targets") or []:
                if isinstance(target, dict) and target.get("kind") == "Namespace" \
                        and target.get("cluster"):
                    found.setdefault(str(target["cluster"]), set()).add(str(target["name"]))
    return {cluster: sorted(names) for cluster, names in found.items()}


async def user_view(bus: Bus, body: dict[str, Any]) -> dict[str, Any]:
    principal = principal_of(body)
    permissions, types, targets = await asyncio.gather(
        bus.request(SUBJECT_PERMISSIONS, {"principal": principal}),
        bus.request(SUBJECT_CUSTOM_TYPES, {"principal": principal}),
        namespace_targets(bus))
    if "error" in permissions:
        return {"principal": principal, "error": permissions["error"]}
    clusters = permissions.get("clusters") or {}
    kinds = [*sorted(BUILTIN_TYPES - {"clusters"}), *sorted(types.get("types") or [])]
    namespaced = [kind for kind in kinds if kind != "nodes"]
    # Every cluster, denied ones too: a cluster the user may not see as a whole can still
    # show some types, or the items of some namespaces (a Namespace-level grant).
    asked: list[tuple[str, str | None, str]] = []
    for name in sorted(clusters):
        asked += [(name, None, kind) for kind in ["clusters", *kinds]]
        asked += [(name, ns, kind) for ns in targets.get(name, []) for kind in namespaced]
    seen: dict[str, dict[str, Any]] = {name: {"types": {}, "namespaces": {}}
                                       for name in clusters}
    for start in range(0, len(asked), MAX_CHECKS):
        part = asked[start:start + MAX_CHECKS]
        batch = await bus.request(SUBJECT_BATCH, {"principal": principal, "checks": [
            {"action": "view", "resource": _resource(name, ns, kind)}
            for name, ns, kind in part]}, wait=WHO_CAN_SEE_WAIT)
        if "error" in batch:
            return {"principal": principal, "error": batch["error"]}
        for (name, ns, kind), result in zip(part, batch.get("results") or [], strict=False):
            if kind == "clusters":
                seen[name].update(policy=result.get("policy"), reason=result.get("reason"))
                continue
            decision = result.get("decision")
            filters = (result.get("filters") or {}).get(kind)
            answer = {"decision": decision, **({"filter": filters} if filters else {})}
            if ns is None:
                seen[name]["types"][kind] = answer
            elif decision != "deny":  # a namespace lists what it grants
                seen[name]["namespaces"].setdefault(ns, {})[kind] = answer
    rows = []
    for name in sorted(clusters):
        row = {"name": name, **clusters[name], **seen[name]}
        granted = any(t["decision"] != "deny" for t in row["types"].values()) \
            or bool(row["namespaces"])
        # What the user sees there: all of it, some of it (some types, some namespaces),
        # or nothing.
        row["sees"] = row["decision"] if row["decision"] != "deny" else \
            "partial" if granted else "deny"
        rows.append(row)
    return {"principal": principal, "clusters": rows,
            "types": types.get("types"), "types_error": types.get("error"),
            "revision": permissions.get("revision")}


def _resource(cluster: str, namespace: str | None, kind: str) -> dict[str, Any]:
    if kind == "clusters":
        return {"type": "cluster", "name": cluster}
    return {"type": kind, "name": "*", "cluster": cluster,
            **({"namespace": namespace} if namespace else {})}


async def explain(bus: Bus, body: dict[str, Any]) -> dict[str, Any]:
    cluster = str(body.get("cluster") or "").strip()
    if not cluster:
        raise PlaygroundError("a cluster is needed")
    resource: dict[str, Any] = {"type": str(body.get("type") or "cluster"), "cluster": cluster}
    for field in ("name", "namespace"):
        if str(body.get(field) or "").strip():
            resource[field] = str(body[field]).strip()
    if resource["type"] == "cluster":
        resource.setdefault("name", cluster)
    request = {"principal": principal_of(body), "action": str(body.get("action") or "view"),
               "resource": resource, "explain": True}
    return {"request": request, "reply": await bus.request(SUBJECT_CHECK, request)}


def target_of(body: dict[str, Any]) -> dict[str, Any]:
    """A target from the form, or from ``kind/name`` / ``namespace/<cluster>/<name>`` as
    the ``clearance effective`` command takes it."""
    text = str(body.get("target") or "").strip()
    if text:
        parts = text.split("/")
        kinds = {"fleet": "Fleet", "clusterset": "ClusterSet", "cluster": "Cluster",
                 "namespace": "Namespace"}
        kind = kinds.get(parts[0].lower())
        if kind == "Fleet" and len(parts) <= 2:
            return {"kind": "Fleet", "name": parts[1] if len(parts) == 2 else "fleet"}
        if kind == "Namespace" and len(parts) == 3:
            return {"kind": kind, "cluster": parts[1], "name": parts[2]}
        if kind is not None and len(parts) == 2:
            return {"kind": kind, "name": parts[1]}
        raise PlaygroundError(f"target {text!r}: write fleet, cluster/NAME, clusterset/NAME "
                              "or namespace/CLUSTER/NAME")
    target = {"kind": str(body.get("kind") or ""), "name": str(body.get("name") or "")}
    if body.get("cluster"):
        target["cluster"] = str(body["cluster"])
    return target


async def effective(bus: Bus, body: dict[str, Any]) -> dict[str, Any]:
    target = target_of(body)
    return {"target": target,
            "reply": await bus.request(SUBJECT_EFFECTIVE, {"target": target})}


async def simulate(bus: Bus, body: dict[str, Any]) -> dict[str, Any]:
    text = str(body.get("policy") or "")
    try:  # YAML is a superset of JSON: either may be pasted
        documents = safeyaml.load_all(text, max_aliases=MOST_ALIASES,
                                       max_expansion=MOST_EXPANSION)
    except safeyaml.Refused as exc:
        raise PlaygroundError(f"the policy is refused: {exc}") from None
    except (yaml.YAMLError, RecursionError) as exc:
        raise PlaygroundError(f"the policy is not YAML or JSON: {exc}") from None
    policy = documents[0] if len(documents) == 1 else None
    if not isinstance(policy, dict):
        raise PlaygroundError("paste one AccessPolicy object (YAML or JSON)")
    operation = "delete" if body.get("operation") == "delete" else "apply"
    return {"operation": operation, "reply": await bus.request(
        SUBJECT_EFFECTIVE_SIMULATE, {"policy": policy, "operation": operation}, wait=10.0)}


ACTIONS = {"who-can-see": who_can_see, "user-view": user_view, "explain": explain,
           "effective": effective, "simulate": simulate}
