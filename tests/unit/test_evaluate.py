"""Cluster decisions (README: Policy semantics): table-driven cases and properties."""

from __future__ import annotations

import random
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_api.wire import Principal
from clearance_core.kube.principal import Identity, identity_of
from clearance_core.monitor.evaluate import candidates, evaluate_cluster
from clearance_core.monitor.policy import CompiledPolicy, compile_policy, invalid_policy
from tests.unit.policies import policy

NOW = 1_800_000_000.0  # 2027-01-15
PAST, FUTURE = "2020-01-01T00:00:00Z", "2030-01-01T00:00:00Z"
ALICE = Identity(username="alice", email="alice@example.com", groups=frozenset({"devs"}))
LABELS = {"prod-east": {"env": "prod"}, "dev-1": {"env": "dev"}}


def decide(policies: list[dict[str, Any]], cluster: str = "prod-east", action: str = "view",
           who: Identity = ALICE) -> tuple[str, str | None]:
    compiled = [compile_policy(p) for p in policies]
    outcome = evaluate_cluster(compiled, who, action=action, cluster=cluster,
                               labels=LABELS.get(cluster, {}), now=NOW)
    return outcome.decision, outcome.policy


def rule(**selector: Any) -> dict[str, Any]:
    return {"selector": selector}


class TestSelectors:
    def test_match_names_with_wildcards(self) -> None:
        assert decide([policy(users=["alice"], rules=[rule(matchNames=["prod-*"])])])[0] == "allow"
        assert decide([policy(users=["alice"], rules=[rule(matchNames=["prod"])])])[0] == "deny"

    def test_match_pattern_must_match_the_whole_name(self) -> None:
        assert decide([policy(users=["alice"], rules=[rule(matchPattern="prod")])])[0] == "deny"
        assert decide([policy(users=["alice"], rules=[rule(matchPattern="prod-.*")])])[0] == "allow"

    def test_match_labels_come_from_the_inventory(self) -> None:
        p = policy(users=["alice"], rules=[rule(matchLabels={"env": "prod"})])
        assert decide([p])[0] == "allow"
        assert decide([p], cluster="dev-1")[0] == "deny"
        assert decide([p], cluster="unknown")[0] == "deny"  # not in the inventory: no labels

    def test_empty_selector_fields_match_nothing(self) -> None:
        p = policy(users=["alice"], rules=[rule(matchNames=[], matchLabels={}, matchPattern="")])
        assert decide([p])[0] == "deny"

    def test_selector_fields_are_ored(self) -> None:
        p = policy(users=["alice"], rules=[rule(matchNames=["nope"], matchLabels={"env": "dev"})])
        assert decide([p], cluster="dev-1")[0] == "allow"

    def test_default_all_matches_with_view_only(self) -> None:
        p = policy(users=["alice"], default="all")
        assert decide([p])[0] == "allow"
        assert decide([p], action="view_metrics")[0] == "deny"

    def test_first_matching_rule_supplies_permissions(self) -> None:
        p = policy(users=["alice"], rules=[
            {"selector": {"matchNames": ["prod-*"]}, "permissions": {"view": True}},
            {"selector": {"matchNames": ["*"]}, "permissions": {"view": True, "viewMetrics": True}},
        ])
        assert decide([p], action="view_metrics") == ("deny", "ns/p")
        assert decide([p], cluster="dev-1", action="view_metrics") == ("allow", "ns/p")


class TestOrder:
    def test_lower_priority_number_decides_first(self) -> None:
        deny = policy("d", users=["alice"], priority=5, effect="Deny", default="all")
        allow = policy("a", users=["alice"], priority=10, default="all")
        assert decide([allow, deny]) == ("deny", "ns/d")

    def test_deny_before_allow_at_equal_priority(self) -> None:
        deny = policy("z", users=["alice"], priority=5, effect="Deny", default="all")
        allow = policy("a", users=["alice"], priority=5, default="all")
        assert decide([allow, deny]) == ("deny", "ns/z")

    def test_ties_break_on_namespace_and_name(self) -> None:
        b = policy("b", users=["alice"], priority=5, default="all",
                   rules=[{"selector": {"matchNames": ["*"]}, "permissions": {"view": False}}])
        a = policy("a", users=["alice"], priority=5, default="all")
        assert decide([b, a]) == ("allow", "ns/a")

    def test_permissions_are_not_additive(self) -> None:
        first = policy("first", users=["alice"], priority=1, default="all")
        second = policy("second", users=["alice"], priority=2, rules=[
            {"selector": {"matchNames": ["*"]}, "permissions": {"viewMetrics": True}}])
        assert decide([first, second], action="view_metrics") == ("deny", "ns/first")

    def test_a_policy_that_does_not_match_the_cluster_passes_on(self) -> None:
        narrow = policy("narrow", users=["alice"], priority=1, effect="Deny",
                        rules=[rule(matchNames=["dev-*"])])
        broad = policy("broad", users=["alice"], priority=2, default="all")
        assert decide([narrow, broad]) == ("allow", "ns/broad")
        assert decide([narrow, broad], cluster="dev-1") == ("deny", "ns/narrow")


