"""Resource filters (README: Policy semantics), compiled once into matchers.

A rule's ``resources`` entries arrive as the dicts users wrote. ``compile_filter``
validates one and turns every dimension into a pair of :class:`NameSet` (allowed,
denied), so checking an item costs a few set lookups and at most one regex call per
dimension; nothing is re-parsed per item. :class:`RuleView` holds the filters of the one
rule that matched a cluster and applies the namespace rule on top of each type's own
filter, so the namespace a pod lives in is enforced even when the rule lists no pod
filter (ClusterPulse's Go engine did not cascade it; see the implementation notes, 4.3).

Choices the contract leaves open, made fail-closed:

* An absent value (no such field, a ``null`` field, no namespace) matches no inclusion
  and no exclusion: a dimension with inclusions hides it, one with only exclusions passes
  it (ClusterPulse compared a missing field as ``""``, which ``denied: [""]`` could hit).
* ``visibility: all`` shows every item even when ``filters`` are written (the contract
  and the ClusterPulse documents say so); only ``filtered`` applies them.
* An operator's ``namespaces`` (where it is available) are consulted only for operators,
  so no other item can claim ``["*"]`` to slip past a namespace filter.
* The namespace rule uses the ``namespaces`` filter's ``names`` and ``namespaces``
  dimensions, both matched against the namespace name (a namespace item is its own
  namespace); its labels and fields cannot be known for a pod and do not cascade.
* Two entries of one type in one rule: the first in spec order wins, like rules.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, Protocol

import msgspec

from clearance_api.errors import InvalidObject
from clearance_api.wire import DecisionKind
from clearance_core.kube import objects
from clearance_core.kube.resources import BUILTIN_PLURALS, plural
from clearance_core.monitor.wildcard import NameSet, compiled

Visibility = Literal["all", "none", "filtered"]
FieldValue = str | int | float | bool | None

BUILTIN_TYPES = frozenset(BUILTIN_PLURALS.values())
#: Built-in types whose items live in a namespace: the namespace rule applies to them.
NAMESPACED_TYPES = frozenset({"pods", "operators", "alerts", "events"})
#: Namespaced types whose items may also belong to no namespace (a node's event, a
#: cluster-wide alert): such an item is inside no namespace, so the namespace rule's
#: name lists cannot hide it; only ``visibility: none`` on namespaces does (the whole type
#: is then denied, and every item of it must be hidden too).
CLUSTER_SCOPED_TOO = frozenset({"alerts", "events"})
_VISIBILITIES = ("all", "none", "filtered")
_json = msgspec.json.Encoder()


def text_of(value: object) -> str | None:
    """The string form a filter compares: JSON form for numbers, ``true``/``false``.

    ``None`` (JSON null) and non-finite floats (no JSON form) count as absent.
    """
    if value is None:
        return None
    if type(value) is str:  # the common case first: this runs per item
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float) and not math.isfinite(value):
        return None
    try:
        return _json.encode(value).decode()
    except TypeError:
        return str(value)


class Dimension(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One filter dimension: exclusions win, no inclusions means "not excluded passes"."""

    allowed: NameSet = msgspec.field(default_factory=NameSet)
    denied: NameSet = msgspec.field(default_factory=NameSet)

    def __bool__(self) -> bool:
        return bool(self.allowed) or bool(self.denied)

    def passes(self, value: str | None) -> bool:
        if value is None:  # absent: matches neither list
            return not self.allowed
        if self.denied.matches(value):
            return False
        return not self.allowed or self.allowed.matches(value)


class ResourceFilter(msgspec.Struct, frozen=True, kw_only=True):
    """One compiled resource filter; msgpack-encodable so the compiler can store it."""

    type: str  # plural for built-ins, exact name for custom types
    visibility: Visibility = "all"
    names: Dimension = msgspec.field(default_factory=Dimension)
    namespaces: Dimension = msgspec.field(default_factory=Dimension)
    labels: dict[str, str] = {}
    fields: dict[str, Dimension] = {}
    aggregations_include: tuple[str, ...] = ()
    aggregations_exclude: tuple[str, ...] = ()
    # True when the filters can hide an item (``filtered`` with a non-empty dimension);
    # computed at compile time so ``visible`` can return at once for open filters.
    restricts: bool = False
    raw: dict[str, Any] = {}  # as written, for the reply's ``filters``


class Item(msgspec.Struct, kw_only=True, frozen=True):
    """An item to filter, as ``clearance.v1.filter`` carries it (README: The API)."""

    name: str
    namespace: str | None = None
    labels: dict[str, str] = {}
    fields: dict[str, FieldValue] = {}
    namespaces: list[str] | None = None  # operators: the namespaces they are available in


# Compilation ---------------------------------------------------------------------------


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _strings(value: Any, where: str) -> list[str]:
    # Numbers and booleans in a list of strings compare in their JSON form (README: Conventions).
    return objects.texts(value, where)


def _dimension(value: Any, where: str) -> Dimension:
    if value is None:
        return Dimension()
    if not isinstance(value, dict):
        raise InvalidObject(f"{where} must be an object with allowed/denied lists")
    allowed = _strings(value.get("allowed"), f"{where}.allowed")
    denied = _strings(value.get("denied"), f"{where}.denied")
    return Dimension(allowed=NameSet.of(allowed), denied=NameSet.of(denied))


