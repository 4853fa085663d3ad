"""RbacIndex: the RBAC authorizer, rules review and who-can over one snapshot of objects.

Kubernetes answers these by scanning every binding per request (``VisitRulesFor``, the
subject locator); with thousands of bindings that is too slow for a per-request path,
so the index is built once per snapshot (in time linear in roles, bindings and the
rules they hold) and each question touches only what can matter:

* ``allowed``/``rules_for`` look bindings up by subject (user, each group) and namespace;
* ``who_can`` looks rules up by resource token (exact, ``*``, ``*/sub``), keeps the roles
  whose rules allow the request, then the bindings referencing those roles.

Answers never depend on the order objects were given in: bindings are visited
ClusterRoleBindings first (as ``VisitRulesFor`` does), each kind by namespace and name.

Aggregated ClusterRoles are resolved here, not read from their stored ``rules``: the
Kubernetes controller overwrites those with the union of the rules of the ClusterRoles
the selectors pick (by name within each selector, duplicates dropped, never itself), so
a snapshot taken before the controller ran would otherwise be stale. Chains
(view -> edit -> admin) resolve as the controller converges to; in a cycle an aggregated
role contributes only the non-aggregated roles reachable from it, so there is no loop.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple

from clearance_core.rbac import (
    Attributes,
    Binding,
    NonResourceAttributes,
    PolicyRule,
    Role,
    RoleKey,
    binding_subjects,
    describe_subject,
    subject_key,
)


class _Bound(NamedTuple):
    binding: Binding
    role: RoleKey
    users: frozenset[str]
    groups: frozenset[str]

    def missing(self) -> str:
        ref = self.role
        role = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
        binding = f'{self.binding.kind.lower()} "{self.binding.id}"'
        return f'{binding} references missing {ref.kind.lower()} "{role}"'


def _aggregate(errors: list[str]) -> str | None:
    """Like Go's utilerrors.NewAggregate: one message as is, several in brackets."""
    if not errors:
        return None
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


