"""A MonitorAccessPolicy's status: the same object for ``clearance.v1.policy-status``
replies and for the ``clearance.status.…`` events the compiler publishes."""

from __future__ import annotations

from collections.abc import Mapping

from clearance_api.wire import PolicyStatus, StatusCondition
from clearance_core.folding.fold import policy_state
from clearance_core.monitor.metricsource import CompiledSource, missing_sources
from clearance_core.monitor.policy import CompiledPolicy


def policy_status(
    policy: CompiledPolicy, sources: Mapping[str, CompiledSource], *, now: float,
    revision: int,
) -> PolicyStatus:
    state, message = policy_state(policy, now)
    compiled = StatusCondition(
        type="Compiled",
        status="True" if policy.valid else "False",
        reason="Compiled" if policy.valid else "Invalid",
        message="compiled" if policy.valid else (policy.error or "invalid"),
    )
    active = StatusCondition(type="Active", status="True" if state == "Active" else "False",
                             reason=state, message=message)
    return PolicyStatus(
        state=state,
        message=message,
        conditions=[compiled, active],
        warnings=[f"custom type {t!r} has no MetricSource"
                  for t in missing_sources(policy, sources)],
        revision=revision,
    )


def failed(revision: int, reason: str) -> PolicyStatus:
    """An object that could not even be recorded as invalid: withdrawn, with the reason."""
    return PolicyStatus(
        state="Error", message=reason, revision=revision,
        conditions=[StatusCondition(type="Compiled", status="False", reason="Invalid",
                                    message=reason)])


def deleted(revision: int) -> PolicyStatus:
    return PolicyStatus(state="Deleted", message="deleted", revision=revision)
