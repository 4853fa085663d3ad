"""Decisions with inherited AccessPolicies on top of MonitorAccessPolicies
(docs/guide/inherited.md): a matching Deny rule wins over everything, then the first matching
MonitorAccessPolicy, then the matching Allow rules together, else deny."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_api.wire import Resource
from clearance_core.inherit import hierarchy
from clearance_core.inherit.accesspolicy import AccessRule
from clearance_core.inherit.decide import (
    decide_with_inherited,
    denies,
    matching,
    subjects_match,
    target_for,
    visible_items,
)
from clearance_core.inherit.merge import EffectiveRule
from clearance_core.kube.principal import Identity
from clearance_core.monitor.decide import Decision, decide
from clearance_core.monitor.filters import Item
from clearance_core.monitor.policy import compile_policy
from tests.support.accesspolicies import access_policy, fleet_index, rule
from tests.support.policies import policy

ALICE = Identity(username="alice", email="alice@example.com", groups=frozenset({"dev"}))
APP_ONLY = [{"type": "namespaces", "visibility": "filtered",
             "filters": {"names": {"allowed": ["app"]}}}]
WEB_ONLY = [{"type": "namespaces", "visibility": "filtered",
             "filters": {"names": {"allowed": ["web"]}}}]


def effective_rules(rules: dict[str, Any]) -> dict[str, EffectiveRule]:
    index = fleet_index(access_policy("p", namespace="t", target=("Cluster", "c1"),
                                      rules=rules))
    eff = index.effective_of(hierarchy.cluster("c1"))
    assert eff is not None
    return eff.rules


def monitor(resource: Resource, *, action: str = "view", effect: str | None = None,
            user: str = "alice") -> Decision:
    policies = [] if effect is None else [compile_policy(policy(
        users=[user], effect=effect, rules=[{"selector": {"matchNames": ["c1"]}}]))]
    return decide(policies, ALICE, action=action, resource=resource, cluster="c1",
                  labels={}, now=0.0)


def ask(rules: dict[str, Any], resource: dict[str, Any], *, action: str = "view",
        map_effect: str | None = None) -> Decision:
    res = Resource(cluster="c1", **resource)
    return decide_with_inherited(effective_rules(rules), ALICE, action=action, resource=res,
                                 monitor=monitor(res, action=action, effect=map_effect),
                                 target=hierarchy.cluster("c1"))


def test_a_matching_deny_rule_wins_over_an_allowing_monitor_policy() -> None:
    result = ask({"block": rule(groups=["dev"], effect="Deny")},
                 {"type": "pod", "name": "x", "namespace": "app"}, map_effect="Allow")
    assert (result.decision, result.policy) == ("deny", "t/p")
    assert result.reason == "denied by AccessPolicy rule block of t/p at Cluster c1"
    step = result.outcome.trace[result.outcome.decided_at or 0]
    assert step.policy == "t/p" and step.outcome == "decided"
    # One decider in the trace: the MonitorAccessPolicy that would have decided is
    # shown as overruled.
    assert [s.outcome for s in result.outcome.trace].count("decided") == 1
    overruled = result.outcome.trace[0]
    assert overruled.outcome == "matched" and overruled.reason.startswith("overruled: ")


def test_a_deny_rule_for_someone_else_changes_nothing() -> None:
    result = ask({"block": rule(groups=["ops"], effect="Deny")},
                 {"type": "pod", "name": "x", "namespace": "app"}, map_effect="Allow")
    assert (result.decision, result.policy) == ("allow", "ns/p")


def test_a_matching_monitor_policy_decides_before_allow_rules() -> None:
    result = ask({"see": rule(users=["alice"])},
                 {"type": "pod", "name": "x", "namespace": "app"}, map_effect="Deny")
    assert (result.decision, result.policy) == ("deny", "ns/p")


def test_allow_rules_decide_together_when_no_monitor_policy_matches() -> None:
    rules = {"app": rule(users=["alice@example.com"], resources=APP_ONLY),
             "web": rule(groups=["dev"], resources=WEB_ONLY)}
    for namespace, source_rule in (("app", "app"), ("web", "web")):
        result = ask(rules, {"type": "pod", "name": "x", "namespace": namespace})
        assert result.decision == "allow", namespace
        assert f"rule {source_rule} of t/p" in result.reason
    hidden = ask(rules, {"type": "pod", "name": "x", "namespace": "kube-system"})
    assert hidden.decision == "deny" and "hidden by every AccessPolicy rule" in hidden.reason
    # A whole type two rules filter: partial, with the first rule's filters (a subset).
    whole = ask(rules, {"type": "pods"})
    assert whole.decision == "partial"
    assert whole.filters == {"namespaces": APP_ONLY[0]}
    assert "any of app, web" in whole.reason
    # A rule with no filters shows the whole type.
    assert ask({**rules, "all": rule(groups=["dev"])}, {"type": "pods"}).decision == "allow"


def test_permissions_are_the_union_and_none_means_view() -> None:
    rules = {"plain": rule(groups=["dev"]), "metrics": rule(groups=["dev"], view=False,
                                                            metrics=True)}
    result = ask(rules, {"type": "cluster", "name": "c1"}, action="view_metrics")
    assert result.decision == "allow"
    assert result.permissions == ("view", "view_metrics")
    only_view = ask({"plain": rule(groups=["dev"])}, {"type": "cluster", "name": "c1"},
                    action="view_metrics")
    assert only_view.decision == "deny" and "do not grant view_metrics" in only_view.reason


def test_visibility_for_an_action_comes_only_from_rules_granting_it() -> None:
    rules = {"everything": rule(groups=["dev"]),
             "metrics-in-app": rule(groups=["dev"], view=False, metrics=True,
                                    resources=APP_ONLY)}
    assert ask(rules, {"type": "pod", "name": "x", "namespace": "web"},
               action="view_metrics").decision == "deny"
    assert ask(rules, {"type": "pod", "name": "x", "namespace": "app"},
               action="view_metrics").decision == "allow"
    assert ask(rules, {"type": "pod", "name": "x", "namespace": "web"}).decision == "allow"


def test_no_rule_and_no_monitor_policy_is_deny() -> None:
    result = ask({"theirs": rule(users=["bob"])}, {"type": "pods"})
    assert (result.decision, result.policy) == ("deny", None)


def test_the_target_read_is_namespace_then_cluster_then_fleet() -> None:
    index = fleet_index(
        access_policy("fleet", namespace="t", rules={"f": rule(groups=["dev"])}),
        access_policy("ns", namespace="t", target=("Namespace", "c1", "app"),
                      rules={"n": rule(groups=["dev"], effect="Deny")}),
        clusters={"c1": None})

    def rules_for(resource: Resource) -> set[str]:
        for target in target_for(resource, resource.cluster or ""):
            eff = index.effective.get(target)
            if eff is not None:
                return set(eff.rules)
        raise AssertionError("the Fleet always has an effective policy")

    assert rules_for(Resource(type="pod", name="x", cluster="c1", namespace="app")) == {"n"}
    assert rules_for(Resource(type="namespace", name="app", cluster="c1")) == {"n"}
    assert rules_for(Resource(type="pod", name="x", cluster="c1", namespace="web")) == {"f"}
    assert rules_for(Resource(type="pod", name="x", cluster="unknown", namespace="app")) == \
        {"f"}


def test_visible_items_is_the_union_of_the_granting_rules() -> None:
    rules = effective_rules({"app": rule(groups=["dev"], resources=APP_ONLY),
                             "web": rule(groups=["dev"], resources=WEB_ONLY)})
    items = [Item(name=f"p{i}", namespace=ns) for i, ns in enumerate(["app", "kube", "web"])]
    shown = visible_items(rules, ALICE, action="view", type_name="pods", items=items)
    assert [item.name for item in shown] == ["p0", "p2"]
    assert visible_items(rules, ALICE, action="view_metrics", type_name="pods",
                         items=items) == []


# The rules that match a principal are found by subject (an index built once per rule
# set): always exactly the rules that subjects_match accepts, whatever the names.

_NAMES = st.sampled_from(["alice", "alice@example.com", "bob", "dev", "ops", "x",
                          "system:serviceaccount:ns:sa"])


@settings(max_examples=300, deadline=None)
@given(rules=st.dictionaries(
           st.text("abcd", min_size=1, max_size=3),
           st.builds(lambda users, groups, sas, deny: AccessRule(
               users=tuple(users), groups=tuple(groups), service_accounts=tuple(sas),
               effect="Deny" if deny else "Allow"),
               st.lists(_NAMES, max_size=3), st.lists(_NAMES, max_size=3),
               st.lists(_NAMES, max_size=2), st.booleans()),
           max_size=12),
       username=_NAMES, email=st.one_of(st.none(), _NAMES),
       groups=st.frozensets(_NAMES, max_size=8))
def test_rules_found_by_subject_are_the_rules_whose_subjects_match(
        rules: dict[str, AccessRule], username: str, email: str | None,
        groups: frozenset[str]) -> None:
    effective = {name: EffectiveRule(rule=r, source="t/p", block="defaults")
                 for name, r in rules.items()}
    identity = Identity(username=username, email=email, groups=groups)
    scanned = [(name, effective[name]) for name in sorted(effective)
               if subjects_match(effective[name].rule, identity)]
    assert matching(effective, identity) == scanned
    assert matching(effective, identity) == scanned  # the index, built, gives the same
    assert denies(effective, identity) == any(r.rule.effect == "Deny" for _, r in scanned)
