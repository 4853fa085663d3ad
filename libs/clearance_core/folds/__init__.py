"""One fold per kind: an event into the compiled state, pure and synchronous.

A fold reads the :class:`~clearance_core.model.Model`, records what to persist and
whom the change concerns in a :class:`~clearance_core.model.Writes`, updates the model
to match, and returns what happened (an outcome for metrics, statuses to publish). It
raises only :class:`~clearance_core.errors.InvalidObject` for objects it cannot read;
the compiler treats anything else as the object's failure too (CONTRACT section 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clearance_core.kinds import ObjectRef
from clearance_core.model import Model, Writes
from clearance_core.wire import PolicyStatus


@dataclass(frozen=True)
class FoldEvent:
    seq: int
    type: str  # ADDED | MODIFIED | DELETED
    obj: dict[str, Any]
    ref: ObjectRef
    now: float

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


Fold = Callable[[Model, Writes, FoldEvent], FoldResult]