class TestSubjects:
    def test_email_group_and_service_account_subjects(self) -> None:
        assert decide([policy(users=["alice@example.com"], default="all")])[0] == "allow"
        assert decide([policy(groups=["devs"], default="all")])[0] == "allow"
        sa = identity_of(Principal(username="system:serviceaccount:mon:bot"), [])
        p = policy(service_accounts=[{"name": "bot", "namespace": "mon"}], default="all")
        assert decide([p], who=sa)[0] == "allow"
        assert decide([policy(groups=["system:serviceaccounts:mon"], default="all")], who=sa)[0] \
            == "allow"

    def test_matching_is_case_sensitive_and_exact(self) -> None:
        assert decide([policy(users=["Alice"], default="all")])[0] == "deny"
        assert decide([policy(groups=["dev"], default="all")])[0] == "deny"

    def test_system_authenticated_is_never_implied(self) -> None:
        assert decide([policy(groups=["system:authenticated"], default="all")])[0] == "deny"


class TestValidity:
    def test_windows(self) -> None:
        assert decide([policy(users=["alice"], default="all", not_after=PAST)])[0] == "deny"
        assert decide([policy(users=["alice"], default="all", not_before=FUTURE)])[0] == "deny"
        assert decide([policy(users=["alice"], default="all", not_before=PAST,
                              not_after=FUTURE)])[0] == "allow"

    def test_valid_until_is_the_next_boundary_of_any_candidate(self) -> None:
        compiled = [compile_policy(policy("a", users=["alice"], default="all",
                                          not_after=FUTURE)),
                    compile_policy(policy("b", users=["alice"], priority=1, effect="Deny",
                                          default="all", not_before="2028-01-01T00:00:00Z"))]
        outcome = evaluate_cluster(compiled, ALICE, action="view", cluster="x", labels={}, now=NOW)
        assert outcome.decision == "allow"
        assert outcome.valid_until == 1830297600.0  # 2028-01-01: the Deny starts then

    def test_trace_lists_skipped_policies_with_reasons(self) -> None:
        compiled = [
            compile_policy(policy("off", users=["alice"], priority=1, enabled=False,
                                  default="all")),
            compile_policy(policy("old", users=["alice"], priority=2, not_after=PAST,
                                  default="all")),
            invalid_policy(policy("bad", users=["alice"], priority=3), "broken regex"),
            compile_policy(policy("miss", users=["alice"], priority=4,
                                  rules=[rule(matchNames=["dev-*"])])),
            compile_policy(policy("win", users=["alice"], priority=5, default="all")),
            # After the decider: listed, never consulted, the decision unchanged.
            compile_policy(policy("never", users=["alice"], priority=6, effect="Deny",
                                  rules=[rule(matchNames=["nope"]),
                                         rule(matchNames=["prod-*"])])),
            compile_policy(policy("late-off", users=["alice"], priority=7, enabled=False)),
            compile_policy(policy("late-miss", users=["alice"], priority=8)),
        ]
        assert all(p is not None for p in compiled)
        outcome = evaluate_cluster([p for p in compiled if p], ALICE, action="view",
                                   cluster="prod-east", labels={}, now=NOW)
        steps = [(s.policy, s.outcome, s.reason.split(":")[0]) for s in outcome.trace]
        assert steps == [
            ("ns/off", "skipped", "disabled"),
            ("ns/old", "skipped", "expired"),
            ("ns/bad", "skipped", "invalid"),
            ("ns/miss", "no_match", "no rule matches cluster prod-east"),
            ("ns/win", "decided", "allow"),
            ("ns/never", "matched", "not consulted"),
            ("ns/late-off", "skipped", "disabled"),
            ("ns/late-miss", "no_match", "no rule matches cluster prod-east"),
        ]
        assert (outcome.decision, outcome.policy, outcome.decided_at) == ("allow", "ns/win", 4)
        never = outcome.trace[5]
        assert (never.rule, never.selector) == (1, "matchNames")
        assert "ns/win decided first" in never.reason


# Properties ---------------------------------------------------------------------------

names = st.sampled_from(["prod-east", "prod-west", "dev-1", "staging"])
policy_dicts = st.builds(
    policy,
    name=st.sampled_from(["a", "b", "c", "d", "e"]),
    namespace=st.sampled_from(["x", "y"]),
    priority=st.integers(0, 4),
    effect=st.sampled_from(["Allow", "Deny"]),
    enabled=st.booleans(),
    users=st.lists(st.sampled_from(["alice", "bob", "alice@example.com"]), max_size=2),
    groups=st.lists(st.sampled_from(["devs", "ops"]), max_size=2),
    default=st.sampled_from(["all", "none"]),
    rules=st.lists(st.builds(
        lambda names, perms: {"selector": {"matchNames": names}, "permissions": perms},
        st.lists(st.sampled_from(["prod-*", "dev-?", "staging", "*"]), min_size=1, max_size=2),
        st.fixed_dictionaries({"view": st.booleans(), "viewMetrics": st.booleans()}),
    ), max_size=3),
    not_after=st.sampled_from([None, PAST, FUTURE]),
)


