"""Kubernetes RBAC (README: RBAC reviews): a table from Kubernetes' own tests, and properties.

The table follows ``plugin/pkg/auth/authorizer/rbac/rbac_test.go`` (TestAuthorizer,
TestRuleMatches) and ``pkg/registry/rbac/validation/rule.go`` (subject matching), plus the
aggregation controller's behaviour. The properties check the index against a reference
written straight from ``VisitRulesFor`` (a linear scan, aggregation as a set fixpoint),
and who_can / rules_for against allowed.
"""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_api.errors import InvalidObject
from clearance_core.rbac.index import RbacIndex
from clearance_core.rbac.rules import (
    Attributes,
    Binding,
    NonResourceAttributes,
    PolicyRule,
    ResourceAttributes,
    Role,
    binding_subjects,
    parse_binding,
    parse_role,
)

V1 = "rbac.authorization.k8s.io/v1"

# Builders: compact strings like the Go tests' newRule("get,list", "", "pods", "").


def rule(verbs: str = "*", groups: str = "", resources: str = "", names: str = "",
         urls: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"verbs": verbs.split(",")}
    if resources:
        out["apiGroups"] = groups.split(",")
        out["resources"] = resources.split(",")
    if names:
        out["resourceNames"] = names.split(",")
    if urls:
        out["nonResourceURLs"] = urls.split(",")
    return out


def cr(name: str, *rules: dict[str, Any], labels: dict[str, str] | None = None,
       aggregate: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": V1, "kind": "ClusterRole",
                           "metadata": {"name": name, "labels": labels or {}},
                           "rules": list(rules)}
    if aggregate is not None:
        obj["aggregationRule"] = {"clusterRoleSelectors": aggregate}
    return obj


def role(ns: str, name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": V1, "kind": "Role", "metadata": {"name": name, "namespace": ns},
            "rules": list(rules)}


def subjects(specs: tuple[str, ...]) -> list[dict[str, str]]:
    """``User:alice``, ``Group:g``, ``ServiceAccount:name`` or ``ServiceAccount:ns/name``."""
    out = []
    for spec in specs:
        kind, name = spec.split(":", 1)
        subject = {"kind": kind, "name": name}
        if kind == "ServiceAccount" and "/" in name:
            subject["namespace"], subject["name"] = name.split("/")
        out.append(subject)
    return out


def crb(name: str, role_name: str, *specs: str) -> dict[str, Any]:
    return {"apiVersion": V1, "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role_name},
            "subjects": subjects(specs)}


def rb(ns: str, name: str, ref: str, *specs: str) -> dict[str, Any]:
    """``ref`` is ``Role:name`` or ``ClusterRole:name``."""
    kind, role_name = ref.split(":")
    return {"apiVersion": V1, "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind,
                        "name": role_name},
            "subjects": subjects(specs)}


def index(*objects: dict[str, Any]) -> RbacIndex:
    roles = [parse_role(o) for o in objects if o["kind"] in ("Role", "ClusterRole")]
    bindings = [parse_binding(o) for o in objects if o["kind"].endswith("Binding")]
    return RbacIndex(roles, bindings)


def res(verb: str, resource: str, ns: str = "", group: str = "", sub: str = "",
        name: str = "") -> ResourceAttributes:
    return ResourceAttributes(verb=verb, resource=resource, namespace=ns, group=group,
                              subresource=sub, name=name)


def url(verb: str, path: str) -> NonResourceAttributes:
    return NonResourceAttributes(verb=verb, path=path)


