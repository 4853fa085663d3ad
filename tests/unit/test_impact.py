"""Who gains or loses access where, in a dry run (``clearance_core.questions.impact``).

On the example fleet (folded offline, as the compiler folds it): the sample that drops the
payments filter shows group ``sre`` (and olivia, its member) gaining ``namespaces`` on
both production clusters; a MonitorAccessPolicy that decides a cluster makes an inherited
Allow there "no change"; an inherited Deny beats it; the rows are cut, and counted, at the
limit and at the budget.

The property, over random fleets of both policy kinds (``tests/unit/fleets.py``) and a
random change: every row's before and after are what ``check`` answers on the decision
service's own snapshot of the index before and of one built from scratch after — and a
principal that no row's subject matches gets the same answer before and after on every
resource of every target (complete by construction). A mutation that forgets the removed
version of a rule is caught.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from clearance_api.wire import AccessAnswer, AccessChange, Principal, Resource
from clearance_core.folding.offline import Offline
from clearance_core.inherit.accesspolicy import policy_key
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.index import InheritanceIndex
from clearance_core.kube.principal import Identity
from clearance_core.kube.resources import target_namespace
from clearance_core.questions import answers, impact
from clearance_core.questions.impact_words import describe
from clearance_core.questions.simulate import dry_run
from tests.unit.accesspolicies import ANYONE, compiled
from tests.unit.fleets import (
    CLUSTERS,
    DECLARED,
    ELSEWHERE,
    GROUPS,
    NAMESPACES,
    NOW,
    USERS,
    Fleet,
    access_policies,
    fleets,
)
from tests.unit.test_offline import EXAMPLES

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = yaml.safe_load((ROOT / "docs/walkthrough/guardrails-without-payments.yaml")
                        .read_text())
BIG = 1_000_000


def example_fleet() -> Offline:
    offline = Offline(now=1_800_000_000.0)
    offline.fold(EXAMPLES)
    return offline


def rows_of(reply_access: list[AccessChange]) -> dict[tuple[str, str, str], AccessChange]:
    """(target, kind:name, resource) -> row."""
    found = {}
    for row in reply_access:
        target = row.target.name if row.target.kind == "Cluster" else \
            f"{row.target.cluster}/{row.target.name}"
        resource = msgspec.json.encode(row.resource).decode()
        found[(target, f"{row.subject.kind}:{row.subject.name}", resource)] = row
    return found


def ap(name: str, namespace: str, target: dict[str, Any], block: str,
       rules: dict[str, Any], strategy: str = "merge") -> dict[str, Any]:
    spec: dict[str, Any] = {"targetRef": target}
    spec[block] = rules if block == "rules" else {"strategy": strategy, "rules": rules}
    return {"apiVersion": "clearance.io/v1alpha1", "kind": "AccessPolicy",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


# The example fleet -----------------------------------------------------------------------

def test_dropping_the_payments_filter_shows_sre_gaining_payments_on_production() -> None:
    reply = example_fleet().simulate(SAMPLE, limit=BIG, budget=BIG)
    rows = rows_of(reply.access)
    assert reply.truncated is None
    for cluster in ("prod-eu-west", "prod-us-east"):
        for subject in ("group:sre", "user:olivia"):  # olivia: the Group sre lists her
            row = rows[(cluster, subject, '{"type":"namespaces"}')]
            assert row.before.decision == "partial"
            assert row.before.filters == {"namespaces": {
                "type": "namespaces", "visibility": "filtered",
                "filters": {"names": {"denied": ["payments"]}}}}
            assert (row.after.decision, row.after.filters) == ("allow", None)
            assert row.move == "gains"
            assert "namespaces payments no longer hidden" in row.detail
            same = rows[(cluster, subject, f'{{"type":"cluster","name":"{cluster}"}}')]
            assert (same.move, same.detail) == ("none", "no change")
    # The shop namespace's own target changes too (its sre rule's source), not its access.
    shop = rows[("prod-us-east/shop", "group:sre", '{"type":"namespaces","name":"shop"}')]
    assert shop.move == "none"
    # No other cluster moves: the sample is the production set's.
    assert {key[0] for key in rows} == {"prod-eu-west", "prod-us-east", "prod-us-east/shop"}


def test_a_monitor_access_policy_deciding_the_cluster_makes_an_allow_no_change() -> None:
    grant = ap("devs", "staging-us-east", {"kind": "Cluster", "name": "staging-us-east"},
               "rules", {"devs": {"subjects": {"groups": ["developers"],
                                               "users": ["erin@example.com"]}}})
    rows = rows_of(example_fleet().simulate(grant, limit=BIG, budget=BIG).access)
    here = '{"type":"cluster","name":"staging-us-east"}'
    # developers-non-prod decides staging for developers, before and after: no false gain.
    developers = rows[("staging-us-east", "group:developers", here)]
    assert developers.before == developers.after
    assert developers.after.policy == "clusterpulse/developers-non-prod"
    assert (developers.move, developers.detail) == ("none", "no change")
    assert rows[("staging-us-east", "user:bob", here)].move == "none"  # a member of it
    # erin's MonitorAccessPolicy is not in force yet (notBefore 2026-10): she gains.
    erin = rows[("staging-us-east", "user:erin@example.com", here)]
    assert (erin.before.decision, erin.after.decision, erin.move) == ("deny", "allow", "gains")
    assert erin.after.policy == "staging-us-east/devs"


def test_an_inherited_deny_beats_the_monitor_access_policy_and_is_a_loss() -> None:
    lock = ap("lock", "clearance-system", {"kind": "Fleet", "name": "fleet"}, "overrides",
              {"lock": {"effect": "Deny", "subjects": {"groups": ["developers"]}}})
    rows = rows_of(example_fleet().simulate(lock, limit=BIG, budget=BIG).access)
    row = rows[("staging-us-east", "group:developers",
                '{"type":"cluster","name":"staging-us-east"}')]
    assert (row.before.decision, row.after.decision) == ("allow", "deny")
    assert (row.after.policy, row.move, row.detail) == (
        "clearance-system/lock", "loses", "no longer visible")
    # Nobody else is named by the new rule: sre keeps what it had.
    assert not [key for key in rows if "sre" in key[1] or "olivia" in key[1]]


def test_rows_over_the_limit_are_counted_and_said() -> None:
    offline = example_fleet()
    whole = offline.simulate(SAMPLE, limit=BIG, budget=BIG)
    cut = offline.simulate(SAMPLE, limit=3, budget=BIG)
    assert cut.access == whole.access[:3]
    assert cut.truncated is not None
    assert (cut.truncated.listed, cut.truncated.total) == (3, len(whole.access))
    assert "more than the limit of 3" in cut.truncated.reason


def test_rows_over_the_namespace_target_budget_are_counted_and_said() -> None:
    offline = example_fleet()
    pods = ap("pods", "clearance-system", {"kind": "Fleet", "name": "fleet"}, "defaults",
              {"pods": {"subjects": {"groups": ["developers"]},
                        "resources": [{"type": "pods", "visibility": "filtered",
                                       "filters": {"names": {"denied": ["*-canary"]}}}]}})
    # Every pods of prod-us-east weighs its Namespace target shop, whose own rule names
    # developers, before and after: a budget of one pair stops at the first such row.
    cut = offline.simulate(pods, limit=BIG, budget=1)
    assert cut.truncated is not None
    assert 0 < cut.truncated.listed < cut.truncated.total
    assert "more than 1 (question, Namespace target) pairs" in cut.truncated.reason
    whole = offline.simulate(pods, limit=BIG, budget=BIG)
    assert whole.truncated is None
    assert cut.access == whole.access[:cut.truncated.listed]
    stopped = whole.access[cut.truncated.listed]
    assert (stopped.target.name, stopped.resource.type) == ("prod-us-east", "pods")


def test_deleting_the_guardrails_shows_the_shop_namespace_losing_its_filter() -> None:
    reply = example_fleet().simulate(SAMPLE, "delete", limit=BIG, budget=BIG)
    rows = rows_of(reply.access)
    row = rows[("prod-eu-west", "group:sre", '{"type":"namespaces"}')]
    # The Fleet's default takes over: payments no longer hidden, metrics kept.
    assert (row.before.decision, row.after.decision, row.move) == ("partial", "allow", "gains")


# Words -----------------------------------------------------------------------------------

def answer(decision: str, filters: dict[str, Any] | None = None,
           permissions: tuple[str, ...] = ("view",), policy: str | None = "p") -> AccessAnswer:
    return msgspec.convert({"decision": decision, "filters": filters,
                            "permissions": list(permissions), "policy": policy},
                           AccessAnswer)


def names(kind: str, **lists: list[str]) -> dict[str, Any]:
    return {kind: {"type": kind, "visibility": "filtered", "filters": {"names": lists}}}


@pytest.mark.parametrize(("before", "after", "move", "detail"), [
    (answer("partial", names("namespaces", denied=["payments"])),
     answer("partial", names("namespaces", denied=["vault"])), "changes",
     "filters change: namespaces payments no longer hidden; namespaces vault now hidden"),
    (answer("partial", names("namespaces", denied=["payments", "vault"])),
     answer("partial", names("namespaces", denied=["vault"])), "gains",
     "filters change: namespaces payments no longer hidden"),
    (answer("allow"), answer("partial", names("pods", allowed=["web-*"])), "loses",
     "now only partly visible; pods web-*: now the only ones shown"),
    (answer("deny", policy=None), answer("partial", names("pods", denied=["x"])), "gains",
     "now partly visible"),
    (answer("allow", permissions=("view", "view_metrics")), answer("allow"), "loses",
     "view_metrics revoked"),
    (answer("allow"), answer("allow", policy="q"), "none", "no change (now decided by q)"),
    (answer("partial", {"pvc": {"type": "pvc", "visibility": "all"}}), answer("partial", {}),
     "loses", "filters change: pvc now hidden"),  # a custom type without an entry is hidden
    (answer("partial", {"pods": {"type": "pods", "visibility": "filtered",
                                 "filters": {"labels": {"tier": "web"}}}}),
     answer("partial", {"pods": {"type": "pods", "visibility": "filtered",
                                 "filters": {"labels": {"tier": "db"}}}}),
     "changes", "filters change: pods labels filters change"),
])
def test_describe_says_which_way_and_how(before: AccessAnswer, after: AccessAnswer,
                                         move: str, detail: str) -> None:
    assert describe(before, after) == (move, detail)


# The property ----------------------------------------------------------------------------

#: Every principal of the fleets' vocabulary: a user with no, one or both groups asserted.
PRINCIPALS = [(user, groups) for user in USERS
              for groups in ([], [GROUPS[0]], [GROUPS[1]], list(GROUPS))]
TYPES = ("pods", "namespaces", "operators", "pvc", "certs", "nodes")


@st.composite
def changes(draw: st.DrawFn) -> tuple[Fleet, dict[str, Any], str]:
    fleet = draw(fleets())
    if fleet.inherited and draw(st.booleans()):
        return fleet, draw(st.sampled_from(fleet.inherited)), "delete"
    name = draw(st.sampled_from([f"a{i}" for i in range(6)]))  # a0-a4 may exist
    return fleet, draw(access_policies(name)), "apply"


def after_fleet(fleet: Fleet, obj: dict[str, Any], operation: str) -> Fleet:
    """The fleet with the change made, its index built from scratch."""
    key = policy_key(obj)
    kept = [found for found in fleet.inherited if policy_key(found) != key]
    inherited = kept if operation == "delete" else [*kept, obj]
    index = InheritanceIndex.build(compiled(*inherited), fleet.clusters, fleet.cluster_sets,
                                   authority=ANYONE)
    return dataclasses.replace(fleet, inherited=inherited, index=index)


def identity_in(fleet: Fleet, principal: Principal) -> Identity:
    return fleet.identity(principal.username, principal.groups)


def checked(fleet: Fleet, identity: Identity, resource: Resource, cluster: str) -> AccessAnswer:
    """``check`` on the decision service's snapshot of the fleet."""
    found = answers.check(fleet.state(identity), identity, "view", resource, cluster=cluster,
                          now=NOW, explain=False)
    return AccessAnswer(decision=found.decision, policy=found.policy,
                        permissions=list(found.permissions), filters=found.filters)


