"""Who can see X, in the pure core: the question a check asks, how subjects are named and
classified, and — a property over random fleets — that the subjects enumerated are
complete: a username they do not list gets what ``others`` gets (decided here with the
check's pure functions, ``decide`` then ``decide_with_inherited``), and a group's answer
does not depend on the unnamed username it is asked as."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_api.errors import BadRequest
from clearance_api.wire import Principal, Resource
from clearance_core.inherit import hierarchy
from clearance_core.inherit.decide import decide_with_inherited
from clearance_core.inherit.merge import EffectiveRule
from clearance_core.kube.principal import identity_of
from clearance_core.monitor.decide import decide
from clearance_core.monitor.policy import CompiledPolicy, compile_policy
from clearance_core.questions.audience import (
    UNNAMED,
    Names,
    Subject,
    principal_of,
    question,
    spans_namespaces,
    unnamed,
)
from tests.unit.accesspolicies import access_policy, fleet_index, rule
from tests.unit.policies import policy


def test_the_question_is_the_check_a_subject_would_ask() -> None:
    assert question("c1", None, None) == Resource(type="cluster", name="c1", cluster="c1")
    assert question("c1", None, "shop") == Resource(type="namespaces", name="shop",
                                                   cluster="c1")
    for named in ("cluster", "clusters"):  # the cluster itself, whatever the namespace
        assert question("c1", named, "shop") == question("c1", None, None)
    assert question("c1", "pods", None) == Resource(type="pods", cluster="c1")
    assert question("c1", "pods", "shop") == Resource(type="pods", cluster="c1",
                                                     namespace="shop")
    for cluster, type_name, namespace, word in (("", None, None, "cluster"),
                                                ("c1", "", None, "type"),
                                                ("c1", None, "", "namespace")):
        with pytest.raises(BadRequest, match=word):
            question(cluster, type_name, namespace)


def test_only_a_whole_namespaced_type_without_a_namespace_spans_namespaces() -> None:
    assert spans_namespaces(question("c1", "pods", None))
    assert spans_namespaces(question("c1", "namespaces", None))
    assert not spans_namespaces(question("c1", "pods", "shop"))
    assert not spans_namespaces(question("c1", None, None))
    assert not spans_namespaces(question("c1", "nodes", None))
    assert not spans_namespaces(question("c1", None, "shop"))


def test_subjects_are_named_once_and_ordered() -> None:
    names = Names()
    sa = "system:serviceaccount:ns:bot"
    names.add(users=["bob", "alice", sa], service_accounts=[sa], groups=["sre", "dev"])
    names.add_members({"sre": ["olivia", "bob"], "unnamed": ["zed"]})
    assert names.subjects() == [
        Subject("user", "alice"), Subject("user", "bob"), Subject("user", "olivia"),
        Subject("group", "dev"), Subject("group", "sre"), Subject("serviceaccount", sa)]
    assert "zed" not in names.taken()  # a Group no policy names adds no one


def test_the_unnamed_username_is_one_nothing_names() -> None:
    assert unnamed(set()) == UNNAMED
    assert unnamed({UNNAMED, f"{UNNAMED}#1"}) == f"{UNNAMED}#2"
    assert principal_of(Subject("group", "sre"), "x") == Principal(username="x",
                                                                   groups=["sre"])
    assert principal_of(Subject("user", "bob"), "x") == Principal(username="bob")


# The property: random fleets -------------------------------------------------------------

USERS = ["u0", "u1", "u2", "u3", "system:serviceaccount:a:b"]
GROUPS = ["g0", "g1", "g2", "system:serviceaccounts"]
CLUSTER = "c1"
RESOURCES = [Resource(type="cluster", name=CLUSTER, cluster=CLUSTER),
             Resource(type="pods", cluster=CLUSTER),
             Resource(type="pods", name="p", cluster=CLUSTER, namespace="shop")]

subsets = st.lists(st.sampled_from(USERS), max_size=2, unique=True)
group_subsets = st.lists(st.sampled_from(GROUPS), max_size=2, unique=True)


@st.composite
def monitor_policies(draw: st.DrawFn) -> list[CompiledPolicy]:
    out = []
    for i in range(draw(st.integers(0, 4))):
        users = draw(subsets)
        out.append(compile_policy(policy(
            f"m{i}", priority=draw(st.integers(0, 3)),
            effect=draw(st.sampled_from(["Allow", "Deny"])),
            users=[u for u in users if not u.startswith("system:")],
            service_accounts=[{"namespace": "a", "name": "b"}] if any(
                u.startswith("system:") for u in users) else [],
            groups=draw(group_subsets),
            default=draw(st.sampled_from(["all", "none"])))))
    return out


@st.composite
def access_rules(draw: st.DrawFn) -> dict[str, EffectiveRule]:
    rules: dict[str, Any] = {}
    for i in range(draw(st.integers(0, 3))):
        rules[f"r{i}"] = rule(users=[u for u in draw(subsets) if not u.startswith("system:")],
                              groups=draw(group_subsets),
                              effect=draw(st.sampled_from(["Allow", "Deny"])),
                              resources=draw(st.sampled_from([None, [
                                  {"type": "pods", "visibility": "filtered",
                                   "filters": {"names": {"denied": ["p"]}}}]])))
    if not rules:
        return {}
    index = fleet_index(access_policy("ap", namespace="t", target=("Cluster", CLUSTER),
                                      rules=rules))
    effective = index.effective_of(hierarchy.cluster(CLUSTER))
    assert effective is not None
    return dict(effective.rules)


def check(policies: list[CompiledPolicy], rules: Mapping[str, EffectiveRule],
          members: Mapping[str, list[str]], principal: Principal,
          resource: Resource) -> tuple[str, str | None]:
    """What a check answers, composed as the decision service composes it."""
    member_of = [g for g, users in members.items() if principal.username in users]
    identity = identity_of(principal, member_of)
    monitor = decide(policies, identity, action="view", resource=resource, cluster=CLUSTER,
                     labels={}, now=0.0)
    decision = decide_with_inherited(rules, identity, action="view", resource=resource,
                                     monitor=monitor) if rules else monitor
    return decision.decision, decision.policy


@settings(max_examples=300, deadline=None, derandomize=True)
@given(policies=monitor_policies(), rules=access_rules(),
       members=st.dictionaries(st.sampled_from(GROUPS), subsets, max_size=3),
       resource=st.sampled_from(RESOURCES), stranger=st.sampled_from([*USERS, "zz"]))
def test_subjects_are_complete_and_each_gets_its_own_answer(
        policies: list[CompiledPolicy], rules: dict[str, EffectiveRule],
        members: dict[str, list[str]], resource: Resource, stranger: str) -> None:
    names = Names()
    for p in policies:
        names.add(users=p.users, service_accounts=p.service_accounts, groups=p.groups)
    names.add_rules(rules.values())
    names.add_members(members)
    subjects = names.subjects()
    nobody = unnamed(names.taken())
    others = check(policies, rules, members, Principal(username=nobody), resource)
    listed = {s.name for s in subjects}
    # A username the answer does not list gets others: its Groups are named nowhere (a
    # Group a policy names lists it into the answer). A service account's own groups come
    # with it whatever its name: it gets others unless they are listed.
    principal = Principal(username=stranger)
    own = {"system:serviceaccounts", "system:serviceaccounts:a"} \
        if stranger.startswith("system:serviceaccount:") else set()
    if stranger not in listed and not own & listed:
        assert check(policies, rules, members, principal, resource) == others
    # A group subject's answer does not depend on which unnamed username asks it.
    for subject in subjects:
        if subject.kind == "group":
            assert check(policies, rules, members, principal_of(subject, nobody), resource) \
                == check(policies, rules, members, principal_of(subject, "zz-unnamed"),
                         resource)
