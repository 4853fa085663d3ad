"""Principals, resources, request fields and errors shared by every subject."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

import msgspec

from clearance_api.wire.limits import MAX_TOKEN, Groups

Action = Literal["view", "view_metrics"]
DecisionKind = Literal["allow", "deny", "partial"]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
ErrorCode = Literal["bad_request", "not_found", "stale", "unavailable", "internal"]
FieldValue = str | int | float | bool | None


class Principal(msgspec.Struct, kw_only=True, frozen=True):
    """Who is asking, as asserted by the calling service (README: Principals)."""

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
    """Fields every request subject accepts (README: Conventions)."""

    request_id: str | None = None
    min_revision: Revision | None = None
    #: How long to wait for ``min_revision``; at most a minute (a request holds a slot).
    timeout_ms: TimeoutMs | None = None


#: A Kubernetes bearer token (what a client sends as ``Authorization: Bearer <token>``).
Token = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TOKEN)]


class PrincipalBase(RequestBase, kw_only=True):
    """A request on behalf of someone (docs/security.md): ``principal`` as asserted by
    the calling service, or ``token``, a Kubernetes bearer token that the decision
    service verifies with a TokenReview and turns into the principal it names (username
    and groups; no email). Exactly one of the two; ``cache.clear`` takes at most one."""

    principal: Principal | None = None
    token: Token | None = None
    #: False where no principal has a meaning of its own (cache.clear: every principal).
    needs_principal: ClassVar[bool] = True

    def who(self) -> Principal:
        """The principal asked about. The decision service refuses a request without
        one and resolves a token into one before any handler runs, so a missing one
        here is a defect (an ``internal`` error, never an answer for nobody)."""
        if self.principal is None:
            raise ValueError("request reached a handler without a principal")
        return self.principal


class ErrorBody(msgspec.Struct, kw_only=True):
    code: ErrorCode
    message: str


class ErrorReply(msgspec.Struct, kw_only=True):
    error: ErrorBody
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET
