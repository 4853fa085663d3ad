"""Folding one event into an object's compiled value, and whom the change affects."""

from __future__ import annotations

from typing import Any

import msgspec

from clearance_core.folding.fold import (
    cluster_labels,
    fold_cluster,
    fold_group,
    fold_policy,
    policy_change,
    policy_state,
    without_undeclared_types,
)
from clearance_core.monitor.metricsource import compile_source
from clearance_core.monitor.policy import compile_policy
from tests.unit.policies import policy


def source(type_name: str, fields: list[str]) -> Any:
    return compile_source({"metadata": {"name": type_name, "namespace": "m"},
                           "spec": {"rbac": {"resourceTypeName": type_name,
                                             "filterableFields": fields}}})


def test_a_new_policy_affects_its_users_service_accounts_and_groups() -> None:
    obj = policy(users=["alice"], groups=["ops"],
                 service_accounts=[{"name": "bot", "namespace": "mon"}])
    new, affected = fold_policy("ADDED", obj, None, {})
    assert new is not None and new.valid
    assert affected.users == {"alice", "system:serviceaccount:mon:bot"}
    assert affected.groups == {"ops"} and not affected.clusters


def test_a_subject_change_affects_old_and_new_subjects() -> None:
    before, _ = fold_policy("ADDED", policy(users=["alice"]), None, {})
    after, affected = fold_policy("MODIFIED", policy(users=["bob"]), before, {})
    assert after is not None and affected.users == {"alice", "bob"}


def test_an_unchanged_policy_affects_nobody() -> None:
    before, _ = fold_policy("ADDED", policy(users=["alice"]), None, {})
    _, affected = fold_policy("MODIFIED", policy(users=["alice"]), before, {})
    assert not affected


def test_deleting_a_policy_withdraws_it_for_its_subjects() -> None:
    before, _ = fold_policy("ADDED", policy(users=["alice"]), None, {})
    after, affected = fold_policy("DELETED", policy(users=["alice"]), before, {})
    assert after is None and affected.users == {"alice"}
    assert not policy_change(None, None)


def test_an_invalid_policy_is_kept_as_a_record_that_never_decides() -> None:
    obj = policy(users=["alice"], not_after="tomorrow")
    before, _ = fold_policy("ADDED", policy(users=["alice"]), None, {})
    after, affected = fold_policy("MODIFIED", obj, before, {})
    assert after is not None and not after.valid and "notAfter" in (after.error or "")
    assert affected.users == {"alice"}  # the previous valid version is withdrawn


def test_a_field_filter_the_metricsource_does_not_allow_invalidates_the_policy() -> None:
    obj = policy(users=["a"], rules=[{"selector": {"matchNames": ["*"]}, "resources": [
        {"type": "pvc", "visibility": "filtered",
         "filters": {"fields": {"size": {"allowed": ["1"]}}}}]}])
    bad, _ = fold_policy("ADDED", obj, None, {"pvc": source("pvc", ["phase"])})
    good, _ = fold_policy("ADDED", obj, None, {"pvc": source("pvc", ["size"])})
    assert bad is not None and not bad.valid and "filterableFields" in (bad.error or "")
    assert good is not None and good.valid


def test_an_undeclared_custom_type_is_dropped_until_declared() -> None:
    compiled = compile_policy(policy(users=["a"], rules=[{
        "selector": {"matchNames": ["*"]}, "resources": [{"type": "pods"}, {"type": "pvc"}]}]))
    hidden = without_undeclared_types(compiled, {})
    assert [f.type for f in hidden.rules[0].filters] == ["pods"]
    assert hidden.custom_types == ("pvc",)  # still indexed: a MetricSource re-folds it
    assert without_undeclared_types(compiled, {"pvc": source("pvc", [])}) is compiled


def test_cluster_labels_change_affects_the_cluster_only_when_they_change() -> None:
    obj = {"metadata": {"name": "c", "labels": {"env": "prod", "tier": 1, "x": None}}}
    assert cluster_labels(obj) == {"env": "prod", "tier": "1"}
    labels, affected = fold_cluster("ADDED", "c", obj, None)
    assert labels == {"env": "prod", "tier": "1"} and affected.clusters == {"c"}
    _, affected = fold_cluster("MODIFIED", "c", obj, labels)
    assert not affected
    gone, affected = fold_cluster("DELETED", "c", obj, labels)
    assert gone is None and affected.clusters == {"c"}


def test_a_group_change_affects_exactly_the_users_added_or_removed() -> None:
    users, affected = fold_group("MODIFIED", {"users": ["a", "b"]}, ["b", "c"])
    assert users == ["a", "b"] and affected.users == {"a", "c"}
    users, affected = fold_group("DELETED", {"users": ["a"]}, ["a"])
    assert users is None and affected.users == {"a"}


def test_policy_state_names_what_an_operator_sees() -> None:
    compiled = compile_policy(policy(users=["a"], not_before="2999-01-01T00:00:00Z"))
    assert policy_state(compiled, now=0)[0] == "Inactive"
    expired = msgspec.structs.replace(compiled, not_before=None, not_after=1.0)
    assert policy_state(expired, now=2.0)[0] == "Expired"
    off = msgspec.structs.replace(compiled, not_before=None, enabled=False)
    assert policy_state(off, now=0)[0] == "Inactive"
    assert policy_state(msgspec.structs.replace(compiled, not_before=None), now=0)[0] == \
        "Active"
