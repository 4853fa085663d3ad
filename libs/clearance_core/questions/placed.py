"""Lists judged item by item where each item lives: what ``filter``, ``metrics`` and
``custom-types`` apply, so they agree with ``check`` on every item in its namespace.

A :class:`Placed` holds, for one principal, action and cluster, what governs the
cluster's target (``here``) and each Namespace target that answers the principal
otherwise (``there``, :class:`clearance_core.questions.placement.NamespaceIndex`); every other
namespace reads the cluster's target, so ``here`` governs it. An item is visible as
``check`` would answer it:

* a node: by ``here`` (it lives in no namespace); a namespace item: by its own target;
* an item with a namespace: by that namespace's target;
* an operator with its availability (``namespaces``): if any namespace it is available
  in shows it, placed there — ``*`` meaning every namespace: any Namespace target, or
  ``here`` in some namespace that is not one of them (:meth:`Placed.elsewhere`);
* a namespaced item without a namespace: as ``check`` answers an item named without its
  namespace — shown by ``here`` and, placed in each, by every Namespace target.

A whole type is :func:`~clearance_core.inherit.govern.combined` over ``here`` and each target
(inside its namespace), exactly the decision kind of a whole-type ``check``
(:mod:`clearance_core.questions.spread`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

from clearance_api.wire import DecisionKind
from clearance_core.inherit.govern import Governing, combined
from clearance_core.kube.resources import CLUSTER_SCOPED, plural, singular
from clearance_core.monitor.filters import Item, RuleView

T = TypeVar("T", bound=Item)
#: Names tried for "some namespace that is no Namespace target" besides those a rule
#: names: any may do when nothing restricts namespaces.
_FRESH = ("default", "clearance-elsewhere-0")
#: What a wildcard's ``*`` is replaced with to name namespaces it matches.
_FILLERS = ("", "x", "clearance-0")


def placed_in(item: Item, namespace: str) -> Item:
    """The item as if it lived in ``namespace`` only (no other availability)."""
    return Item(name=item.name, namespace=namespace, labels=item.labels, fields=item.fields)


def _patterns(raw: Mapping[str, Any] | None, dimension: str) -> list[str]:
    """The ``allowed`` patterns of one dimension of a filter as written."""
    if not raw:
        return []
    inner = raw.get("filters") or {}
    found = inner.get(dimension) if isinstance(inner, dict) else None
    allowed = found.get("allowed") if isinstance(found, dict) else None
    return [str(p) for p in allowed or () if p is not None]


def _named(view: RuleView, kind: str) -> list[str]:
    """Namespace names a view's namespace filters let through, found from what they
    allow (a wildcard instantiated a few ways), and a few fresh names."""
    written = view.filters_map()
    patterns = [*_patterns(written.get("namespaces"), "names"),
                *_patterns(written.get("namespaces"), "namespaces"),
                *_patterns(written.get(kind), "namespaces")]
    names = list(_FRESH)
    for pattern in patterns:
        for filler in _FILLERS:
            names.append(pattern.replace("*", filler).replace("?", "x"))
    return list(dict.fromkeys(names))


def placed_spreads(type_name: str, item: Item) -> bool:
    """Whether a list item is weighed against every Namespace target: a namespaced item
    without a namespace, or an operator available in ``*``."""
    kind = plural(type_name)
    if singular(kind) in CLUSTER_SCOPED or kind == "namespaces":
        return False
    if kind == "operators" and item.namespaces:
        return "*" in item.namespaces
    return item.namespace is None


class Placed:
    """What governs one action on the items of one cluster, target by target."""

    __slots__ = ("here", "there")

    def __init__(self, here: Governing, there: Mapping[str, Governing] | None = None
                 ) -> None:
        self.here = here
        self.there = dict(there or {})

    def at(self, namespace: str | None) -> Governing:
        """What governs items living in ``namespace`` (None: in no namespace)."""
        if namespace is None:
            return self.here
        return self.there.get(namespace, self.here)

    def governings(self) -> list[Governing]:
        return [self.here, *self.there.values()]

    def type_decision(self, type_name: str) -> DecisionKind:
        """The whole type in the cluster, as a whole-type ``check`` decides it."""
        kind = plural(type_name)
        if not self.there or singular(kind) in CLUSTER_SCOPED:
            return self.here.type_decision(kind)
        return combined([self.here.type_decision(kind),
                         *(found.type_decision_in(kind, namespace)
                           for namespace, found in self.there.items())])

    def custom_types(self) -> set[str]:
        """The custom types some item of the cluster may show: listed with a visibility
        other than none by ``here``, or by a Namespace target inside its namespace."""
        types = self.here.custom_types()
        for namespace, found in self.there.items():
            types |= {kind for kind in found.custom_types()
                      if found.type_decision_in(kind, namespace) != "deny"}
        return types

    def elsewhere(self, kind: str, item: Item) -> bool:
        """Whether ``here`` shows ``item`` in some namespace that is no Namespace target
        of ``there``: tried on the namespaces its filters name and a few fresh names, so
        a namespace it cannot name is not counted (fail closed)."""
        for view in self.here.views:
            for namespace in _named(view, kind):
                if namespace not in self.there and \
                        view.item_visible(kind, placed_in(item, namespace))[0]:
                    return True
        return False

    def item_visible(self, type_name: str, item: Item) -> bool:
        kind = plural(type_name)
        if singular(kind) in CLUSTER_SCOPED:
            return self.here.item_visible(kind, item)[0]
        if kind == "namespaces":
            return self.at(item.name).item_visible(kind, item)[0]
        if kind == "operators" and item.namespaces:
            return any(self._available(kind, item, namespace)
                       for namespace in item.namespaces)
        if item.namespace is not None:
            return self.at(item.namespace).item_visible(kind, item)[0]
        return self.here.item_visible(kind, item)[0] and all(
            found.item_visible(kind, placed_in(item, namespace))[0]
            for namespace, found in self.there.items())

    def _available(self, kind: str, item: Item, namespace: str) -> bool:
        if namespace == "*":
            return self.elsewhere(kind, item) or any(
                found.item_visible(kind, placed_in(item, other))[0]
                for other, found in self.there.items())
        return self.at(namespace).item_visible(kind, placed_in(item, namespace))[0]

    def visible(self, type_name: str, items: Sequence[T]) -> list[T]:
        """The visible items, in input order. Items of one target are filtered together
        (:meth:`Governing.filter_items`); operators with their availability and
        namespaced items without a namespace one by one."""
        kind = plural(type_name)
        if singular(kind) in CLUSTER_SCOPED or (not self.there and kind != "operators"):
            return self.here.filter_items(kind, items)  # one target governs them all
        groups: dict[str | None, list[T]] = {}
        single: list[T] = []
        for item in items:
            if kind == "namespaces":
                home: str | None = item.name
            elif kind == "operators" and item.namespaces:
                single.append(item)
                continue
            else:
                home = item.namespace
            if home is None and self.there:
                single.append(item)
                continue
            groups.setdefault(home if home in self.there else None, []).append(item)
        if not single and len(groups) <= 1:
            return self.at(next(iter(groups), None)).filter_items(kind, items)
        shown: set[int] = set()
        for home, members in groups.items():
            shown.update(id(item) for item in self.at(home).filter_items(kind, members))
        shown.update(id(item) for item in single if self.item_visible(kind, item))
        return [item for item in items if id(item) in shown]


def all_of(placed: Iterable[Placed]) -> Governing:
    """Every view of every target, as one Governing: aggregations pass only what every
    rule involved lets through."""
    return Governing([view for found in placed for governing in found.governings()
                      for view in governing.views])


def as_items(items: Sequence[Any]) -> Sequence[Item]:
    """Wire items (``ListItem``) carry exactly what an ``Item`` is matched on."""
    return cast("Sequence[Item]", items)
