"""Who gains or loses access where, if one AccessPolicy were applied or deleted
(README: Inherited, ``clearance.v1.effective.simulate``).

A dry run (:mod:`clearance_core.questions.simulate`) gives the effective policies before and after
as two :class:`~clearance_core.inherit.index.InheritanceIndex`. The access diff asks
``check`` of both, for every subject that can have moved, on what can have moved:

* **where**: each Cluster and Namespace target whose effective rules change — a decision
  reads those two kinds only (a Fleet or ClusterSet change reaches the decisions through
  the Cluster targets below it, each materialised and listed in the diff);
* **who**: every subject that a rule added, removed or changed there names (either
  version of it), and the users the OpenShift Groups it names list — as
  ``who-can-see`` lists them (:mod:`clearance_core.questions.audience`: a group is asked as a member
  of it alone, a user with its Groups, a service account with its groups). A decision
  reads only the rules whose subjects match the principal, so a principal that none of
  those rules names gets the same answer before and after on that target: the list is
  complete by construction;
* **what**: the target itself (the cluster object, or the namespace item) and every type
  those rules filter (a whole type; at a Namespace target, its items in that namespace).

Each answer is :func:`clearance_core.questions.answers.check` — the decision service's own — on a
state (:class:`_Side`) that reads the principal's MonitorAccessPolicies as its snapshot
does and the effective rules of one of the two indexes, so a MonitorAccessPolicy that
decides a cluster still decides it after an inherited Allow changes (no false gain), and
an inherited Deny still wins over it.

Bounded: at most ``limit`` (target, subject, resource) rows, listed in order (targets as
the diff lists them, then subjects, then resources), and at most ``budget`` (question,
Namespace target) pairs weighed, as one request's checks are; what is cut is counted, and
the reply says so (:meth:`Impact.truncated`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple, Protocol

from clearance_api.wire import Principal, Resource
from clearance_api.wire.effective import (
    AccessAnswer,
    AccessChange,
    AccessResource,
    AccessSubject,
    AccessTruncated,
)
from clearance_core.inherit import hierarchy
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.index import InheritanceIndex
from clearance_core.inherit.merge import EffectivePolicy, EffectiveRule
from clearance_core.kube.principal import Identity
from clearance_core.kube.resources import CLUSTER_SCOPED, singular
from clearance_core.monitor.evaluate import Matcher
from clearance_core.monitor.policy import CompiledPolicy
from clearance_core.questions import answers
from clearance_core.questions.audience import Names, Subject, principal_of, unnamed
from clearance_core.questions.impact_words import describe
from clearance_core.questions.placement import NamespaceIndex

#: The action every row asks (an answer's ``permissions`` say whether metrics come too).
ACTION = "view"


class Monitors(Protocol):
    """The MonitorAccessPolicy side of a principal's state (the decision service's
    snapshot): a dry run of an AccessPolicy does not move it."""

    @property
    def policies(self) -> Sequence[CompiledPolicy]: ...
    @property
    def labels(self) -> Mapping[str, Mapping[str, str]]: ...
    @property
    def match(self) -> Matcher: ...


#: A subject's principal state: its MonitorAccessPolicy side and its identity.
StateOf = Callable[[Subject], tuple[Monitors, Identity]]


class Question(NamedTuple):
    target: Target
    subject: Subject
    resource: Resource
    cluster: str  # the target's


class Plan(NamedTuple):
    """The rows to answer (at most the limit), how many there are in all, and the
    principal each listed subject is asked as."""

    questions: list[Question]
    total: int
    principals: dict[Subject, Principal]


def changed_rules(before: EffectivePolicy | None,
                  after: EffectivePolicy | None) -> list[EffectiveRule]:
    """Both versions of every rule added, removed or changed between two effective
    policies of one target."""
    old = before.rules if before is not None else {}
    new = after.rules if after is not None else {}
    found: list[EffectiveRule] = []
    for name in sorted(old.keys() | new.keys()):
        was, now = old.get(name), new.get(name)
        if was != now:
            found += [rule for rule in (was, now) if rule is not None]
    return found


def filtered_types(rules: Iterable[EffectiveRule]) -> list[str]:
    """The types the rules' Allow versions filter (sorted)."""
    return sorted({flt.type for found in rules if found.rule.effect == "Allow"
                   for flt in found.rule.filters})


