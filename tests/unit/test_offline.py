"""Manifests folded offline (``clearance_core.folding.offline``) with the compiler's folds, and
checks decided on them with the decision service's code (``clearance_core.questions.answers``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_api.wire import Principal, Resource
from clearance_core.folding import registry
from clearance_core.folding.folds import FoldEvent, FoldResult
from clearance_core.folding.model import Model, Writes
from clearance_core.folding.offline import Offline
from clearance_core.inherit.authority import Authority
from tests.unit.policies import policy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [doc for path in sorted((ROOT / "examples").glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text())
            if isinstance(doc, dict) and "kind" in doc]
#: (username, resource) -> the README's answer: decision and deciding policy.
QUESTIONS: list[tuple[str, dict[str, Any], str, str | None]] = [
    ("dave", {"type": "cluster", "name": "prod-us-east"}, "deny",
     "clusterpulse/contractors-no-production"),
    ("olivia", {"type": "cluster", "name": "staging-us-east"}, "allow",
     "clearance-system/fleet-baseline"),
    ("olivia", {"type": "pods", "cluster": "prod-eu-west", "namespace": "payments",
                "name": "api-0"}, "deny", "platform/production-guardrails"),
    ("mallory", {"type": "cluster", "name": "prod-us-east"}, "deny",
     "clearance-system/fleet-baseline"),
    ("bob", {"type": "pods", "cluster": "prod-us-east", "namespace": "shop"}, "partial",
     "shop/shop-intent"),
    ("bob", {"type": "cluster", "name": "prod-us-east"}, "deny", None),
]
NOW = 1_800_000_000.0  # 2027


def answers(offline: Offline) -> list[tuple[str, str | None]]:
    found = []
    for user, resource, _, _ in QUESTIONS:
        decision = offline.check(Principal(username=user), action="view",
                                 resource=Resource(**resource))
        found.append((decision.decision, decision.policy))
    return found


def folded(objects: list[dict[str, Any]], **kwargs: Any) -> Offline:
    offline = Offline(now=NOW, **kwargs)
    offline.fold(objects)
    return offline


def test_the_example_fleet_folds_whole_and_answers_as_the_readme_says() -> None:
    offline = folded(EXAMPLES)
    assert {o.outcome for o in offline.outcomes.values()} == {"compiled"}
    assert len(offline.outcomes) == len(EXAMPLES)
    assert answers(offline) == [(decision, deciding) for _, _, decision, deciding in QUESTIONS]
    status = offline.policy_status("clusterpulse/platform-full")
    assert status is not None and status.state == "Active"
    conditions = offline.access_conditions("shop/shop-intent")
    assert conditions is not None
    assert [(c.type, c.reason) for c in conditions] == [("Accepted", "Accepted"),
                                                        ("Enforced", "PartiallyEnforced")]


@settings(max_examples=25, deadline=None)
@given(st.permutations(EXAMPLES))
def test_the_order_objects_are_given_in_changes_nothing(objects: list[dict[str, Any]]) -> None:
    assert answers(folded(objects)) == answers(folded(EXAMPLES))


def test_a_misspelled_deny_takes_no_part_and_says_why() -> None:
    deny = policy("no-prod", effect="Deny", priority=1, groups=["developers"],
                  rules=[{"selector": {"matchNames": ["prod-*"]}}])
    grant = policy("all", groups=["developers"], default="all")
    group = {"apiVersion": "user.openshift.io/v1", "kind": "Group",
             "metadata": {"name": "developers"}, "users": ["bob"]}
    cluster = Resource(type="cluster", name="prod-1")
    assert folded([deny, grant, group]).check(
        Principal(username="bob"), action="view", resource=cluster).decision == "deny"
    deny["spec"]["scope"]["clusters"]["rules"][0]["selector"] = {"matchName": ["prod-*"]}
    offline = folded([deny, grant, group])
    decision = offline.check(Principal(username="bob"), action="view", resource=cluster)
    assert (decision.decision, decision.policy) == ("allow", "ns/all")
    status = offline.policy_status("ns/no-prod")
    assert status is not None and status.state == "Error"
    assert status.message == ("spec.scope.clusters.rules[0].selector.matchName: unknown "
                              'field (did you mean "matchNames"?)')


def test_the_admin_namespaces_decide_which_policies_take_part() -> None:
    key = "clearance-system/fleet-baseline"
    for admins, reason in ((["clearance-system"], "Accepted"), (["elsewhere"], "Unauthorized")):
        conditions = folded(EXAMPLES, authority=Authority.of(admins)).access_conditions(key)
        assert conditions is not None and conditions[0].reason == reason


def test_an_object_whose_fold_fails_is_withdrawn_and_the_rest_folded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    mallory = Principal(username="mallory")
    cluster = Resource(type="cluster", name="prod-us-east")
    assert folded(EXAMPLES).check(mallory, action="view", resource=cluster).decision == "deny"
    real = registry.REGISTRY["group"]

    def failing(model: Model, tx: Writes, event: FoldEvent) -> FoldResult:
        if event.ref.name == "suspended":
            raise RuntimeError("boom")
        assert real.fold is not None
        return real.fold(model, tx, event)

    monkeypatch.setitem(registry.REGISTRY, "group",
                        registry.KindSpec(real.kind, real.api_version, real.plural,
                                          real.namespaced, failing))
    offline = folded(EXAMPLES)
    failed = [o for o in offline.outcomes.values() if o.outcome == "failed"]
    assert [(o.ref.name, o.error) for o in failed] == [
        ("suspended", "could not be compiled: RuntimeError: boom")]
    # Without the Group, mallory is not suspended: her platform-team grant decides.
    decision = offline.check(mallory, action="view", resource=cluster)
    assert (decision.decision, decision.policy) == ("allow", "clusterpulse/platform-full")


def test_objects_are_folded_as_the_watcher_publishes_them() -> None:
    """YAML's timestamps arrive as RFC 3339 text (the watcher encodes events as JSON);
    what cannot be encoded is rejected, as the watcher rejects it."""
    written = yaml.safe_load("""
apiVersion: clusterpulse.io/v1alpha1
kind: MonitorAccessPolicy
metadata: {name: dated, namespace: ns}
spec:
  identity: {subjects: {users: [u]}}
  access: {effect: Allow}
  lifecycle: {validity: {notBefore: 2026-01-01T00:00:00Z}}
""")
    unencodable = policy("odd", users=["u"])
    unencodable["metadata"]["annotations"] = {"a": object()}
    offline = folded([written, unencodable])
    outcomes = {ref.name: (o.outcome, o.error) for ref, o in offline.outcomes.items()}
    assert outcomes["dated"] == ("compiled", None)
    assert outcomes["odd"][0] == "failed"
    assert str(outcomes["odd"][1]).startswith("rejected by the watcher: cannot be encoded")
