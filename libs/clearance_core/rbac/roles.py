"""RoleRules: every Role and ClusterRole with its effective rules, aggregation resolved,
kept exact as roles come and go one at a time.

Aggregated ClusterRoles are resolved here, not read from their stored ``rules``: the
Kubernetes controller overwrites those with the union of the rules of the ClusterRoles
the selectors pick (by name within each selector, duplicates dropped, never itself), so
a snapshot taken before the controller ran would otherwise be stale. Chains
(view -> edit -> admin) resolve as the controller converges to; in a cycle an aggregated
role contributes only the non-aggregated roles reachable from it, so there is no loop.

The picks form a graph (aggregated role -> the ClusterRoles it picks). When ClusterRole
X changes, a root's resolution can change only if the root is X or reaches X, in the old
graph or in the new one. The two graphs differ only in the edges into X — from the
*matchers*, the aggregated roles whose selectors match X's old or new labels — and the
edges out of X. A path to X ends with an edge from a matcher, and up to that matcher it
uses edges that did not change. So re-resolving X, the matchers and the roots that
reached a matcher in the old graph is exact, and touches nothing else.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from clearance_core.rbac.rules import LabelSelector, PolicyRule, Role, RoleKey


def _cluster_key(name: str) -> RoleKey:
    return RoleKey("ClusterRole", "", name)


class RoleRules:
    """Roles by key, their effective ``rules``, and which aggregated ClusterRoles reach
    each ClusterRole (``aggregated_into``)."""

    def __init__(self, roles: Iterable[Role] = ()) -> None:
        self.roles: dict[RoleKey, Role] = {}
        self.rules: dict[RoleKey, tuple[PolicyRule, ...]] = {}
        #: ClusterRole name -> the aggregated ClusterRoles whose resolution reaches it.
        self.aggregated_into: dict[str, set[str]] = defaultdict(set)
        self._cluster: dict[str, Role] = {}
        self._by_label: dict[tuple[str, str], set[str]] = defaultdict(set)
        self._picks: dict[str, list[str]] = {}  # aggregated ClusterRole -> picked names
        self._reached: dict[str, set[str]] = {}  # aggregated ClusterRole -> names reached
        for role in roles:  # in bulk: resolve once, after every role is known
            self._forget(role.key)
            self._learn(role)
        for name in self._picks:
            self._picks[name] = self._pick(name)
        for name in self._picks:
            self._resolve(name)

    def put(self, role: Role) -> set[RoleKey]:
        """Add or replace ``role``; the keys whose effective rules may have changed."""
        return self._change(role.key, role)

    def remove(self, key: RoleKey) -> set[RoleKey]:
        """Remove the role ``key`` (if present); the keys whose rules may have changed."""
        return self._change(key, None)

    # Bookkeeping ---------------------------------------------------------------------

    def _learn(self, role: Role) -> None:
        self.roles[role.key] = role
        self.rules[role.key] = role.rules
        if role.kind != "ClusterRole":
            return
        self._cluster[role.name] = role
        for pair in role.labels.items():
            self._by_label[pair].add(role.name)
        if role.aggregation is not None:
            self._picks[role.name] = []

    def _forget(self, key: RoleKey) -> None:
        old = self.roles.pop(key, None)
        self.rules.pop(key, None)
        if old is None or old.kind != "ClusterRole":
            return
        del self._cluster[old.name]
        for pair in old.labels.items():
            names = self._by_label[pair]
            names.discard(old.name)
            if not names:
                del self._by_label[pair]
        self._picks.pop(old.name, None)

    def _change(self, key: RoleKey, new: Role | None) -> set[RoleKey]:
        old = self.roles.get(key)
        if key.kind != "ClusterRole":
            self._forget(key)
            if new is not None:
                self._learn(new)
            return {key}
        name = key.name
        labels = [role.labels for role in (old, new) if role is not None]
        # Read from the old graph, before anything moves.
        matchers = {
            other for other in self._picks
            if other != name and any(
                _selects(self._cluster[other].aggregation or (), found) for found in labels)
        }
        roots = {name, *matchers}
        for matcher in matchers:
            roots |= self.aggregated_into.get(matcher, set())
        self._forget(key)
        if new is not None:
            self._learn(new)
        for matcher in matchers:
            self._picks[matcher] = self._pick(matcher)
        if name in self._picks:
            self._picks[name] = self._pick(name)
        for root in roots:
            self._unresolve(root)
        for root in roots:
            if root in self._picks:
                self._resolve(root)
        return {_cluster_key(root) for root in roots}

    # Aggregation ---------------------------------------------------------------------

    def _pick(self, name: str) -> list[str]:
        """The ClusterRoles ``name``'s selectors pick: per selector, by name, never itself
        (a role two selectors pick is listed twice, as the controller visits it)."""
        picked: list[str] = []
        for selector in self._cluster[name].aggregation or ():
            candidates: Iterable[str] = self._cluster
            if selector.match_labels:  # narrow by the rarest label before testing
                rarest: set[str] = min((self._by_label.get(pair, set())
                                        for pair in selector.match_labels.items()), key=len)
                candidates = rarest
            picked.extend(sorted(
                n for n in candidates
                if n != name and selector.matches(self._cluster[n].labels)
            ))
        return picked

    def _unresolve(self, root: str) -> None:
        for other in self._reached.pop(root, ()):
            into = self.aggregated_into[other]
            into.discard(root)
            if not into:
                del self.aggregated_into[other]

    def _resolve(self, root: str) -> None:
        """Depth-first, in pick order; iterative so a long chain cannot exhaust the stack."""
        out: dict[PolicyRule, None] = {}  # an ordered set: the controller drops duplicates
        reached: set[str] = set()
        entered = {root}  # an aggregated role is expanded once per root: no cycles
        stack = [iter(self._picks[root])]
        while stack:
            name = next(stack[-1], None)
            if name is None:
                stack.pop()
                continue
            reached.add(name)
            role = self._cluster[name]
            if role.aggregation is None:
                out.update(dict.fromkeys(role.rules))
            elif name not in entered:
                entered.add(name)
                stack.append(iter(self._picks[name]))
        self.rules[_cluster_key(root)] = tuple(out)
        self._reached[root] = reached
        for other in reached:
            self.aggregated_into[other].add(root)


def _selects(selectors: Iterable[LabelSelector], labels: dict[str, str]) -> bool:
    return any(selector.matches(labels) for selector in selectors)
