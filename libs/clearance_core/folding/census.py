"""How many policies are in each state, as the compiler knows them (metrics and
``clearance.v1.status``'s ``policies_by_state``).

A MonitorAccessPolicy's state is its ClusterPulse status ``state`` (``fold.policy_state``):
Active, Inactive, Error or Expired — time-dependent, so a census is taken at a moment.
An AccessPolicy's is the reason of its RFC 0009 conditions: the ``Accepted`` reason when
it is not accepted (Invalid, TargetNotFound, Unauthorized), else its ``Enforced`` reason
(Enforced, PartiallyEnforced, Overridden, Unknown).

Every known state is present, zero or not: a dashboard's series and a status reader's
keys stay stable while policies move between states.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from clearance_api.wire import StatusCondition
from clearance_core.folding.fold import policy_state
from clearance_core.monitor.policy import CompiledPolicy

MONITOR = "MonitorAccessPolicy"
ACCESS = "AccessPolicy"
MONITOR_STATES = ("Active", "Inactive", "Error", "Expired")
#: ``Accepted`` (True, with no ``Enforced`` condition) is not produced by this version's
#: conditions; it is listed so a policy between the two is still counted somewhere.
ACCESS_STATES = ("Enforced", "PartiallyEnforced", "Overridden", "Unknown", "Invalid",
                 "TargetNotFound", "Unauthorized", "Accepted")

Census = dict[str, dict[str, int]]


def access_state(conditions: Iterable[StatusCondition]) -> str:
    """One AccessPolicy's state from its conditions."""
    by_type = {condition.type: condition for condition in conditions}
    accepted = by_type.get("Accepted")
    if accepted is not None and accepted.status != "True":
        return accepted.reason
    enforced = by_type.get("Enforced")
    return enforced.reason if enforced is not None else "Accepted"


def census(monitor: Iterable[CompiledPolicy],
           access: Mapping[str, list[StatusCondition]], now: float) -> Census:
    """kind -> state -> how many, from the MonitorAccessPolicies held (invalid ones
    included) and the conditions of every AccessPolicy (valid or not) at ``now``."""
    found: Census = {MONITOR: dict.fromkeys(MONITOR_STATES, 0),
                     ACCESS: dict.fromkeys(ACCESS_STATES, 0)}
    for policy in monitor:
        monitor_state, _message = policy_state(policy, now)
        found[MONITOR][monitor_state] = found[MONITOR].get(monitor_state, 0) + 1
    for conditions in access.values():
        state = access_state(conditions)
        found[ACCESS][state] = found[ACCESS].get(state, 0) + 1
    return found
