"""``can-i`` (``--list``), ``who-can``, ``search`` and ``search-plan``: Kubernetes access
reviews and ACM search (README: RBAC reviews), with kubectl's syntax and exit statuses."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from clearance_api.wire import (
    SUBJECT_REVIEW_RESOURCE,
    SUBJECT_REVIEW_RULES,
    SUBJECT_REVIEW_SUBJECT,
    SUBJECT_SEARCH_FILTER,
    SUBJECT_SEARCH_PLAN,
    NonResourceAttributes,
    PrincipalRequest,
    ResourceAttributes,
    ResourceReviewRequest,
    RulesReviewRequest,
    RulesReviewSpec,
    SearchFilterRequest,
    SearchResult,
    SubjectAccessReview,
    SubjectAccessReviewSpec,
)
from clearance_cli import client, inputs
from clearance_cli.decisions import principal_of
from clearance_cli.flags import CliError
from clearance_cli.output import table
from clearance_core.rbac import names as kube_names


def resource_parts(text: str) -> tuple[str, str, str]:
    """kubectl's RESOURCE syntax: ``pods``, ``pods/log``, ``deployments.apps`` ->
    (resource, subresource, group)."""
    resource, _, subresource = text.partition("/")
    resource, _, group = resource.partition(".")
    return resource, subresource, group


def subject_review(args: argparse.Namespace) -> SubjectAccessReview:
    spec = SubjectAccessReviewSpec(user=args.user, groups=args.groups)
    if args.resource.startswith("/"):
        spec.non_resource_attributes = NonResourceAttributes(path=args.resource, verb=args.verb)
    else:
        resource, subresource, group = resource_parts(args.resource)
        spec.resource_attributes = ResourceAttributes(
            verb=args.verb, resource=resource, group=group, subresource=subresource,
            namespace=args.namespace, name=args.name)
    return SubjectAccessReview(spec=spec)


def can_i(args: argparse.Namespace) -> int:
    if args.list:
        if args.verb or args.resource:
            raise CliError("can-i --list takes no VERB or RESOURCE")
        body = RulesReviewRequest(spec=RulesReviewSpec(namespace=args.namespace),
                                  user=args.user, groups=args.groups)
        return client.ask(args, SUBJECT_REVIEW_RULES, body, rules_table)
    if not (args.verb and args.resource):
        raise CliError("can-i needs VERB and RESOURCE (or --list)")

    def allowed(reply: dict[str, Any]) -> bool:
        status = reply.get("status")
        return isinstance(status, dict) and status.get("allowed") is True

    def show(reply: dict[str, Any]) -> list[str]:
        status = reply.get("status") or {}
        for warning in review_warnings(args, str(status.get("reason") or "")):
            print(f"Warning: {warning}", file=sys.stderr)
        if status.get("reason"):  # as kubectl: the answer on stdout, the why on stderr
            print(f"  {status['reason']}", file=sys.stderr)
        if status.get("evaluationError"):
            print(f"  evaluation error: {status['evaluationError']}", file=sys.stderr)
        return ["yes" if allowed(reply) else "no"]

    return client.ask(args, SUBJECT_REVIEW_SUBJECT, subject_review(args), show,
                      lambda reply: client.yes_no(allowed(reply)))


def review_warnings(args: argparse.Namespace, reason: str) -> list[str]:
    """kubectl's warnings for ``can-i``: a verb not among Kubernetes' verbs; a resource
    that is no built-in Kubernetes resource and that the review's reason says no rule
    names (``clearance_core.rbac.names``)."""
    non_resource = args.resource.startswith("/")
    found = [kube_names.unknown_verb(args.verb, non_resource=non_resource)]
    if not non_resource:
        found.append(kube_names.unknown_resource(resource_parts(args.resource)[0], reason))
    return [warning for warning in found if warning is not None]


RULES = ["RESOURCES", "NON-RESOURCE-URLS", "RESOURCE-NAMES", "VERBS"]


def _resources(rule: dict[str, Any]) -> list[str]:
    """kubectl's ``resource.group`` spelling, one per (group, resource) of the rule."""
    groups = rule.get("apiGroups") or [""]
    return [f"{r}.{g}" if g else str(r) for g in groups for r in rule.get("resources") or []]


def rules_table(reply: dict[str, Any]) -> list[str]:
    status = reply.get("status") or {}
    rows = [[_resources(r), None, r.get("resourceNames"), r.get("verbs")]
            for r in status.get("resourceRules") or []]
    rows += [[None, r.get("nonResourceURLs"), None, r.get("verbs")]
             for r in status.get("nonResourceRules") or []]
    if status.get("evaluationError"):
        print(f"evaluation error: {status['evaluationError']}", file=sys.stderr)
    return table(RULES, rows)


def who_can(args: argparse.Namespace) -> int:
    resource, subresource, group = resource_parts(args.resource)
    body = ResourceReviewRequest(verb=args.verb, resource=resource, group=group,
                                 subresource=subresource, namespace=args.namespace,
                                 name=args.name)

    def show(reply: dict[str, Any]) -> list[str]:
        rows = [["User", u] for u in reply.get("users") or []]
        rows += [["Group", g] for g in reply.get("groups") or []]
        return table(["KIND", "NAME"], rows)

    return client.ask(args, SUBJECT_REVIEW_RESOURCE, body, show)


SEARCH = ["CLUSTER", "GROUP", "RESOURCE", "KIND", "NAMESPACE", "NAME"]


def search(args: argparse.Namespace) -> int:
    document = inputs.read(args.file)
    items = document.get("items") if isinstance(document, dict) else document
    try:
        body = SearchFilterRequest(principal=principal_of(args),
                                   items=msgspec.convert(items, list[SearchResult]))
    except msgspec.ValidationError as exc:
        raise CliError(f"{args.file}: a list of search results: {exc}") from None

    def show(reply: dict[str, Any]) -> list[str]:
        found = reply.get("items") or []
        return [f"{reply.get('visible')} of {reply.get('total')} visible",
                *(table(SEARCH, ([i.get(k.lower()) for k in SEARCH] for i in found))
                  if found else [])]

    return client.ask(args, SUBJECT_SEARCH_FILTER, body, show)


def search_plan(args: argparse.Namespace) -> int:
    def show(reply: dict[str, Any]) -> list[str]:
        hub = reply.get("hub") or []
        sql = reply.get("sql") or {}
        lines = table(["GROUP", "RESOURCE", "NAMESPACES", "NAMES"],
                      ([h.get("group") or "core", h.get("resource"), h.get("namespaces"),
                        h.get("names")] for h in hub))
        managed = reply.get("managed_clusters") or []
        return [*lines, "", "managed clusters: " + (", ".join(managed) or "none"),
                f"sql where: {sql.get('where')}",
                f"sql params: {msgspec.json.encode(sql.get('params') or []).decode()}"]

    return client.ask(args, SUBJECT_SEARCH_PLAN,
                      PrincipalRequest(principal=principal_of(args)), show)