class RbacIndex:
    """An immutable index over Roles, ClusterRoles and bindings; rebuild it on change."""

    binding_subjects = staticmethod(binding_subjects)

    def __init__(self, roles: Iterable[Role] = (), bindings: Iterable[Binding] = ()) -> None:
        self._roles: dict[RoleKey, Role] = {role.key: role for role in roles}
        self._aggregated_into: dict[RoleKey, set[RoleKey]] = defaultdict(set)
        self._rules: dict[RoleKey, tuple[PolicyRule, ...]] = self._resolve_rules()

        unique = {(b.kind, b.namespace, b.name): b for b in bindings}
        ordered = sorted(unique.values(), key=lambda b: (b.kind, b.namespace, b.name))
        self._bindings: list[_Bound] = []
        # Subject -> binding positions; RoleBindings also keyed by their namespace.
        self._crb_user: dict[str, list[int]] = defaultdict(list)
        self._crb_group: dict[str, list[int]] = defaultdict(list)
        self._rb_user: dict[tuple[str, str], list[int]] = defaultdict(list)
        self._rb_group: dict[tuple[str, str], list[int]] = defaultdict(list)
        # Subject -> namespaces of the RoleBindings naming it (where it may hold grants).
        self._rb_namespaces: dict[tuple[bool, str], set[str]] = defaultdict(set)
        # Role -> binding positions: every binding, and RoleBindings per namespace.
        self._by_role: dict[RoleKey, list[int]] = defaultdict(list)
        self._by_ns_role: dict[tuple[str, RoleKey], list[int]] = defaultdict(list)
        for pos, binding in enumerate(ordered):
            users, groups = binding_subjects(binding)
            bound = _Bound(binding, binding.role_key, frozenset(users), frozenset(groups))
            self._bindings.append(bound)
            self._by_role[bound.role].append(pos)
            ns = binding.namespace
            self._by_ns_role[ns, bound.role].append(pos)  # ns "" holds the CRBs
            for user in users:
                (self._rb_user[ns, user] if ns else self._crb_user[user]).append(pos)
                if ns:
                    self._rb_namespaces[False, user].add(ns)
            for group in groups:
                (self._rb_group[ns, group] if ns else self._crb_group[group]).append(pos)
                if ns:
                    self._rb_namespaces[True, group].add(ns)

        # (role namespace, resource token) -> (role, rule): who_can's way in.
        self._by_resource: dict[tuple[str, str], list[tuple[RoleKey, PolicyRule]]] = (
            defaultdict(list)
        )
        self._non_resource: list[tuple[RoleKey, PolicyRule]] = []
        for key, rules in self._rules.items():
            for rule in rules:
                for token in dict.fromkeys(rule.resources):
                    self._by_resource[key.namespace, token].append((key, rule))
                if rule.non_resource_urls and key.kind == "ClusterRole":
                    self._non_resource.append((key, rule))

    # Aggregation ---------------------------------------------------------------------

    def _resolve_rules(self) -> dict[RoleKey, tuple[PolicyRule, ...]]:
        rules = {key: role.rules for key, role in self._roles.items()}
        cluster = {k.name: r for k, r in self._roles.items() if k.kind == "ClusterRole"}
        by_label: dict[tuple[str, str], set[str]] = defaultdict(set)
        for name, role in cluster.items():
            for pair in role.labels.items():
                by_label[pair].add(name)
        picks: dict[str, list[str]] = {}
        for name, role in cluster.items():
            if role.aggregation is None:
                continue
            picked: list[str] = []
            for selector in role.aggregation:
                candidates: Iterable[str] = cluster
                if selector.match_labels:  # narrow by the rarest label before testing
                    sets = sorted(
                        (by_label.get(pair, set()) for pair in selector.match_labels.items()),
                        key=len,
                    )
                    candidates = sets[0]
                picked.extend(
                    sorted(
                        n for n in candidates
                        if n != name and selector.matches(cluster[n].labels)
                    )
                )
            picks[name] = picked
        for name in picks:
            key = RoleKey("ClusterRole", "", name)
            resolved, reached = self._expand(name, picks, cluster)
            rules[key] = resolved
            for other in reached:
                self._aggregated_into[RoleKey("ClusterRole", "", other)].add(key)
        return rules

    @staticmethod
    def _expand(
        root: str, picks: dict[str, list[str]], cluster: dict[str, Role]
    ) -> tuple[tuple[PolicyRule, ...], set[str]]:
        """Depth-first, in pick order; iterative so a long chain cannot exhaust the stack."""
        out: dict[PolicyRule, None] = {}  # an ordered set: the controller drops duplicates
        reached: set[str] = set()
        entered = {root}  # an aggregated role is expanded once per root: no cycles
        stack = [iter(picks[root])]
        while stack:
            name = next(stack[-1], None)
            if name is None:
                stack.pop()
                continue
            reached.add(name)
            role = cluster[name]
            if role.aggregation is None:
                out.update(dict.fromkeys(role.rules))
            elif name not in entered:
                entered.add(name)
                stack.append(iter(picks[name]))
        return tuple(out), reached

    # Questions -----------------------------------------------------------------------

    def _applicable(self, username: str, groups: Iterable[str], namespace: str) -> list[int]:
        """Positions of the bindings naming the subject: CRBs, then RBs of ``namespace``."""
        found: set[int] = set(self._crb_user.get(username, ()))
        group_list = tuple(groups)
        for group in group_list:
            found.update(self._crb_group.get(group, ()))
        if namespace:
            found.update(self._rb_user.get((namespace, username), ()))
            for group in group_list:
                found.update(self._rb_group.get((namespace, group), ()))
        return sorted(found)

    def allowed(
        self, attrs: Attributes, username: str, groups: Iterable[str]
    ) -> tuple[bool, str, str | None]:
        """(allowed, reason, evaluation_error) as the RBAC authorizer decides.

        ``evaluation_error`` names every applicable binding whose role is missing, whether
        or not another binding allows (Kubernetes stops at the first allow, which would
        make the error depend on listing order).
        """
        group_set = frozenset(groups)
        namespace = "" if isinstance(attrs, NonResourceAttributes) else attrs.namespace
        winner: _Bound | None = None
        errors: list[str] = []
        for pos in self._applicable(username, group_set, namespace):
            bound = self._bindings[pos]
            rules = self._rules.get(bound.role)
            if rules is None:
                errors.append(bound.missing())
            elif winner is None and any(rule.allows(attrs) for rule in rules):
                winner = bound
        error = _aggregate(errors)
        if winner is None:
            return False, f"RBAC: {error}" if error else "", error
        return True, "RBAC: allowed by " + self._describe(winner, username, group_set), error

    @staticmethod
    def _describe(bound: _Bound, username: str, groups: frozenset[str]) -> str:
        """Kubernetes' binding describers, naming the first subject that applies.

        Note Kubernetes prints a RoleBinding as ``name/namespace``; so do we.
        """
        binding = bound.binding
        subject = next(
            s
            for s in binding.subjects
            if (key := subject_key(s, binding.namespace)) is not None
            and (key[1] in groups if key[0] else key[1] == username)
        )
        ref = binding.role_ref
        label = f"{binding.name}/{binding.namespace}" if binding.namespace else binding.name
        who = describe_subject(subject, binding.namespace)
        return f'{binding.kind} "{label}" of {ref.kind} "{ref.name}" to {who}'

    def rules_for(
        self, username: str, groups: Iterable[str], namespace: str
    ) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        """(resourceRules, nonResourceRules) of a SelfSubjectRulesReview in ``namespace``.

        Every rule of every applicable binding, in visiting order, neither merged nor
        de-duplicated. A rule with both parts lands in both lists. Like Kubernetes'
        ``RulesFor``, non-resource rules of a ClusterRole bound by a RoleBinding are
        listed too, although only a ClusterRoleBinding can grant a URL: the review
        reports the rules of the roles bound, not their effect.
        """
        resource_rules: list[dict[str, object]] = []
        non_resource_rules: list[dict[str, object]] = []
        for _, rule in self.scoped_rules(username, groups, namespace):
            if rule.resources:
                resource_rules.append(rule.resource_rule())
            if rule.non_resource_urls:
                non_resource_rules.append(rule.non_resource_rule())
        return resource_rules, non_resource_rules

    def binding_namespaces(self, username: str, groups: Iterable[str]) -> set[str]:
        """The namespaces of the RoleBindings naming the subject: the only namespaces where
        it can hold a grant beyond its ClusterRoleBindings' (whether or not a Namespace
        object for them is known)."""
        found = set(self._rb_namespaces.get((False, username), ()))
        for group in groups:
            found.update(self._rb_namespaces.get((True, group), ()))
        return found

    def scoped_rules(
        self, username: str, groups: Iterable[str], namespace: str
    ) -> list[tuple[bool, PolicyRule]]:
        """(granted by a ClusterRoleBinding, rule) for every rule that applies in
        ``namespace``, in visiting order — what a query plan needs to tell cluster-wide
        grants from one namespace's."""
        out: list[tuple[bool, PolicyRule]] = []
        for pos in self._applicable(username, groups, namespace):
            bound = self._bindings[pos]
            cluster_wide = not bound.binding.namespace
            out.extend((cluster_wide, rule) for rule in self._rules.get(bound.role, ()))
        return out

    def evaluation_error(
        self, username: str, groups: Iterable[str], namespace: str
    ) -> str | None:
        """The applicable bindings whose role is missing (a rules review's evaluationError)."""
        errors = [
            self._bindings[pos].missing()
            for pos in self._applicable(username, groups, namespace)
            if self._bindings[pos].role not in self._rules
        ]
        return _aggregate(errors)

    def _matching_roles(self, attrs: Attributes) -> set[RoleKey]:
        if isinstance(attrs, NonResourceAttributes):
            return {key for key, rule in self._non_resource if rule.allows(attrs)}
        sub = attrs.subresource
        combined = f"{attrs.resource}/{sub}" if sub else attrs.resource
        tokens = dict.fromkeys(("*", combined, f"*/{sub}") if sub else ("*", combined))
        found: set[RoleKey] = set()
        for role_namespace in ("", attrs.namespace) if attrs.namespace else ("",):
            for token in tokens:
                for key, rule in self._by_resource.get((role_namespace, token), ()):
                    if key not in found and rule.allows(attrs):
                        found.add(key)
        return found

    def who_can(self, attrs: Attributes) -> tuple[list[str], list[str]]:
        """Sorted (users, groups) named in a binding that allows ``attrs`` (who-can).

        Exactly the subjects for which :meth:`allowed` says yes: a user is allowed iff it
        is listed or one of its groups is. Service accounts appear as their usernames.
        """
        namespace = "" if isinstance(attrs, NonResourceAttributes) else attrs.namespace
        users: set[str] = set()
        groups: set[str] = set()
        for key in self._matching_roles(attrs):
            for scope in ("", namespace) if namespace else ("",):
                for pos in self._by_ns_role.get((scope, key), ()):
                    users.update(self._bindings[pos].users)
                    groups.update(self._bindings[pos].groups)
        return sorted(users), sorted(groups)

    def subjects_of_role(self, kind: str, namespace: str, name: str) -> tuple[list[str], list[str]]:
        """Sorted (users, groups) bound to a role directly or through aggregation.

        For cache invalidation: ask both the old and the new index, since a label change
        moves a ClusterRole into or out of an aggregated one.
        """
        key = RoleKey(kind, namespace if kind == "Role" else "", name)
        users: set[str] = set()
        groups: set[str] = set()
        for role in (key, *self._aggregated_into.get(key, ())):
            for pos in self._by_role.get(role, ()):
                users.update(self._bindings[pos].users)
                groups.update(self._bindings[pos].groups)
        return sorted(users), sorted(groups)

    def effective_rules(
        self, kind: str, namespace: str, name: str
    ) -> tuple[PolicyRule, ...] | None:
        """A role's rules after aggregation; None when the role does not exist."""
        return self._rules.get(RoleKey(kind, namespace if kind == "Role" else "", name))