def one(rules: dict[str, Any] | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A world where alice holds ``rules`` cluster-wide through one ClusterRoleBinding."""
    rules = rules if isinstance(rules, list) else [rules]
    return [cr("r", *rules), crb("b", "r", "User:alice")]


SA1 = "system:serviceaccount:ns1:robot"
LBL = {"rbac.example.com/aggregate-to-view": "true"}

# (id, objects, attributes, username, groups, allowed)
CASES: list[tuple[str, list[dict[str, Any]], Attributes, str, tuple[str, ...], bool]] = [
    # verbs and API groups
    ("verb-star", one(rule("*", "", "pods")), res("escalate", "pods", "ns1"), "alice", (), True),
    ("verb-case-sensitive", one(rule("get", "", "pods")), res("GET", "pods", "ns1"),
     "alice", (), False),
    ("verb-other", one(rule("get,list", "", "pods")), res("watch", "pods", "ns1"),
     "alice", (), False),
    ("group-star", one(rule("get", "*", "deployments")),
     res("get", "deployments", "ns1", group="apps"), "alice", (), True),
    ("group-core-not-apps", one(rule("get", "", "deployments")),
     res("get", "deployments", "ns1", group="apps"), "alice", (), False),
    ("group-apps-not-core", one(rule("get", "apps", "pods")), res("get", "pods", "ns1"),
     "alice", (), False),
    ("group-exact", one(rule("get", "batch,apps", "deployments")),
     res("get", "deployments", "ns1", group="apps"), "alice", (), True),
    ("version-ignored", one(rule("get", "", "pods")),
     ResourceAttributes(verb="get", resource="pods", version="v9", namespace="ns1"),
     "alice", (), True),
    # resources and subresources
    ("res-exact", one(rule("get", "", "pods")), res("get", "pods", "ns1"), "alice", (), True),
    ("res-case-sensitive", one(rule("get", "", "Pods")), res("get", "pods", "ns1"),
     "alice", (), False),
    ("res-not-subresource", one(rule("get", "", "pods")),
     res("get", "pods", "ns1", sub="log"), "alice", (), False),
    ("subres-exact", one(rule("get", "", "pods/log")), res("get", "pods", "ns1", sub="log"),
     "alice", (), True),
    ("subres-not-parent", one(rule("get", "", "pods/log")), res("get", "pods", "ns1"),
     "alice", (), False),
    ("subres-other", one(rule("get", "", "pods/log")),
     res("get", "pods", "ns1", sub="exec"), "alice", (), False),
    ("star-covers-subresource", one(rule("get", "", "*")),
     res("get", "pods", "ns1", sub="status"), "alice", (), True),
    ("star-sub", one(rule("update", "*", "*/scale")),
     res("update", "deployments", "ns1", group="apps", sub="scale"), "alice", (), True),
    ("star-sub-not-parent", one(rule("update", "*", "*/scale")),
     res("update", "deployments", "ns1", group="apps"), "alice", (), False),
    ("star-sub-other-sub", one(rule("update", "*", "*/scale")),
     res("update", "deployments", "ns1", group="apps", sub="status"), "alice", (), False),
    ("res-slash-star-literal", one(rule("get", "apps", "deployments/*")),
     res("get", "deployments", "ns1", group="apps", sub="scale"), "alice", (), False),
    # resourceNames
    ("names-get-listed", one(rule("get,list,create", "", "configmaps", names="a,b")),
     res("get", "configmaps", "ns1", name="b"), "alice", (), True),
    ("names-get-other", one(rule("get", "", "configmaps", names="a")),
     res("get", "configmaps", "ns1", name="c"), "alice", (), False),
    ("names-list-no-name", one(rule("get,list", "", "configmaps", names="a")),
     res("list", "configmaps", "ns1"), "alice", (), False),
    ("names-create-no-name", one(rule("create", "", "configmaps", names="a")),
     res("create", "configmaps", "ns1"), "alice", (), False),
    ("names-list-with-name", one(rule("list", "", "configmaps", names="a")),
     res("list", "configmaps", "ns1", name="a"), "alice", (), True),
    ("no-names-list", one(rule("list", "", "configmaps")), res("list", "configmaps", "ns1"),
     "alice", (), True),
    # non-resource URLs
    ("url-exact", one(rule("get", urls="/healthz")), url("get", "/healthz"), "alice", (), True),
    ("url-exact-not-child", one(rule("get", urls="/healthz")), url("get", "/healthz/ready"),
     "alice", (), False),
    ("url-verb", one(rule("get", urls="/apis")), url("watch", "/apis"), "alice", (), False),
    ("url-prefix", one(rule("get", urls="/apis/*")), url("get", "/apis/v1/foo"),
     "alice", (), True),
    ("url-prefix-not-parent", one(rule("get", urls="/apis/*")), url("get", "/apis"),
     "alice", (), False),
    ("url-prefix-root", one(rule("get", urls="/*")), url("get", "/"), "alice", (), True),
    ("url-star", one(rule("get", urls="*")), url("get", "/anything/at/all"),
     "alice", (), True),
    ("url-mid-star-literal", one(rule("get", urls="/api/*/pods")), url("get", "/api/v1/pods"),
     "alice", (), False),
    ("url-not-resource", one(rule("get", urls="*")), res("get", "pods", "ns1"),
     "alice", (), False),
    ("resource-not-url", one(rule("*", "*", "*")), url("get", "/healthz"), "alice", (), False),
    ("url-through-rolebinding", [cr("r", rule("get", urls="*")),
                                 rb("ns1", "b", "ClusterRole:r", "User:alice")],
     url("get", "/healthz"), "alice", (), False),
    # where bindings apply
    ("crb-any-namespace", one(rule("get", "", "pods")), res("get", "pods", "ns7"),
     "alice", (), True),
    ("crb-cluster-scoped", one(rule("get", "", "nodes")), res("get", "nodes"),
     "alice", (), True),
    ("rb-own-namespace", [cr("r", rule("get", "", "pods")),
                          rb("ns1", "b", "ClusterRole:r", "User:alice")],
     res("get", "pods", "ns1"), "alice", (), True),
    ("rb-other-namespace", [cr("r", rule("get", "", "pods")),
                            rb("ns1", "b", "ClusterRole:r", "User:alice")],
     res("get", "pods", "ns2"), "alice", (), False),
    ("rb-never-cluster-scoped", [cr("r", rule("*", "*", "*")),
                                 rb("ns1", "b", "ClusterRole:r", "User:alice")],
     res("get", "nodes"), "alice", (), False),
    ("rb-role", [role("ns1", "r", rule("get", "", "pods")),
                 rb("ns1", "b", "Role:r", "User:alice")],
     res("get", "pods", "ns1"), "alice", (), True),
    ("rb-role-of-other-namespace", [role("ns2", "r", rule("get", "", "pods")),
                                    rb("ns1", "b", "Role:r", "User:alice")],
     res("get", "pods", "ns1"), "alice", (), False),
    # subjects
    ("user-other", one(rule("get", "", "pods")), res("get", "pods", "ns1"), "bob", (), False),
    ("user-star-is-literal", [cr("r", rule("get", "", "pods")), crb("b", "r", "User:*")],
     res("get", "pods", "ns1"), "bob", (), False),
    ("group", [cr("r", rule("get", "", "pods")), crb("b", "r", "Group:devs")],
     res("get", "pods", "ns1"), "bob", ("x", "devs"), True),
    ("group-not-user", [cr("r", rule("get", "", "pods")), crb("b", "r", "Group:devs")],
     res("get", "pods", "ns1"), "devs", (), False),
    ("sa-defaults-to-rb-namespace", [cr("r", rule("get", "", "pods")),
                                     rb("ns1", "b", "ClusterRole:r", "ServiceAccount:robot")],
     res("get", "pods", "ns1"), SA1, (), True),
    ("sa-default-other-namespace", [cr("r", rule("get", "", "pods")),
                                    rb("ns2", "b", "ClusterRole:r", "ServiceAccount:robot")],
     res("get", "pods", "ns2"), SA1, (), False),
    ("sa-rb-explicit-namespace", [cr("r", rule("get", "", "pods")),
                                  rb("ns2", "b", "ClusterRole:r", "ServiceAccount:ns1/robot")],
     res("get", "pods", "ns2"), SA1, (), True),
    ("sa-crb-without-namespace", [cr("r", rule("get", "", "pods")),
                                  crb("b", "r", "ServiceAccount:robot")],
     res("get", "pods", "ns1"), SA1, (), False),
    ("sa-crb-with-namespace", [cr("r", rule("get", "", "pods")),
                               crb("b", "r", "ServiceAccount:ns1/robot")],
     res("get", "pods", "ns9"), SA1, (), True),
    ("sa-group", [cr("r", rule("get", "", "pods")),
                  rb("ns1", "b", "ClusterRole:r", "Group:system:serviceaccounts:ns1")],
     res("get", "pods", "ns1"), SA1, ("system:serviceaccounts", "system:serviceaccounts:ns1"),
     True),
    ("user-subject-names-sa", [cr("r", rule("get", "", "pods")), crb("b", "r", f"User:{SA1}")],
     res("get", "pods", "ns1"), SA1, (), True),
    ("nothing-bound", [cr("r", rule("*", "*", "*"))], res("get", "pods", "ns1"),
     "alice", (), False),
    # aggregation
    ("agg-match-labels", [cr("view", aggregate=[{"matchLabels": LBL}]),
                          cr("extra", rule("get", "", "pods"), labels=LBL),
                          crb("b", "view", "User:alice")],
     res("get", "pods", "ns1"), "alice", (), True),
    ("agg-own-rules-ignored", [cr("view", rule("*", "*", "*"), aggregate=[{"matchLabels": LBL}]),
                               cr("extra", rule("get", "", "pods"), labels=LBL),
                               crb("b", "view", "User:alice")],
     res("delete", "pods", "ns1"), "alice", (), False),
    ("agg-label-mismatch", [cr("view", aggregate=[{"matchLabels": LBL}]),
                            cr("extra", rule("get", "", "pods"), labels={"other": "true"}),
                            crb("b", "view", "User:alice")],
     res("get", "pods", "ns1"), "alice", (), False),
    ("agg-expression-in", [cr("view", aggregate=[{"matchExpressions": [
                               {"key": "tier", "operator": "In", "values": ["a", "b"]}]}]),
                           cr("extra", rule("get", "", "pods"), labels={"tier": "b"}),
                           crb("b", "view", "User:alice")],
     res("get", "pods", "ns1"), "alice", (), True),
    ("agg-expression-notin-absent", [cr("view", aggregate=[{"matchExpressions": [
                                         {"key": "tier", "operator": "NotIn", "values": ["a"]}]}]),
                                     cr("extra", rule("get", "", "pods")),
                                     crb("b", "view", "User:alice")],
     res("get", "pods", "ns1"), "alice", (), True),
    ("agg-expression-doesnotexist", [cr("view", aggregate=[{"matchExpressions": [
                                         {"key": "tier", "operator": "DoesNotExist"}]}]),
                                     cr("extra", rule("get", "", "pods"), labels={"tier": "x"}),
                                     crb("b", "view", "User:alice")],
     res("get", "pods", "ns1"), "alice", (), False),
    ("agg-selectors-or", [cr("view", aggregate=[{"matchLabels": {"a": "1"}},
                                                {"matchExpressions": [
                                                    {"key": "b", "operator": "Exists"}]}]),
                          cr("extra", rule("get", "", "pods"), labels={"b": ""}),
                          crb("b", "view", "User:alice")],
     res("get", "pods", "ns1"), "alice", (), True),
    ("agg-chain", [cr("admin", aggregate=[{"matchLabels": {"to-admin": "true"}}]),
                   cr("edit", labels={"to-admin": "true"},
                      aggregate=[{"matchLabels": {"to-edit": "true"}}]),
                   cr("view", labels={"to-edit": "true"},
                      aggregate=[{"matchLabels": {"to-view": "true"}}]),
                   cr("pods-reader", rule("get", "", "pods"), labels={"to-view": "true"}),
                   crb("b", "admin", "User:alice")],
     res("get", "pods", "ns1"), "alice", (), True),
    ("agg-cycle", [cr("a", labels={"x": "1"}, aggregate=[{"matchLabels": {"y": "1"}}]),
                   cr("b", labels={"y": "1"}, aggregate=[{"matchLabels": {"x": "1"}}]),
                   cr("c", rule("get", "", "pods"), labels={"x": "1"}),
                   crb("bind", "b", "User:alice")],
     res("get", "pods", "ns1"), "alice", (), True),
    ("agg-through-rolebinding", [cr("view", aggregate=[{"matchLabels": LBL}]),
                                 cr("extra", rule("get", "", "pods"), labels=LBL),
                                 rb("ns1", "b", "ClusterRole:view", "User:alice")],
     res("get", "pods", "ns1"), "alice", (), True),
    # missing roles contribute nothing
    ("missing-clusterrole", [crb("b", "gone", "User:alice")], res("get", "pods", "ns1"),
     "alice", (), False),
    ("missing-role", [rb("ns1", "b", "Role:gone", "User:alice")], res("get", "pods", "ns1"),
     "alice", (), False),
]


@pytest.mark.parametrize(("objects", "attrs", "username", "groups", "expected"),
                         [pytest.param(*case[1:], id=case[0]) for case in CASES])
def test_authorizer_table(objects: list[dict[str, Any]], attrs: Attributes, username: str,
                          groups: tuple[str, ...], expected: bool) -> None:
    idx = index(*objects)
    allowed, reason, _ = idx.allowed(attrs, username, groups)
    assert allowed is expected, reason
    # who_can is the same question asked the other way round.
    users, listed_groups = idx.who_can(attrs)
    assert (username in users or bool(set(groups) & set(listed_groups))) is expected
    # and a rules review must show a covering rule exactly when access is allowed.
    resource_rules, url_rules = idx.rules_for(username, groups,
                                              getattr(attrs, "namespace", ""))
    rules = url_rules if isinstance(attrs, NonResourceAttributes) else resource_rules
    assert any(msgspec.convert(r, PolicyRule).allows(attrs) for r in rules) is expected


def test_table_is_large() -> None:
    assert len(CASES) >= 40


# Reasons and evaluation errors, worded as Kubernetes words them -----------------------


def test_reason_names_binding_role_and_first_matching_subject() -> None:
    idx = index(cr("view", rule("get", "", "pods")),
                crb("viewers", "view", "User:bob", "Group:devs", "User:alice"),
                rb("ns1", "local", "ClusterRole:view", "ServiceAccount:robot"))
    assert idx.allowed(res("get", "pods", "ns1"), "alice", ["devs"]) == (
        True, 'RBAC: allowed by ClusterRoleBinding "viewers" of ClusterRole "view" to Group "devs"',
        None)
    # Kubernetes prints a RoleBinding as name/namespace and a service account likewise.
    assert idx.allowed(res("get", "pods", "ns1"), SA1, [])[1] == (
        'RBAC: allowed by RoleBinding "local/ns1" of ClusterRole "view" to '
        'ServiceAccount "robot/ns1"')


def test_missing_roles_are_named_only_when_they_apply() -> None:
    idx = index(crb("b1", "gone", "User:alice"), rb("ns1", "b2", "Role:nope", "Group:devs"),
                rb("ns2", "b3", "Role:nope", "User:alice"), crb("b4", "gone", "User:bob"))
    assert idx.allowed(res("get", "pods", "ns1"), "alice", ["devs"]) == (
        False,
        'RBAC: [clusterrolebinding "b1" references missing clusterrole "gone", '
        'rolebinding "ns1/b2" references missing role "ns1/nope"]',
        '[clusterrolebinding "b1" references missing clusterrole "gone", '
        'rolebinding "ns1/b2" references missing role "ns1/nope"]')
    assert idx.allowed(res("get", "pods", "ns3"), "carol", []) == (False, "", None)
    assert idx.evaluation_error("alice", ["devs"], "ns1") == idx.allowed(
        res("get", "pods", "ns1"), "alice", ["devs"])[2]
    assert idx.evaluation_error("alice", [], "ns2") == (
        '[clusterrolebinding "b1" references missing clusterrole "gone", '
        'rolebinding "ns2/b3" references missing role "ns2/nope"]')
    assert idx.evaluation_error("alice", [], "") == (
        'clusterrolebinding "b1" references missing clusterrole "gone"')


def test_missing_role_does_not_hide_another_grant() -> None:
    idx = index(crb("a", "gone", "User:alice"), cr("r", rule("get", "", "pods")),
                crb("b", "r", "User:alice"))
    allowed, _, error = idx.allowed(res("get", "pods", "ns1"), "alice", [])
    assert allowed
    assert error == 'clusterrolebinding "a" references missing clusterrole "gone"'


# Rules review ---------------------------------------------------------------------------


def test_rules_for_keeps_rules_as_stored_and_splits_the_two_kinds() -> None:
    mixed = {"verbs": ["get"], "apiGroups": [""], "resources": ["pods", "pods"],
             "nonResourceURLs": ["/healthz"]}
    idx = index(cr("c", rule("get", "", "pods"), mixed, rule("get", urls="/metrics")),
                crb("b", "c", "User:alice"),
                rb("ns1", "local", "ClusterRole:c", "User:alice"),
                role("ns1", "r", rule("list", "apps", "deployments", names="x")),
                rb("ns1", "rb", "Role:r", "User:alice"),
                rb("ns2", "elsewhere", "Role:r", "User:alice"))
    resources, urls = idx.rules_for("alice", [], "ns1")
    pods = {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}
    doubled = {"verbs": ["get"], "apiGroups": [""], "resources": ["pods", "pods"]}
    assert resources == [pods, doubled,  # through the ClusterRoleBinding
                         pods, doubled,  # again through the RoleBinding: not de-duplicated
                         {"verbs": ["list"], "apiGroups": ["apps"],
                          "resources": ["deployments"], "resourceNames": ["x"]}]
    # Non-resource rules through the RoleBinding too: Kubernetes' RulesFor lists every
    # rule of every role bound in the namespace, although a RoleBinding grants no URL.
    healthz = {"verbs": ["get"], "nonResourceURLs": ["/healthz"]}
    metrics = {"verbs": ["get"], "nonResourceURLs": ["/metrics"]}
    assert urls == [healthz, metrics, healthz, metrics]
    assert idx.rules_for("alice", [], "") == (resources[:2], urls[:2])
    assert idx.rules_for("bob", [], "ns1") == ([], [])


# who-can and subjects -------------------------------------------------------------------


def test_who_can_lists_subjects_with_service_accounts_as_usernames() -> None:
    idx = index(cr("r", rule("get", "", "pods")), cr("other", rule("get", "", "secrets")),
                crb("b1", "r", "User:alice", "Group:devs", "ServiceAccount:kube-system/ctl",
                    "ServiceAccount:nobody"),
                rb("ns1", "b2", "ClusterRole:r", "ServiceAccount:robot", "User:bob"),
                rb("ns2", "b3", "ClusterRole:r", "User:carol"),
                crb("b4", "other", "User:dave"))
    assert idx.who_can(res("get", "pods", "ns1")) == (
        ["alice", "bob", "system:serviceaccount:kube-system:ctl", SA1], ["devs"])
    assert idx.who_can(res("get", "pods")) == (
        ["alice", "system:serviceaccount:kube-system:ctl"], ["devs"])


def test_binding_subjects_and_subjects_of_role_through_aggregation() -> None:
    objects = [cr("view", aggregate=[{"matchLabels": LBL}]),
               cr("extra", rule("get", "", "pods"), labels=LBL),
               crb("b1", "view", "User:alice"), rb("ns1", "b2", "ClusterRole:extra", "Group:g"),
               rb("ns1", "b3", "Role:extra", "User:zed"), role("ns1", "extra")]
    idx = index(*objects)
    assert idx.subjects_of_role("ClusterRole", "", "extra") == (["alice"], ["g"])
    assert idx.subjects_of_role("ClusterRole", "", "view") == (["alice"], [])
    assert idx.subjects_of_role("Role", "ns1", "extra") == (["zed"], [])
    assert idx.subjects_of_role("ClusterRole", "", "absent") == ([], [])
    # Relabelled out of the aggregate: the new index no longer links them.
    objects[1] = cr("extra", rule("get", "", "pods"))
    assert index(*objects).subjects_of_role("ClusterRole", "", "extra") == ([], ["g"])
    binding = parse_binding(rb("ns1", "b", "Role:x", "ServiceAccount:robot", "User:u",
                               "Group:g", "User:u"))
    assert binding_subjects(binding) == ([SA1, "u"], ["g"])
    assert RbacIndex.binding_subjects(parse_binding(crb("b", "x", "ServiceAccount:r"))) == (
        [], [])


def test_labels_changing_moves_rules_in_and_out_of_an_aggregate() -> None:
    view = cr("view", rule("list", "", "nodes"), aggregate=[{"matchLabels": LBL}])
    binding = crb("b", "view", "User:alice")
    before = index(view, binding, cr("extra", rule("get", "", "pods")))
    after = index(view, binding, cr("extra", rule("get", "", "pods"), labels=LBL))
    assert before.effective_rules("ClusterRole", "", "view") == ()
    assert not before.allowed(res("get", "pods", "ns1"), "alice", [])[0]
    assert after.allowed(res("get", "pods", "ns1"), "alice", [])[0]


def test_aggregation_order_and_deduplication_follow_the_controller() -> None:
    shared = rule("get", "", "pods")
    idx = index(cr("agg", aggregate=[{"matchLabels": {"b": "1"}}, {"matchLabels": {"a": "1"}}]),
                cr("z", shared, rule("list", "", "pods"), labels={"a": "1"}),
                cr("y", rule("watch", "", "pods"), shared, labels={"a": "1", "b": "1"}),
                cr("x", rule("get", "", "nodes"), labels={"b": "1"}),
                cr("agg2", labels={"a": "1"}, aggregate=[{}]))  # {} selects every role
    verbs = [(r.verbs[0], r.resources[0])
             for r in idx.effective_rules("ClusterRole", "", "agg") or ()]
    # selectors in order, roles by name within a selector, first copy of a rule wins
    assert verbs == [("get", "nodes"), ("watch", "pods"), ("get", "pods"), ("list", "pods")]
    everything = idx.effective_rules("ClusterRole", "", "agg2") or ()
    assert {(r.verbs[0], r.resources[0]) for r in everything} == set(verbs)


# Parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize(("obj", "message"), [
    ([], "must be a JSON object"),
    ({"kind": "Pod", "metadata": {"name": "x"}}, "kind must be"),
    ({"kind": "Role", "apiVersion": "rbac.authorization.k8s.io/v1beta1",
      "metadata": {"name": "x", "namespace": "n"}}, "apiVersion"),
    ({"kind": "Role", "metadata": {"name": "x"}}, "needs metadata.namespace"),
    ({"kind": "ClusterRole", "metadata": {}}, "metadata.name"),
    ({"kind": "ClusterRole", "metadata": {"name": "x"}, "rules": [{"verbs": "get"}]},
     "rules"),
    ({"kind": "ClusterRole", "metadata": {"name": "x", "labels": {"a": [1]}}},
     "metadata.labels"),
    ({"kind": "ClusterRole", "metadata": {"name": "x"}, "aggregationRule": []},
     "aggregationRule must be an object"),
    ({"kind": "ClusterRole", "metadata": {"name": "x"}, "aggregationRule": {
        "clusterRoleSelectors": [{"matchExpressions": [{"key": "a", "operator": "in"}]}]}},
     "aggregationRule.clusterRoleSelectors"),
    ({"kind": "ClusterRole", "metadata": {"name": "x"}, "aggregationRule": {
        "clusterRoleSelectors": [{"matchExpressions": [{"key": "a", "operator": "In"}]}]}},
     "In needs values"),
    ({"kind": "ClusterRole", "metadata": {"name": "x"}, "aggregationRule": {
        "clusterRoleSelectors": [{"matchExpressions": [
            {"key": "a", "operator": "Exists", "values": ["v"]}]}]}},
     "Exists takes no values"),
])
def test_parse_role_rejects(obj: Any, message: str) -> None:
    with pytest.raises(InvalidObject, match=message):
        parse_role(obj)


@pytest.mark.parametrize(("obj", "message"), [
    ({"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "n"}}, "roleRef"),
    ({**crb("b", "r"), "roleRef": {"kind": "Role", "name": "r"}},
     "can only reference a ClusterRole"),
    ({**crb("b", "r"), "roleRef": {"kind": "Group", "name": "r"}}, "roleRef"),
    ({**crb("b", "r"), "roleRef": {"kind": "ClusterRole", "name": ""}}, "roleRef"),
    ({**crb("b", "r"), "subjects": [{"kind": "Robot", "name": "x"}]}, "subjects"),
    ({**crb("b", "r"), "subjects": [{"kind": "User"}]}, "subjects"),
    ({**crb("b", "r"), "subjects": {"kind": "User", "name": "x"}}, "subjects"),
])
def test_parse_binding_rejects(obj: Any, message: str) -> None:
    with pytest.raises(InvalidObject, match=message):
        parse_binding(obj)


def test_parse_accepts_nulls_and_round_trips_through_msgpack() -> None:
    obj = cr("c", {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"],
                   "resourceNames": None}, aggregate=None)
    obj["aggregationRule"] = None
    parsed = parse_role(obj)
    assert parsed.aggregation is None
    assert parsed.rules[0].as_stored() == {"verbs": ["get"], "apiGroups": [""],
                                           "resources": ["pods"]}
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(parsed), type=Role) == parsed
    binding = parse_binding({**rb("ns1", "b", "Role:r", "User:u"), "subjects": None})
    assert binding.subjects == ()
    assert binding.role_key == ("Role", "ns1", "r")
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(binding), type=Binding) == binding


# Properties -----------------------------------------------------------------------------

VERBS = ["get", "list", "create", "*"]
GROUPS = ["", "apps", "*"]
RESOURCES = ["pods", "pods/log", "deployments", "deployments/scale", "*/scale", "*"]
NAMESPACES = ["ns1", "ns2"]
LABELS = [{}, {"k": "a"}, {"k": "b"}, {"j": "x"}]
SUBJECTS = ["User:alice", "User:bob", "Group:g1", "Group:g2",
            "Group:system:serviceaccounts:ns1", "ServiceAccount:robot",
            "ServiceAccount:ns2/robot", f"User:{SA1}"]
PEOPLE = [("alice", ()), ("alice", ("g1",)), ("bob", ("g2",)), ("carol", ("g1", "g2")),
          (SA1, ("system:serviceaccounts", "system:serviceaccounts:ns1")),
          ("system:serviceaccount:ns2:robot", ("system:serviceaccounts",
                                              "system:serviceaccounts:ns2"))]


def some(values: list[str], min_size: int = 1) -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(values), min_size=min_size, max_size=3)


rules_st = st.one_of(
    st.builds(lambda v, g, r, n: {"verbs": v, "apiGroups": g, "resources": r,
                                  "resourceNames": n},
              some(VERBS), some(GROUPS), some(RESOURCES),
              st.just([]) | st.just([]) | some(["a", "b"])),
    st.builds(lambda v, u: {"verbs": v, "nonResourceURLs": u},
              some(VERBS), some(["/healthz", "/apis/*", "*", "/apis"])),
)
selector_st = st.one_of(
    st.builds(lambda kv: {"matchLabels": dict([kv])},
              st.sampled_from([("k", "a"), ("k", "b"), ("j", "x")])),
    st.builds(lambda op, vals: {"matchExpressions": [
        {"key": "k", "operator": op, **({"values": vals} if op in ("In", "NotIn") else {})}]},
        st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]), some(["a", "b"])),
)


@st.composite
def worlds(draw: st.DrawFn) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 5))):
        aggregate = draw(st.none() | st.none() | st.lists(selector_st, max_size=2))
        objects.append(cr(f"c{i}", *draw(st.lists(rules_st, max_size=3)),
                          labels=draw(st.sampled_from(LABELS)), aggregate=aggregate))
    for i in range(draw(st.integers(0, 3))):
        objects.append(role(draw(st.sampled_from(NAMESPACES)), f"r{i}",
                            *draw(st.lists(rules_st, max_size=3))))
    roles = [f"c{i}" for i in range(6)]  # c5 never exists: a missing role
    for i in range(draw(st.integers(1, 8))):
        specs = draw(st.lists(st.sampled_from(SUBJECTS), min_size=1, max_size=3))
        if draw(st.booleans()):
            objects.append(crb(f"b{i}", draw(st.sampled_from(roles)), *specs))
        else:
            ref = draw(st.sampled_from([f"ClusterRole:{r}" for r in roles]
                                       + [f"Role:r{j}" for j in range(3)]))
            objects.append(rb(draw(st.sampled_from(NAMESPACES)), f"b{i}", ref, *specs))
    return objects


attrs_st = st.one_of(
    st.builds(lambda v, g, r, s, n, ns: ResourceAttributes(
        verb=v, group=g, resource=r, subresource=s, name=n, namespace=ns),
        st.sampled_from(["get", "list", "create", "delete"]), st.sampled_from(["", "apps"]),
        st.sampled_from(["pods", "pods", "deployments", "nodes"]),
        st.sampled_from(["", "", "", "log", "scale"]), st.sampled_from(["", "", "a", "c"]),
        st.sampled_from(["", *NAMESPACES, *NAMESPACES, "ns3"])),
    st.builds(lambda v, p: NonResourceAttributes(verb=v, path=p),
              st.sampled_from(["get", "post"]),
              st.sampled_from(["/healthz", "/apis", "/apis/v1", "/"])),
)


@st.composite
def requests_in(draw: st.DrawFn, objects: list[dict[str, Any]]) -> Attributes:
    """Half the time a request some rule of the world fits, so that allows are common."""
    rules = [r for o in objects for r in o.get("rules", ())]
    if not rules or draw(st.booleans()):
        return draw(attrs_st)
    picked = draw(st.sampled_from(rules))
    verb = draw(st.sampled_from(picked["verbs"])).replace("*", "get")
    if "nonResourceURLs" in picked:
        path = draw(st.sampled_from(picked["nonResourceURLs"]))
        return NonResourceAttributes(verb=verb, path=path.replace("*", "v1"))
    resource = draw(st.sampled_from(picked["resources"])).replace("*", "deployments")
    resource, _, sub = resource.partition("/")
    return ResourceAttributes(
        verb=verb, group=draw(st.sampled_from(picked["apiGroups"])).replace("*", "apps"),
        resource=resource, subresource=sub,
        name=draw(st.sampled_from(picked["resourceNames"] or [""])),
        namespace=draw(st.sampled_from(["", *NAMESPACES])))


def reference_allowed(objects: list[dict[str, Any]], attrs: Attributes, username: str,
                      groups: tuple[str, ...]) -> bool:
    """VisitRulesFor as a linear scan; aggregation as the least set fixpoint."""
    roles = {(r.kind, r.namespace, r.name): r for r in map(parse_role, (
        o for o in objects if o["kind"] in ("Role", "ClusterRole")))}
    rules = {k: set(r.rules) for k, r in roles.items()}
    aggregated = {k for k, r in roles.items() if r.aggregation is not None}
    for k in aggregated:
        rules[k] = set()
    changed = True
    while changed:
        changed = False
        for k in aggregated:
            picked = {o for o, r in roles.items() if o[0] == "ClusterRole" and o != k
                      and any(s.matches(r.labels) for s in roles[k].aggregation or ())}
            new = set().union(*(rules[o] for o in picked)) if picked else set()
            if new != rules[k]:
                rules[k], changed = new, True
    namespace = getattr(attrs, "namespace", "")
    for b in (parse_binding(o) for o in objects if o["kind"].endswith("Binding")):
        if b.namespace and (not namespace or b.namespace != namespace):
            continue
        applies = False
        for s in b.subjects:
            if s.kind == "User":
                applies |= s.name == username
            elif s.kind == "Group":
                applies |= s.name in groups
            else:
                ns = s.namespace or b.namespace
                applies |= bool(ns) and username == f"system:serviceaccount:{ns}:{s.name}"
        key = ("Role", b.namespace, b.role_ref.name) if b.role_ref.kind == "Role" else (
            "ClusterRole", "", b.role_ref.name)
        if applies and any(r.allows(attrs) for r in rules.get(key, ())):
            return True
    return False


@settings(max_examples=300, deadline=None)
@given(worlds(), st.data())
def test_index_agrees_with_reference_and_who_can_and_rules_for(
        objects: list[dict[str, Any]], data: st.DataObject) -> None:
    attrs = data.draw(requests_in(objects))
    idx = index(*objects)
    users, groups = idx.who_can(attrs)
    namespace = getattr(attrs, "namespace", "")
    for username, member_of in PEOPLE:
        allowed = idx.allowed(attrs, username, member_of)[0]
        assert allowed == reference_allowed(objects, attrs, username, member_of)
        assert allowed == (username in users or bool(set(member_of) & set(groups)))
        resource_rules, url_rules = idx.rules_for(username, member_of, namespace)
        rules = url_rules if isinstance(attrs, NonResourceAttributes) else resource_rules
        assert allowed == any(msgspec.convert(r, PolicyRule).allows(attrs) for r in rules)


@settings(max_examples=150, deadline=None)
@given(worlds(), st.data(), st.randoms())
def test_answers_do_not_depend_on_input_order(
        objects: list[dict[str, Any]], data: st.DataObject, rnd: random.Random) -> None:
    requests = data.draw(st.lists(requests_in(objects), min_size=1, max_size=4))
    shuffled = list(objects)
    rnd.shuffle(shuffled)
    first, second = index(*objects), index(*shuffled)
    for attrs in requests:
        assert first.who_can(attrs) == second.who_can(attrs)
        for username, member_of in PEOPLE:
            assert first.allowed(attrs, username, member_of) == second.allowed(
                attrs, username, member_of)
            for namespace in ("", *NAMESPACES):
                assert first.rules_for(username, member_of, namespace) == second.rules_for(
                    username, member_of, namespace)
    for i in range(6):
        assert first.subjects_of_role("ClusterRole", "", f"c{i}") == second.subjects_of_role(
            "ClusterRole", "", f"c{i}")
