"""Decisions inside a cluster: the deciding rule's filters (README: Policy semantics)."""

from __future__ import annotations

from typing import Any

from clearance_api.wire import Resource
from clearance_core.kube.principal import Identity
from clearance_core.monitor.decide import decide
from clearance_core.monitor.policy import compile_policy
from tests.unit.policies import policy

ALICE = Identity(username="alice", email=None, groups=frozenset())
RULE_RESOURCES = [
    {"type": "namespaces", "visibility": "filtered",
     "filters": {"names": {"allowed": ["app-*"], "denied": ["app-secret"]}}},
    {"type": "nodes", "visibility": "none"},
    {"type": "pvc", "visibility": "filtered",
     "filters": {"fields": {"storageClass": {"allowed": ["gp3"]}}}},
    {"type": "certificates", "visibility": "all"},
]


def ask(resource: dict[str, Any], *, resources: list[dict[str, Any]] | None = None,
        effect: str = "Allow", default: str = "none") -> tuple[str, Any, Any]:
    rules = [] if resources is None else [
        {"selector": {"matchNames": ["c1"]}, "resources": resources}]
    compiled = compile_policy(policy(users=["alice"], effect=effect, default=default,
                                     rules=rules))
    result = decide([compiled], ALICE, action="view",
                    resource=Resource(cluster="c1", **resource), cluster="c1", labels={},
                    now=0.0)
    at = result.outcome.decided_at
    hidden = None if at is None else result.outcome.trace[at].hidden_by
    return result.decision, result.filters, hidden


def test_pods_follow_the_namespace_rule() -> None:
    assert ask({"type": "pod", "name": "web", "namespace": "app-shop"},
               resources=RULE_RESOURCES)[0] == "allow"
    assert ask({"type": "pods", "name": "web", "namespace": "kube-system"},
               resources=RULE_RESOURCES) == ("deny", None, "namespace")
    assert ask({"type": "pods", "name": "x", "namespace": "app-secret"},
               resources=RULE_RESOURCES)[0] == "deny"


def test_a_whole_namespaced_type_is_partial_with_the_namespace_filter() -> None:
    decision, filters, _ = ask({"type": "pods"}, resources=RULE_RESOURCES)
    assert decision == "partial"
    assert filters == {"namespaces": RULE_RESOURCES[0]}


def test_namespaces_themselves_are_filtered_by_name() -> None:
    assert ask({"type": "namespace", "name": "app-x"}, resources=RULE_RESOURCES)[0] == "allow"
    assert ask({"type": "namespace", "name": "default"}, resources=RULE_RESOURCES)[:1] == ("deny",)
    assert ask({"type": "namespaces"}, resources=RULE_RESOURCES)[0] == "partial"


def test_visibility_none_denies_the_type() -> None:
    assert ask({"type": "nodes"}, resources=RULE_RESOURCES)[0] == "deny"
    assert ask({"type": "node", "name": "n1"}, resources=RULE_RESOURCES)[0] == "deny"


def test_custom_types_need_listing_and_field_filters_apply() -> None:
    ok = {"type": "pvc", "name": "data", "namespace": "app-a", "fields": {"storageClass": "gp3"}}
    bad = {**ok, "fields": {"storageClass": "io2"}}
    assert ask(ok, resources=RULE_RESOURCES)[0] == "allow"
    assert ask(bad, resources=RULE_RESOURCES) == ("deny", None, "fields.storageClass")
    assert ask({"type": "pvc"}, resources=RULE_RESOURCES)[0] == "partial"
    assert ask({"type": "certificates"}, resources=RULE_RESOURCES)[0] == "allow"
    assert ask({"type": "secrets"}, resources=RULE_RESOURCES)[0] == "deny"  # unlisted
    assert ask({"type": "secrets", "name": "s"}, resources=RULE_RESOURCES)[2] == "unlisted"


def test_unlisted_builtins_are_visible_subject_to_the_namespace_rule() -> None:
    assert ask({"type": "alerts"}, resources=RULE_RESOURCES)[0] == "partial"
    assert ask({"type": "alerts"}, resources=[])[0] == "allow"
    assert ask({"type": "events", "name": "e", "namespace": "kube-system"},
               resources=RULE_RESOURCES)[0] == "deny"


def test_default_all_shows_builtins_but_no_custom_types() -> None:
    assert ask({"type": "pods"}, default="all")[0] == "allow"
    assert ask({"type": "pvc"}, default="all")[0] == "deny"


def test_a_deny_policy_denies_everything_inside_the_cluster() -> None:
    assert ask({"type": "pods"}, resources=RULE_RESOURCES, effect="Deny")[0] == "deny"
    assert ask({"type": "certificates", "name": "c"}, resources=RULE_RESOURCES,
               effect="Deny")[0] == "deny"


def test_a_whole_type_in_a_hidden_namespace_is_denied() -> None:
    hidden = ask({"type": "pods", "namespace": "kube-system"}, resources=RULE_RESOURCES)
    assert hidden == ("deny", None, "namespace")
    assert ask({"type": "alerts", "namespace": "app-secret"}, resources=RULE_RESOURCES)[0] \
        == "deny"
    assert ask({"type": "operators", "namespace": "default"}, resources=RULE_RESOURCES)[0] \
        == "deny"
    # A visible namespace: as without one (the type's own filters may still hide items).
    decision, filters, _ = ask({"type": "pods", "namespace": "app-shop"},
                               resources=RULE_RESOURCES)
    assert (decision, filters) == ("partial", {"namespaces": RULE_RESOURCES[0]})
    assert ask({"type": "nodes", "namespace": "kube-system"},
               resources=[RULE_RESOURCES[0]])[0] == "allow"  # not namespaced
    assert ask({"type": "pvc", "namespace": "kube-system"}, resources=RULE_RESOURCES)[0] \
        == "partial"  # the namespace rule is for built-ins; pvc filters no namespace
    own = [{"type": "pvc", "visibility": "filtered",
            "filters": {"namespaces": {"denied": ["kube-*"]}}}]
    assert ask({"type": "pvc", "namespace": "kube-system"}, resources=own) \
        == ("deny", None, "namespaces")
    assert ask({"type": "pvc", "namespace": "app-a"}, resources=own)[0] == "partial"


def test_alerts_and_events_without_a_namespace_pass_the_namespace_rule() -> None:
    assert ask({"type": "alert", "name": "NodeDown"}, resources=RULE_RESOURCES)[0] == "allow"
    assert ask({"type": "event", "name": "e"}, resources=RULE_RESOURCES)[0] == "allow"
    assert ask({"type": "pod", "name": "p"}, resources=RULE_RESOURCES) \
        == ("deny", None, "namespace")  # a pod always has one: absent matches no allow-list
    hidden = [{"type": "namespaces", "visibility": "none"}]
    assert ask({"type": "alert", "name": "NodeDown"}, resources=hidden)[0] == "deny"
