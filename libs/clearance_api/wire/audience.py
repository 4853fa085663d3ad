"""``clearance.v1.who-can-see``: every subject named anywhere, with what it gets."""

from __future__ import annotations

from typing import Literal

import msgspec

from clearance_api.wire.common import Action, DecisionKind, RequestBase

#: How a subject is named: a user (a username or an email), a group, a service account
#: (its username, ``system:serviceaccount:<namespace>:<name>``).
SubjectKind = Literal["user", "group", "serviceaccount"]


class WhoCanSeeRequest(RequestBase, kw_only=True):
    """``clearance.v1.who-can-see``: who can see a cluster (no ``type``), a namespace of
    it (no ``type``, a ``namespace``), or a type there (every item of it, in
    ``namespace`` if given)."""

    cluster: str
    type: str | None = None
    namespace: str | None = None
    action: Action = "view"


class SubjectDecision(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    """What ``check`` answers for one subject alone, and the policy that decided.
    (Strings only, so never in a cycle: an answer holds tens of thousands of them, which
    the cyclic collector need not walk.)"""

    kind: SubjectKind
    name: str
    decision: DecisionKind
    policy: str | None


class OthersDecision(msgspec.Struct, kw_only=True, frozen=True):
    """What ``check`` answers for a principal that no policy or binding names."""

    decision: DecisionKind
    policy: str | None


class WhoCanSeeReply(msgspec.Struct, kw_only=True):
    subjects: list[SubjectDecision]
    others: OthersDecision
    revision: int
    request_id: str | msgspec.UnsetType | None = msgspec.UNSET
