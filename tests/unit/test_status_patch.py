"""The status the watcher writes back: what ``kubectl get`` shows, and no write twice."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from clearance_api.wire import PolicyStatus, StatusCondition
from clearance_core.kube import status_patch

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"


def cond(type_: str, status: str, reason: str, message: str = "m") -> StatusCondition:
    return StatusCondition(type=type_, status=status,  # type: ignore[arg-type]
                           reason=reason, message=message)


def test_a_monitor_access_policy_shows_clusterpulse_state_and_message() -> None:
    body = PolicyStatus(state="Error", message="spec.access.effect: required",
                        conditions=[cond("Compiled", "False", "Invalid")],
                        warnings=["custom type 'x' has no MetricSource"], revision=9)
    want = status_patch.desired(body, 4, {}, T0)
    assert want == {
        "state": "Error", "message": "spec.access.effect: required",
        "conditions": [{"type": "Compiled", "status": "False", "reason": "Invalid",
                        "message": "m", "lastTransitionTime": T0, "observedGeneration": 4}],
        "warnings": ["custom type 'x' has no MetricSource"],
        "observedGeneration": 4,
    }


def test_an_access_policy_shows_why_it_is_not_accepted_else_how_it_is_enforced() -> None:
    invalid = PolicyStatus(conditions=[cond("Accepted", "False", "Invalid", "both blocks"),
                                       cond("Enforced", "Unknown", "Unknown")])
    assert status_patch.summary(invalid) == ("Invalid", "both blocks")
    partial = PolicyStatus(conditions=[cond("Accepted", "True", "Accepted"),
                                       cond("Enforced", "True", "PartiallyEnforced", "r1")])
    assert status_patch.summary(partial) == ("PartiallyEnforced", "r1")
    assert status_patch.summary(PolicyStatus()) == ("Unknown", "")


def test_an_unchanged_status_is_not_written_and_transition_times_are_kept() -> None:
    body = PolicyStatus(state="Active", message="ok",
                        conditions=[cond("Compiled", "True", "Compiled"),
                                    cond("Active", "True", "Active")])
    first = status_patch.desired(body, 1, {}, T0)
    assert status_patch.patch(first, {}) == first
    live = {**first, "extra": "kept by others"}
    assert status_patch.patch(status_patch.desired(body, 1, live, T1), live) is None
    # A condition that flips gets a new time; one that holds keeps its own.
    flipped = PolicyStatus(state="Inactive", message="disabled",
                           conditions=[cond("Compiled", "True", "Compiled"),
                                       cond("Active", "False", "Inactive")])
    patch = status_patch.patch(status_patch.desired(flipped, 2, live, T1), live)
    assert patch is not None
    assert [c["lastTransitionTime"] for c in patch["conditions"]] == [T0, T1]
    assert patch["observedGeneration"] == 2


def test_owned_fields_no_longer_reported_are_removed() -> None:
    live = {"state": "Active", "message": "ok", "conditions": [], "warnings": ["w"],
            "observedGeneration": 1}
    patch = status_patch.patch(status_patch.desired(
        PolicyStatus(state="Active", message="ok"), 1, live, T0), live)
    assert patch == {"warnings": None, "state": "Active", "message": "ok", "conditions": [],
                     "observedGeneration": 1}


_conditions = st.lists(st.builds(
    cond, st.sampled_from(["Accepted", "Enforced", "Compiled", "Active"]),
    st.sampled_from(["True", "False", "Unknown"]), st.sampled_from(["A", "B"]),
    st.text(max_size=5)), max_size=4, unique_by=lambda c: c.type)
_statuses = st.builds(PolicyStatus, conditions=_conditions,
                      warnings=st.lists(st.text(max_size=3), max_size=2))


@given(_statuses, _statuses, st.none() | st.integers(0, 9), st.integers(0, 9))
def test_writing_converges_in_one_patch(before: PolicyStatus, after: PolicyStatus,
                                        gen0: int | None, gen1: int) -> None:
    # Whatever the live status was, one patch makes the next comparison find nothing
    # to write, even later (a later clock) and from a second writer.
    live: dict[str, Any] = status_patch.desired(before, gen0, {}, T0)
    patch = status_patch.patch(status_patch.desired(after, gen1, live, T1), live)
    merged = live if patch is None else {
        **{k: v for k, v in live.items() if k not in patch}, **{
            k: v for k, v in patch.items() if v is not None}}
    assert status_patch.patch(status_patch.desired(after, gen1, merged, "later"),
                              merged) is None
