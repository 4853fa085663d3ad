"""Hostile and careless objects: every one compiles or is invalid with a reason, never
raises anything else, never produces a value the store cannot hold, never stalls."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_api.errors import InvalidObject
from clearance_core.folding.fold import fold_group, fold_policy
from clearance_core.monitor.aggregate import compile_aggregation
from clearance_core.monitor.evaluate import match_cluster
from clearance_core.monitor.filters import Item, compile_filter, visible
from clearance_core.monitor.metricsource import compile_source, winner
from clearance_core.monitor.policy import compile_policy, invalid_policy
from clearance_core.monitor.wildcard import NameSet, to_regex
from clearance_core.rbac.rules import parse_binding, parse_role
from tests.unit.policies import policy

_msgpack = msgspec.msgpack.Encoder()


def selector_policy(**selector: Any) -> dict[str, Any]:
    return policy(rules=[{"selector": selector}])


def storable(obj: dict[str, Any]) -> str:
    """Compile as the compiler does; the result must encode for the store."""
    compiled, _ = fold_policy("ADDED", obj, None, {})
    if compiled is not None:
        _msgpack.encode(compiled)
    return "none" if compiled is None else ("valid" if compiled.valid else "invalid")


# Patterns ------------------------------------------------------------------------------


def test_a_backtracking_bomb_in_match_pattern_answers_at_once() -> None:
    compiled = compile_policy(selector_policy(matchPattern="(a|aa)*c"))
    # On a backtracking engine this never returns (2^40 paths); RE2 is linear.
    assert match_cluster(compiled, "a" * 40, {}) is None
    assert match_cluster(compiled, "a" * 40 + "c", {}) == (0, "matchPattern")


@pytest.mark.parametrize(("pattern", "reason"), [
    ("a{1001}", "invalid repetition size"),
    ("(?<=a)b", "invalid regular expression"),
    ("(a)\\1", "invalid regular expression"),
    ("x" * 257, "the limit is 256"),
    ("(" * 200 + ")" * 200, "matchPattern"),
])
def test_patterns_outside_re2_or_over_256_characters_are_invalid(pattern: str,
                                                                 reason: str) -> None:
    with pytest.raises(InvalidObject, match=re.escape(reason)):
        compile_policy(selector_policy(matchPattern=pattern))
    assert storable(selector_policy(matchPattern=pattern)) == "invalid"


def test_a_repetition_count_beyond_any_engine_limit_is_no_crash() -> None:
    # Python's re raised OverflowError here, which killed the compiler. RE2 (C++) reads
    # a count it cannot parse as literal text.
    obj = selector_policy(matchPattern="a{4294967296}")
    assert storable(obj) == "valid"
    assert match_cluster(compile_policy(obj), "a{4294967296}", {}) == (0, "matchPattern")


def test_a_256_character_pattern_is_accepted() -> None:
    compiled = compile_policy(selector_policy(matchPattern="p" * 254 + ".*"))
    assert match_cluster(compiled, "p" * 254 + "-east", {}) == (0, "matchPattern")


def test_aggregation_matches_runs_on_re2() -> None:
    agg = compile_aggregation({"name": "n", "function": "count",
                               "filter": {"field": "f", "operator": "matches",
                                          "value": "(a|aa)*c"}})
    assert agg.filter is not None and not agg.filter.test({"f": "a" * 40})
    with pytest.raises(InvalidObject, match="limit is 256"):
        compile_aggregation({"name": "n", "function": "count", "filter": {
            "field": "f", "operator": "matches", "value": "a" * 300}})


def _glob(pattern: str, value: str) -> bool:
    """Reference wildcard semantics by dynamic programming."""
    reach = [True] + [False] * len(pattern)
    for j, char in enumerate(pattern):
        reach[j + 1] = reach[j] and char == "*"
    for ch in value:
        row = [False] * (len(pattern) + 1)
        for j, char in enumerate(pattern):
            if char == "*":
                row[j + 1] = row[j] or reach[j + 1]
            else:
                row[j + 1] = reach[j] and (char == "?" or char == ch)
        reach = row
    return reach[-1]


@settings(max_examples=400, deadline=None)
@given(pattern=st.text("ab*?.\n", max_size=8), value=st.text("ab.\n", max_size=10))
def test_wildcards_match_exactly_the_glob_semantics(pattern: str, value: str) -> None:
    assert (re.fullmatch(to_regex(pattern), value) is not None) == _glob(pattern, value)
    assert NameSet.of([pattern]).matches(value) == _glob(pattern, value)


def test_wildcard_bombs_answer_at_once_in_every_dimension() -> None:
    bomb = "*a" * 12 + "*b"
    flt = compile_filter({"type": "pods", "visibility": "filtered", "filters": {
        "names": {"allowed": [bomb, "x*"], "denied": [bomb + "*"]},
        "namespaces": {"denied": [bomb]}}})
    hostile = "a" * 5000
    # Backtracking naively over twelve stars is about 5000^12 steps.
    assert not visible(flt, Item(name=hostile, namespace=hostile))
    assert not visible(flt, Item(name=hostile + "b", namespace="ns"))  # denied wins
    assert visible(flt, Item(name="xy", namespace="ns"))
    assert NameSet.of([bomb]).matches("a" * 5000 + "b")


# Sizes and the store -------------------------------------------------------------------


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda p: p["spec"]["identity"].update(priority=2**64), "64-bit"),
    (lambda p: p["spec"]["identity"].update(priority=2**63), "64-bit"),
    (lambda p: p["spec"]["scope"]["clusters"]["rules"][0].update(resources=[
        {"type": "pods", "visibility": "filtered",
         "filters": {"fields": {"x": {"allowed": [10**30]}}}}]), "64-bit"),
    (lambda p: p["spec"]["scope"]["clusters"]["rules"][0].update(extra=[-(2**70)]),
     "64-bit"),
    (lambda p: p["spec"].update(deep=_nested(200)), "nested deeper"),
])
def test_values_the_store_cannot_hold_make_the_policy_invalid_with_the_limit(
        mutate: Any, reason: str) -> None:
    obj = selector_policy(matchNames=["a"])
    mutate(obj)
    with pytest.raises(InvalidObject, match=reason):
        compile_policy(obj)
    assert storable(obj) == "invalid"


def test_the_largest_64_bit_priority_is_accepted() -> None:
    obj = selector_policy(matchNames=["a"])
    obj["spec"]["identity"]["priority"] = 2**63 - 1
    assert compile_policy(obj).priority == 2**63 - 1
    assert storable(obj) == "valid"


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"x": value}
    return value


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
_json = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=12)
_policy_fields = st.fixed_dictionaries({}, optional={
    "identity": st.fixed_dictionaries({}, optional={
        "priority": _json, "subjects": st.fixed_dictionaries({}, optional={
            "users": _json, "groups": _json, "serviceAccounts": _json})}),
    "access": st.fixed_dictionaries({}, optional={
        "effect": st.sampled_from(["Allow", "Deny", None, 1]), "enabled": _json}),
    "scope": st.fixed_dictionaries({}, optional={"clusters": st.fixed_dictionaries({}, optional={
        "default": _json, "rules": st.lists(st.fixed_dictionaries({}, optional={
            "selector": st.fixed_dictionaries({}, optional={
                "matchNames": _json, "matchPattern": _json, "matchLabels": _json}),
            "permissions": _json,
            "resources": st.lists(st.fixed_dictionaries({"type": _json}, optional={
                "visibility": _json, "filters": _json, "aggregations": _json}),
                max_size=2)}), max_size=2)})}),
    "lifecycle": _json,
})


@settings(max_examples=300, deadline=None)
@given(spec=_policy_fields)
def test_any_policy_compiles_or_is_invalid_and_always_fits_the_store(
        spec: dict[str, Any]) -> None:
    obj = {"apiVersion": "clusterpulse.io/v1alpha1", "kind": "MonitorAccessPolicy",
           "metadata": {"name": "p", "namespace": "ns"}, "spec": spec}
    assert storable(obj) in ("valid", "invalid")
    record = invalid_policy(obj, "reason")
    assert record is not None
    _msgpack.encode(record)


# One parsing convention ----------------------------------------------------------------


def test_null_means_absent_in_a_policy() -> None:
    obj = selector_policy(matchNames=["prod-*"], matchPattern=None, matchLabels=None)
    obj["spec"]["access"]["enabled"] = None
    obj["spec"]["identity"]["subjects"]["groups"] = None
    obj["spec"]["lifecycle"] = {"validity": {"notBefore": None, "notAfter": None}}
    obj["spec"]["scope"]["clusters"]["rules"][0]["permissions"] = None
    compiled = compile_policy(obj)
    assert compiled.enabled is True
    assert compiled.not_before is None and compiled.not_after is None
    assert compiled.rules[0].permissions == ("view",)


def test_scalars_in_subject_and_selector_lists_compare_in_json_form() -> None:
    obj = selector_policy(matchNames=[10, True], matchLabels={"tier": 1})
    obj["spec"]["identity"]["subjects"] = {"users": [7, "alice"], "groups": [False]}
    compiled = compile_policy(obj)
    assert compiled.users == ("7", "alice") and compiled.groups == ("false",)
    assert match_cluster(compiled, "10", {}) == (0, "matchNames")
    assert match_cluster(compiled, "true", {}) == (0, "matchNames")
    assert match_cluster(compiled, "x", {"tier": "1"}) == (0, "matchLabels")
    assert storable(obj) == "valid"


@pytest.mark.parametrize("stamp", [
    "2026-01-01", "20260101T000000Z", "2026-W01-1T00:00:00Z", "2026-01-01T00:00:00",
    "2026-01-01T00:00Z", "2026-01-01T00:00:00+0200", " 2026-01-01T00:00:00Z",
    "2026-01-01T00:00:00Z ", "2026-13-01T00:00:00Z", "2026-001T00:00:00Z",
])
def test_times_that_are_not_rfc_3339_make_the_policy_invalid(stamp: str) -> None:
    obj = selector_policy(matchNames=["a"])
    obj["spec"]["lifecycle"] = {"validity": {"notAfter": stamp}}
    with pytest.raises(InvalidObject, match="notAfter"):
        compile_policy(obj)


@pytest.mark.parametrize(("stamp", "epoch"), [
    ("2026-01-01T00:00:00Z", 1767225600.0),
    ("2026-01-01t02:00:00.5+02:00", 1767225600.5),
    ("2025-12-31T19:00:00-05:00", 1767225600.0),
])
def test_rfc_3339_times_with_offsets_and_fractions_are_accepted(stamp: str,
                                                               epoch: float) -> None:
    obj = selector_policy(matchNames=["a"])
    obj["spec"]["lifecycle"] = {"validity": {"notBefore": stamp}}
    assert compile_policy(obj).not_before == epoch


def test_a_group_with_odd_entries_keeps_its_members() -> None:
    users, affected = fold_group("ADDED", {"users": ["bob", 1, None, True]}, None)
    assert users == ["1", "bob", "true"]
    assert affected.users == {"1", "bob", "true"}


def test_rbac_objects_follow_the_same_convention() -> None:
    role = parse_role({"kind": "ClusterRole", "metadata": {"name": "r", "labels": {"v": 2}},
                       "rules": [{"verbs": ["get", None], "apiGroups": [""],
                                  "resources": [404], "resourceNames": None}]})
    assert role.labels == {"v": "2"}
    assert role.rules[0].verbs == ("get",) and role.rules[0].resources == ("404",)
    binding = parse_binding({"kind": "ClusterRoleBinding", "metadata": {"name": "b"},
                             "roleRef": {"kind": "ClusterRole", "name": "r", "apiGroup": None},
                             "subjects": [{"kind": "User", "name": 42}]})
    assert binding.subjects[0].name == "42"


def _source(name: str, created: str | None, type_name: str = "pvc") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "m"}
    if created:
        meta["creationTimestamp"] = created
    return {"metadata": meta, "spec": {"rbac": {"resourceTypeName": type_name,
                                                "filterableFields": [1, "a"],
                                                "filterAggregations": None}}}


def test_the_oldest_metricsource_of_a_type_is_in_force() -> None:
    old = compile_source(_source("z-old", "2025-01-01T00:00:00Z"))
    new = compile_source(_source("a-new", "2026-01-01T00:00:00Z"))
    undated = compile_source(_source("0-undated", None))
    assert old.filterable_fields == ("1", "a") and old.filter_aggregations is True
    assert winner([new, undated, old]) == old
    assert winner([undated, new]) == new
    assert winner([]) is None
