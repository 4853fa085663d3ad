"""What each AccessPolicy's conditions are computed from, summed over its scope and kept
current target by target (README: Inherited).

A policy's ``Enforced`` condition (:mod:`clearance_core.inherit.status`) depends on the
effective policies of every target in its scope only through a few sums: which of its
rules are held somewhere, which fates its other rules met (their causes, and who won),
the ``when`` errors, whether its ``unset`` was ignored, which of its ``unset`` names kept a
default out and which overrides its ``unset`` named. A :class:`Part` is one target's share
of those sums; a :class:`Tally` adds the parts of every target in scope, keeping what
messages list in order. The inheritance index replaces a target's parts whenever it
recomputes the target, so a policy's conditions cost the first items of its tally — never
a walk over its scope, which for a Fleet policy is every target: one namespace changing
then costs the same on a fleet of any size.
"""

from __future__ import annotations

from typing import NamedTuple, TypeVar

from clearance_core.inherit.accesspolicy import CompiledAccessPolicy
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.merge import EffectivePolicy, Fate
from clearance_core.inherit.words import Ordered, cause

_K = TypeVar("_K")


class Part(NamedTuple):
    """One policy's share in one target's effective policy."""

    #: Its rules the target holds.
    held: tuple[str, ...]
    #: Its other rules, each with why the target does not hold it.
    fates: tuple[tuple[str, Fate], ...]
    #: The runtime error of one of its ``when`` conditions on this target.
    error: str | None
    #: Whether its ``unset`` was ignored here (unset forbidden system-wide).
    unset_ignored: bool
    #: (rule it unsets, source of the override holding that rule here).
    unset_overrides: frozenset[tuple[str, str]]
    #: The names of its ``unset`` that kept a higher policy's default out here.
    unset_used: frozenset[str] = frozenset()


class Shape(NamedTuple):
    """What a part is computed from, of a policy: worked out once per policy version."""

    key: str
    names: tuple[str, ...]  # its rule names, each once
    unset: tuple[str, ...]
    unset_names: frozenset[str]  # the same, as a set (for set operations)


def shape(policy: CompiledAccessPolicy) -> Shape:
    return Shape(policy.key, tuple(policy.rule_names()), policy.unset, frozenset(policy.unset))


_NONE: frozenset[tuple[str, str]] = frozenset()


def part(of: Shape, effective: EffectivePolicy,
         kept: list[tuple[int, frozenset[str]]] | None = None) -> Part:
    """``kept``: the target's :meth:`~EffectivePolicy.kept_sets`, when several parts of
    one target are computed."""
    key, rules = of.key, effective.rules
    held: list[str] = []
    fates: list[tuple[str, Fate]] = []
    for name in of.names:
        found = rules.get(name)
        if found is not None and found.source == key:
            held.append(name)
        else:
            fate = effective.fate(key, name)
            assert fate is not None
            fates.append((name, fate))
    overrides = _NONE if not of.unset else frozenset(
        (name, found.source) for name in of.unset
        if (found := rules.get(name)) is not None and found.block == "overrides")
    return Part(tuple(held), tuple(fates), effective.errors.get(key) if effective.errors
                else None, key in effective.unset_ignored, overrides,
                effective.unset_used(key, of.unset_names, kept))


def _bump(counts: dict[_K, int], key: _K, by: int) -> bool:
    """Count ``key`` ``by`` more; whether it appeared or vanished."""
    left = counts.get(key, 0) + by
    if left:
        counts[key] = left
        return left == by
    del counts[key]
    return True


