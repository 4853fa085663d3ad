"""Aggregations recomputed from visible items (README: Policy semantics): tables and properties.

The properties compare ``compute`` with an independent reference written in exact
arithmetic (``fractions``/``decimal``), over the items a RuleView leaves visible.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_api.errors import InvalidObject
from clearance_core.monitor.aggregate import (
    Aggregation,
    compile_aggregation,
    compile_aggregations,
    compute,
    number_of,
    select,
)
from clearance_core.monitor.filters import Item, RuleView, compile_filter


def agg(function: str, field: str | None = "v", **extra: Any) -> Aggregation:
    raw: dict[str, Any] = {"name": "x", "function": function, **extra}
    if field is not None:
        raw["field"] = field
    return compile_aggregation(raw)


def one(aggregation: Aggregation, items: list[dict[str, Any]]) -> Any:
    return compute([aggregation], items)["x"]


def values(*vs: Any) -> list[dict[str, Any]]:
    return [{"v": v} for v in vs]


# Compilation ---------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "message"), [
    ("count", "aggregations[2] must be an object"),
    ({"function": "count"}, ".name must be a non-empty string"),
    ({"name": "", "function": "count"}, ".name must be a non-empty string"),
    ({"name": "a", "function": "median", "field": "v"}, ".function must be one of"),
    ({"name": "a"}, ".function must be one of"),
    ({"name": "a", "function": "sum"}, ".field is required for function sum"),
    ({"name": "a", "function": "count", "field": 3}, ".field must be a string"),
    ({"name": "a", "function": "count", "groupBy": ["x"]}, ".groupBy must be a string"),
    ({"name": "a", "function": "percentile", "field": "v", "percentile": 101},
     ".percentile must be a number from 0 to 100"),
    ({"name": "a", "function": "percentile", "field": "v", "percentile": "90"},
     ".percentile must be a number"),
    ({"name": "a", "function": "percentile", "field": "v", "percentile": True},
     ".percentile must be a number"),
    ({"name": "a", "function": "count", "filter": "x"}, ".filter must be an object"),
    ({"name": "a", "function": "count", "filter": {"operator": "equals", "value": "1"}},
     ".filter.field must be a non-empty string"),
    ({"name": "a", "function": "count", "filter": {"field": "s", "operator": "like"}},
     ".filter.operator must be one of"),
    ({"name": "a", "function": "count",
      "filter": {"field": "s", "operator": "matches", "value": "(unclosed"}},
     ".filter.value: invalid regular expression"),
    ({"name": "a", "function": "count",
      "filter": {"field": "s", "operator": "greaterThan", "value": "big"}},
     ".filter.value must be a number for greaterThan"),
    ({"name": "a", "function": "count", "filter": {"field": "s", "operator": "in", "value": 3}},
     ".filter.value must be a list or a comma-separated string"),
    ({"name": "a", "function": "count", "filter": {"field": "s", "operator": "equals"}},
     ".filter.value must be a string, number or boolean"),
])
def test_bad_aggregations_are_invalid_with_a_path(raw: Any, message: str) -> None:
    with pytest.raises(InvalidObject) as error:
        compile_aggregation(raw, "aggregations[2]")
    assert message in error.value.message


def test_aggregation_lists_need_unique_names() -> None:
    with pytest.raises(InvalidObject, match=r"aggregations\[1\]\.name 'a' is used twice"):
        compile_aggregations([{"name": "a", "function": "count"},
                              {"name": "a", "function": "count"}])
    with pytest.raises(InvalidObject, match="must be a list"):
        compile_aggregations({"name": "a"})
    assert compile_aggregations(None) == []


def test_compiled_aggregations_survive_msgpack() -> None:
    compiled = compile_aggregations([
        {"name": "n", "function": "count", "groupBy": "zone"},
        {"name": "p", "function": "percentile", "field": "v", "percentile": 90,
         "filter": {"field": "s", "operator": "in", "value": ["a", 1]}},
        {"name": "m", "function": "max", "field": "v",
         "filter": {"field": "s", "operator": "matches", "value": "a.*"}},
    ])
    again = msgspec.msgpack.decode(msgspec.msgpack.encode(compiled), type=list[Aggregation])
    assert again == compiled


# Functions -----------------------------------------------------------------------------


@pytest.mark.parametrize(("aggregation", "items", "result"), [
    (agg("count", None), values(1, None, "x"), 3),  # counts items
    (agg("count", None), [], 0),  # count of nothing is 0...
    (agg("count"), [*values(1, None, "x"), {}], 2),  # ...with a field: where present
    (agg("sum"), [], None),  # ...every other function of nothing is null
    (agg("avg"), values("x", True), None),
    (agg("distinct"), [], None),
    (agg("sum"), values(1, 2, 3), 6),
    (agg("sum"), values(1, "2", 0.5), 3.5),  # numeric strings are coerced
    (agg("sum"), values(1, True, "abc", None, float("nan"), float("inf"), "1e999", [1]), 1),
    (agg("sum"), values(" 4 ", "+1", "-2.5", ".5", "1e2"), 103.0),
    (agg("sum"), values("٣", "0x10", "1_000", "inf", "NaN", ""), None),  # not numbers
    (agg("sum"), values(10**400, 1), 1),  # too large for a float: skipped
    (agg("avg"), values(1, 2), 1.5),
    (agg("min"), values(3, "1", 2.5), 1),
    (agg("max"), values(3, "10", 2.5), 10),
    (agg("percentile", percentile=50), values(4, 1, 3, 2), 2),  # nearest rank
    (agg("percentile", percentile=0), values(4, 1, 3), 1),
    (agg("percentile", percentile=100), values(4, 1, 3), 4),
    (agg("percentile", percentile=70), values(*range(1, 11)), 7),  # exact, not 8
    (agg("percentile", percentile=90), values(*range(1, 11)), 9),
    (agg("percentile", percentile=91), values(*range(1, 11)), 10),
    (agg("percentile"), values(*range(1, 11)), 5),  # default 50
    (agg("distinct"), values("a", "b", "a", None), 2),
    (agg("distinct"), values(1, "1", True, "true"), 2),  # compared as strings
    (agg("distinct"), values(1, 1.0), 2),  # "1" and "1.0"
])
def test_functions(aggregation: Aggregation, items: list[dict[str, Any]], result: Any) -> None:
    got = one(aggregation, items)
    assert got == result
    assert type(got) is type(result)


def test_sums_of_integers_stay_integers_and_avg_is_a_float() -> None:
    assert one(agg("sum"), values(2**60, 2**60)) == 2**61
    assert isinstance(one(agg("avg"), values(2, 4)), float)


def test_group_by_maps_each_group_value_to_its_result() -> None:
    items: list[dict[str, Any]] = [
        {"v": 1, "zone": "b"}, {"v": 2, "zone": "a"}, {"v": 3, "zone": "b"}, {"v": 4},
        {"v": 5, "zone": None}, {"v": 6, "zone": 1},
    ]
    result = one(agg("sum", groupBy="zone"), items)
    assert result == {"a": 2, "b": 4, "": 9, "1": 6}
    assert list(result) == sorted(result)  # deterministic order
    assert one(agg("count", None, groupBy="zone"), []) == {}


def test_filter_applies_before_grouping_and_the_function() -> None:
    items = [{"v": 1, "s": "Bound"}, {"v": 2, "s": "Pending"}, {"v": 4, "s": "Bound"}]
    bound = {"field": "s", "operator": "equals", "value": "Bound"}
    assert one(agg("sum", filter=bound), items) == 5
    assert one(agg("count", None, filter=bound, groupBy="v"), items) == {"1": 1, "4": 1}


@pytest.mark.parametrize(("operator", "operand", "value", "passes"), [
    ("equals", "Bound", "Bound", True),
    ("equals", "Bound", "bound", False),
    ("equals", 1, 1, True),  # string forms: "1" == "1"
    ("equals", "1", 1, True),
    ("equals", "1", 1.0, False),  # "1.0"
    ("equals", "true", True, True),
    ("notEquals", "Bound", "Pending", True),
    ("notEquals", "Bound", "Bound", False),
    ("notEquals", "Bound", None, False),  # absent fails every operator
    ("contains", "ou", "Bound", True),
    ("contains", "x", "Bound", False),
    ("startsWith", "Bo", "Bound", True),
    ("startsWith", "ou", "Bound", False),
    ("endsWith", "nd", "Bound", True),
    ("endsWith", "Bo", "Bound", False),
    ("greaterThan", 10, 11, True),
    ("greaterThan", "10", "10.5", True),
    ("greaterThan", 10, 10, False),
    ("greaterThan", 10, "big", False),  # non-numeric fails
    ("greaterThan", 0, True, False),
    ("lessThan", 10, 9.5, True),
    ("lessThan", 10, 10, False),
    ("lessThan", 10, None, False),
    ("in", ["a", "b"], "b", True),
    ("in", "a, b ,c", "b", True),  # comma-separated, trimmed
    ("in", "a,b", "c", False),
    ("in", [1, 2], 2, True),
    ("in", ["a"], None, False),
    ("matches", "gp[23]", "gp3", True),
    ("matches", "gp", "gp3", False),  # the whole value must match (fullmatch)
    ("matches", "a+b", "aab", True),  # a real regex, unlike wildcards
    ("matches", "1\\d", 15, True),
    ("equals", "", None, False),
])
def test_filter_operators(operator: str, operand: Any, value: Any, passes: bool) -> None:
    counted = one(agg("count", None, filter={"field": "s", "operator": operator,
                                             "value": operand}), [{"s": value}])
    assert counted == (1 if passes else 0)


@pytest.mark.parametrize(("value", "number"), [
    (1, 1), (1.5, 1.5), ("2", 2), (" 2.5 ", 2.5), ("-1e3", -1000.0), (True, None),
    (None, None), ("x", None), (float("nan"), None), (float("-inf"), None), ("1e400", None),
    ([1], None), ("²", None),
])
def test_number_of(value: Any, number: float | None) -> None:
    assert number_of(value) == number


# select --------------------------------------------------------------------------------


@pytest.mark.parametrize(("include", "exclude", "kept"), [
    (None, None, ["a", "b", "c"]),
    ([], [], ["a", "b", "c"]),  # an empty include list keeps everything
    (["a", "b"], None, ["a", "b"]),
    (None, ["b"], ["a", "c"]),
    (["a", "b"], ["b"], ["a"]),  # exclude wins
    (["zzz"], None, []),
])
def test_select(include: list[str] | None, exclude: list[str] | None, kept: list[str]) -> None:
    assert list(select({"a": 1, "b": 2, "c": 3}, include, exclude)) == kept


# Properties ----------------------------------------------------------------------------

FUNCTIONS = ["count", "sum", "avg", "min", "max", "percentile", "distinct"]
# Decimal-exact floats, whose JSON form is their repr, plus values numeric functions skip.
numbers = st.one_of(
    st.integers(-1000, 1000),
    st.decimals(min_value=-1000, max_value=1000, places=2).map(float),
)
field_values = st.one_of(
    numbers,
    numbers.map(str),
    st.sampled_from(["abc", "", "1x", True, False, None, float("nan"), float("inf")]),
)
fields = st.fixed_dictionaries({}, optional={"v": field_values, "g": st.sampled_from("xy")})


def ref_number(value: Any) -> Fraction | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = Decimal(value)
        except ArithmeticError:
            return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Decimal) and not value.is_finite():
        return None
    return Fraction(value)


def ref_text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else repr(value)


def reference(function: str, percentile: float, field: str | None,
              items: list[dict[str, Any]]) -> Any:
    if function == "count":
        return len(items) if field is None else sum(
            1 for i in items if i.get(field) is not None)
    assert field is not None
    if function == "distinct":
        texts = {t for i in items if (t := ref_text(i.get(field))) is not None}
        return len(texts) or None
    nums = sorted(n for i in items if (n := ref_number(i.get(field))) is not None)
    if not nums:
        return None
    if function == "sum":
        return sum(nums)
    if function == "avg":
        return sum(nums) / len(nums)
    if function == "min":
        return nums[0]
    if function == "max":
        return nums[-1]
    rank = math.ceil(Decimal(repr(percentile)) * len(nums) / 100)
    return nums[max(rank, 1) - 1]


def same(got: Any, expected: Any) -> bool:
    if expected is None or got is None:
        return got is expected
    if isinstance(expected, Fraction):
        return bool(float(expected) == pytest.approx(got, rel=1e-12, abs=1e-9))
    return bool(got == expected)


@settings(max_examples=400)
@given(st.sampled_from(FUNCTIONS), st.one_of(st.integers(0, 100), st.sampled_from([33.3, 99.9])),
       st.booleans(), st.booleans(), st.lists(fields, max_size=15))
def test_compute_agrees_with_the_reference(function: str, percentile: float, grouped: bool,
                                           whole_items: bool,
                                           items: list[dict[str, Any]]) -> None:
    field = None if function == "count" and whole_items else "v"
    aggregation = compile_aggregation(
        {"name": "x", "function": function, "field": field, "percentile": percentile,
         **({"groupBy": "g"} if grouped else {})})
    got = one(aggregation, items)
    if not grouped:
        assert same(got, reference(function, percentile, field, items))
        return
    groups: dict[str, list[dict[str, Any]]] = {}
    for i in items:
        groups.setdefault(i.get("g") or "", []).append(i)
    assert set(got) == set(groups)
    for key, members in groups.items():
        assert same(got[key], reference(function, percentile, field, members))


@settings(max_examples=200)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), fields), max_size=15),
       st.lists(st.sampled_from(["a", "b", "c", "z*"]), max_size=2),
       st.sampled_from(FUNCTIONS))
def test_recomputed_over_visible_items_equals_the_subset(
        rows: list[tuple[str, dict[str, Any]]], denied: list[str], function: str) -> None:
    rule = RuleView.of([compile_filter({"type": "pvc", "visibility": "filtered",
                                        "filters": {"namespaces": {"denied": denied}}})])
    items = [Item(name=f"i{n}", namespace=ns, fields=f) for n, (ns, f) in enumerate(rows)]
    shown = rule.filter_items("pvc", items)
    subset = [f for ns, f in rows if ns not in denied]
    assert [i.fields for i in shown] == subset
    aggregation = compile_aggregation({"name": "x", "function": function, "field": "v",
                                       "percentile": 50})
    assert same(one(aggregation, [i.fields for i in shown]),
                reference(function, 50, "v", subset))


@given(st.dictionaries(st.sampled_from("abcdef"), st.integers(), max_size=6),
       st.one_of(st.none(), st.lists(st.sampled_from("abcdefg"), max_size=4)),
       st.one_of(st.none(), st.lists(st.sampled_from("abcdefg"), max_size=4)))
def test_select_exclude_wins(aggregates: dict[str, int], include: list[str] | None,
                             exclude: list[str] | None) -> None:
    kept = select(aggregates, include, exclude)
    assert not set(kept) & set(exclude or ())
    if include:
        assert set(kept) <= set(include)
    for name, value in aggregates.items():
        wanted = (not include or name in include) and name not in (exclude or ())
        assert (name in kept) is wanted
        if wanted:
            assert kept[name] == value


def test_sums_and_averages_beyond_a_double_are_null_not_an_error() -> None:
    from clearance_core.monitor.aggregate import compute  # noqa: PLC0415

    aggs = [compile_aggregation({"name": "s", "function": "sum", "field": "v"}),
            compile_aggregation({"name": "a", "function": "avg", "field": "v"})]
    assert compute(aggs, [{"v": 1e308}, {"v": 1e308}]) == {"s": None, "a": None}
    big = 10**300
    assert compute(aggs, [{"v": big}, {"v": big}])["s"] == 2 * big  # exact for integers
