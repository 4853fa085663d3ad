"""AccessPolicy objects as users write them, careless and hostile: each compiles or is
invalid with a reason naming the field; nothing else is ever raised."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_api.errors import InvalidObject
from clearance_core.inherit.accesspolicy import compile_access_policy
from clearance_core.inherit.conditions import evaluate
from clearance_core.inherit.hierarchy import Target
from tests.unit.accesspolicies import access_policy, block, rule

SRE = rule(groups=["sre"])


def invalid(obj: Any, reason: str) -> None:
    with pytest.raises(InvalidObject, match=re.escape(reason)):
        compile_access_policy(obj)


def test_a_full_policy_compiles() -> None:
    compiled = compile_access_policy(access_policy(
        "p", target=("Namespace", "c1", "app"), created="2025-01-01T00:00:00+02:00",
        defaults=block({"a": rule(users=["u"], groups=["g"], view=True, metrics=True,
                                  resources=[{"type": "pod", "visibility": "none"}])},
                       "merge", "size(self.rules) == 0"),
        overrides=block({"b": rule(effect="Deny", groups=["x"])}), unset=["z", "z"]))
    assert compiled.target == Target(kind="Namespace", name="app", cluster="c1")
    assert compiled.created == 1735682400.0
    assert [(b.kind, b.strategy) for b in compiled.blocks] == [("defaults", "merge"),
                                                               ("overrides", "atomic")]
    a = compiled.blocks[0].rules["a"]
    assert a.permissions == ("view", "view_metrics")
    assert [f.type for f in a.filters] == ["pods"]
    assert compiled.unset == ("z",)
    assert compiled.blocks[1].rules["b"].effect == "Deny"


def test_null_means_absent_everywhere() -> None:
    obj = access_policy("p", target=("Cluster", "c1"),
                        defaults={"strategy": None, "when": None,
                                  "rules": {"a": {"effect": None, "permissions": None,
                                                  "subjects": {"users": [None, "u"],
                                                               "groups": None}}}},
                        overrides=None, unset=None)
    obj["metadata"]["creationTimestamp"] = None
    obj["spec"]["rules"] = None
    compiled = compile_access_policy(obj)
    block_ = compiled.blocks[0]
    assert (block_.kind, block_.strategy, block_.when) == ("defaults", "atomic", None)
    assert block_.rules["a"].effect == "Allow"
    assert block_.rules["a"].users == ("u",)
    assert block_.rules["a"].permissions == ("view",)
    assert compiled.created is None


def test_scalars_in_subject_lists_compare_in_json_form() -> None:
    compiled = compile_access_policy(access_policy(
        rules={"a": {"subjects": {"users": [10, True], "groups": [1.5],
                                  "serviceAccounts": [{"name": 7}]}}}))
    found = compiled.blocks[0].rules["a"]
    assert found.users == ("10", "true") and found.groups == ("1.5",)
    assert found.service_accounts == ("system:serviceaccount:default:7",)


@pytest.mark.parametrize(("spec", "reason"), [
    ({}, "spec.targetRef is required"),
    ({"targetRef": {"kind": "Gateway", "name": "x"}}, "spec.targetRef.kind must be one of"),
    ({"targetRef": {"kind": "Fleet", "name": "prod"}}, "name of the Fleet must be 'fleet'"),
    ({"targetRef": {"kind": "Cluster"}}, "spec.targetRef.name must be a non-empty string"),
    ({"targetRef": {"kind": "Namespace", "name": "app"}}, "spec.targetRef.cluster"),
    ({"targetRef": {"kind": "Cluster", "name": "c", "cluster": "c"}},
     "spec.targetRef.cluster is only for kind Namespace"),
    ({"targetRef": {"kind": "Fleet", "name": "fleet"}, "rules": {"a": SRE},
      "defaults": {"rules": {"b": SRE}}}, "both bare rules and defaults/overrides"),
    ({"targetRef": {"kind": "Fleet", "name": "fleet"}, "defaults": {"strategy": "patch"}},
     "spec.defaults.strategy must be atomic or merge"),
    ({"targetRef": {"kind": "Fleet", "name": "fleet"}, "rules": {"a": {"effect": "allow"}}},
     "spec.rules.a.effect must be Allow or Deny"),
    ({"targetRef": {"kind": "Fleet", "name": "fleet"}, "rules": {"a": {"permissions":
                                                                      {"view": "yes"}}}},
     "spec.rules.a.permissions.view must be a boolean"),
    ({"targetRef": {"kind": "Fleet", "name": "fleet"}, "rules": {"a": {"resources": [
        {"type": "pods", "visibility": "some"}]}}}, "spec.rules.a.resources[0].visibility"),
    ({"targetRef": {"kind": "Fleet", "name": "fleet"}, "rules": {"a": {"subjects": {
        "serviceAccounts": [{"namespace": "x"}]}}}},
     "spec.rules.a.subjects.serviceAccounts[0].name is required"),
    ({"targetRef": {"kind": "Fleet", "name": "fleet"}, "rules": {"a": "everyone"}},
     "spec.rules.a must be an object"),
    ({"targetRef": {"kind": "Fleet", "name": "fleet"}, "unset": "a"},
     "spec.unset must be a list of strings"),
    ({"targetRef": {"kind": "Fleet", "name": "fleet"}, "unset": [{"a": 1}]},
     "spec.unset[0] must be a string"),
    ({"targetRef": {"kind": "Fleet", "name": "fleet"}, "rules": {str(i): {} for i in
                                                               range(1001)}},
     "the limit is 1000"),
])
def test_schema_errors_name_the_field(spec: dict[str, Any], reason: str) -> None:
    invalid({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}, reason)


@pytest.mark.parametrize(("when", "reason"), [
    ("spec.rules.a > 50", "undeclared reference to 'spec"),  # the RFC's E1 form, no self.
    ("self.rules +", "Syntax error"),
    ("1 + 2", "must be a boolean expression, not int"),
    ("'text'", "must be a boolean expression, not string"),
    ("", "does not compile"),
    ("(" * 200 + "true" + ")" * 200, "does not compile"),
    ("true || " * 1000 + "true", "the limit is 4096"),
    ("true\x00", "NUL"),
    (42, "must be a CEL expression"),
])
def test_a_condition_that_does_not_compile_makes_the_policy_invalid(when: Any,
                                                                    reason: str) -> None:
    invalid(access_policy(overrides={"rules": {}, "when": when}),
            "spec.overrides.when")
    invalid(access_policy(overrides={"rules": {}, "when": when}), reason)


@pytest.mark.parametrize("stamp", [
    "2025-01-01", "20250101T000000Z", "2025-W01-1T00:00:00Z", "2025-01-01T00:00:00",
    "2025-13-01T00:00:00Z", "yesterday", 1735689600, ["2025-01-01T00:00:00Z"]])
def test_bad_creation_timestamps_are_invalid(stamp: Any) -> None:
    obj = access_policy()
    obj["metadata"]["creationTimestamp"] = stamp
    invalid(obj, "metadata.creationTimestamp")


def test_huge_values_and_deep_nesting_are_invalid_with_the_limit() -> None:
    invalid(access_policy(rules={"a": {"resources": [{"type": "x", "n": 2**64}]}}),
            "outside the 64-bit range")
    deep: Any = "x"
    for _ in range(100):
        deep = {"d": deep}
    invalid(access_policy(rules={"a": {"subjects": deep}}), "nested deeper than the limit")
    invalid(access_policy(rules={"a": {"resources": [{"type": "x", "n": float("inf")}]}}),
            "not a finite number")


def test_a_huge_number_of_subjects_compiles_and_encodes() -> None:
    compiled = compile_access_policy(access_policy(rules={"a": rule(
        users=[f"u{i}" for i in range(20000)])}))
    assert len(compiled.blocks[0].rules["a"].users) == 20000
    msgspec.msgpack.encode(compiled)


def test_evaluation_is_bounded_and_a_runtime_failure_is_false_with_a_reason() -> None:
    nested = "self.unset.all(a, self.unset.all(b, self.unset.all(c, true)))"
    result, error = evaluate(nested, {"rules": {}, "unset": [str(i) for i in range(1000)]})
    assert result is False and error is not None and "budget" in error.lower()
    assert evaluate("self.rules.x.effect == 'Deny'", {"rules": {}, "unset": []})[0] is False
    assert evaluate("self.unset[0] == 'a'", {"rules": {}, "unset": ["\ud800"]})[0] is False
    assert evaluate("self.rules.size() == 0", {"rules": {}, "unset": []}) == (True, None)
    assert evaluate("self.rules", {"rules": {"a": 1}, "unset": []})[0] is False


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=30)


@settings(max_examples=150, deadline=None)
@given(spec=st.dictionaries(
    st.sampled_from(["targetRef", "rules", "defaults", "overrides", "unset", "x"]),
    _json_values, max_size=5),
    meta=st.dictionaries(st.sampled_from(["name", "namespace", "creationTimestamp"]),
                         _json_values, max_size=3))
def test_arbitrary_objects_compile_or_are_invalid_never_anything_else(
        spec: dict[str, Any], meta: dict[str, Any]) -> None:
    try:
        compiled = compile_access_policy({"metadata": meta, "spec": spec})
    except InvalidObject as exc:
        assert exc.message
        return
    msgspec.msgpack.encode(compiled)  # what the compiler stores


@settings(max_examples=100, deadline=None)
@given(rules=st.dictionaries(st.text(min_size=1, max_size=5), _json_values, max_size=4),
       when=st.sampled_from([None, "size(self.rules) > 0", "'a' in self.unset",
                             "self.rules.a.effect == 'Deny'"]))
def test_arbitrary_rules_compile_or_are_invalid(rules: dict[str, Any],
                                                when: str | None) -> None:
    obj = access_policy(target=("Cluster", "c"), defaults={"rules": rules, "when": when})
    try:
        compile_access_policy(obj)
    except InvalidObject as exc:
        assert exc.message
