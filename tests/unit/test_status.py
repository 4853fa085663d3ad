"""A policy's status as operators and clients see it (events and policy-status replies)."""

from __future__ import annotations

from clearance_core.folding import status
from clearance_core.folding.fold import fold_policy
from tests.unit.policies import policy


def test_a_valid_policy_in_force_is_active_and_compiled() -> None:
    compiled, _ = fold_policy("ADDED", policy(users=["a"]), None, {})
    assert compiled is not None
    body = status.policy_status(compiled, {}, now=0, revision=7)
    assert (body.state, body.revision) == ("Active", 7)
    assert [(c.type, c.status) for c in body.conditions] == [("Compiled", "True"),
                                                              ("Active", "True")]


def test_an_invalid_policy_is_an_error_with_the_reason() -> None:
    compiled, _ = fold_policy("ADDED", policy(users=["a"], priority=-1), None, {})
    assert compiled is not None
    body = status.policy_status(compiled, {}, now=0, revision=1)
    assert body.state == "Error" and "priority" in body.message
    assert body.conditions[0].reason == "Invalid"


def test_a_custom_type_without_metricsource_is_a_warning() -> None:
    compiled, _ = fold_policy("ADDED", policy(users=["a"], rules=[{
        "selector": {"matchNames": ["*"]}, "resources": [{"type": "certs"}]}]), None, {})
    assert compiled is not None
    body = status.policy_status(compiled, {}, now=0, revision=1)
    assert body.warnings == ["custom type 'certs' has no MetricSource"]


def test_failed_and_deleted() -> None:
    assert status.failed(3, "boom").state == "Error"
    assert status.failed(3, "boom").conditions[0].message == "boom"
    assert status.deleted(4).state == "Deleted"
