"""``clearance effective``, ``clearance simulate`` and ``clearance reach``: inherited
AccessPolicies from a shell (README: Inherited).

Targets are written ``fleet``, ``clusterset/NAME``, ``cluster/NAME`` or
``namespace/CLUSTER/NAME``, and printed the same way, so a target from ``reach`` or
``simulate`` can be pasted into ``effective``. Rules print one per line: name, block,
source, effect, subjects, permissions and the resource types they filter (the rules in
full are in the reply of ``clearance request clearance.v1.effective``), then the policies
aimed at the target or above it that take no part, each with why.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Literal

import msgspec

from clearance_api.wire import (
    SUBJECT_EFFECTIVE,
    SUBJECT_EFFECTIVE_REACH,
    SUBJECT_EFFECTIVE_SIMULATE,
    AccessChange,
    EffectiveReply,
    EffectiveRequest,
    ReachReply,
    ReachRequest,
    SimulateReply,
    SimulateRequest,
    StatusCondition,
    Target,
)
from clearance_cli import client, inputs
from clearance_cli.flags import CliError
from clearance_cli.output import table

_KINDS = {"fleet": "Fleet", "clusterset": "ClusterSet", "cluster": "Cluster",
          "namespace": "Namespace"}
_SYNTAX = "fleet, clusterset/NAME, cluster/NAME or namespace/CLUSTER/NAME"


def parse_target(text: str) -> Target:
    """The command line's TARGET; an ``argparse`` type, so a bad one is a usage error."""
    kind, _, rest = text.partition("/")
    found = _KINDS.get(kind.lower())
    parts = rest.split("/") if rest else []
    if found == "Fleet" and parts in ([], ["fleet"]):
        return Target(kind="Fleet", name="fleet")
    if found == "Namespace" and len(parts) == 2 and all(parts):
        return Target(kind="Namespace", cluster=parts[0], name=parts[1])
    if found == "ClusterSet" and len(parts) == 1 and parts[0]:
        return Target(kind="ClusterSet", name=parts[0])
    if found == "Cluster" and len(parts) == 1 and parts[0]:
        return Target(kind="Cluster", name=parts[0])
    raise argparse.ArgumentTypeError(f"{text!r}: a target is {_SYNTAX}")


def target_text(target: Target) -> str:
    """The inverse of :func:`parse_target`."""
    if target.kind == "Fleet":
        return "fleet"
    if target.kind == "Namespace":
        return f"namespace/{target.cluster}/{target.name}"
    return f"{target.kind.lower()}/{target.name}"


def policy_ref(text: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` of an AccessPolicy; an ``argparse`` type."""
    namespace, slash, name = text.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"{text!r}: an AccessPolicy is NAMESPACE/NAME")
    return namespace, name


def _load_policy(path: Path) -> dict[str, Any]:
    document = inputs.read(path)
    # The service checks the kind too; saying it here names the file.
    if not isinstance(document, dict) or document.get("kind") != "AccessPolicy":
        kind = document.get("kind") if isinstance(document, dict) else type(document).__name__
        raise CliError(f"{path}: kind {kind!r} is not AccessPolicy")
    return document


# Rendering -------------------------------------------------------------------------------


def _texts(value: Any) -> list[str]:
    """Strings of a list as written (the rule is shown as the service stored it)."""
    return [str(v) for v in value] if isinstance(value, list) else []


def _subjects(rule: dict[str, Any]) -> str:
    subjects = rule.get("subjects")
    if not isinstance(subjects, dict):
        return "-"
    found = [f"user:{u}" for u in _texts(subjects.get("users"))]
    found += [f"group:{g}" for g in _texts(subjects.get("groups"))]
    accounts = subjects.get("serviceAccounts")
    for account in accounts if isinstance(accounts, list) else []:
        if isinstance(account, dict):
            found.append(f"sa:{account.get('namespace') or 'default'}/{account.get('name')}")
    return ",".join(found) or "-"


def _permissions(rule: dict[str, Any]) -> str:
    permissions = rule.get("permissions")
    if not isinstance(permissions, dict) or all(
            permissions.get(k) is None for k in ("view", "viewMetrics")):
        return "view"  # none written grants view only, as the service compiles it
    granted = [k for k in ("view", "viewMetrics") if permissions.get(k) is True]
    return ",".join(granted) or "none"


def _resources(rule: dict[str, Any]) -> str:
    resources = rule.get("resources")
    shown = [f"{r.get('type')}:{r.get('visibility', 'all')}"
             for r in (resources if isinstance(resources, list) else [])
             if isinstance(r, dict)]
    return ",".join(shown) or "-"


def rule_row(name: str, found: dict[str, Any]) -> list[str]:
    rule = found.get("rule")
    rule = rule if isinstance(rule, dict) else {}
    effect = str(rule.get("effect") or "Allow")
    # A Deny rule denies everything: what it would grant or filter means nothing.
    allow = effect != "Deny"
    return [name, str(found.get("block")), str(found.get("source")), effect,
            _subjects(rule), _permissions(rule) if allow else "-",
            _resources(rule) if allow else "-"]


HEADER = ["RULE", "BLOCK", "SOURCE", "EFFECT", "SUBJECTS", "PERMISSIONS", "RESOURCES"]


def _conditions(conditions: list[StatusCondition]) -> list[str]:
    if not conditions:
        return ["(no such policy)"]
    return [f"{c.type} {c.status} {c.reason}: {c.message}" for c in conditions]


def render_effective(reply: EffectiveReply) -> list[str]:
    lines = [f"{target_text(reply.target)} (revision {reply.revision})"]
    if reply.rules:
        lines += table(HEADER, (rule_row(name, msgspec.to_builtins(found))
                                  for name, found in reply.rules.items()))
    else:
        lines.append("no rules")
    lines.append("policies on its path, highest first: " + (", ".join(reply.policies)
                                                             or "none"))
    lines.append("rules from: " + (", ".join(reply.affected_by) or "none"))
    if reply.excluded:
        lines.append("taking no part (aimed at it or above it):")
        lines += table(None, ([entry.policy, entry.reason, entry.message]
                              for entry in reply.excluded), indent="  ")
    return lines


def _subject_text(change: AccessChange) -> str:
    kind, name = change.subject.kind, change.subject.name
    if kind == "serviceaccount":  # system:serviceaccount:NS:NAME, as rules print it
        namespace, _, account = name.removeprefix("system:serviceaccount:").partition(":")
        return f"sa:{namespace}/{account}"
    return f"{kind}:{name}"


def _resource_text(change: AccessChange) -> str:
    resource = change.resource
    if resource.type == "cluster":
        return "cluster"
    if resource.name != "*":
        return f"namespace {resource.name}"
    return resource.type if resource.namespace is None else \
        f"{resource.type} in {resource.namespace}"


def _after_text(change: AccessChange) -> str:
    """``no change``, or the new decision (and its policy, if another decides), which
    way it moves and how (the answers in full: ``clearance request``)."""
    if change.move == "none":
        return change.detail
    after = change.after
    by = "" if after.policy == change.before.policy else \
        f" ({after.policy or 'no policy'})"
    return f"{after.decision}{by}, {change.move}: {change.detail}"


ACCESS_HEADER = ["TARGET", "SUBJECT", "RESOURCE", "BEFORE", "AFTER"]


def render_access(reply: SimulateReply) -> list[str]:
    """Who gains or loses access: each row's decision before, and after."""
    if not reply.targets:
        return []
    lines = ["who gains or loses access (check, view)"]
    if not reply.access and reply.truncated is None:
        lines.append("  nobody: no changed rule names a subject")
    rows = [[target_text(change.target), _subject_text(change), _resource_text(change),
             change.before.decision, _after_text(change)] for change in reply.access]
    lines += table(ACCESS_HEADER, rows, indent="  ") if rows else []
    if reply.truncated is not None:
        cut = reply.truncated
        lines.append(f"  ... {cut.total - cut.listed} more rows not listed ({cut.listed} of "
                     f"{cut.total}): {cut.reason}")
    return lines


def render_simulate(reply: SimulateReply, operation: str) -> list[str]:
    count = len(reply.targets)
    lines = [f"{operation}: {count} target{'' if count == 1 else 's'} would change"]
    for diff in reply.targets:
        lines.append(target_text(diff.target))
        rows = [["+", *rule_row(n, r)] for n, r in diff.added.items()]
        rows += [["~", *rule_row(n, r)] for n, r in diff.changed.items()]
        rows += [["-", name, "", "", "", "", "", ""] for name in diff.removed]
        lines += table(None, rows, indent="  ")
    for key, change in reply.status.items():
        lines.append(f"status of {key}")
        moves: list[tuple[str, list[StatusCondition]]] = [
            ("before", change.before), ("after", change.after)]
        if change.before == change.after:  # the simulated policy is always reported
            moves = [("same", change.after)]
        for label, conditions in moves:
            shown = _conditions(conditions)
            lines.append(f"  {label + ':':7} {shown[0]}")
            lines += [f"  {'':7} {more}" for more in shown[1:]]
    return lines + render_access(reply)


def accepted_after(reply: SimulateReply) -> bool:
    """Whether every policy the dry run reports is Accepted afterwards (or gone)."""
    return all(c.status == "True" for change in reply.status.values()
               for c in change.after if c.type == "Accepted")


def _target(text: str) -> Target:
    try:
        return parse_target(text)
    except argparse.ArgumentTypeError as exc:
        raise CliError(str(exc)) from None


def effective(args: argparse.Namespace) -> int:
    body = EffectiveRequest(target=_target(args.target))
    return client.ask(args, SUBJECT_EFFECTIVE, body, lambda reply: render_effective(
        msgspec.convert(reply, EffectiveReply)))


def reach(args: argparse.Namespace) -> int:
    try:
        namespace, name = policy_ref(args.policy)
    except argparse.ArgumentTypeError as exc:
        raise CliError(str(exc)) from None

    def show(reply: dict[str, Any]) -> list[str]:
        targets = msgspec.convert(reply, ReachReply).targets
        if not targets:
            print("no target holds it (its rules are overridden or unset everywhere)",
                  file=sys.stderr)
            return []
        return table(["TARGET"], ([target_text(t)] for t in targets))

    body = ReachRequest(namespace=namespace, name=name, rule=args.rule)
    return client.ask(args, SUBJECT_EFFECTIVE_REACH, body, show)


def simulate(args: argparse.Namespace) -> int:
    """Exit status 1 when the policy would not be accepted, so a pipeline can refuse it."""
    operation: Literal["apply", "delete"] = "delete" if args.delete else "apply"
    body = SimulateRequest(policy=_load_policy(args.file), operation=operation)

    def verdict(reply: dict[str, Any]) -> int:
        return 0 if args.delete or accepted_after(msgspec.convert(reply, SimulateReply)) else 1

    return client.ask(args, SUBJECT_EFFECTIVE_SIMULATE, body, lambda reply: render_simulate(
        msgspec.convert(reply, SimulateReply), f"{operation} {args.file}"), verdict)
