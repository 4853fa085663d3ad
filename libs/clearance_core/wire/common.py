"""Principals, resources, request fields and errors shared by every subject."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from clearance_core.wire.limits import Groups

Action = Literal["view", "view_metrics"]
DecisionKind = Literal["allow", "deny", "partial"]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
ErrorCode = Literal["bad_request", "not_found", "stale", "unavailable", "internal"]
FieldValue = str | int | float | bool | None


class Principal(msgspec.Struct, kw_only=True, frozen=True):
    """Who is asking, as asserted by the calling service (CONTRACT section 2)."""

    username: str
    groups: Groups = []
    email: str | None = None


class Resource(msgspec.Struct, kw_only=True, frozen=True):
    """What is asked about. ``cluster`` defaults to ``name`` for ``type: cluster``."""

    type: str
    name: str = "*"
    cluster: str | None = None
    namespace: str | None = None
    labels: dict[str, str] = {}
    fields: dict[str, FieldValue] = {}


Revision = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
TimeoutMs = Annotated[int, msgspec.Meta(ge=0, le=60_000)]


class RequestBase(msgspec.Struct, kw_only=True):
    """Fields every request subject accepts (CONTRACT section 0)."""

    request_id: str | None = None
    min_revision: Revision | None = None
    #: How long to wait for ``min_revision``; at most a minute (a request holds a slot).
    timeout_ms: TimeoutMs | None = None


class ErrorBody(msgspec.Struct, kw_only=True):
    code: ErrorCode
    message: str


class ErrorReply(msgspec.Struct, kw_only=True):
    error: ErrorBody
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET
