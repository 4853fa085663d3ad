"""The words AccessPolicy conditions are made of, shared by the tallies (which keep the
causes in order as they change) and :mod:`clearance_core.inherit.status` (which writes
the messages). Every list in a message is bounded: :data:`LIST_LIMIT` items, then how
many more, so a policy over thousands of targets keeps a readable status."""

from __future__ import annotations

import functools
from bisect import bisect_left, insort
from collections.abc import Iterable

from clearance_core.inherit.merge import Fate

LIST_LIMIT = 20


def listed(shown: list[str], total: int, sep: str = ", ") -> str:
    """The first items of a list (cut to its limit already), then how many more."""
    more = total - len(shown)
    return f"{sep.join(shown)} and {more} more" if more > 0 else sep.join(shown)


def names(items: Iterable[str]) -> str:
    unique = sorted(set(items))
    return listed(unique[:LIST_LIMIT], len(unique))


_ATOMIC = {"defaults": "its atomic defaults", "rules": "its rules (atomic defaults)"}


# A Fleet policy's status names a cause per policy that won over it, recomputed whenever
# one of them moves: the same fates come back event after event.
@functools.lru_cache(maxsize=1 << 16)
def cause(fate: Fate) -> str:
    """Why a rule is not held somewhere, as the Enforced message says it: the real cause,
    never the policy itself as a winner (:class:`~clearance_core.inherit.merge.Fate`)."""
    if fate.kind == "unset":
        return f"unset by {names(fate.by)}" if fate.by else "unset"
    if fate.kind in ("when_false", "when_error"):
        outcome = "is false" if fate.kind == "when_false" else "failed"
        return f"not applied: spec.{fate.block or 'defaults'}.when {outcome}"
    if fate.kind == "not_applied":
        block = _ATOMIC.get(fate.block or "defaults", "its atomic defaults")
        return (f"not applied: {block} were replaced as a whole by the rules of "
                f"{names(fate.by)}" if fate.by else "not applied")
    if fate.kind == "replaced":
        return "replaced by its own atomic overrides"
    return f"overridden by {names(fate.by)}" if fate.by else "overridden"


class Ordered:
    """Distinct strings with how many times each is counted, kept sorted as they come and
    go, so a message's first items are read without sorting them all each time."""

    __slots__ = ("counts", "order")

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.order: list[str] = []  # the counted strings, sorted

    def clone(self) -> Ordered:
        other = Ordered()
        other.counts, other.order = dict(self.counts), list(self.order)
        return other

    def __len__(self) -> int:
        return len(self.order)

    def count(self, item: str, by: int) -> bool:
        """Count ``item`` ``by`` more (or fewer); whether it appeared or vanished."""
        left = self.counts.get(item, 0) + by
        if left > 0:
            self.counts[item] = left
            if left == by:
                insort(self.order, item)
                return True
            return False
        del self.counts[item]
        del self.order[bisect_left(self.order, item)]
        return True
