"""The effective policy of one target: the fold of its path's policies (README: Inherited).

Sort the policies on the target's path from lowest to highest (:meth:`precedence`
reversed: the most specific level first; at one level the newest first, then
``namespace/name`` descending), start from an empty policy and merge each into it:

* bare ``rules`` merge as an atomic block of defaults; otherwise the ``defaults`` block,
  then the ``overrides`` block, each seeing the result so far; then the policy's ``unset``
  joins the accumulated ``unset`` (unless unset is forbidden: then it is recorded as
  ignored, for the policy's status);
* a block applies only if its ``when`` is true for ``self`` = the accumulated policy; a
  runtime error counts as false and is recorded (the policy's Enforced becomes Unknown).
  ``self`` is converted for the engine once per state of the accumulated policy (states
  change only when a block or an ``unset`` changes something), and the whole merge spends
  at most :data:`clearance_core.inherit.conditions.BUDGET` on its conditions (beyond it, a
  condition is a runtime error);
* defaults: drop the block's rules named in the accumulated ``unset``; an empty accumulated
  policy takes the block's rules, otherwise ``atomic`` changes nothing and ``merge`` adds
  each rule whose name is absent;
* overrides: ``atomic`` replaces all rules by the block's, ``merge`` sets each by name;
  ``unset`` never removes an override (it only filters defaults as they arrive).

Every effective rule keeps its provenance (source policy and block). The fold also keeps,
for every rule of every policy on the path that did not end up in the result, why not
(:class:`Fate`), and which ``unset`` kept which default out: that is what the policies'
Enforced conditions are computed from. A fate names the real cause, decided where it
happened: a block whose ``when`` is false was not applied (whoever holds that name), an
atomic default block that met lower rules was not applied as a whole (same-named rules
included), a default kept out by ``unset`` was unset only if the block would have added
it (not when a lower rule holds the name, nor when the atomic block gives way anyway), and
a policy's own atomic overrides replace its own defaults — a policy never overrides
itself. A rule a policy sets in both blocks has the fate of its override (the block that
would have won, as :meth:`CompiledAccessPolicy.block_of` says).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import msgspec

from clearance_core.inherit import cel_cost, conditions
from clearance_core.inherit.accesspolicy import AccessRule, Block, BlockKind, CompiledAccessPolicy
from clearance_core.inherit.hierarchy import Target

#: ``overridden``: another policy's rule of that name replaced it, or that policy's atomic
#: overrides replaced every rule; ``replaced``: the policy's own atomic overrides did;
#: ``unset``: lower policies' ``unset`` kept the default out; ``not_applied``: its atomic
#: default block met lower policies' rules; ``when_false`` / ``when_error``: the ``when``
#: of the block naming it was false / failed.
FateKind = Literal["overridden", "replaced", "unset", "not_applied", "when_false",
                   "when_error"]


class EffectiveRule(msgspec.Struct, frozen=True, kw_only=True):
    rule: AccessRule
    source: str  # namespace/name of the policy it came from
    block: BlockKind

    def wire(self) -> dict[str, Any]:
        """The contract's ``{"rule": AccessRule as written, "source", "block"}``."""
        return {"rule": self.rule.raw, "source": self.source, "block": self.block}


class Fate(msgspec.Struct, frozen=True, kw_only=True):
    """Why a policy's rule is not in a target's effective policy, and who won."""

    kind: FateKind
    #: The other policies that decided it (never the policy itself): the winner
    #: (``overridden``), the lower policies whose rules were there (``not_applied``,
    #: sorted), the policies that unset it (``unset``, lowest first).
    by: tuple[str, ...] = ()
    #: The policy's block concerned: whose ``when`` (``when_*``), which atomic block
    #: (``not_applied``: ``defaults`` or bare ``rules``).
    block: BlockKind | None = None


_NO_NAMES: frozenset[str] = frozenset()