class Tally:
    """The parts of one policy over the targets in its scope, and their sums.

    The conditions read which rule names are held somewhere, which fates were met, the
    errors, whether an unset was ignored anywhere, which overrides an unset named, and
    whether the scope is empty (the target does not exist) — never how many targets
    each counts. ``version`` moves exactly when one of those moves, so the conditions
    of a policy whose version stayed are the same."""

    __slots__ = ("bys", "cause_rules", "causes", "error_lines", "errors", "fates", "held",
                 "parts", "unclaimed", "unset_ignored", "unset_overrides", "unset_used",
                 "version", "winners")

    def __init__(self) -> None:
        self.parts: dict[Target, Part] = {}
        #: rule name -> targets holding it
        self.held: dict[str, int] = {}
        #: (rule name, fate) -> targets where that rule met that fate
        self.fates: dict[tuple[str, Fate], int] = {}
        #: target -> its ``when`` error
        self.errors: dict[Target, str] = {}
        #: The same as the message lists them: "<target>: <error>", in order.
        self.error_lines = Ordered()
        #: The causes of the fates (in order; each counted once per (rule, fate)), the
        #: rules that met each, the fates' lists of policies (each counted once per
        #: (rule, fate)) and the policies that won (each once per distinct list: a Fleet
        #: default block of 1,000 rules that 200 policies unset is one list, not 200,000
        #: winners to count at each change).
        self.causes = Ordered()
        self.cause_rules: dict[str, dict[str, int]] = {}
        self.bys: dict[tuple[str, ...], int] = {}
        self.winners = Ordered()
        #: (rule, fate) pairs that name no other policy (a ``when``, its own overrides)
        self.unclaimed = 0
        #: targets where the policy's ``unset`` was ignored
        self.unset_ignored = 0
        #: (rule unset, override source) -> targets
        self.unset_overrides: dict[tuple[str, str], int] = {}
        #: the names of the policy's unset that kept a higher default out, as one set per
        #: target (mostly the same set: the whole list) -> targets
        self.unset_used: dict[frozenset[str], int] = {}
        self.version = 0

    @classmethod
    def of(cls, policy: CompiledAccessPolicy, scope: list[EffectivePolicy]) -> Tally:
        """From scratch, over the effective policies of a scope."""
        tally = cls()
        for effective in scope:
            tally.put(effective.target, part(shape(policy), effective))
        return tally

    def unset_used_names(self) -> frozenset[str]:
        """The names of the policy's unset that kept a default out on some target."""
        return frozenset().union(*self.unset_used)

    def __len__(self) -> int:
        return len(self.parts)

    def clone(self) -> Tally:
        other = Tally()
        other.parts = dict(self.parts)
        other.held = dict(self.held)
        other.fates = dict(self.fates)
        other.errors = dict(self.errors)
        other.error_lines = self.error_lines.clone()
        other.causes = self.causes.clone()
        other.cause_rules = {text: dict(rules) for text, rules in self.cause_rules.items()}
        other.bys = dict(self.bys)
        other.winners = self.winners.clone()
        other.unclaimed = self.unclaimed
        other.unset_ignored = self.unset_ignored
        other.unset_overrides = dict(self.unset_overrides)
        other.unset_used = dict(self.unset_used)
        other.version = self.version
        return other

    def put(self, target: Target, found: Part) -> None:
        """Count ``found`` as the target's part (replacing what it had)."""
        self.drop(target)
        self.parts[target] = found
        self._count(target, found, 1)

    def drop(self, target: Target) -> None:
        found = self.parts.pop(target, None)
        if found is not None:
            self._count(target, found, -1)

    def _count(self, target: Target, found: Part, by: int) -> None:
        moved = len(self.parts) == (1 if by > 0 else 0)  # the scope became (non-)empty
        for name in found.held:
            moved |= _bump(self.held, name, by)
        for pair in found.fates:
            if _bump(self.fates, pair, by):
                self._fate(*pair, by)
                moved = True
        for unset in found.unset_overrides:
            moved |= _bump(self.unset_overrides, unset, by)
        if found.unset_used:
            moved |= _bump(self.unset_used, found.unset_used, by)
        if found.unset_ignored:
            self.unset_ignored += by
            moved |= self.unset_ignored == (1 if by > 0 else 0)
        if found.error is not None:
            moved = True
            if by > 0:
                self.errors[target] = found.error
            else:
                self.errors.pop(target, None)
            self.error_lines.count(f"{target}: {found.error}", by)
        self.version += moved

    def _fate(self, name: str, fate: Fate, by: int) -> None:
        """A (rule, fate) appeared (``by`` 1) or vanished (-1) in this policy's scope."""
        text = cause(fate)
        self.causes.count(text, by)
        rules = self.cause_rules.setdefault(text, {})
        _bump(rules, name, by)
        if not rules:
            del self.cause_rules[text]
        if not fate.by:
            self.unclaimed += by
        elif _bump(self.bys, fate.by, by):  # a list of policies appeared or vanished
            for winner in set(fate.by):
                self.winners.count(winner, by)


