"""MetricSource aggregations, recomputed from the items a principal may see.

Aggregates are derived from the filtered item set by construction (README: Policy semantics),
so a filtered user never receives totals computed over items hidden from them
(ClusterPulse leaked cluster-wide totals with ``filterAggregations: false`` and its API
ignored three of the nine filter operators; see the implementation notes, 4.4 and 7.10).
Every aggregation is compiled once (function and operator checked, the ``matches``
regex compiled) and then evaluated over plain field dicts.

Choices the contract leaves open:

* An absent or ``null`` field fails every filter operator, ``notEquals`` included (it
  is "no value", not "a different value"), and is skipped by every function.
* ``matches`` must match the whole value, like ``matchPattern`` (RE2, linear time).
* Numeric functions coerce numeric strings (``"1.5"``); bools, NaN, infinities and
  non-numeric values are skipped. Sums of integers stay integers.
* ``distinct`` over no values is null, like every function but ``count``.
* ``percentile`` defaults to 50 (the median) when not given.
* Group keys are sorted, so equal inputs give byte-identical replies.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from fractions import Fraction
from typing import Any, Literal

import msgspec

from clearance_api.errors import InvalidObject
from clearance_core.monitor import patterns
from clearance_core.monitor.filters import text_of

Function = Literal["count", "sum", "avg", "min", "max", "percentile", "distinct"]
Operator = Literal[
    "equals", "notEquals", "contains", "startsWith", "endsWith",
    "greaterThan", "lessThan", "in", "matches",
]
FUNCTIONS: tuple[str, ...] = ("count", "sum", "avg", "min", "max", "percentile", "distinct")
OPERATORS: tuple[str, ...] = (
    "equals", "notEquals", "contains", "startsWith", "endsWith",
    "greaterThan", "lessThan", "in", "matches",
)
# ASCII digits only: ``\d`` would also accept other scripts' digits.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class Condition(msgspec.Struct, frozen=True, kw_only=True):
    """An aggregation's ``filter``, with its operand pre-converted for the operator."""

    field: str
    operator: Operator
    text: str = ""  # string operators, matches (regex source)
    number: float | None = None  # greaterThan / lessThan
    choices: frozenset[str] = frozenset()  # in

    def test(self, values: dict[str, Any]) -> bool:
        value = values.get(self.field)
        op = self.operator
        if op in ("greaterThan", "lessThan"):
            number = number_of(value)
            if number is None or self.number is None:
                return False
            return number > self.number if op == "greaterThan" else number < self.number
        text = text_of(value)
        if text is None:
            return False
        if op == "equals":
            return text == self.text
        if op == "notEquals":
            return text != self.text
        if op == "contains":
            return self.text in text
        if op == "startsWith":
            return text.startswith(self.text)
        if op == "endsWith":
            return text.endswith(self.text)
        if op == "in":
            return text in self.choices
        return patterns.fullmatch(self.text, text)  # matches