def compiled_set(dicts: list[dict[str, Any]]) -> list[CompiledPolicy]:
    unique = {(d["metadata"]["namespace"], d["metadata"]["name"]): d for d in dicts}
    return [compile_policy(d) for d in unique.values()]


def answer(policies: list[CompiledPolicy], cluster: str, action: str) -> tuple[str, str | None]:
    outcome = evaluate_cluster(policies, ALICE, action=action, cluster=cluster,
                               labels=LABELS.get(cluster, {}), now=NOW)
    return outcome.decision, outcome.policy


@settings(max_examples=300, deadline=None)
@given(st.lists(policy_dicts, max_size=6), names, st.sampled_from(["view", "view_metrics"]),
       st.randoms())
def test_answer_does_not_depend_on_the_order_policies_were_added(
        dicts: list[dict[str, Any]], cluster: str, action: str, rnd: random.Random) -> None:
    policies = compiled_set(dicts)
    shuffled = list(policies)
    rnd.shuffle(shuffled)
    assert answer(policies, cluster, action) == answer(shuffled, cluster, action)


@settings(max_examples=300, deadline=None)
@given(st.lists(policy_dicts, max_size=5), policy_dicts, names,
       st.sampled_from(["disabled", "expired", "not_yet_valid", "invalid"]))
def test_a_policy_not_in_force_never_changes_an_answer(
        dicts: list[dict[str, Any]], extra: dict[str, Any], cluster: str, how: str) -> None:
    extra["metadata"]["name"] = "extra"
    validity = extra["spec"]["lifecycle"]["validity"]
    if how == "disabled":
        extra["spec"]["access"]["enabled"] = False
    elif how == "expired":
        validity["notAfter"] = PAST
    elif how == "not_yet_valid":
        validity["notBefore"] = FUTURE
    policies = compiled_set(dicts)
    added = compile_policy(extra) if how != "invalid" else invalid_policy(extra, "broken")
    assert added is not None
    for action in ("view", "view_metrics"):
        assert answer([*policies, added], cluster, action) == answer(policies, cluster, action)


@settings(max_examples=200, deadline=None)
@given(st.lists(policy_dicts, max_size=5), names)
def test_view_metrics_is_never_allowed_where_view_metrics_is_not_granted(
        dicts: list[dict[str, Any]], cluster: str) -> None:
    policies = compiled_set(dicts)
    outcome = evaluate_cluster(policies, ALICE, action="view_metrics", cluster=cluster,
                               labels={}, now=NOW)
    if outcome.decision == "allow":
        assert "view_metrics" in outcome.permissions


@settings(max_examples=200, deadline=None)
@given(st.lists(policy_dicts, max_size=5), names)
def test_a_top_priority_deny_for_everything_always_wins(
        dicts: list[dict[str, Any]], cluster: str) -> None:
    policies = compiled_set(dicts)
    veto = compile_policy(policy("0-veto", namespace="0", users=["alice"], priority=0,
                                 effect="Deny", default="all"))
    assert answer([*policies, veto], cluster, "view") == ("deny", "0/0-veto")


@settings(max_examples=300, deadline=None)
@given(st.lists(policy_dicts, max_size=6), names, st.sampled_from(["view", "view_metrics"]))
def test_the_trace_lists_every_candidate_and_one_decider(
        dicts: list[dict[str, Any]], cluster: str, action: str) -> None:
    policies = compiled_set(dicts)
    outcome = evaluate_cluster(policies, ALICE, action=action, cluster=cluster,
                               labels=LABELS.get(cluster, {}), now=NOW)
    assert [s.policy for s in outcome.trace] == [p.key for p in candidates(policies, ALICE)]
    decided = [i for i, s in enumerate(outcome.trace) if s.outcome == "decided"]
    assert decided == ([] if outcome.decided_at is None else [outcome.decided_at])
    assert (outcome.policy is None) is (outcome.decided_at is None)
    if outcome.decided_at is not None:
        assert outcome.trace[outcome.decided_at].policy == outcome.policy
        # Nothing before the decider matched the cluster while in force.
        assert all(s.outcome in ("skipped", "no_match")
                   for s in outcome.trace[:outcome.decided_at])


@settings(max_examples=300, deadline=None)
@given(st.lists(policy_dicts, max_size=6), names, st.sampled_from(["view", "view_metrics"]),
       st.sampled_from([NOW, NOW + 10**8]))
def test_without_explain_the_answer_is_the_same_and_has_no_trace(
    dicts: list[dict[str, Any]], cluster: str, action: str, now: float,
) -> None:
    """Answers cached without their explanation are the explained ones minus the trace."""
    policies = compiled_set(dicts)
    kwargs: dict[str, Any] = {"action": action, "cluster": cluster,
                              "labels": LABELS.get(cluster, {}), "now": now}
    full = evaluate_cluster(policies, ALICE, **kwargs)
    bare = evaluate_cluster(policies, ALICE, explain=False, **kwargs)
    assert bare.trace == [] and bare.decided_at is None
    assert msgspec.structs.replace(bare, trace=full.trace, decided_at=full.decided_at) == full
