"""How one subject's answer moves in a dry run, in words (README: Inherited, simulate).

:func:`describe` compares two ``check`` answers (decision, permissions, filters) and says
whether the subject ``gains``, ``loses``, ``changes`` (some of it wider, some narrower) or
nothing moves, with a line a policy author reads: ``now wholly visible; namespaces payments
no longer hidden``. Filters are compared as a client applies them (README: The API,
``check``): per type, the ``names`` and ``namespaces`` lists of its entry; a built-in type
without an entry is shown, a custom type without one is not. Anything else that differs
(labels, fields, aggregations) is said to change without a direction: only the decisions
and the lists above are ordered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clearance_api.wire.effective import AccessAnswer, AccessMove
from clearance_core.monitor.filters import BUILTIN_TYPES

#: +1 wider, -1 narrower, 0 neither (another filter).
Phrase = tuple[int, str]

_RANK = {"deny": 0, "partial": 1, "allow": 2}
_DECISIONS: dict[tuple[str, str], str] = {
    ("deny", "allow"): "now visible",
    ("deny", "partial"): "now partly visible",
    ("partial", "allow"): "now wholly visible",
    ("allow", "partial"): "now only partly visible",
    ("allow", "deny"): "no longer visible",
    ("partial", "deny"): "no longer visible",
}
_METRICS = "view_metrics"


def describe(before: AccessAnswer, after: AccessAnswer) -> tuple[AccessMove, str]:
    """Which way the answer moves, and how (``none``: the same access, whatever policy
    decides it)."""
    if (before.decision == after.decision and before.filters == after.filters
            and set(before.permissions) == set(after.permissions)):
        if before.policy != after.policy:
            return "none", f"no change (now decided by {after.policy or 'no policy'})"
        return "none", "no change"
    phrases: list[Phrase] = []
    decision = _DECISIONS.get((before.decision, after.decision))
    if decision is not None:
        sign = 1 if _RANK[after.decision] > _RANK[before.decision] else -1
        phrases.append((sign, decision))
    if before.decision != "deny" and after.decision != "deny":
        filters = filter_changes(before.filters or {}, after.filters or {})
        if filters and before.decision == after.decision == "partial":
            # Only the filters moved: say so first, then how.
            filters[0] = (filters[0][0], "filters change: " + filters[0][1])
        phrases += filters
        phrases += _permissions(before.permissions, after.permissions)
    if not phrases:  # the same decision and lists: some other part of a filter moved
        phrases.append((0, "filters change"))
    signs = {sign for sign, _ in phrases}
    move: AccessMove = "gains" if signs == {1} else "loses" if signs == {-1} else "changes"
    return move, "; ".join(text for _, text in phrases)


def _permissions(before: Sequence[str], after: Sequence[str]) -> list[Phrase]:
    if _METRICS in after and _METRICS not in before:
        return [(1, "view_metrics granted")]
    if _METRICS in before and _METRICS not in after:
        return [(-1, "view_metrics revoked")]
    return []


def filter_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Phrase]:
    """What differs between two ``filters`` of allowed answers, type by type."""
    phrases: list[Phrase] = []
    for kind in sorted(before.keys() | after.keys()):
        old, new = before.get(kind), after.get(kind)
        if old != new:
            phrases += _entry_changes(kind, _entry(kind, old), _entry(kind, new))
    return phrases


class _Entry:
    """One type's filter as a client applies it."""

    def __init__(self, visibility: str, lists: dict[str, dict[str, list[str]]],
                 rest: dict[str, Any]) -> None:
        self.visibility = visibility
        self.lists = lists  # names / namespaces -> allowed / denied -> values
        self.rest = rest  # labels, fields, aggregations: compared whole


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _entry(kind: str, raw: Any) -> _Entry:
    if not isinstance(raw, dict):  # no entry: a built-in type is shown, a custom one not
        return _Entry("all" if kind in BUILTIN_TYPES else "none", {}, {})
    visibility = str(raw.get("visibility") or "all")
    found = raw.get("filters") if visibility == "filtered" else None
    filters = found if isinstance(found, dict) else {}
    lists = {}
    for dimension in ("names", "namespaces"):
        value = filters.get(dimension)
        if isinstance(value, dict):
            lists[dimension] = {side: _strings(value.get(side)) for side in ("allowed", "denied")}
    rest = {key: value for key, value in filters.items() if key not in lists}
    if "aggregations" in raw:
        rest["aggregations"] = raw["aggregations"]
    return _Entry(visibility, lists, rest)


def _entry_changes(kind: str, old: _Entry, new: _Entry) -> list[Phrase]:
    if old.visibility == "none" and new.visibility != "none":
        return [(1, f"{kind} now shown")]
    if new.visibility == "none" and old.visibility != "none":
        return [(-1, f"{kind} now hidden")]
    if old.visibility == new.visibility == "none":
        return []
    phrases: list[Phrase] = []
    for dimension in ("names", "namespaces"):
        before = old.lists.get(dimension, {})
        after = new.lists.get(dimension, {})
        phrases += _list_changes(kind, dimension, before, after)
    for key in sorted(old.rest.keys() | new.rest.keys()):
        if old.rest.get(key) != new.rest.get(key):
            phrases.append((0, f"{kind} {key} filters change"))
    return phrases


def _label(kind: str, dimension: str, values: Sequence[str]) -> str:
    joined = ", ".join(values)
    return f"{kind} {joined}" if dimension == "names" else f"{kind} in namespaces {joined}"


def _list_changes(kind: str, dimension: str, before: Mapping[str, list[str]],
                  after: Mapping[str, list[str]]) -> list[Phrase]:
    phrases: list[Phrase] = []
    old_denied, new_denied = before.get("denied", []), after.get("denied", [])
    lifted = [v for v in old_denied if v not in new_denied]
    added = [v for v in new_denied if v not in old_denied]
    if lifted:
        phrases.append((1, f"{_label(kind, dimension, lifted)} no longer hidden"))
    if added:
        phrases.append((-1, f"{_label(kind, dimension, added)} now hidden"))
    old_allowed, new_allowed = before.get("allowed", []), after.get("allowed", [])
    # A non-empty allowed list shows only what it names; an empty one limits nothing.
    if old_allowed and not new_allowed:
        phrases.append((1, f"{_label(kind, dimension, old_allowed)}: no longer the only "
                           "ones shown"))
    elif new_allowed and not old_allowed:
        phrases.append((-1, f"{_label(kind, dimension, new_allowed)}: now the only ones "
                            "shown"))
    else:
        shown = [v for v in new_allowed if v not in old_allowed]
        dropped = [v for v in old_allowed if v not in new_allowed]
        if shown:
            phrases.append((1, f"{_label(kind, dimension, shown)} now shown"))
        if dropped:
            phrases.append((-1, f"{_label(kind, dimension, dropped)} no longer shown"))
    return phrases
