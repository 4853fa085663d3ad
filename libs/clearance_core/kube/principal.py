"""Principals: the effective identity a decision is made for (README: Principals).

Effective groups = the groups the caller asserted, plus every OpenShift Group that lists
the username or the email, plus the service-account groups for
``system:serviceaccount:<ns>:<name>`` usernames. ``system:authenticated`` is never added.
:func:`effective_groups` is the one definition: checks, principal views, reviews and
search all take their groups from it (the runtime only reads the Group memberships).
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from clearance_api.wire import Principal

SA_PREFIX = "system:serviceaccount:"


class Identity(msgspec.Struct, frozen=True, kw_only=True):
    username: str
    email: str | None
    groups: frozenset[str]

    @property
    def names(self) -> tuple[str, ...]:
        """The strings a ``users`` subject or a Group member may name: username, email."""
        return (self.username,) if not self.email else (self.username, self.email)


def service_account_groups(username: str) -> tuple[str, ...]:
    if not username.startswith(SA_PREFIX):
        return ()
    parts = username[len(SA_PREFIX) :].split(":")
    if len(parts) != 2 or not all(parts):
        return ()
    return ("system:serviceaccounts", f"system:serviceaccounts:{parts[0]}")


def effective_groups(
    username: str, given: Iterable[str], member_of: Iterable[str]
) -> frozenset[str]:
    """The asserted groups, the Groups listing the user (``member_of``, read from the
    inventory for the username and the email) and the service-account groups."""
    return frozenset((*given, *member_of, *service_account_groups(username)))


def identity_of(principal: Principal, member_of: Iterable[str]) -> Identity:
    """``member_of``: the Groups (from the inventory) listing the username or email."""
    return Identity(username=principal.username, email=principal.email,
                    groups=effective_groups(principal.username, principal.groups, member_of))
