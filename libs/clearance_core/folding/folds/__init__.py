"""One fold per kind: an event into the compiled state, pure and synchronous.

A fold reads the :class:`~clearance_core.folding.model.Model`, records what to persist and
whom the change concerns in a :class:`~clearance_core.folding.model.Writes`, updates the model
to match, and returns what happened (an outcome for metrics, statuses to publish). It
raises only :class:`~clearance_api.errors.InvalidObject` for objects it cannot read;
the compiler treats anything else as the object's failure too (docs/api/events.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from clearance_api.wire import PolicyStatus
from clearance_core.folding.kinds import ObjectRef
from clearance_core.folding.model import Model, Writes


class FoldEvent(msgspec.Struct, frozen=True):
    """One stream event to fold (a Struct: a frozen dataclass cost ten times as much to
    make, once per event)."""

    seq: int
    type: str  # ADDED | MODIFIED | DELETED
    obj: dict[str, Any]
    ref: ObjectRef
    now: float
    #: False while the compiler replays a backlog: a fold may then skip work that only
    #: makes its invalidation more precise (never one that makes it correct).
    precise: bool = True

    @property
    def deleted(self) -> bool:
        return self.type == "DELETED"

    @property
    def key(self) -> str:
        return f"{self.ref.namespace}/{self.ref.name}"


@dataclass
class FoldResult:
    outcome: str  # compiled | deleted | invalid (the events_compiled metric's label)
    statuses: list[tuple[ObjectRef, PolicyStatus]] = field(default_factory=list)
    #: Why the object is invalid (``outcome`` invalid), for the kinds without a status of
    #: their own (MetricSources, RBAC, Groups, ManagedClusters, bindings): ``clearance
    #: validate`` reports it.
    error: str | None = None


Fold = Callable[[Model, Writes, FoldEvent], FoldResult]


def reach_members(model: Model, tx: Writes) -> None:
    """Widen the cached checks a change removes to the current members of every group it
    names (by username or email, as the Group lists them); the compiler calls this after
    every fold but those of a build's events (no decision is answered, so nothing is
    cached, until the build has reached its target).

    A cached check is indexed under the groups its principal had when it was computed,
    and a Group's membership change invalidates nothing while no policy or rule names
    the group (no answer reads it). So a user who joined such a group keeps entries that
    its index does not list, and a policy that then starts naming the group — whose
    change names the group, not the user — would leave them: an answer without the new
    policy. Its members' own indexes hold those entries. (Announcements are left as they
    are: clients hear the group and resolve it themselves.)"""
    for group in tx.invalidate.groups:
        tx.invalidate.users.update(model.groups.get(group, ()))
