"""What governs a list inside one target: the filters lists, metrics and custom types
apply, with MonitorAccessPolicies and inherited AccessPolicies together (README: Inherited).

:func:`govern` takes the cluster's MonitorAccessPolicy outcome for an action and the
effective rules of the target the list is in, and applies the contract's order:

1. a matching inherited ``Deny`` rule: nothing is visible;
2. else the MonitorAccessPolicy that decided the cluster: its rule's filters (nothing,
   if it denied or does not grant the action);
3. else the matching inherited ``Allow`` rules granting the action, together: an item
   is visible if any of them shows it;
4. else nothing.

A :class:`Governing` is a union of rule views. Its aggregation include/exclude is the
intersection of theirs — a value shows only if every governing rule lets it — the
fail-closed reading where rules disagree (visibility of items is the union, as the
contract says; a number must not leak what one of the rules hides).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

from clearance_api.wire import DecisionKind
from clearance_core.inherit.decide import access_view, matching
from clearance_core.inherit.merge import EffectiveRule
from clearance_core.kube.principal import Identity
from clearance_core.kube.resources import plural
from clearance_core.monitor.aggregate import select
from clearance_core.monitor.evaluate import Outcome
from clearance_core.monitor.filters import BUILTIN_TYPES, Item, RuleView, rule_view

T = TypeVar("T", bound=Item)
_RANK: dict[DecisionKind, int] = {"deny": 0, "partial": 1, "allow": 2}


class Governing:
    """The rule views that decide what is visible (none: nothing is)."""

    __slots__ = ("views",)

    def __init__(self, views: Sequence[RuleView] = ()) -> None:
        self.views = tuple(views)

    def __bool__(self) -> bool:
        return bool(self.views)

    def type_decision(self, type_name: str) -> DecisionKind:
        """The most any view allows: an item may show if any view shows it."""
        best: DecisionKind = "deny"
        for view in self.views:
            found = view.type_decision(type_name)
            if _RANK[found] > _RANK[best]:
                best = found
        return best

    def type_decision_in(self, type_name: str, namespace: str) -> DecisionKind:
        """A whole type asked inside ``namespace``, as ``check`` answers it: a view that
        hides every item of the type there (:meth:`RuleView.namespace_hides`) shows
        none."""
        best: DecisionKind = "deny"
        for view in self.views:
            found = view.type_decision(type_name)
            if found != "deny" and view.namespace_hides(type_name, namespace) is not None:
                found = "deny"
            if _RANK[found] > _RANK[best]:
                best = found
        return best

    def item_visible(self, type_name: str, item: Item) -> tuple[bool, str | None]:
        """(visible, what hid it under the first view) — visible if any view shows it."""
        reason: str | None = "denied"
        for index, view in enumerate(self.views):
            shown, hidden_by = view.item_visible(type_name, item)
            if shown:
                return True, None
            if index == 0:
                reason = hidden_by
        return False, reason

    def filter_items(self, type_name: str, items: Sequence[T]) -> list[T]:
        """The items some view shows, in input order."""
        if len(self.views) == 1:
            return cast("list[T]", self.views[0].filter_items(type_name, items))
        shown: set[int] = set()
        for view in self.views:
            shown.update(id(item) for item in view.filter_items(type_name, items))
        return [item for item in items if id(item) in shown]

    def custom_types(self) -> set[str]:
        """Custom types some view lists with a visibility other than none."""
        return {kind for view in self.views for kind, raw in view.filters_map().items()
                if kind not in BUILTIN_TYPES and raw.get("visibility", "all") != "none"}

    def select(self, values: dict[str, Any], type_name: str) -> dict[str, Any]:
        """The aggregations every view lets through (its include/exclude)."""
        for view in self.views:
            flt = view.filter_for(plural(type_name))
            if flt is not None:
                values = select(values, flt.aggregations_include, flt.aggregations_exclude)
        return values


NOTHING = Governing()


def govern(outcome: Outcome, rules: Mapping[str, EffectiveRule], identity: Identity,
           action: str, declared: frozenset[str] | None = None) -> Governing:
    """``outcome``: the cluster's MonitorAccessPolicy evaluation for ``action``;
    ``rules``: the effective rules of the target (empty: no inherited policy);
    ``declared``: the custom types some MetricSource declares (others are hidden)."""
    matched = matching(rules, identity) if rules else []
    if any(found.rule.effect == "Deny" for _, found in matched):
        return NOTHING
    if outcome.order is not None:  # a MonitorAccessPolicy decided
        if outcome.decision != "allow" or outcome.rule is None:
            return NOTHING
        return Governing((rule_view(outcome.rule),))
    return Governing([access_view(found.rule, declared) for _, found in matched
                      if action in found.rule.permissions])


def combined(decisions: Iterable[DecisionKind]) -> DecisionKind:
    """One list's decision over the targets its items are in: allow if every target
    allows the type, deny if every one denies it, else partial."""
    found = set(decisions)
    if found <= {"allow"}:
        return "allow" if found else "deny"
    if found == {"deny"}:
        return "deny"
    return "partial"
