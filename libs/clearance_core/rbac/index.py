"""RbacIndex: the RBAC authorizer, rules review and who-can, kept current one object at a
time.

Kubernetes answers these by scanning every binding per request (``VisitRulesFor``, the
subject locator); with thousands of bindings that is too slow for a per-request path,
so the index is built once (in time linear in roles, bindings and the rules they hold),
then kept current by :meth:`RbacIndex.put_role`, :meth:`RbacIndex.remove_role`,
:meth:`RbacIndex.put_binding` and :meth:`RbacIndex.remove_binding` — each touches only the
entries of that object (and, for a ClusterRole, of the aggregated roles it feeds) — and
each question touches only what can matter:

* ``allowed``/``rules_for`` look bindings up by subject (user, each group) and namespace;
* ``who_can`` looks rules up by resource token (exact, ``*``, ``*/sub``), keeps the roles
  whose rules allow the request, then the bindings referencing those roles.

Answers never depend on the order objects were given or changed in: bindings are visited
ClusterRoleBindings first (as ``VisitRulesFor`` does), each kind by namespace and name —
the order of their identities, ``(kind, namespace, name)``. Aggregated ClusterRoles are
resolved by :class:`clearance_core.rbac.roles.RoleRules`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

from clearance_core.rbac import names as kube_names
from clearance_core.rbac.bindings import BindingId, BindingIndex, Bound
from clearance_core.rbac.roles import RoleRules
from clearance_core.rbac.rules import (
    Attributes,
    Binding,
    NonResourceAttributes,
    PolicyRule,
    ResourceAttributes,
    Role,
    RoleKey,
    binding_subjects,
    describe_subject,
    subject_key,
)


def _aggregate(errors: list[str]) -> str | None:
    """Like Go's utilerrors.NewAggregate: one message as is, several in brackets."""
    if not errors:
        return None
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


