"""``check``, ``batch``, ``permissions``, ``policies``, ``who-can-see``, ``status``,
``cache-clear`` and ``policy-status``: the decision service's subjects."""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from clearance_api.wire import (
    SUBJECT_BATCH,
    SUBJECT_CACHE_CLEAR,
    SUBJECT_CHECK,
    SUBJECT_PERMISSIONS,
    SUBJECT_POLICIES,
    SUBJECT_POLICY_STATUS,
    SUBJECT_STATUS,
    SUBJECT_WHO_CAN_SEE,
    BatchItem,
    BatchRequest,
    CacheClearRequest,
    CheckRequest,
    PolicyStatusRequest,
    Principal,
    PrincipalRequest,
    Resource,
    StatusRequest,
    WhoCanSeeRequest,
)
from clearance_cli import client, inputs
from clearance_cli.flags import NO, OK, CliError
from clearance_cli.output import cell_text, table
from clearance_core.kube.resources import singular


def principal_of(args: argparse.Namespace) -> Principal:
    return Principal(username=args.user, groups=args.groups, email=getattr(args, "email", None))


def check_request(args: argparse.Namespace) -> CheckRequest:
    # Without --name a check asks about the cluster itself, or about every item of the
    # type (name "*"), never about an item that happens to carry the cluster's name.
    whole = args.cluster if singular(args.type) == "cluster" else "*"
    return CheckRequest(
        principal=principal_of(args), action=args.action, explain=args.explain,
        resource=Resource(type=args.type, name=args.name or whole, cluster=args.cluster,
                          namespace=args.namespace))


RESULT = ["DECISION", "POLICY", "PERMISSIONS", "FILTERS", "CACHED", "REASON"]
TRACE = ["POLICY", "PRIORITY", "EFFECT", "OUTCOME", "RULE", "SELECTOR", "HIDDEN-BY", "REASON"]


def result_row(result: dict[str, Any]) -> list[object]:
    filters = result.get("filters")
    return [result.get("decision"), result.get("policy"), result.get("permissions"),
            sorted(filters) if isinstance(filters, dict) else None, result.get("cached"),
            result.get("reason")]


def trace_table(steps: Any, indent: str = "") -> list[str]:
    if not isinstance(steps, list) or not steps:
        return []
    return table(TRACE, ([s.get(k.lower().replace("-", "_")) for k in TRACE]
                         for s in steps if isinstance(s, dict)), indent)


def check(args: argparse.Namespace) -> int:
    def show(reply: dict[str, Any]) -> list[str]:
        lines = table(RESULT, [result_row(reply)])
        trace = trace_table(reply.get("trace"))
        return [*lines, "", *trace] if trace else lines

    # Like `kubectl auth can-i`: the exit status answers (0 allow or partial, 1 deny).
    return client.ask(args, SUBJECT_CHECK, check_request(args), show,
                      verdict=lambda reply: OK if reply.get("allowed") is True else NO)


def batch(args: argparse.Namespace) -> int:
    checks = inputs.read(args.file)
    if isinstance(checks, dict):
        checks = checks.get("checks")
    try:
        items = msgspec.convert(checks, list[BatchItem])
    except msgspec.ValidationError as exc:
        raise CliError(f"{args.file}: a list of {{action, resource}}: {exc}") from None

    def show(reply: dict[str, Any]) -> list[str]:
        results = reply.get("results") or []
        rows = [[str(i), _resource(item.resource), *result_row(result)]
                for i, (item, result) in enumerate(zip(items, results, strict=False))]
        lines = table(["#", "RESOURCE", *RESULT], rows)
        for i, result in enumerate(results):
            trace = trace_table(result.get("trace"), indent="  ")
            lines += [f"trace of #{i}:", *trace] if trace else []
        return lines

    body = BatchRequest(principal=principal_of(args), checks=items, explain=args.explain)
    return client.ask(args, SUBJECT_BATCH, body, show)


def _resource(resource: Resource) -> str:
    where = "/".join(p for p in (resource.cluster, resource.namespace) if p)
    return f"{resource.type} {where + '/' if where else ''}{resource.name}"


