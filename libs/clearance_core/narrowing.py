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

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from clearance_core.evaluate import match_cluster
from clearance_core.policy import CompiledPolicy


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
        Lua (``clearance_runtime.cache.NARROWED``) is this predicate."""
        if cluster is None:
            return True
        if self.clusters is not None and cluster not in self.clusters:
            return False
        return self.after is None or order is None or order >= self.after


def behaviour(policy: CompiledPolicy | None, cluster: str,
              labels: Mapping[str, str]) -> tuple[Any, ...] | None:
    """What a policy can contribute to an answer about the cluster: None where it can
    never decide there (absent, invalid, disabled or matching no rule)."""
    if policy is None or not policy.valid or not policy.enabled:
        return None
    matched = match_cluster(policy, cluster, labels)
    if matched is None:
        return None
    index, field = matched
    rule = None if index is None else policy.rules[index]
    return (policy.priority, policy.effect, index, field, rule, policy.not_before,
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
    same = old is not None and new is not None and _subjects(old) == _subjects(new)
    clusters = set()
    for name, labels in inventory.items():
        before, after = behaviour(old, name, labels), behaviour(new, name, labels)
        if (before != after) if same else (before is not None or after is not None):
            clusters.add(name)
    return Narrow(clusters=frozenset(clusters), after=min(p.order() for p in versions))


def membership_change(inventory: Mapping[str, Mapping[str, str]],
                      naming: Iterable[CompiledPolicy]) -> Narrow:
    """The narrowing of users joining or leaving a group that the MonitorAccessPolicies
    ``naming`` name (no AccessPolicy rule may name it: those are not narrowed). Only
    those policies enter or leave the users' candidates."""
    deciding = [p for p in naming if p.valid and p.enabled]
    if not deciding:
        return Narrow(clusters=frozenset())
    clusters = frozenset(
        name for name, labels in inventory.items()
        if any(match_cluster(p, name, labels) is not None for p in deciding))
    return Narrow(clusters=clusters, after=min(p.order() for p in deciding))
