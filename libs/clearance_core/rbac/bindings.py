"""BindingIndex: RoleBindings and ClusterRoleBindings by subject, namespace and role,
kept current one binding at a time (the binding half of
:class:`clearance_core.rbac.index.RbacIndex`).

A binding is known by its identity ``(kind, namespace, name)``; sorted, identities give
Kubernetes' visiting order — ClusterRoleBindings first, then each kind by namespace and
name — so answers never depend on the order bindings arrived or changed in.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple, TypeAlias, TypeVar

from clearance_core.rbac.rules import Binding, RoleKey, binding_subjects

#: A binding's identity, (kind, namespace, name).
BindingId: TypeAlias = tuple[str, str, str]
_K = TypeVar("_K")
_V = TypeVar("_V")


class Bound(NamedTuple):
    """A binding with what the index asks of it: its role and the subjects it names."""

    binding: Binding
    role: RoleKey
    users: frozenset[str]
    groups: frozenset[str]

    def missing(self) -> str:
        ref = self.role
        role = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
        binding = f'{self.binding.kind.lower()} "{self.binding.id}"'
        return f'{binding} references missing {ref.kind.lower()} "{role}"'


def _discard(index: dict[_K, set[_V]], key: _K, value: _V) -> None:
    """Remove ``value`` from ``index[key]``, and the key with its last value: an index
    under churn must not keep an empty set for every subject it ever saw."""
    values = index.get(key)
    if values is not None:
        values.discard(value)
        if not values:
            del index[key]


class BindingIndex:
    def __init__(self) -> None:
        self.bound: dict[BindingId, Bound] = {}
        # Subject -> bindings; RoleBindings also keyed by their namespace.
        self._crb_user: dict[str, set[BindingId]] = defaultdict(set)
        self._crb_group: dict[str, set[BindingId]] = defaultdict(set)
        self._rb_user: dict[tuple[str, str], set[BindingId]] = defaultdict(set)
        self._rb_group: dict[tuple[str, str], set[BindingId]] = defaultdict(set)
        # Subject -> namespace -> how many RoleBindings there name it.
        self._rb_namespaces: dict[tuple[bool, str], dict[str, int]] = defaultdict(dict)
        # Role -> bindings: every binding, and per namespace ("" holds the CRBs).
        self._by_role: dict[RoleKey, set[BindingId]] = defaultdict(set)
        self._by_ns_role: dict[tuple[str, RoleKey], set[BindingId]] = defaultdict(set)
        # Namespace -> its RoleBindings (who-can-see lists the subjects of one namespace's).
        self._rb_in: dict[str, set[BindingId]] = defaultdict(set)

    def put(self, binding: Binding) -> None:
        """Add or replace a binding."""
        bid = (binding.kind, binding.namespace, binding.name)
        self.remove(bid)
        users, groups = binding_subjects(binding)
        bound = Bound(binding, binding.role_key, frozenset(users), frozenset(groups))
        self.bound[bid] = bound
        ns = binding.namespace
        self._by_role[bound.role].add(bid)
        self._by_ns_role[ns, bound.role].add(bid)
        if ns:
            self._rb_in[ns].add(bid)
        for is_group, names in ((False, bound.users), (True, bound.groups)):
            for name in names:
                if ns:
                    (self._rb_group if is_group else self._rb_user)[ns, name].add(bid)
                    counts = self._rb_namespaces[is_group, name]
                    counts[ns] = counts.get(ns, 0) + 1
                else:
                    (self._crb_group if is_group else self._crb_user)[name].add(bid)

    def remove(self, bid: BindingId) -> None:
        """Remove the binding ``(kind, namespace, name)``, if present."""
        bound = self.bound.pop(bid, None)
        if bound is None:
            return
        ns = bound.binding.namespace
        _discard(self._by_role, bound.role, bid)
        _discard(self._by_ns_role, (ns, bound.role), bid)
        if ns:
            _discard(self._rb_in, ns, bid)
        for is_group, names in ((False, bound.users), (True, bound.groups)):
            for name in names:
                if not ns:
                    _discard(self._crb_group if is_group else self._crb_user, name, bid)
                    continue
                _discard(self._rb_group if is_group else self._rb_user, (ns, name), bid)
                counts = self._rb_namespaces[is_group, name]
                counts[ns] -= 1
                if not counts[ns]:
                    del counts[ns]
                if not counts:
                    del self._rb_namespaces[is_group, name]

    def applicable(self, username: str, groups: Iterable[str], namespace: str) -> list[Bound]:
        """The bindings naming the subject, in visiting order: its ClusterRoleBindings,
        then its RoleBindings in ``namespace``."""
        found: set[BindingId] = set(self._crb_user.get(username, ()))
        group_list = tuple(groups)
        for group in group_list:
            found.update(self._crb_group.get(group, ()))
        if namespace:
            found.update(self._rb_user.get((namespace, username), ()))
            for group in group_list:
                found.update(self._rb_group.get((namespace, group), ()))
        return [self.bound[bid] for bid in sorted(found)]

    def namespaces(self, username: str, groups: Iterable[str]) -> set[str]:
        """The namespaces of the RoleBindings naming the subject."""
        found = set(self._rb_namespaces.get((False, username), ()))
        for group in groups:
            found.update(self._rb_namespaces.get((True, group), ()))
        return found

    def named(self, namespaces: Iterable[str]) -> tuple[set[str], set[str]]:
        """(users, groups) every ClusterRoleBinding names, and every RoleBinding in one of
        ``namespaces``; service accounts as their usernames."""
        users, groups = set(self._crb_user), set(self._crb_group)
        for namespace in namespaces:
            for bid in self._rb_in.get(namespace, ()):
                users.update(self.bound[bid].users)
                groups.update(self.bound[bid].groups)
        return users, groups

    def of_role(self, role: RoleKey, namespace: str | None = None) -> Iterable[Bound]:
        """The bindings referencing ``role``: all, or those in ``namespace`` ("": CRBs)."""
        bids = self._by_role.get(role, ()) if namespace is None else \
            self._by_ns_role.get((namespace, role), ())
        return (self.bound[bid] for bid in bids)