def resources_of(target: Target, types: Iterable[str]) -> list[Resource]:
    """The target itself, then each of ``types`` the target can ask about."""
    if target.kind == "Namespace":
        cluster, namespace = target.cluster or "", target.name
        # Cluster-scoped types (and the cluster) are judged at the cluster's target, and
        # the namespace item is the target itself: neither is asked here.
        return [Resource(type="namespaces", name=namespace, cluster=cluster),
                *(Resource(type=kind, cluster=cluster, namespace=namespace) for kind in types
                  if singular(kind) not in CLUSTER_SCOPED and singular(kind) != "namespace")]
    cluster = target.name
    return [Resource(type="cluster", name=cluster, cluster=cluster),
            *(Resource(type=kind, cluster=cluster) for kind in types
              if singular(kind) != "cluster")]


def _decides(target: Target) -> bool:
    return target.kind in ("Cluster", "Namespace")


class _Side:
    """One index's effective rules with a principal's MonitorAccessPolicies: the state
    :func:`clearance_core.questions.answers.check` reads
    (:class:`clearance_core.questions.answers.State`)."""

    def __init__(self, index: InheritanceIndex, monitors: Monitors, identity: Identity,
                 declared: frozenset[str], spread: dict[str, NamespaceIndex]) -> None:
        self._index = index
        self._monitors = monitors
        self._identity = identity
        self._declared = declared
        self._spread = spread  # cluster -> its Namespace targets, indexed (shared)

    @property
    def policies(self) -> Sequence[CompiledPolicy]:
        return self._monitors.policies

    @property
    def labels(self) -> Mapping[str, Mapping[str, str]]:
        return self._monitors.labels

    @property
    def declared(self) -> frozenset[str]:
        return self._declared

    @property
    def match(self) -> Matcher:
        return self._monitors.match

    def inherited(self, cluster: str, namespace: str | None
                  ) -> tuple[Target | None, Mapping[str, EffectiveRule]]:
        # Every existing cluster is materialised; a Namespace target is while a policy
        # names it (else it has its cluster's rules), as the decision service reads them.
        for target in hierarchy.decision_targets(cluster, namespace):
            found = self._index.effective.get(target)
            if found is not None:
                return found.target, found.rules
        return None, {}

    def cluster_rules(self, cluster: str
                      ) -> tuple[Target | None, Mapping[str, EffectiveRule]]:
        return self.inherited(cluster, None)

    def namespace_targets(self, cluster: str) -> Mapping[str, EffectivePolicy]:
        index = self._spread.get(cluster)
        if index is None:
            index = self._spread[cluster] = NamespaceIndex(
                self.cluster_rules(cluster)[1], self._index.namespace_targets(cluster))
        return index.concerning(self._identity)


def answer_of(side: answers.State, identity: Identity, resource: Resource, *,
              cluster: str, now: float) -> AccessAnswer:
    decision = answers.check(side, identity, ACTION, resource, cluster=cluster, now=now,
                             explain=False)
    return AccessAnswer(decision=decision.decision, policy=decision.policy,
                        permissions=list(decision.permissions), filters=decision.filters)


class _Named:
    """The changed rules of each target and the subjects they name, worked out once per
    distinct change: a Fleet or ClusterSet change gives thousands of targets the same
    rules (the same objects), so planning costs the distinct changes, not the targets."""

    def __init__(self, sides: tuple[InheritanceIndex, InheritanceIndex],
                 members: Mapping[str, Collection[str]]) -> None:
        self._sides = sides
        self._members = members
        # Keyed by identity; each entry holds the objects its key names, so no id is
        # reused while the plan lives.
        self._rules: dict[tuple[int, int], tuple[object, object, list[EffectiveRule]]] = {}
        self._named: dict[tuple[int, ...], tuple[list[Subject], list[str]]] = {}
        #: Every username named so far.
        self.taken: set[str] = set()

    def at(self, target: Target) -> tuple[list[Subject], list[str]]:
        """The subjects the target's changed rules name, and the types they filter."""
        before, after = (side.effective_of(target) for side in self._sides)
        old = before.rules if before is not None else {}
        new = after.rules if after is not None else {}
        pair = (id(old), id(new))
        held = self._rules.get(pair)
        if held is None:
            held = self._rules[pair] = (old, new, changed_rules(before, after))
        rules = held[2]
        key = tuple(id(found.rule) for found in rules)  # held by ``rules``
        found = self._named.get(key)
        if found is None:
            names = Names()
            names.add_rules(rules)
            names.add_members(self._members)
            self.taken |= names.taken()
            found = self._named[key] = (names.subjects(), filtered_types(rules))
        return found


class Impact:
    """The access diff between two indexes (``before`` is not mutated; neither is
    ``after`` once given)."""

    def __init__(self, before: InheritanceIndex, after: InheritanceIndex, *,
                 declared: frozenset[str], now: float) -> None:
        self._sides = (before, after)
        self._declared = declared
        self._now = now
        self._spread: tuple[dict[str, NamespaceIndex], dict[str, NamespaceIndex]] = ({}, {})
        #: (question, Namespace target) pairs weighed so far, and whether the budget cut.
        self.spent = 0
        self.over_budget = False

    def plan(self, targets: Iterable[Target], members: Mapping[str, Collection[str]], *,
             limit: int, taken: Iterable[str] = ()) -> Plan:
        """The rows for the targets of a dry run's diff (``members``: group -> the users
        its OpenShift Group lists; ``taken``: other usernames in use, which a group's
        principal must not be named)."""
        questions: list[Question] = []
        total = 0
        everyone: set[str] = set(taken)
        named = _Named(self._sides, members)
        for target in sorted(set(targets), key=Target.sort_key):
            if not _decides(target):
                continue
            subjects, types = named.at(target)
            if not subjects:
                continue
            resources = resources_of(target, types)
            cluster = target.cluster if target.kind == "Namespace" else target.name
            assert cluster is not None  # a Namespace target names its cluster
            total += len(subjects) * len(resources)
            for subject in subjects:
                if len(questions) >= limit:
                    break
                questions += [Question(target, subject, resource, cluster)
                              for resource in resources[:limit - len(questions)]]
        nobody = unnamed(everyone | named.taken)
        principals = {question.subject: principal_of(question.subject, nobody)
                      for question in questions}
        return Plan(questions, total, principals)

    def answers(self, plan: Plan, state_of: StateOf, *, budget: int
                ) -> Iterator[AccessChange]:
        """Each question answered before and after, in order, until the plan or the
        ``budget`` of (question, Namespace target) pairs runs out."""
        before, after = self._sides
        for question in plan.questions:
            monitors, identity = state_of(question.subject)
            old = _Side(before, monitors, identity, self._declared, self._spread[0])
            new = _Side(after, monitors, identity, self._declared, self._spread[1])
            resource, cluster = question.resource, question.cluster
            cost = (answers.check_cost(old, resource, cluster)
                    + answers.check_cost(new, resource, cluster))
            if self.spent + cost > budget:
                self.over_budget = True
                return
            self.spent += cost
            was = answer_of(old, identity, resource, cluster=cluster, now=self._now)
            now = answer_of(new, identity, resource, cluster=cluster, now=self._now)
            move, detail = describe(was, now)
            yield AccessChange(
                target=question.target,
                subject=AccessSubject(kind=question.subject.kind, name=question.subject.name),
                resource=AccessResource(type=resource.type, name=resource.name,
                                        namespace=resource.namespace),
                before=was, after=now, move=move, detail=detail)

    def truncated(self, plan: Plan, listed: int, *, limit: int, budget: int,
                  limit_setting: str, budget_setting: str) -> AccessTruncated | None:
        """What the reply says of the rows not listed (None: every row is)."""
        if listed >= plan.total:
            return None
        if self.over_budget:
            reason = (f"the rows after these would weigh more than {budget} (question, "
                      f"Namespace target) pairs in all ({budget_setting})")
        else:
            reason = (f"{plan.total} (target, subject, resource) rows, more than the "
                      f"limit of {limit} ({limit_setting})")
        return AccessTruncated(listed=listed, total=plan.total, reason=reason)


def access_diff(before: InheritanceIndex, after: InheritanceIndex, targets: Iterable[Target],
                state_of: Callable[[Principal], tuple[Monitors, Identity]],
                members: Mapping[str, Collection[str]], *, declared: frozenset[str],
                now: float, limit: int, budget: int, limit_setting: str = "limit",
                budget_setting: str = "budget",
                ) -> tuple[list[AccessChange], AccessTruncated | None]:
    """The whole access diff at once (offline, and for tests; the decision service
    answers the same plan in slices)."""
    impact = Impact(before, after, declared=declared, now=now)
    plan = impact.plan(targets, members, limit=limit)
    states = {subject: state_of(principal) for subject, principal in plan.principals.items()}
    rows = list(impact.answers(plan, states.__getitem__, budget=budget))
    return rows, impact.truncated(plan, len(rows), limit=limit, budget=budget,
                                  limit_setting=limit_setting,
                                  budget_setting=budget_setting)