def _object(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidObject(f"{where} must be an object")
    return value


def compile_filter(raw: Any, path: str = "") -> ResourceFilter:
    """Validate and compile one resource filter; ``path`` prefixes error messages
    (e.g. ``rules[0].resources[2]``). Raises InvalidObject."""
    where = path or "resource filter"
    if not isinstance(raw, dict):
        raise InvalidObject(f"{where} must be an object")
    kind = raw.get("type")
    if not isinstance(kind, str) or not kind:
        raise InvalidObject(f"{_at(path, 'type')} must be a non-empty string")
    visibility: Any = raw.get("visibility")
    if visibility is None:  # null = absent (README: Conventions)
        visibility = "all"
    if visibility not in _VISIBILITIES:
        raise InvalidObject(
            f"{_at(path, 'visibility')} must be all, none or filtered, not {visibility!r}")
    filters = _object(raw.get("filters"), _at(path, "filters"))
    names = _dimension(filters.get("names"), _at(path, "filters.names"))
    namespaces = _dimension(filters.get("namespaces"), _at(path, "filters.namespaces"))
    labels = _object(filters.get("labels"), _at(path, "filters.labels"))
    labels = {key: objects.text(value, f"{_at(path, 'filters.labels')}.{key}")
              for key, value in labels.items()}
    fields: dict[str, Dimension] = {}
    for key, value in _object(filters.get("fields"), _at(path, "filters.fields")).items():
        if not isinstance(key, str):
            raise InvalidObject(f"{_at(path, 'filters.fields')} keys must be strings")
        fields[key] = _dimension(value, f"{_at(path, 'filters.fields')}.{key}")
    aggregations = _object(raw.get("aggregations"), _at(path, "aggregations"))
    include = _strings(aggregations.get("include"), _at(path, "aggregations.include"))
    exclude = _strings(aggregations.get("exclude"), _at(path, "aggregations.exclude"))
    restricts = visibility == "filtered" and (
        bool(names) or bool(namespaces) or bool(labels) or any(fields.values()))
    return ResourceFilter(
        type=plural(kind),
        visibility=visibility,
        names=names,
        namespaces=namespaces,
        labels=dict(labels),
        fields=fields,
        aggregations_include=tuple(include),
        aggregations_exclude=tuple(exclude),
        restricts=restricts,
        raw=raw,
    )


# Matching ------------------------------------------------------------------------------
#
# ``visible`` runs per item over lists of 100,000 items, so each filter is turned once
# into closures that test a value with local set lookups and bound regex methods (about
# four times faster than walking the Structs). The Structs stay the stored, encodable
# form; ``Dimension.passes`` is the reference the closures are tested against.

ValueTest = Callable[[str | None], bool]
HiddenTest = Callable[[Item], str | None]


def _value_test(dimension: Dimension) -> ValueTest:
    allowed, denied = dimension.allowed, dimension.denied
    has_allowed = bool(allowed)
    allowed_literals, denied_literals = allowed.literals, denied.literals
    if allowed.regex is None and denied.regex is None:
        # Literals only: set lookups.
        def literal_passes(value: str | None) -> bool:
            if value is None:  # absent: matches neither list
                return not has_allowed
            if value in denied_literals:
                return False
            return not has_allowed or value in allowed_literals

        return literal_passes
    # Wildcards: one regex per value, "not fully denied, and allowed" folded into a single
    # pattern with a negative lookahead, so denied-wins costs no second regex call.
    allow_parts = [re.escape(v) for v in sorted(allowed_literals)]
    if allowed.regex is not None:
        allow_parts.append(allowed.regex)
    deny_parts = [re.escape(v) for v in sorted(denied_literals)]
    if denied.regex is not None:
        deny_parts.append(denied.regex)
    allow = "|".join(allow_parts) if has_allowed else ".*"
    source = f"(?s)(?!(?:{'|'.join(deny_parts)})\\Z)(?:{allow})" if deny_parts else \
        f"(?s)(?:{allow})"
    match = compiled(source).fullmatch

    def passes(value: str | None) -> bool:
        if value is None:
            return not has_allowed
        return match(value) is not None

    return passes


def _namespace_test(dimension: Dimension, kind: str) -> Callable[[Item], bool]:
    """A namespace dimension against an item: a namespace is its own namespace, an
    operator passes if any namespace it is available in passes (``*``: all of them)."""
    passes = _value_test(dimension)
    if kind == "namespaces":
        return lambda item: passes(item.name)
    if kind == "operators":
        def operator_passes(item: Item) -> bool:
            available = item.namespaces
            if not available:  # no availability information: its own namespace
                return passes(item.namespace)
            return "*" in available or any(passes(ns) for ns in available)
        return operator_passes
    return lambda item: passes(item.namespace)


def _hidden_test(flt: ResourceFilter) -> HiddenTest:
    if flt.visibility == "none":
        return lambda item: "visibility"
    if not flt.restricts:  # ``all``, or ``filtered`` with nothing to filter on
        return lambda item: None
    names = _value_test(flt.names) if flt.names else None
    namespaces = _namespace_test(flt.namespaces, flt.type) if flt.namespaces else None
    labels = tuple(flt.labels.items())
    fields = tuple(
        (name, f"fields.{name}", _value_test(dim)) for name, dim in flt.fields.items() if dim)

    def hidden(item: Item) -> str | None:
        if names is not None and not names(item.name):
            return "names"
        if namespaces is not None and not namespaces(item):
            return "namespaces"
        if labels:
            item_labels = item.labels
            for key, value in labels:
                if item_labels.get(key) != value:  # a missing label fails
                    return "labels"
        if fields:
            values = item.fields
            for name, reason, passes in fields:
                if not passes(text_of(values.get(name))):
                    return reason
        return None

    return hidden


# Filters are immutable and few; their tests are cached by identity. The cache holds the
# filter itself, so an id is never reused while its entry lives.
_TESTS: dict[int, tuple[ResourceFilter, HiddenTest]] = {}
_TESTS_MAX = 4096


def _test_of(flt: ResourceFilter) -> HiddenTest:
    entry = _TESTS.get(id(flt))
    if entry is not None and entry[0] is flt:
        return entry[1]
    test = _hidden_test(flt)
    if len(_TESTS) >= _TESTS_MAX:
        _TESTS.pop(next(iter(_TESTS)), None)  # oldest first
    _TESTS[id(flt)] = (flt, test)
    return test


def hidden_by(flt: ResourceFilter, item: Item) -> str | None:
    """The dimension that hides ``item`` (``visibility``, ``names``, ``namespaces``,
    ``labels``, ``fields.<name>``), or None when the filter shows it."""
    return _test_of(flt)(item)


def visible(flt: ResourceFilter, item: Item) -> bool:
    """Whether the filter alone shows ``item`` (no namespace rule: see RuleView)."""
    if not flt.restricts:
        return flt.visibility != "none"
    return _test_of(flt)(item) is None


class RuleView:
    """The filters of the one rule that matched a cluster, keyed by plural type, with
    each filter's test and the namespace rule compiled once for the view's lifetime."""

    __slots__ = ("_by_type", "_hidden", "_ns", "_ns_names", "_ns_namespaces")

    def __init__(self, by_type: Mapping[str, ResourceFilter]) -> None:
        self._by_type = dict(by_type)
        self._hidden = {kind: _test_of(flt) for kind, flt in self._by_type.items()}
        self._ns = ns = self._by_type.get("namespaces")
        # The namespace rule: the namespaces filter's names and namespaces dimensions,
        # both matched against the namespace name. None when it cannot hide anything.
        restricts = ns is not None and ns.visibility == "filtered" and (
            bool(ns.names) or bool(ns.namespaces))
        self._ns_names = _value_test(ns.names) if restricts and ns else None
        self._ns_namespaces = _value_test(ns.namespaces) if restricts and ns else None

    @classmethod
    def of(cls, filters: Iterable[ResourceFilter]) -> RuleView:
        by_type: dict[str, ResourceFilter] = {}
        for flt in filters:
            by_type.setdefault(flt.type, flt)  # first entry of a type wins, like rules
        return cls(by_type)

    def filter_for(self, type_name: str) -> ResourceFilter | None:
        return self._by_type.get(plural(type_name))

    def filters_map(self) -> dict[str, dict[str, Any]]:
        """Plural type -> the filter as written, for every listed type (do not mutate)."""
        return {kind: flt.raw for kind, flt in self._by_type.items()}

    def _namespaces_hidden(self) -> bool:
        return self._ns is not None and self._ns.visibility == "none"

    def namespace_visible(self, namespace: str | None) -> bool:
        """Whether items inside ``namespace`` may be shown at all (the namespace rule).
        ``None`` (no namespace) is an absent value: hidden when names are allowlisted —
        right for pods and operators, which always have one; alerts and events without
        one are inside no namespace (see ``CLUSTER_SCOPED_TOO``)."""
        if self._namespaces_hidden():
            return False
        names, namespaces = self._ns_names, self._ns_namespaces
        if names is None or namespaces is None:
            return True
        return names(namespace) and namespaces(namespace)

    def _namespace_rule(self, kind: str, item: Item) -> bool:
        if self._namespaces_hidden():
            return False  # also for operators available in ``*``
        if self._ns_names is None:
            return True
        if kind == "operators" and item.namespaces:
            return "*" in item.namespaces or any(
                self.namespace_visible(ns) for ns in item.namespaces)
        if item.namespace is None and kind in CLUSTER_SCOPED_TOO:
            return True
        return self.namespace_visible(item.namespace)

    def item_visible(self, type_name: str, item: Item) -> tuple[bool, str | None]:
        """(visible, reason): reason is a ``hidden_by`` dimension, ``namespace`` (the
        namespace rule) or ``unlisted`` (a custom type the rule does not list)."""
        kind = plural(type_name)
        hidden = self._hidden.get(kind)
        if hidden is None:
            if kind not in BUILTIN_TYPES:
                return False, "unlisted"
        else:
            reason = hidden(item)
            if reason is not None:
                return False, reason
        if kind in NAMESPACED_TYPES and not self._namespace_rule(kind, item):
            return False, "namespace"
        return True, None

    def type_decision(self, type_name: str) -> DecisionKind:
        """A whole-type check: deny when no item can be visible, partial when some item
        could be hidden, allow when none could."""
        kind = plural(type_name)
        flt = self._by_type.get(kind)
        namespaced = kind in NAMESPACED_TYPES
        if flt is None and kind not in BUILTIN_TYPES:
            return "deny"
        if flt is not None and flt.visibility == "none":
            return "deny"
        if namespaced and self._namespaces_hidden():
            return "deny"
        if (flt is not None and flt.restricts) or (namespaced and self._ns_names is not None):
            return "partial"
        return "allow"

    def namespace_hides(self, type_name: str, namespace: str) -> str | None:
        """For a whole-type check naming ``namespace``: what hides every item of the type
        in it — ``namespace`` (the namespace rule, for namespaced built-ins) or
        ``namespaces`` (the type's own filter) — or None when some item there may show.

        As for a check on one item, the namespace is the item's only one (an operator's
        availability elsewhere is not known to a check)."""
        kind = plural(type_name)
        if kind in NAMESPACED_TYPES and not self.namespace_visible(namespace):
            return "namespace"
        flt = self._by_type.get(kind)
        if (kind != "namespaces" and flt is not None and flt.restricts
                and flt.namespaces and not flt.namespaces.passes(namespace)):
            return "namespaces"
        return None

    def filter_items(self, type_name: str, items: Iterable[Item]) -> list[Item]:
        """The visible items, in input order; whole-type decisions short-cut the loop."""
        decision = self.type_decision(type_name)
        if decision == "deny":
            return []
        if decision == "allow":
            return list(items)
        # ``item_visible`` inlined: the type is resolved once, not per item, and the
        # namespace rule is decided once per distinct namespace (they repeat a lot).
        kind = plural(type_name)
        hidden = self._hidden.get(kind)
        if kind not in NAMESPACED_TYPES or self._ns_names is None:
            if hidden is None:
                return list(items)
            return [item for item in items if hidden(item) is None]
        items = list(items)
        if kind == "operators":
            # Operators may be available in many namespaces: decided per item.
            return [item for item in items if self._namespace_rule(kind, item)
                    and (hidden is None or hidden(item) is None)]
        # Every other namespaced kind lives in one namespace: decide each distinct
        # namespace once, then a dict lookup per item.
        verdicts = {
            namespace: self.namespace_visible(namespace)
            for namespace in {item.namespace for item in items}
        }
        if kind in CLUSTER_SCOPED_TOO and None in verdicts:
            verdicts[None] = True  # inside no namespace (namespaces are not ``none`` here)
        if hidden is None:
            return [item for item in items if verdicts[item.namespace]]
        return [item for item in items if verdicts[item.namespace] and hidden(item) is None]


class _HasFilters(Protocol):
    @property
    def filters(self) -> tuple[ResourceFilter, ...]: ...


_views: dict[int, tuple[object, RuleView]] = {}


def rule_view(rule: _HasFilters) -> RuleView:
    """A rule's filters as a view, built once per compiled rule object (a
    MonitorAccessPolicy rule or an AccessPolicy rule alike)."""
    cached = _views.get(id(rule))
    if cached is not None and cached[0] is rule:
        return cached[1]
    if len(_views) > 4096:
        _views.clear()
    view = RuleView.of(rule.filters)
    _views[id(rule)] = (rule, view)
    return view


def reply_filters(view: RuleView, kind: str) -> dict[str, Any]:
    """The reply's ``filters`` for a whole-type answer on ``kind``: its own filter as
    written, and for a namespaced built-in the namespaces filter (the namespace rule
    applies too)."""
    written = view.filters_map()
    shown = {k: v for k, v in written.items() if k == kind}
    if kind in NAMESPACED_TYPES and "namespaces" in written:
        shown["namespaces"] = written["namespaces"]
    return shown
