"""The playground's questions, each answered from public request subjects:

- who can see cluster X: a check of ``view`` on X for every user and group the console
  knows (see ``live.Directory``) and any the operator names — there is no reverse index
  to ask, so the answer is as complete as the list of candidates, and says so;
- what can user U see: ``permissions`` (every cluster and its actions), ``custom-types``,
  and one ``check.batch`` for the filters on each visible cluster;
- explain one decision: ``check`` with ``explain: true``;
- the effective policy of a target: ``effective``;
- a dry run of a pasted AccessPolicy: ``effective.simulate``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import yaml

from clearance_console.bus import Bus
from clearance_core.filters import BUILTIN_TYPES
from clearance_core.wire import (
    SUBJECT_BATCH,
    SUBJECT_CHECK,
    SUBJECT_CUSTOM_TYPES,
    SUBJECT_EFFECTIVE,
    SUBJECT_EFFECTIVE_SIMULATE,
    SUBJECT_PERMISSIONS,
)
from clearance_runtime import safeyaml

#: A group is asked about as this user in that one group: a name no policy lists, so only
#: the group can be what grants it.
GROUP_PROBE_USER = "clearance-console:group-member"
#: Aliases and expanded nodes a pasted policy may have: a policy uses none or a few, and
#: an alias bomb (a few hundred bytes expanding to billions of nodes) is refused at once.
MOST_ALIASES = 50
MOST_EXPANSION = 20_000
#: Candidates checked for one "who can see" at most, and in flight at once.
MOST_CANDIDATES = 2_000
PARALLEL_CHECKS = 32


class PlaygroundError(ValueError):
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


def _names(text: Any) -> list[str]:
    if isinstance(text, list):
        return [str(t).strip() for t in text if str(t).strip()]
    return [t.strip() for t in str(text or "").replace("\n", ",").split(",") if t.strip()]


async def who_can_see(bus: Bus, body: dict[str, Any]) -> dict[str, Any]:
    cluster = str(body.get("cluster") or "").strip()
    if not cluster:
        raise PlaygroundError("a cluster is needed")
    effective = await bus.request(SUBJECT_EFFECTIVE, {"target": {"kind": "Cluster",
                                                                 "name": cluster}})
    bus.harvest_rules(effective)
    directory = bus.live.directory
    users = list(dict.fromkeys([*_names(body.get("users")), *directory.users]))
    groups = list(dict.fromkeys([*_names(body.get("groups")), *directory.groups]))
    candidates = ([("user", u, {"username": u}) for u in users]
                  + [("group", g, {"username": GROUP_PROBE_USER, "groups": [g]})
                     for g in groups])[:MOST_CANDIDATES]

    async def ask(kind: str, name: str, principal: dict[str, Any]) -> dict[str, Any]:
        reply = await bus.request(SUBJECT_CHECK, {
            "principal": principal, "action": "view",
            "resource": {"type": "cluster", "name": cluster}})
        return {"kind": kind, "name": name, "decision": reply.get("decision"),
                "permissions": reply.get("permissions") or [], "policy": reply.get("policy"),
                "reason": reply.get("reason") or (reply.get("error") or {}).get("message")}

    rows: list[dict[str, Any]] = []
    for start in range(0, len(candidates), PARALLEL_CHECKS):
        rows += await asyncio.gather(*(ask(*c) for c in
                                       candidates[start:start + PARALLEL_CHECKS]))
    allowed = [r for r in rows if r["decision"] in ("allow", "partial")]
    return {"cluster": cluster, "allowed": allowed,
            "denied": len(rows) - len(allowed), "checked": len(rows),
            "effective_error": effective.get("error"),
            "note": "checked every user and group the console knows (named in watched "
                    "objects, in decisions.changed events, in the cluster's effective "
                    "policy) and those given; a group is checked as a member of it alone"}


async def user_view(bus: Bus, body: dict[str, Any]) -> dict[str, Any]:
    principal = principal_of(body)
    permissions, types = await asyncio.gather(
        bus.request(SUBJECT_PERMISSIONS, {"principal": principal}),
        bus.request(SUBJECT_CUSTOM_TYPES, {"principal": principal}))
    if "error" in permissions:
        return {"principal": principal, "error": permissions["error"]}
    clusters = permissions.get("clusters") or {}
    visible = sorted(name for name, c in clusters.items()
                     if c.get("decision") in ("allow", "partial"))
    kinds = [*sorted(BUILTIN_TYPES - {"clusters"}), *sorted(types.get("types") or [])]
    pairs = [(name, kind) for name in visible for kind in ["clusters", *kinds]]
    seen: dict[str, dict[str, Any]] = {name: {"types": {}} for name in visible}
    if pairs:
        # One batch for every visible cluster and type: what each type shows there, and
        # through which filters (the cluster's own check carries the deciding policy).
        batch = await bus.request(SUBJECT_BATCH, {"principal": principal, "checks": [
            {"action": "view", "resource": {"type": kind, "name": "*" if kind != "clusters"
                                            else name, "cluster": name}}
            for name, kind in pairs]})
        for (name, kind), result in zip(pairs, batch.get("results") or [], strict=False):
            if kind == "clusters":
                seen[name].update(policy=result.get("policy"), reason=result.get("reason"))
                continue
            filters = (result.get("filters") or {}).get(kind)
            seen[name]["types"][kind] = {"decision": result.get("decision"),
                                         **({"filter": filters} if filters else {})}
    return {"principal": principal,
            "clusters": [{"name": name, **clusters[name], **seen.get(name, {})}
                         for name in sorted(clusters)],
            "types": types.get("types"), "types_error": types.get("error"),
            "revision": permissions.get("revision")}


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