class EffectivePolicy(msgspec.Struct, frozen=True, kw_only=True):
    target: Target
    rules: dict[str, EffectiveRule] = {}
    unset: tuple[str, ...] = ()
    #: The policies on the path that took part, highest first (the contract's order).
    policies: tuple[str, ...] = ()
    #: policy -> rule name -> why that rule of the policy is not held here.
    fates: dict[str, dict[str, Fate]] = {}
    #: policy -> the runtime error of one of its ``when`` conditions here.
    errors: dict[str, str] = {}
    #: Policies whose ``unset`` was ignored because unset is forbidden system-wide.
    unset_ignored: tuple[str, ...] = ()
    #: The names of defaults an ``unset`` kept out here, by the index in ``policies`` of
    #: the highest policy whose default of that name was kept out: every policy below it
    #: that unsets the name kept it out (:meth:`unset_used`). Each name once, however many
    #: policies unset it, under one of few indexes (the policies with such defaults).
    kept_out: dict[int, tuple[str, ...]] = {}

    @property
    def affected_by(self) -> list[str]:
        """The policies that contributed a rule, in path order (highest first)."""
        sources = {rule.source for rule in self.rules.values()}
        return [key for key in self.policies if key in sources]

    def holds(self, policy: str, rule: str | None = None) -> bool:
        """Whether this target enforces the policy's rules (any of them) or that rule."""
        if rule is not None:
            found = self.rules.get(rule)
            return found is not None and found.source == policy
        return any(found.source == policy for found in self.rules.values())

    def fate(self, policy: str, rule: str) -> Fate | None:
        """None when the rule of that policy is held here; else why it is not: the cause
        the merge noted (a rule of a block whose ``when`` is false is "not applied", not
        "overridden" by whoever holds its name)."""
        found = self.rules.get(rule)
        if found is not None and found.source == policy:
            return None
        noted = self.fates.get(policy, {}).get(rule)
        if noted is not None:
            return noted
        # Every rule of a policy on the path that is not held was noted; this is for a
        # policy the merge did not see (none is asked about).
        return Fate(kind="overridden", by=(found.source,) if found is not None else ())

    def kept_sets(self) -> list[tuple[int, frozenset[str]]]:
        """:attr:`kept_out` as sets, for :meth:`unset_used` (built once per target)."""
        return [(at, frozenset(names)) for at, names in self.kept_out.items()]

    def unset_used(self, policy: str, unset: frozenset[str],
                   kept: list[tuple[int, frozenset[str]]] | None = None) -> frozenset[str]:
        """The names of ``unset`` (the policy's) that kept a higher default out here;
        ``kept``: :meth:`kept_sets`. Set operations, not a loop over the names (a policy
        may unset 1,000 names, on every target of its scope), and ``unset`` itself when
        each of its names kept a default out (the usual case of a long list)."""
        if not self.kept_out or not unset:
            return _NO_NAMES
        try:
            rank = self.policies.index(policy)
        except ValueError:
            return _NO_NAMES
        below = [names for at, names in (self.kept_sets() if kept is None else kept)
                 if at < rank]
        if not below:
            return _NO_NAMES
        names = below[0] if len(below) == 1 else frozenset().union(*below)
        return unset if unset <= names else unset & names

    def wire(self) -> dict[str, Any]:
        """The ``clearance.v1.effective`` reply body (without revision/request_id)."""
        return {"target": msgspec.to_builtins(self.target),
                "rules": {name: rule.wire() for name, rule in sorted(self.rules.items())},
                "policies": list(self.policies), "affected_by": self.affected_by}