class RbacIndex:
    """An index over Roles, ClusterRoles and bindings, updated in place object by object."""

    binding_subjects = staticmethod(binding_subjects)

    def __init__(self, roles: Iterable[Role] = (), bindings: Iterable[Binding] = ()) -> None:
        self._roles = RoleRules(roles)
        self._bindings = BindingIndex()
        # (role namespace, resource token) -> role -> its rules naming the token: who_can's
        # way in; and the ClusterRoles' URL rules.
        self._by_resource: dict[tuple[str, str], dict[RoleKey, list[PolicyRule]]] = (
            defaultdict(dict))
        self._non_resource: dict[RoleKey, list[PolicyRule]] = {}
        self._indexed: dict[RoleKey, tuple[PolicyRule, ...]] = {}  # rules as indexed
        # How many indexed rules name each verb and each resource (without its
        # subresource): a deny says which name no rule uses (README: RBAC reviews).
        self._verbs: Counter[str] = Counter()
        self._resources: Counter[str] = Counter()
        for key in list(self._roles.rules):
            self._index_rules(key)
        for binding in bindings:  # a later binding of the same identity replaces one
            self._bindings.put(binding)

    # Changes -------------------------------------------------------------------------

    def put_role(self, role: Role) -> None:
        """Add or replace a Role or ClusterRole (and re-resolve what aggregates it)."""
        for key in self._roles.put(role):
            self._index_rules(key)

    def remove_role(self, key: RoleKey) -> None:
        for changed in self._roles.remove(key):
            self._index_rules(changed)

    def put_binding(self, binding: Binding) -> None:
        """Add or replace a RoleBinding or ClusterRoleBinding."""
        self._bindings.put(binding)

    def remove_binding(self, bid: BindingId) -> None:
        """Remove the binding ``(kind, namespace, name)``, if present."""
        self._bindings.remove(bid)

    def _index_rules(self, key: RoleKey) -> None:
        """Re-index the rules of ``key`` as they now resolve (none: the role is gone)."""
        for rule in self._indexed.pop(key, ()):
            self._count(rule, -1)
            for token in rule.resources:
                by_role = self._by_resource.get((key.namespace, token))
                if by_role is not None:
                    by_role.pop(key, None)
                    if not by_role:
                        del self._by_resource[key.namespace, token]
        self._non_resource.pop(key, None)
        rules = self._roles.rules.get(key)
        if rules is None:
            return
        self._indexed[key] = rules
        for rule in rules:
            self._count(rule, 1)
            for token in dict.fromkeys(rule.resources):
                self._by_resource[key.namespace, token].setdefault(key, []).append(rule)
            if rule.non_resource_urls and key.kind == "ClusterRole":
                self._non_resource.setdefault(key, []).append(rule)

    def _count(self, rule: PolicyRule, step: int) -> None:
        for verb in set(rule.verbs):
            self._verbs[verb] += step
            if self._verbs[verb] <= 0:
                del self._verbs[verb]
        for resource in {token.partition("/")[0] for token in rule.resources}:
            self._resources[resource] += step
            if self._resources[resource] <= 0:
                del self._resources[resource]

    # Questions -----------------------------------------------------------------------

    def unnamed(self, attrs: Attributes) -> list[str]:
        """What a review asks about that no rule names, even by ``*``: its verb, its
        resource (notes for a deny's reason: ``kube_names``)."""
        notes = []
        if attrs.verb not in self._verbs and "*" not in self._verbs:
            notes.append(kube_names.unnamed_verb(attrs.verb))
        if isinstance(attrs, ResourceAttributes) and attrs.resource not in self._resources \
                and "*" not in self._resources:
            notes.append(kube_names.unnamed_resource(attrs.resource))
        return notes

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
        winner: Bound | None = None
        errors: list[str] = []
        for bound in self._bindings.applicable(username, group_set, namespace):
            rules = self._roles.rules.get(bound.role)
            if rules is None:
                errors.append(bound.missing())
            elif winner is None and any(rule.allows(attrs) for rule in rules):
                winner = bound
        error = _aggregate(errors)
        if winner is None:
            return False, f"RBAC: {error}" if error else "", error
        return True, "RBAC: allowed by " + self._describe(winner, username, group_set), error

    @staticmethod
    def _describe(bound: Bound, username: str, groups: frozenset[str]) -> str:
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
        return self._bindings.namespaces(username, groups)

    def named(self, namespaces: Iterable[str]) -> tuple[set[str], set[str]]:
        """(users, groups) named by every ClusterRoleBinding and by the RoleBindings in
        ``namespaces`` (service accounts as their usernames), whatever their roles allow."""
        return self._bindings.named(namespaces)

    def scoped_rules(
        self, username: str, groups: Iterable[str], namespace: str
    ) -> list[tuple[bool, PolicyRule]]:
        """(granted by a ClusterRoleBinding, rule) for every rule that applies in
        ``namespace``, in visiting order — what a query plan needs to tell cluster-wide
        grants from one namespace's."""
        out: list[tuple[bool, PolicyRule]] = []
        for bound in self._bindings.applicable(username, groups, namespace):
            cluster_wide = not bound.binding.namespace
            out.extend((cluster_wide, rule) for rule in self._roles.rules.get(bound.role, ()))
        return out

    def evaluation_error(
        self, username: str, groups: Iterable[str], namespace: str
    ) -> str | None:
        """The applicable bindings whose role is missing (a rules review's evaluationError)."""
        errors = [
            bound.missing()
            for bound in self._bindings.applicable(username, groups, namespace)
            if bound.role not in self._roles.rules
        ]
        return _aggregate(errors)

    def _matching_roles(self, attrs: Attributes) -> set[RoleKey]:
        if isinstance(attrs, NonResourceAttributes):
            return {key for key, rules in self._non_resource.items()
                    if any(rule.allows(attrs) for rule in rules)}
        sub = attrs.subresource
        combined = f"{attrs.resource}/{sub}" if sub else attrs.resource
        tokens = dict.fromkeys(("*", combined, f"*/{sub}") if sub else ("*", combined))
        found: set[RoleKey] = set()
        for role_namespace in ("", attrs.namespace) if attrs.namespace else ("",):
            for token in tokens:
                by_role = self._by_resource.get((role_namespace, token), {})
                for key, rules in by_role.items():
                    if key not in found and any(rule.allows(attrs) for rule in rules):
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
                for bound in self._bindings.of_role(key, scope):
                    users.update(bound.users)
                    groups.update(bound.groups)
        return sorted(users), sorted(groups)

    def subjects_of_role(self, kind: str, namespace: str, name: str) -> tuple[list[str], list[str]]:
        """Sorted (users, groups) bound to a role directly or through aggregation.

        For cache invalidation: ask both the old and the new index, since a label change
        moves a ClusterRole into or out of an aggregated one.
        """
        key = RoleKey(kind, namespace if kind == "Role" else "", name)
        users: set[str] = set()
        groups: set[str] = set()
        into = self._roles.aggregated_into.get(name, ()) if kind == "ClusterRole" else ()
        for role in (key, *(RoleKey("ClusterRole", "", other) for other in into)):
            for bound in self._bindings.of_role(role):
                users.update(bound.users)
                groups.update(bound.groups)
        return sorted(users), sorted(groups)

    def effective_rules(
        self, kind: str, namespace: str, name: str
    ) -> tuple[PolicyRule, ...] | None:
        """A role's rules after aggregation; None when the role does not exist."""
        return self._roles.rules.get(RoleKey(kind, namespace if kind == "Role" else "", name))
