"""The event stream and the events Clearance publishes (README: Events)."""

from __future__ import annotations

from typing import Any

import msgspec

from clearance_api.wire.common import EventType


class Event(msgspec.Struct, kw_only=True):
    """One change on ``clearance.events.<kind>.<id>`` (README: Events)."""

    type: EventType
    object: dict[str, Any]


class ChangedPrincipals(msgspec.Struct, kw_only=True):
    users: list[str] = []
    groups: list[str] = []


class DecisionsChanged(msgspec.Struct, kw_only=True):
    """``clearance.decisions.changed``: whose cached decisions an event may alter."""

    revision: int
    principals: ChangedPrincipals
    all: bool = False
