"""Checks, batches, status and the principal-wide views (README: Events; The API)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import msgspec

from clearance_api.wire.common import (
    Action,
    DecisionKind,
    PrincipalBase,
    RequestBase,
    Resource,
)
from clearance_api.wire.limits import Checks

#: How one candidate policy fared in an explanation (see TraceStep).
StepOutcome = Literal["skipped", "no_match", "matched", "decided"]
#: A MonitorAccessPolicy's state, as ClusterPulse reports it (plus Deleted, for events).
PolicyState = Literal["Active", "Inactive", "Error", "Expired", "Deleted"]


class CheckRequest(PrincipalBase, kw_only=True):
    """``clearance.v1.check``."""

    action: Action
    resource: Resource
    explain: bool = False


class BatchItem(msgspec.Struct, kw_only=True, frozen=True):
    action: Action
    resource: Resource


class BatchRequest(PrincipalBase, kw_only=True):
    """``clearance.v1.check.batch``: many checks for one principal, answered in order."""

    checks: Checks[BatchItem]
    explain: bool = False


class StatusRequest(RequestBase, kw_only=True):
    """``clearance.v1.status``."""


class PrincipalRequest(PrincipalBase, kw_only=True):
    """``clearance.v1.permissions``, ``clearance.v1.policies`` and
    ``clearance.v1.search.plan``: about one principal, nothing else."""


class ClusterPermissions(msgspec.Struct, kw_only=True):
    decision: DecisionKind
    permissions: list[Action]


class PermissionsReply(msgspec.Struct, kw_only=True):
    clusters: dict[str, ClusterPermissions]
    #: An extension (README: Warnings), absent when there is nothing to say: the names
    #: the question uses that Clearance does not know. It changes no decision.
    warnings: list[str] | msgspec.UnsetType = msgspec.UNSET
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class PolicySummary(msgspec.Struct, kw_only=True):
    name: str
    namespace: str
    priority: int
    effect: str
    enabled: bool
    valid: bool
    in_force: bool
    matched_by: str


class PoliciesReply(msgspec.Struct, kw_only=True):
    policies: list[PolicySummary]
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class CacheClearRequest(PrincipalBase, kw_only=True):
    """``clearance.v1.cache.clear``: one principal's cached decisions, or all."""

    needs_principal: ClassVar[bool] = False


class CacheClearReply(msgspec.Struct, kw_only=True):
    cleared: int
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class TraceStep(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One candidate policy in an explanation, in evaluation order.

    ``outcome`` is ``skipped`` (with ``reason`` one of ``disabled``, ``invalid``,
    ``not_yet_valid``, ``expired``, ``invalid_time``), ``no_match`` (no rule and no
    default matched the cluster), ``matched`` (a rule matched, but an earlier policy
    decided: not consulted) or ``decided`` (exactly one step, when a policy decided).
    """

    policy: str
    priority: int
    effect: str
    outcome: StepOutcome
    reason: str
    rule: int | None = None
    selector: str | None = None
    #: For a concrete item: the filter dimension that hid it (names, namespaces, labels,
    #: fields.<f>, visibility, namespace (the namespace rule), unlisted).
    hidden_by: str | None = None


class CheckResult(msgspec.Struct, kw_only=True):
    """The answer to one check (``clearance.v1.check`` and each batch entry)."""

    decision: DecisionKind
    allowed: bool
    reason: str
    policy: str | None = None
    permissions: list[Action] = []
    filters: dict[str, Any] | None = None
    cached: bool = False
    trace: list[TraceStep] | msgspec.UnsetType = msgspec.UNSET
    #: An extension (README: Warnings), absent when there is nothing to say: the names
    #: the question uses that Clearance does not know. It changes no decision.
    warnings: list[str] | msgspec.UnsetType = msgspec.UNSET
    revision: int | msgspec.UnsetType = msgspec.UNSET
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class BatchReply(msgspec.Struct, kw_only=True):
    results: list[CheckResult]
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class ServiceStatus(msgspec.Struct, kw_only=True):
    """One service in ``clearance.v1.status``. ``lag`` and ``heartbeat_age_s`` are
    optional extensions (absent from older servers): how many events or change records
    the service was behind its input at its last heartbeat, and that heartbeat's age."""

    revision: int
    healthy: bool
    lag: int | msgspec.UnsetType = msgspec.UNSET
    heartbeat_age_s: float | msgspec.UnsetType = msgspec.UNSET


class CacheStatus(msgspec.Struct, kw_only=True):
    entries: int
    hits: int
    misses: int


class StatusReply(msgspec.Struct, kw_only=True):
    """``policies_by_state`` is an optional extension (absent from older servers and
    before the compiler's first census): kind -> state -> how many policies."""

    revision: int
    services: dict[str, ServiceStatus]
    policies: int
    cache: CacheStatus
    policies_by_state: dict[str, dict[str, int]] | msgspec.UnsetType = msgspec.UNSET
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class PolicyStatusRequest(RequestBase, kw_only=True):
    """``clearance.v1.policy-status`` (this version serves MonitorAccessPolicy)."""

    kind: str
    namespace: str = ""
    name: str


class StatusCondition(msgspec.Struct, kw_only=True):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str


class PolicyStatus(msgspec.Struct, kw_only=True):
    """An object's status: the ``clearance.v1.policy-status`` reply and the body of
    ``clearance.status.<kind>.<namespace>.<name>`` events.

    A MonitorAccessPolicy's carries ``state`` and ``message`` as ClusterPulse reports
    them; an AccessPolicy's only its RFC 0009 ``conditions`` (and ``state: Deleted``
    on the event that reports its deletion)."""

    state: PolicyState | msgspec.UnsetType = msgspec.UNSET
    message: str | msgspec.UnsetType = msgspec.UNSET
    conditions: list[StatusCondition] = []
    warnings: list[str] = []
    revision: int = 0
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET
