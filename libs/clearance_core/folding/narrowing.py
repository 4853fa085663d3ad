"""Which of a change's subjects' cached checks it can alter: the narrowing of an
invalidation by cluster and by evaluation order (pure; the invalidator applies it).

A MonitorAccessPolicy change names its subjects (old and new); a Group membership change
names the users who joined or left. Dropping every cached check of those subjects is
safe but mostly wasted: their answers about most clusters cannot change. Two facts bound
what can:

- **clusters** — a policy takes part in the answer about a cluster only where one of
  its rules (or ``default: all``) matches it. Where neither version of the changed
  policy matches, or both match with the same rule and the same priority, effect and
  validity window, nothing the evaluator reads has changed.
- **order** — the first policy in force that matches decides; later candidates are
  never consulted. A cached answer decided by a policy that comes strictly before every
  version of the changed policy (``CompiledPolicy.order``) keeps its decider and every
  candidate before it, so it holds.

So an entry is dropped iff it is about a cluster of ``clusters`` and was decided by no
MonitorAccessPolicy or by one not before ``after``. Entries about a cluster that was not
in the inventory when they were computed are always dropped (the compiler cannot list
such clusters; the decision service flags them), and an answer's explanation (its
trace, which lists every candidate, consulted or not) is cached apart and always
dropped. The property tests (``tests/unit/test_narrowing.py``) check that no answer
that changes is ever kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

import msgspec

from clearance_core.monitor import patterns, wildcard
from clearance_core.monitor.policy import CompiledPolicy, CompiledSelector


class Narrow(msgspec.Struct, kw_only=True, frozen=True):
    """The part of the subjects' cached checks a change can alter."""

    #: The clusters whose answers can change (None: any cluster).
    clusters: frozenset[str] | None = None
    #: Answers decided by a MonitorAccessPolicy whose ``order()`` sorts before this hold
    #: (None: whatever decided them).
    after: str | None = None

    def union(self, other: Narrow) -> Narrow:
        """What either change can alter (for a record folding several)."""
        clusters = None if self.clusters is None or other.clusters is None \
            else self.clusters | other.clusters
        after = None if self.after is None or other.after is None \
            else min(self.after, other.after)
        return Narrow(clusters=clusters, after=after)

    def drops(self, cluster: str | None, order: str | None) -> bool:
        """Whether an entry about ``cluster`` (None: not in the inventory when computed)
        decided by the policy of ``order`` (None: by none) is dropped. The invalidator's
        Lua (``clearance_runtime/storage/lua/invalidate.lua``, its narrowed call) is this
        predicate."""
        if cluster is None:
            return True
        if self.clusters is not None and cluster not in self.clusters:
            return False
        return self.after is None or order is None or order >= self.after


Matches = dict[str, tuple[int | None, str]]


def matches(policy: CompiledPolicy | None,
            inventory: Mapping[str, Mapping[str, str]]) -> Matches:
    """Every inventory cluster where the policy can decide, with the rule (index, selector
    field) that matches it: ``match_cluster`` over the whole inventory, in bulk (a set
    operation per selector field instead of a call per cluster: this runs on every
    policy event). None of an absent, invalid or disabled policy's."""
    if policy is None or not policy.valid or not policy.enabled:
        return {}
    left = set(inventory)
    found: Matches = {}
    for index, rule in enumerate(policy.rules):
        for field, select in _fields(rule.selector, inventory):
            hits = select(left)
            for cluster in hits:
                found[cluster] = (index, field)
            left -= hits
    if policy.default_match:
        for cluster in left:
            found[cluster] = (None, "default")
    return found


_Select = Callable[[set[str]], AbstractSet[str]]


def _fields(selector: CompiledSelector, inventory: Mapping[str, Mapping[str, str]]
            ) -> list[tuple[str, _Select]]:
    """A selector's fields in ``match_cluster``'s order, each as the subset of the
    clusters given that it matches (an absent or empty field matches nothing)."""
    out: list[tuple[str, _Select]] = []
    names = selector.names
    if names is not None:
        literals = names.literals
        out.append(("matchNames", lambda left: literals & left))
        if names.regex is not None:
            regex = wildcard.compiled(names.regex)
            out.append(("matchNames",
                        lambda left: {c for c in left if regex.fullmatch(c) is not None}))
    if selector.pattern is not None:
        pattern = selector.pattern
        out.append(("matchPattern",
                    lambda left: {c for c in left if patterns.fullmatch(pattern, c)}))
    if selector.labels:
        wanted = selector.labels.items()
        out.append(("matchLabels", lambda left: {
            c for c in left if all(inventory[c].get(k) == v for k, v in wanted)}))
    return out


def _behaviour(policy: CompiledPolicy, found: Matches, cluster: str
               ) -> tuple[Any, ...] | None:
    """What a policy contributes to an answer about the cluster (None: it never decides
    there)."""
    matched = found.get(cluster)
    if matched is None:
        return None
    index = matched[0]
    rule = None if index is None else policy.rules[index]
    return (policy.priority, policy.effect, matched, rule, policy.not_before,
            policy.not_after)


def _subjects(policy: CompiledPolicy | None) -> tuple[frozenset[str], ...]:
    if policy is None:
        return (frozenset(), frozenset(), frozenset())
    return (frozenset(policy.users), frozenset(policy.groups),
            frozenset(policy.service_accounts))


def policy_change(inventory: Mapping[str, Mapping[str, str]],
                  old: CompiledPolicy | None, new: CompiledPolicy | None) -> Narrow:
    """The narrowing of a MonitorAccessPolicy going from ``old`` to ``new``.

    Subjects named by both versions see a change only where the two behave differently;
    subjects named by one version only gain or lose the policy wherever that version
    can decide (the union of both, for simplicity: the record names all subjects)."""
    versions = [p for p in (old, new) if p is not None]
    if not versions:
        return Narrow(clusters=frozenset())
    before, after = matches(old, inventory), matches(new, inventory)
    clusters = before.keys() | after.keys()
    if old is not None and new is not None and _subjects(old) == _subjects(new):
        clusters = {c for c in clusters
                    if _behaviour(old, before, c) != _behaviour(new, after, c)}
    return Narrow(clusters=frozenset(clusters), after=min(p.order() for p in versions))


def membership_change(inventory: Mapping[str, Mapping[str, str]],
                      naming: Iterable[CompiledPolicy]) -> Narrow:
    """The narrowing of users joining or leaving a group that the MonitorAccessPolicies
    ``naming`` name (no AccessPolicy rule may name it: those are not narrowed). Only
    those policies enter or leave the users' candidates."""
    deciding = [p for p in naming if p.valid and p.enabled]
    if not deciding:
        return Narrow(clusters=frozenset())
    clusters: set[str] = set()
    for policy in deciding:
        clusters |= matches(policy, inventory).keys()
    return Narrow(clusters=frozenset(clusters), after=min(p.order() for p in deciding))