class Aggregation(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    function: Function
    field: str | None = None
    filter: Condition | None = None
    group_by: str | None = None
    percentile: float = 50.0


def number_of(value: Any) -> int | float | None:
    """A finite number from a number or numeric string; None for anything else."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = value.strip()
        if not _NUMBER.fullmatch(value):
            return None
        value = int(value) if value.lstrip("+-").isdigit() else float(value)
    if not isinstance(value, int | float):
        return None
    try:
        return value if math.isfinite(value) else None
    except OverflowError:  # an int too large for a float
        return None


# Compilation ---------------------------------------------------------------------------


def _mapping(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise InvalidObject(f"{where} must be an object")
    return raw


def _name(raw: dict[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidObject(f"{where}.{key} must be a non-empty string")
    return value


def _choice(raw: dict[str, Any], key: str, choices: tuple[str, ...], where: str) -> Any:
    value = raw.get(key)
    if value not in choices:
        raise InvalidObject(f"{where}.{key} must be one of {', '.join(choices)}")
    return value


def _condition(raw: Any, where: str) -> Condition:
    raw = _mapping(raw, where)
    field = _name(raw, "field", where)
    operator = _choice(raw, "operator", OPERATORS, where)
    value = raw.get("value")
    if operator in ("greaterThan", "lessThan"):
        number = number_of(value)
        if number is None:
            raise InvalidObject(f"{where}.value must be a number for {operator}")
        return Condition(field=field, operator=operator, number=float(number))
    if operator == "in":
        if isinstance(value, str):
            options = [part.strip() for part in value.split(",")]
        elif isinstance(value, list):
            options = [text for part in value if (text := text_of(part)) is not None]
        else:
            raise InvalidObject(f"{where}.value must be a list or a comma-separated string")
        return Condition(field=field, operator="in", choices=frozenset(options))
    text = text_of(value)
    if text is None or isinstance(value, list | dict):
        raise InvalidObject(f"{where}.value must be a string, number or boolean")
    if operator == "matches":
        patterns.check(text, f"{where}.value")
    return Condition(field=field, operator=operator, text=text)


def compile_aggregation(raw: Any, path: str = "") -> Aggregation:
    """Validate and compile one ``spec.aggregations`` entry. Raises InvalidObject."""
    where = path or "aggregation"
    raw = _mapping(raw, where)
    name = _name(raw, "name", where)
    function = _choice(raw, "function", FUNCTIONS, where)
    field = raw.get("field") or None
    if field is not None and not isinstance(field, str):
        raise InvalidObject(f"{where}.field must be a string")
    if field is None and function != "count":
        raise InvalidObject(f"{where}.field is required for function {function}")
    group_by = raw.get("groupBy") or None
    if group_by is not None and not isinstance(group_by, str):
        raise InvalidObject(f"{where}.groupBy must be a string")
    percentile = raw.get("percentile", 50)
    if percentile is None:
        percentile = 50
    if isinstance(percentile, bool) or not isinstance(percentile, int | float) or not (
            0 <= percentile <= 100):
        raise InvalidObject(f"{where}.percentile must be a number from 0 to 100")
    condition = raw.get("filter")
    return Aggregation(
        name=name,
        function=function,
        field=field,
        filter=None if condition is None else _condition(condition, f"{where}.filter"),
        group_by=group_by,
        percentile=float(percentile),
    )


def compile_aggregations(raw: Any, path: str = "aggregations") -> list[Aggregation]:
    """A whole ``spec.aggregations`` list; names must be unique (they key the reply)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidObject(f"{path} must be a list")
    result = [compile_aggregation(entry, f"{path}[{i}]") for i, entry in enumerate(raw)]
    seen: set[str] = set()
    for index, agg in enumerate(result):
        if agg.name in seen:
            raise InvalidObject(f"{path}[{index}].name {agg.name!r} is used twice")
        seen.add(agg.name)
    return result


# Evaluation ----------------------------------------------------------------------------


def _reduce(agg: Aggregation, items: list[dict[str, Any]]) -> Any:
    function, field = agg.function, agg.field
    if function == "count":
        if field is None:
            return len(items)
        return sum(1 for values in items if values.get(field) is not None)
    assert field is not None  # compile_aggregation requires it
    if function == "distinct":
        seen = {text_of(values.get(field)) for values in items}
        seen.discard(None)
        return len(seen) or None
    numbers = [n for values in items if (n := number_of(values.get(field))) is not None]
    if not numbers:
        return None
    if function == "min":
        return min(numbers)
    if function == "max":
        return max(numbers)
    if function == "percentile":
        numbers.sort()
        # Exact arithmetic on the percentile as written: in floats, 70 / 100 * 10 is
        # 7.000000000000001, whose ceiling would skip to the 8th value.
        rank = max(1, math.ceil(Fraction(repr(agg.percentile)) * len(numbers) / 100))
        return numbers[rank - 1]
    try:
        total = _total(numbers)
        if function == "sum":
            return total
        return total / len(numbers)  # avg
    except OverflowError:
        return None  # beyond the range of a double: no number to report (null)


def _total(numbers: list[int | float]) -> int | float:
    if all(type(n) is int for n in numbers):
        return sum(numbers)  # exact
    return math.fsum(numbers)  # order-independent, so recomputation is reproducible


def compute(aggs: Iterable[Aggregation], items: list[dict[str, Any]]) -> dict[str, Any]:
    """Every aggregation over ``items`` (each an item's fields): name -> value, and for a
    ``groupBy`` aggregation name -> {group value: value}."""
    result: dict[str, Any] = {}
    for agg in aggs:
        condition = agg.filter
        selected = items if condition is None else [v for v in items if condition.test(v)]
        if agg.group_by is None:
            result[agg.name] = _reduce(agg, selected)
            continue
        groups: dict[str, list[dict[str, Any]]] = {}
        for values in selected:
            key = text_of(values.get(agg.group_by)) or ""
            groups.setdefault(key, []).append(values)
        result[agg.name] = {key: _reduce(agg, groups[key]) for key in sorted(groups)}
    return result


def select(
    values: dict[str, Any], include: Iterable[str] | None, exclude: Iterable[str] | None,
) -> dict[str, Any]:
    """The policy's aggregation filter: a non-empty ``include`` keeps only the named
    aggregations, then ``exclude`` removes names (so exclude wins on overlap)."""
    keep = set(include or ())
    drop = set(exclude or ())
    return {
        name: value for name, value in values.items()
        if (not keep or name in keep) and name not in drop
    }