def universe(cluster: str) -> list[Resource]:
    places = (*NAMESPACES, ELSEWHERE)
    return [Resource(type="cluster", name=cluster, cluster=cluster),
            *(Resource(type="namespaces", name=n, cluster=cluster) for n in places),
            *(Resource(type=kind, cluster=cluster) for kind in TYPES),
            *(Resource(type=kind, cluster=cluster, namespace=n)
              for kind in TYPES if kind != "nodes" for n in places)]


def problems(case: tuple[Fleet, dict[str, Any], str]) -> list[str]:
    fleet, obj, operation = case
    reply, after = dry_run(fleet.index, obj, operation)  # type: ignore[arg-type]
    later = after_fleet(fleet, obj, operation)

    def state_of(principal: Principal) -> tuple[impact.Monitors, Identity]:
        identity = identity_in(fleet, principal)
        return fleet.state(identity), identity

    rows, truncated = impact.access_diff(
        fleet.index, after, [diff.target for diff in reply.targets], state_of, fleet.groups,
        declared=DECLARED, now=NOW, limit=BIG, budget=BIG)
    found = [] if truncated is None else [f"truncated: {truncated}"]
    # 1. Each row is check before and after, for the subject's principal.
    listed: dict[Target, set[tuple[str, str]]] = {}
    for row in rows:
        listed.setdefault(row.target, set()).add((row.subject.kind, row.subject.name))
        cluster = row.target.name if row.target.kind == "Cluster" else row.target.cluster
        assert cluster is not None
        resource = Resource(type=row.resource.type, name=row.resource.name, cluster=cluster,
                            namespace=row.resource.namespace)
        if row.subject.kind == "group":
            principal = Principal(username="clearance:who-can-see:anyone",
                                  groups=[row.subject.name])
        else:
            principal = Principal(username=row.subject.name)
        for label, side, got in (("before", fleet, row.before), ("after", later, row.after)):
            wanted = checked(side, identity_in(side, principal), resource, cluster)
            if got != wanted:
                found.append(f"{row.target} {row.subject} {row.resource} {label}: "
                             f"{got} != check {wanted}")
    # 2. Complete: whoever no listed subject matches keeps its answers.
    for username, groups in PRINCIPALS:
        identity = identity_in(fleet, Principal(username=username, groups=groups))

        def matches(target: Target, identity: Identity = identity) -> bool:
            return any((kind == "user" and name == identity.username)
                       or (kind == "group" and name in identity.groups)
                       for kind, name in listed.get(target, ()))

        for cluster in CLUSTERS:
            for resource in universe(cluster):
                was = checked(fleet, identity, resource, cluster)
                now = checked(later, identity, resource, cluster)
                if was == now:
                    continue
                home = target_namespace(resource)
                if home is None and resource.type not in ("cluster", "nodes"):
                    # A whole type that names no namespace: the cluster's target and
                    # every Namespace target of it can move it.
                    where = [t for t in listed if t == Target(kind="Cluster", name=cluster)
                             or (t.kind == "Namespace" and t.cluster == cluster)]
                elif home is None:
                    where = [Target(kind="Cluster", name=cluster)]
                else:
                    where = [Target(kind="Namespace", cluster=cluster, name=home),
                             Target(kind="Cluster", name=cluster)]
                if not any(matches(target) for target in where):
                    found.append(f"{username}+{groups} on {cluster} {resource.type} "
                                 f"{resource.name} in {resource.namespace}: {was} -> {now}, "
                                 f"but no row names it at {where}")
    return found


@settings(max_examples=150, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(changes())
def test_the_access_diff_is_check_before_and_after_and_complete(
        case: tuple[Fleet, dict[str, Any], str]) -> None:
    found = problems(case)
    assert not found, "\n".join([repr(case), *found[:8]])


def test_the_property_catches_a_diff_that_forgets_removed_rules(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def new_versions_only(before: Any, after: Any) -> list[Any]:
        old = before.rules if before is not None else {}
        new = after.rules if after is not None else {}
        return [rule for name, rule in sorted(new.items()) if old.get(name) != rule]

    monkeypatch.setattr(impact, "changed_rules", new_versions_only)
    find(changes(), lambda case: bool(problems(case)),
         settings=settings(max_examples=2000, database=None, deadline=None,
                           suppress_health_check=list(HealthCheck)))