class _Accumulator:
    """The effective policy being built, plus the bookkeeping for statuses.

    The rules and the unset list change only through :meth:`put`, :meth:`clear` and
    :meth:`unset_by`, which keep what conditions see current: the rules as written
    (``self.rules``), their size and shape, and the :class:`~conditions.View` of the
    current state, dropped at each change. The view holds the live ``_raw`` and
    ``_unset`` containers, not copies: the engine converts them at the first evaluation
    that reads ``self`` and keeps that value, and a dropped view is never evaluated again,
    so a state costs one conversion and no Python-side copy."""

    def __init__(self) -> None:
        self.rules: dict[str, EffectiveRule] = {}
        self.unset: dict[str, list[str]] = {}  # rule name -> the policies that unset it
        self.fates: dict[str, dict[str, Fate]] = {}
        self.errors: dict[str, str] = {}
        self.unset_ignored: list[str] = []
        #: How many policies have merged, and for each name how many had when a default
        #: of it was last kept out: an unset kept it out iff that happened after it joined.
        self.merged = 0
        self.kept_out: dict[str, int] = {}
        # rule name -> ``unset[name]`` as a tuple (a fate's ``by``), built once per change
        # of that list: a default block of 1,000 rules that 200 policies unset notes each
        # rule in O(1), and the whole merge costs time linear in the unset lists.
        self._unsetters: dict[str, tuple[str, ...]] = {}
        self.budget = conditions.Budget()
        self._raw: dict[str, Any] = {}
        self._unset: list[str] = []
        self._sizes: dict[int, int] = {}  # a rule's size, by its raw value's identity
        self._stats = conditions.Stats()
        self._stale_stats = False  # a rule was replaced: recount before the next view
        self._view: conditions.View | None = None

    def put(self, name: str, rule: EffectiveRule) -> None:
        replaced = name in self.rules
        self.rules[name] = rule
        self._raw[name] = rule.rule.raw
        self._view = None
        if replaced:
            self._stale_stats = True
        elif not self._stale_stats:
            self._stats.add_rule(name, self._size(rule.rule.raw))

    def clear(self) -> None:
        self.rules, self._raw = {}, {}
        self._stats = conditions.Stats(unset=self._stats.unset)
        self._stale_stats = False
        self._view = None

    def unset_by(self, policy: str, names: tuple[str, ...]) -> None:
        """``policy`` unsets ``names`` (a policy lists a name once, and merges once)."""
        unset, cached = self.unset, self._unsetters
        for name in names:
            found = unset.get(name)
            if found is None:
                unset[name] = [policy]
                self._unset.append(name)
                self._stats.add_unset(name)
                self._view = None
            else:
                found.append(policy)
                if cached:
                    cached.pop(name, None)

    def unsetters(self, name: str) -> tuple[str, ...]:
        """Every policy merged so far that unsets ``name``, lowest first."""
        found = self._unsetters.get(name)
        if found is None:
            found = self._unsetters[name] = tuple(self.unset[name])
        return found

    def _size(self, raw: Any) -> int:
        size = self._sizes.get(id(raw))
        if size is None:
            size = self._sizes[id(raw)] = cel_cost.measure(raw)
        return size

    def self_value(self) -> dict[str, Any]:
        """``self`` built afresh (what the straightforward evaluation reads)."""
        return {"rules": {name: rule.rule.raw for name, rule in self.rules.items()},
                "unset": list(self.unset)}

    def view(self) -> conditions.View:
        if self._view is None:
            if self._stale_stats:
                stats = conditions.Stats(unset=self._stats.unset)
                for name, raw in self._raw.items():
                    stats.add_rule(name, self._size(raw))
                self._stats, self._stale_stats = stats, False
            self._view = conditions.View({"rules": self._raw, "unset": self._unset},
                                         self._stats)
        return self._view

    def note(self, policy: str, rule: str, kind: FateKind, by: tuple[str, ...] = (),
             block: BlockKind | None = None) -> None:
        """Why ``rule`` of ``policy`` is not (or no longer) in; ``by`` never holds the
        policy itself (the callers see to it: a policy's own rules come before its unset,
        and its own atomic overrides note ``replaced``)."""
        self.fates.setdefault(policy, {})[rule] = Fate(kind=kind, by=by, block=block)

    def sources(self) -> tuple[str, ...]:
        return tuple(sorted({rule.source for rule in self.rules.values()}))


def _applies(acc: _Accumulator, block: Block, policy: str) -> bool:
    if block.when is None:
        return True
    error: str | None
    if acc.budget.spent_out:  # no view to build: it would not be evaluated
        result, error = False, conditions.BUDGET_SPENT
    else:
        result, error = conditions.evaluate_in(block.when, acc.view(), acc.budget)
    if error is not None:
        acc.errors.setdefault(policy, f"spec.{block.kind}.when: {error}")
    if not result:
        kind: FateKind = "when_error" if error is not None else "when_false"
        for name in block.rules:
            acc.note(policy, name, kind, block=block.kind)
    return result


def _unset(acc: _Accumulator, policy: str, name: str) -> None:
    """The default ``name`` of ``policy`` would have gone in: the unset kept it out."""
    acc.note(policy, name, "unset", acc.unsetters(name))
    acc.kept_out[name] = acc.merged