def permissions(args: argparse.Namespace) -> int:
    def show(reply: dict[str, Any]) -> list[str]:
        clusters = reply.get("clusters") or {}
        return table(["CLUSTER", "DECISION", "PERMISSIONS"],
                     ([name, c.get("decision"), c.get("permissions")]
                      for name, c in clusters.items()))

    return client.ask(args, SUBJECT_PERMISSIONS, PrincipalRequest(principal=principal_of(args)),
                      show)


def who_can_see(args: argparse.Namespace) -> int:
    def show(reply: dict[str, Any]) -> list[str]:
        rows = [[s.get("kind"), s.get("name"), s.get("decision"), s.get("policy")]
                for s in reply.get("subjects") or []]
        others = reply.get("others") or {}
        # Everyone else, as one row that splits like the others (KIND others, NAME *).
        rows.append(["others", "*", others.get("decision"), others.get("policy")])
        return table(["KIND", "NAME", "DECISION", "POLICY"], rows)

    body = WhoCanSeeRequest(cluster=args.cluster, type=args.type, namespace=args.namespace,
                            action=args.action)
    return client.ask(args, SUBJECT_WHO_CAN_SEE, body, show)


POLICY = ["NAMESPACE", "NAME", "PRIORITY", "EFFECT", "ENABLED", "VALID", "IN-FORCE",
          "MATCHED-BY"]


def policies(args: argparse.Namespace) -> int:
    def show(reply: dict[str, Any]) -> list[str]:
        found = reply.get("policies") or []
        return table(POLICY, ([p.get(k.lower().replace("-", "_")) for k in POLICY]
                              for p in found))

    return client.ask(args, SUBJECT_POLICIES, PrincipalRequest(principal=principal_of(args)),
                      show)


def status(args: argparse.Namespace) -> int:
    def show(reply: dict[str, Any]) -> list[str]:
        cache = reply.get("cache") or {}
        head = table(["REVISION", "POLICIES", "CACHE-ENTRIES", "CACHE-HITS", "CACHE-MISSES"],
                     [[reply.get("revision"), reply.get("policies"), cache.get("entries"),
                       cache.get("hits"), cache.get("misses")]])
        services = reply.get("services") or {}
        return [*head, "", *table(["SERVICE", "REVISION", "HEALTHY"],
                                  ([n, s.get("revision"), s.get("healthy")]
                                   for n, s in services.items()))]

    return client.ask(args, SUBJECT_STATUS, StatusRequest(), show)


def cache_clear(args: argparse.Namespace) -> int:
    if args.all == bool(args.user):
        raise CliError("cache-clear takes --user USER or --all")
    body = CacheClearRequest(principal=None if args.all else principal_of(args))
    return client.ask(args, SUBJECT_CACHE_CLEAR, body,
                      lambda reply: table(["CLEARED"], [[reply.get("cleared")]]))


_KINDS = {"map": "MonitorAccessPolicy", "monitoraccesspolicy": "MonitorAccessPolicy",
          "ap": "AccessPolicy", "accesspolicy": "AccessPolicy"}


def policy_status(args: argparse.Namespace) -> int:
    namespace, slash, name = str(args.policy).partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise CliError(f"{args.policy!r}: a policy is NAMESPACE/NAME")

    def show(reply: dict[str, Any]) -> list[str]:
        lines: list[str] = []
        if "state" in reply:
            lines += table(["STATE", "MESSAGE"], [[reply.get("state"), reply.get("message")]])
        conditions = reply.get("conditions") or []
        if conditions:
            lines += ([""] if lines else []) + table(
                ["TYPE", "STATUS", "REASON", "MESSAGE"],
                ([c.get("type"), c.get("status"), c.get("reason"), c.get("message")]
                 for c in conditions))
        lines += [f"warning: {cell_text(w)}" for w in reply.get("warnings") or []]
        return lines

    body = PolicyStatusRequest(kind=_KINDS[args.kind], namespace=namespace, name=name)
    return client.ask(args, SUBJECT_POLICY_STATUS, body, show)

