"""Compiling MonitorAccessPolicies: what is accepted, what is rejected, and why."""

from __future__ import annotations

import pytest

from clearance_api.errors import InvalidObject
from clearance_core.monitor.policy import compile_policy, invalid_policy
from clearance_core.monitor.wildcard import NameSet
from tests.unit.policies import policy


def test_subjects_are_flattened_with_service_account_usernames() -> None:
    compiled = compile_policy(policy(
        users=["alice", "erin@example.com"], groups=["devs"],
        service_accounts=[{"name": "bot", "namespace": "mon"}, {"name": "robot"}],
    ))
    assert compiled.users == ("alice", "erin@example.com")
    assert compiled.groups == ("devs",)
    assert compiled.service_accounts == (
        "system:serviceaccount:mon:bot", "system:serviceaccount:default:robot")


def test_rule_without_permissions_grants_view_only() -> None:
    compiled = compile_policy(policy(rules=[{"selector": {"matchNames": ["a"]}}]))
    assert compiled.rules[0].permissions == ("view",)


def test_explicit_permissions_are_taken_as_written() -> None:
    compiled = compile_policy(policy(rules=[
        {"selector": {"matchNames": ["a"]}, "permissions": {"viewMetrics": True}},
        {"selector": {"matchNames": ["b"]}, "permissions": {"view": False}},
    ]))
    assert compiled.rules[0].permissions == ("view_metrics",)
    assert compiled.rules[1].permissions == ()


@pytest.mark.parametrize(("default", "matches"), [
    ("all", True), ("allow", True), ("none", False), ("deny", False), ("filtered", False),
])
def test_default_spellings(default: str, matches: bool) -> None:
    assert compile_policy(policy(default=default)).default_match is matches


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda p: p["spec"]["identity"].update(priority=-1), "priority"),
    (lambda p: p["spec"]["identity"].update(priority="high"), "priority"),
    (lambda p: p["spec"]["access"].update(effect="Maybe"), "effect"),
    (lambda p: p["spec"].pop("access"), "access"),
    (lambda p: p["spec"]["lifecycle"]["validity"].update(notAfter="next tuesday"), "notAfter"),
    (lambda p: p["spec"]["lifecycle"]["validity"].update(notBefore="2026-01-01T00:00:00"),
     "RFC 3339"),
    (lambda p: p["spec"]["scope"]["clusters"].update(
        rules=[{"selector": {"matchPattern": "prod-(["}}]), "matchPattern"),
    (lambda p: p["spec"]["scope"]["clusters"].update(default="sometimes"), "default"),
    (lambda p: p["spec"]["scope"]["clusters"].update(
        rules=[{"selector": {}, "resources": [{"visibility": "all"}]}]), "type"),
    (lambda p: p.update(spec=None), "spec"),
    (lambda p: p["metadata"].pop("name"), "metadata.name"),
])
def test_invalid_policies_are_rejected_whole(mutate, message) -> None:  # type: ignore[no-untyped-def]
    obj = policy(rules=[{"selector": {"matchNames": ["a"]}}])
    mutate(obj)
    with pytest.raises(InvalidObject, match=message):
        compile_policy(obj)


def test_invalid_record_keeps_identity_and_subjects_for_explanations() -> None:
    obj = policy(users=["alice"], priority=7, effect="Deny")
    record = invalid_policy(obj, "bad")
    assert record is not None
    assert (record.key, record.valid, record.error, record.users, record.priority) == (
        "ns/p", False, "bad", ("alice",), 7)


def test_rfc3339_offsets_are_honoured() -> None:
    compiled = compile_policy(policy(not_before="2026-01-01T01:00:00+01:00",
                                     not_after="2026-01-01T00:00:01Z"))
    assert compiled.not_before == 1767225600.0
    assert compiled.not_after == 1767225601.0


@pytest.mark.parametrize(("patterns", "value", "expected"), [
    (["prod-*"], "prod-east", True),
    (["prod-*"], "preprod-east", False),
    (["prod-?"], "prod-1", True),
    (["prod-?"], "prod-12", False),
    (["a.b"], "axb", False),          # '.' is literal
    (["a+b*"], "a+bc", True),         # regex metacharacters are literal
    (["a+b*"], "aab", False),
    (["x[*"], "x[yz", True),          # would crash ClusterPulse's Go regexp
    (["exact"], "exact", True),
    (["exact"], "exactly", False),    # anchored at both ends
])
def test_wildcards(patterns: list[str], value: str, expected: bool) -> None:
    assert NameSet.of(patterns).matches(value) is expected