def _defaults(acc: _Accumulator, block: Block, policy: str) -> None:
    if acc.rules and block.strategy == "atomic":
        # The lower rules replace the whole block: none of it is applied, whatever the
        # names (an unset of one of them changes nothing either).
        lower = acc.sources()
        for name in block.rules:
            acc.note(policy, name, "not_applied", lower, block.kind)
        return
    for name, rule in block.rules.items():
        holder = acc.rules.get(name)
        if holder is not None:  # merge: the lower rule of that name stays
            acc.note(policy, name, "overridden", (holder.source,))
        elif name in acc.unset:
            _unset(acc, policy, name)
        else:
            acc.put(name, EffectiveRule(rule=rule, source=policy, block=block.kind))


def _overrides(acc: _Accumulator, block: Block, policy: str) -> None:
    if block.strategy == "atomic":
        for name, replaced in acc.rules.items():
            if replaced.source == policy:  # its own default, or bare rule: not "by itself"
                acc.note(policy, name, "replaced")
            else:
                acc.note(replaced.source, name, "overridden", (policy,))
        if acc.rules:
            acc.clear()
    else:
        for name in block.rules:
            holder = acc.rules.get(name)
            if holder is not None and holder.source != policy:
                acc.note(holder.source, name, "overridden", (policy,))
    for name, rule in block.rules.items():
        acc.put(name, EffectiveRule(rule=rule, source=policy, block="overrides"))


def _merge_policy(acc: _Accumulator, policy: CompiledAccessPolicy, *, allow_unset: bool) -> None:
    """Merge one policy into the accumulated policy (the RFC's "merge p1 into p2")."""
    key = policy.key
    for block in policy.blocks:
        if not _applies(acc, block, key):
            continue
        if block.kind == "overrides":
            _overrides(acc, block, key)
        else:
            _defaults(acc, block, key)
    if not policy.unset:
        return
    if not allow_unset:
        acc.unset_ignored.append(key)
        return
    acc.unset_by(key, policy.unset)


def _kept_out(counts: dict[str, int], merged: int) -> dict[int, tuple[str, ...]]:
    """From name -> how many policies had merged to the index in ``policies`` (highest
    first) -> names."""
    found: dict[int, list[str]] = {}
    for name, count in counts.items():
        found.setdefault(merged - count, []).append(name)
    return {at: tuple(sorted(names)) for at, names in sorted(found.items())}


def lowest_first(policies: Iterable[CompiledAccessPolicy]) -> list[CompiledAccessPolicy]:
    """The fold order: the reverse of precedence (each key is unique, so this is total)."""
    return sorted(policies, key=CompiledAccessPolicy.precedence, reverse=True)


def effective_policy(target: Target, policies: Iterable[CompiledAccessPolicy], *,
                     allow_unset: bool = True) -> EffectivePolicy:
    """The effective policy of ``target`` from the policies on its path (any order;
    the caller has already left out invalid policies and those off the path)."""
    ordered = lowest_first(policies)
    acc = _Accumulator()
    for policy in ordered:
        acc.merged += 1
        _merge_policy(acc, policy, allow_unset=allow_unset)
    # Keep a fate only for rules that did not end up held by their policy.
    fates: dict[str, dict[str, Fate]] = {}
    for policy_key, notes in acc.fates.items():
        for name, fate in notes.items():
            holder = acc.rules.get(name)
            if holder is None or holder.source != policy_key:
                fates.setdefault(policy_key, {})[name] = fate
    return EffectivePolicy(
        target=target,
        rules=dict(sorted(acc.rules.items())),
        unset=tuple(acc.unset),
        policies=tuple(policy.key for policy in reversed(ordered)),
        fates=fates,
        errors=acc.errors,
        unset_ignored=tuple(acc.unset_ignored),
        kept_out=_kept_out(acc.kept_out, len(ordered)),
    )


def subjects_changed(before: EffectivePolicy | None,
                     after: EffectivePolicy | None) -> tuple[set[str], set[str]]:
    """(users, groups) whose decisions on the target can differ between two versions of
    its effective policy: the subjects of every rule added, removed or changed (a rule
    only ever concerns its own subjects). Service accounts are users (their usernames)."""
    old = before.rules if before is not None else {}
    new = after.rules if after is not None else {}
    users: set[str] = set()
    groups: set[str] = set()
    for name in {*old, *new}:
        if old.get(name) == new.get(name):
            continue
        for found in (old.get(name), new.get(name)):
            if found is not None:
                users.update(found.rule.users, found.rule.service_accounts)
                groups.update(found.rule.groups)
    return users, groups