def _same_provenance(old: EffectivePolicy, new: EffectivePolicy) -> bool:
    """Whether every part is the same in both (given the same shapes)."""
    if (old.policies != new.policies or old.unset_ignored != new.unset_ignored
            or old.errors != new.errors or len(old.rules) != len(new.rules)
            or old.fates != new.fates or old.kept_out != new.kept_out):
        return False
    for (name, before), (other, after) in zip(old.rules.items(), new.rules.items(),
                                              strict=True):
        if name != other or before.source != after.source or before.block != after.block:
            return False
    return True


class Tallies:
    """Every policy's tally, and the shapes of the policies. A copy (a simulation's)
    shares the tallies until one of the two changes one: that one copies it first."""

    __slots__ = ("_owned", "_reshaped", "_shapes", "_tallies")

    def __init__(self) -> None:
        self._tallies: dict[str, Tally] = {}
        self._owned: set[str] = set()  # the tallies no copy shares
        self._shapes: dict[str, Shape] = {}
        #: The last policy whose shape changed: its stored parts are stale until every
        #: target of its scope is replaced (which the same index event does).
        self._reshaped: str | None = None

    def copy(self) -> Tallies:
        other = Tallies()
        other._tallies = dict(self._tallies)
        other._shapes = dict(self._shapes)
        other._reshaped = self._reshaped
        self._owned = set()
        return other

    def get(self, key: str) -> Tally:
        """The policy's tally (read only; empty when it takes part nowhere)."""
        return self._tallies.get(key) or Tally()

    def shape(self, policy: CompiledAccessPolicy) -> None:
        """A policy added or changed (before the targets in its scope are replaced)."""
        found = shape(policy)
        if self._shapes.get(policy.key) != found:
            self._shapes[policy.key] = found
            self._reshaped = policy.key

    def forget(self, key: str) -> None:
        self._shapes.pop(key, None)

    def replace(self, target: Target, old: EffectivePolicy | None,
                new: EffectivePolicy | None) -> list[str]:
        """A target's effective policy went from ``old`` to ``new`` (``None``: none):
        replace the parts it gives the policies on its path; returns the policies whose
        tally's version moved (whose conditions may have).

        A part depends on the policy's shape and on the provenance of the target's
        effective policy (who holds each rule, the fates, errors and ignored unsets), not
        on the rules' contents: when a policy changes its rules' subjects — the usual
        change — the provenance of every target below it stays the same and no part is
        recomputed, bar those of a policy whose shape changed."""
        if new is None:
            parts = {}
        elif old is not None and _same_provenance(old, new):
            stale = self._reshaped
            if stale is None or stale not in new.policies:
                return []
            parts = {stale: part(self._shapes[stale], new)}
        else:
            kept = new.kept_sets() if new.kept_out else None
            parts = {key: part(self._shapes[key], new, kept) for key in new.policies}
        changed = [key for key in (old.policies if old is not None else ())
                   if key not in parts and (new is None or key not in new.policies)]
        changed += [key for key, found in parts.items()
                    if (tally := self._tallies.get(key)) is None
                    or tally.parts.get(target) != found]
        moved = []
        for key in changed:
            tally = self._own(key)
            version = tally.version
            if key in parts:
                tally.put(target, parts[key])
            else:
                tally.drop(target)
                if not tally:
                    del self._tallies[key]
                    self._owned.discard(key)
            if tally.version != version:
                moved.append(key)
        return moved

    def _own(self, key: str) -> Tally:
        tally = self._tallies.get(key)
        if tally is None or key not in self._owned:
            tally = self._tallies[key] = Tally() if tally is None else tally.clone()
            self._owned.add(key)
        return tally
