"""Who can see X: the question as a check asks it, and every subject that can matter.

``clearance.v1.who-can-see`` answers like ``kubectl who-can`` and SpiceDB's
LookupSubjects: complete by construction. Visibility comes only from what names a
subject — a MonitorAccessPolicy's subjects, an AccessPolicy rule's subjects on the
question's targets — and a principal's groups from the OpenShift Groups that list it, so
the subjects are exactly those names (and the users those Groups list), each decided by
the very evaluation ``check`` runs, plus one answer for everyone else:

* a **user** subject is that username alone: no asserted groups, but (as for any check)
  the OpenShift Groups listing it;
* a **service account** is its username, ``system:serviceaccount:<ns>:<name>``, with the
  groups every check gives it (``system:serviceaccounts``, ``…:<ns>``);
* a **group** is a principal whose only group is that one, under a username that nothing
  names (:func:`unnamed`), so only the group can be what decides;
* **others** is that unnamed username with no group: what any principal gets that no
  policy names, alone or by a group. Every username not listed gets it — its Groups, if
  any, are named nowhere (a named Group's users are listed) — except that a service
  account always has its own groups: one not listed gets the answer of
  ``system:serviceaccounts`` or ``system:serviceaccounts:<ns>`` where those are listed.

RBAC bindings grant nothing a check weighs (their reviews are ``review.*``), but a
subject a ClusterRoleBinding, or a RoleBinding in the hub namespace named after the
cluster (where ACM grants access to a managed cluster), names is listed too, decided like
any other: an operator reading the answer finds every identity the hub knows of there.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import NamedTuple

from clearance_api.errors import BadRequest
from clearance_api.wire import Principal, Resource, SubjectKind
from clearance_core.inherit.merge import EffectiveRule
from clearance_core.kube.principal import SA_PREFIX, service_account_groups
from clearance_core.kube.resources import singular
from clearance_core.questions.placement import spreads

#: The username "others" and group subjects are asked as (another if something names it).
UNNAMED = "clearance:who-can-see:anyone"


class Subject(NamedTuple):
    kind: SubjectKind
    name: str


def question(cluster: str, type_name: str | None, namespace: str | None) -> Resource:
    """The resource a check asks about: the cluster itself (no type, or type ``cluster``:
    it lives in no namespace); the namespace item itself (no type, a namespace); or every
    item of the type (in that namespace)."""
    if not cluster:
        raise BadRequest("cluster must not be empty")
    if type_name is not None and not type_name:
        raise BadRequest("type must not be empty (omit it to ask about the cluster)")
    if namespace is not None and not namespace:
        raise BadRequest("namespace must not be empty (omit it to ask cluster-wide)")
    if type_name is not None and singular(type_name) == "cluster":
        return Resource(type="cluster", name=cluster, cluster=cluster)  # in no namespace
    if type_name is None:
        if namespace is None:
            return Resource(type="cluster", name=cluster, cluster=cluster)
        return Resource(type="namespaces", name=namespace, cluster=cluster)
    return Resource(type=type_name, name="*", cluster=cluster, namespace=namespace)


def spans_namespaces(resource: Resource) -> bool:
    """Whether the question is about items that may live in any namespace of the cluster
    (a whole namespaced type asked without a namespace): then every Namespace target of
    the cluster can decide for some of them — as for a check
    (:func:`clearance_core.questions.placement.spreads`)."""
    return spreads(resource.type, resource.name, resource.namespace)


class Names:
    """Every name the question's policies and bindings hold, by how they name it."""

    def __init__(self) -> None:
        self.users: set[str] = set()
        self.service_accounts: set[str] = set()
        self.groups: set[str] = set()

    def add(self, *, users: Iterable[str] = (), service_accounts: Iterable[str] = (),
            groups: Iterable[str] = ()) -> None:
        self.users.update(users)
        self.service_accounts.update(service_accounts)
        self.groups.update(groups)

    def add_rules(self, rules: Iterable[EffectiveRule]) -> None:
        for found in rules:
            self.add(users=found.rule.users, service_accounts=found.rule.service_accounts,
                     groups=found.rule.groups)

    def add_members(self, members: Mapping[str, Collection[str]]) -> None:
        """The users (usernames or emails) the OpenShift Groups named here list: their
        groups come with them in every check, so each may be decided otherwise than
        ``others``."""
        for group in self.groups:
            self.users.update(members.get(group, ()))

    def subjects(self) -> list[Subject]:
        """Each name once, users then groups then service accounts, each by name. A
        username that is a service account's is one (it gets that account's groups), by
        whatever field named it."""
        usernames = self.users | self.service_accounts
        accounts = {name for name in usernames
                    if name.startswith(SA_PREFIX) and service_account_groups(name)}
        return [*(Subject("user", name) for name in sorted(usernames - accounts)),
                *(Subject("group", name) for name in sorted(self.groups)),
                *(Subject("serviceaccount", name) for name in sorted(accounts))]

    def taken(self) -> set[str]:
        """Every username a principal could be named by here."""
        return self.users | self.service_accounts


def unnamed(taken: Collection[str]) -> str:
    """A username nothing names (and no service account's): :data:`UNNAMED`, or that
    with the first free ``#n`` suffix."""
    name, n = UNNAMED, 0
    while name in taken:
        n += 1
        name = f"{UNNAMED}#{n}"
    return name


def principal_of(subject: Subject, nobody: str) -> Principal:
    """The principal whose check is the subject's answer (``nobody``: :func:`unnamed`)."""
    if subject.kind == "group":
        return Principal(username=nobody, groups=[subject.name])
    return Principal(username=subject.name)
