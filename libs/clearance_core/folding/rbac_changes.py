"""Who a Role, ClusterRole or binding change can affect (for exact invalidation).

The compiler keeps the RBAC objects it has folded in a :class:`RbacModel` and asks it,
before applying a change, whose answers the change can alter:

- a binding: its old and new subjects;
- a Role or ClusterRole: the subjects of every binding referencing it, or referencing a
  ClusterRole that aggregates it (by its old or its new labels, followed transitively);
- a hub Namespace appearing or vanishing: the subjects of the RoleBindings inside it
  (whose search plans enumerate it).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping

from clearance_core.folding.fold import Affected
from clearance_core.rbac.rules import Binding, Role, RoleKey, binding_subjects


class RbacModel:
    """Roles by :class:`RoleKey` (how bindings name them), bindings by
    :func:`clearance_core.rbac.rules.object_key`."""

    def __init__(self) -> None:
        self.roles: dict[RoleKey, Role] = {}
        self.bindings: dict[str, Binding] = {}
        self._by_role: dict[RoleKey, set[str]] = defaultdict(set)
        #: group -> how many bindings name it: a Group change asks on every event.
        self._by_group: Counter[str] = Counter()
        # The ClusterRoles with an aggregationRule (few): a ClusterRole change looks for
        # its aggregators among these only, not among every role (quadratic in a fleet).
        self._aggregating: dict[RoleKey, Role] = {}

    @classmethod
    def of(cls, stored: Mapping[str, Role | Binding]) -> RbacModel:
        """The model of the compiled objects as stored (object key -> object)."""
        model = cls()
        for key, value in stored.items():
            if isinstance(value, Role):
                model.put_role(value.key, value)
            else:
                model.put_binding(key, value)
        return model

    def put_role(self, key: RoleKey, role: Role | None) -> None:
        self._aggregating.pop(key, None)
        if role is None:
            self.roles.pop(key, None)
        else:
            self.roles[key] = role
            if role.aggregation:
                self._aggregating[key] = role

    def put_binding(self, key: str, binding: Binding | None) -> None:
        old = self.bindings.pop(key, None)
        if old is not None:
            self._by_role[old.role_key].discard(key)
            self._by_group.subtract(binding_subjects(old)[1])
        if binding is not None:
            self.bindings[key] = binding
            self._by_role[binding.role_key].add(key)
            self._by_group.update(binding_subjects(binding)[1])

    def binds_group(self, group: str) -> bool:
        """Whether a RoleBinding or ClusterRoleBinding names the group."""
        return self._by_group[group] > 0

    def _aggregators(self, roles: list[Role]) -> set[RoleKey]:
        """ClusterRoles aggregating any of ``roles``, transitively."""
        found: set[RoleKey] = set()
        frontier = [r for r in roles if r.kind == "ClusterRole"]
        while frontier:
            role = frontier.pop()
            for candidate in self._aggregating.values():
                if candidate.key in found:
                    continue
                if any(sel.matches(role.labels) for sel in candidate.aggregation or ()):
                    found.add(candidate.key)
                    frontier.append(candidate)
        return found

    def affected_by_role(self, key: RoleKey, new: Role | None) -> Affected:
        old = self.roles.get(key)
        versions = [r for r in (old, new) if r is not None]
        keys = {key} | self._aggregators(versions)
        affected = Affected()
        for role_key in keys:
            for binding_key in self._by_role.get(role_key, ()):
                users, groups = binding_subjects(self.bindings[binding_key])
                affected.users.update(users)
                affected.groups.update(groups)
        return affected

    def affected_by_namespace(self, namespace: str) -> Affected:
        """A hub namespace appearing or vanishing changes the search plans of exactly the
        subjects of the RoleBindings inside it (cluster-wide grants cover it either way)."""
        affected = Affected()
        for binding in self.bindings.values():
            if binding.kind == "RoleBinding" and binding.namespace == namespace:
                users, groups = binding_subjects(binding)
                affected.users.update(users)
                affected.groups.update(groups)
        return affected

    def affected_by_binding(self, key: str, new: Binding | None) -> Affected:
        affected = Affected()
        for binding in (self.bindings.get(key), new):
            if binding is not None:
                users, groups = binding_subjects(binding)
                affected.users.update(users)
                affected.groups.update(groups)
        return affected
