"""Inherited AccessPolicies on the wire (README: Inherited): targets, ``clearance.v1.effective``,
``clearance.v1.effective.reach`` and ``clearance.v1.effective.simulate``.

:class:`Target` is the core's own type too (``clearance_core.inherit.hierarchy`` re-exports it),
so the kinds a request may name are the kinds the merge knows, and no string is
translated between the two.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from clearance_api.wire.audience import SubjectKind
from clearance_api.wire.common import Action, DecisionKind, RequestBase
from clearance_api.wire.decisions import StatusCondition

TargetKind = Literal["Fleet", "ClusterSet", "Cluster", "Namespace"]
KINDS: tuple[TargetKind, ...] = ("Fleet", "ClusterSet", "Cluster", "Namespace")
#: Depth in the hierarchy: 0 is the highest (least specific) level.
LEVEL: dict[str, int] = {kind: depth for depth, kind in enumerate(KINDS)}
BlockKind = Literal["defaults", "overrides", "rules"]
Operation = Literal["apply", "delete"]
#: How one subject's answer moves in a dry run: wider, narrower, both at once (some
#: filters loosen while others tighten), or not at all.
AccessMove = Literal["gains", "loses", "changes", "none"]


class Target(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One point of the hierarchy; encodes as the contract's ``{"kind", "name", "cluster"?}``."""

    kind: TargetKind
    name: str
    cluster: str | None = None  # only for Namespace

    @property
    def level(self) -> int:
        return LEVEL[self.kind]

    def __str__(self) -> str:
        if self.kind == "Namespace":
            return f"Namespace {self.cluster}/{self.name}"
        return f"{self.kind} {self.name}"

    def sort_key(self) -> tuple[int, str, str]:
        """Deterministic listing order: by level, then cluster, then name."""
        return (self.level, self.cluster or "", self.name)


class EffectiveRequest(RequestBase, kw_only=True):
    """``clearance.v1.effective``: a Namespace target names its ``cluster``."""

    target: Target


class RuleInForce(msgspec.Struct, kw_only=True):
    """One rule of an effective policy: the AccessRule as written, and where it came from."""

    rule: dict[str, Any]
    source: str  # namespace/name
    block: BlockKind


class ExcludedPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """An AccessPolicy aimed at a target on the path that takes no part: its
    ``Accepted`` reason (``Invalid``, ``TargetNotFound`` or ``Unauthorized``) and
    message."""

    policy: str  # namespace/name
    reason: str
    message: str


class EffectiveReply(msgspec.Struct, kw_only=True):
    target: Target
    rules: dict[str, RuleInForce] = {}
    #: The policies on the target's path that took part, highest first.
    policies: list[str] = []
    #: Those that contributed a rule, highest first.
    affected_by: list[str] = []
    revision: int = 0
    #: The policies aimed at the target or above it on its path that take no part
    #: (highest target first, then by name); an extension of the reply.
    excluded: list[ExcludedPolicy] = []
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class ReachRequest(RequestBase, kw_only=True):
    """``clearance.v1.effective.reach``: where a policy's rules (or one rule) are in force."""

    kind: str = "AccessPolicy"
    namespace: str = ""
    name: str
    rule: str | None = None


class ReachReply(msgspec.Struct, kw_only=True):
    targets: list[Target] = []
    revision: int = 0
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET


class SimulateRequest(RequestBase, kw_only=True):
    """``clearance.v1.effective.simulate``: an AccessPolicy object and what to do with it."""

    policy: dict[str, Any]
    operation: Operation = "apply"


class TargetDiff(msgspec.Struct, kw_only=True):
    """What would change on one target: rules added, removed, and changed (a different
    rule, source or block under the same name), each rule as ``RuleInForce``'s shape."""

    target: Target
    added: dict[str, dict[str, Any]] = {}
    removed: list[str] = []
    changed: dict[str, dict[str, Any]] = {}


class StatusChange(msgspec.Struct, kw_only=True):
    before: list[StatusCondition]
    after: list[StatusCondition]


class AccessSubject(msgspec.Struct, frozen=True, kw_only=True):
    """A subject as a rule names it (as ``who-can-see`` lists it)."""

    kind: SubjectKind
    name: str


class AccessResource(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a row asks about, at its target: the cluster or namespace item itself, or
    every item of a type (``name`` ``*``), in ``namespace`` at a Namespace target."""

    type: str
    name: str = "*"
    namespace: str | None = None


class AccessAnswer(msgspec.Struct, kw_only=True):
    """What ``check`` answers (``view``) for the subject, as in ``clearance.v1.check``."""

    decision: DecisionKind
    policy: str | None = None
    permissions: list[Action] = []
    filters: dict[str, Any] | None = None


class AccessChange(msgspec.Struct, kw_only=True):
    """One subject's answer on one resource of one target, before and after the change:
    ``move`` says which way it goes, ``detail`` how (``no change`` when it does not)."""

    target: Target
    subject: AccessSubject
    resource: AccessResource
    before: AccessAnswer
    after: AccessAnswer
    move: AccessMove
    detail: str


class AccessTruncated(msgspec.Struct, kw_only=True):
    """The access diff is cut: ``listed`` rows of ``total``, and which bound cut it."""

    listed: int
    total: int
    reason: str


class SimulateReply(msgspec.Struct, kw_only=True):
    targets: list[TargetDiff] = []
    #: policy ``ns/name`` -> its conditions before and after (the simulated policy always,
    #: the others whose conditions would move).
    status: dict[str, StatusChange] = {}
    #: Who gains or loses access where (an extension of the reply): for each Cluster and
    #: Namespace target in ``targets``, each subject a rule added, removed or changed
    #: there names (and the users of the Groups it names), on the target itself and on
    #: each type those rules filter.
    access: list[AccessChange] = []
    #: Set when ``access`` is cut by its bounds (README: Inherited).
    truncated: AccessTruncated | None = None
    revision: int = 0
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET
