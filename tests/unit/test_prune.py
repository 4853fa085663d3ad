"""``objects.prune``: every object Clearance reads goes through it (nulls are absent, sizes
are bounded, and for RBAC kinds every scalar compares in its JSON form). Maps and lists of
strings take a short cut; whatever the value, the result and the refusal must be those of
the plain walk, kept here as the oracle."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_api.errors import InvalidObject
from clearance_core.kube import objects


def _walk(value: Any, path: str, depth: int, as_text: bool) -> Any:
    """The rules, one call per node (the code before the short cut)."""
    if depth > objects.MAX_DEPTH:
        raise InvalidObject(f"{path}: nested deeper than the limit of "
                            f"{objects.MAX_DEPTH} levels")
    if type(value) is str:
        return value
    if isinstance(value, dict):
        return {k: _walk(v, f"{path}.{k}", depth + 1, as_text)
                for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_walk(v, f"{path}[{i}]", depth + 1, as_text)
                for i, v in enumerate(value) if v is not None]
    if type(value) is int and not objects.INT_MIN <= value <= objects.INT_MAX:
        raise InvalidObject(f"{path}: integer outside the 64-bit range")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidObject(f"{path}: not a finite number")
    if as_text:
        return objects.scalar_text(value)
    return value


_scalars = st.one_of(
    st.none(), st.booleans(), st.text(max_size=4),
    st.integers(min_value=-(2**64), max_value=2**64), st.floats(allow_nan=True))
_strings = st.text(max_size=4)
_values = st.recursive(
    st.one_of(_scalars, _strings),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=3), inner, max_size=4),
        st.lists(_strings, max_size=4), st.dictionaries(st.text(max_size=3), _strings,
                                                        max_size=4)),
    max_leaves=30)


def _outcome(fn: Any, value: Any, as_text: bool) -> tuple[str, Any]:
    try:
        return "ok", fn(value, as_text)
    except InvalidObject:
        return "refused", None


def _nest(leaf: Any, depth: int) -> Any:
    for i in range(depth):
        leaf = {"k": leaf} if i % 2 else [leaf]
    return leaf


@settings(max_examples=400)
@given(value=_values, as_text=st.booleans())
def test_prune_gives_what_the_plain_walk_gives(value: Any, as_text: bool) -> None:
    assert _outcome(lambda v, t: objects.prune(v, "spec", as_text=t), value, as_text) \
        == _outcome(lambda v, t: _walk(v, "spec", 0, t), value, as_text)


@pytest.mark.parametrize("depth", range(objects.MAX_DEPTH - 3, objects.MAX_DEPTH + 3))
@pytest.mark.parametrize("leaf", [["a", "b"], {"a": "b"}, "a", ["a", None], [{"a": "b"}, {}]])
def test_strings_nested_at_the_depth_limit_are_refused_exactly_where_the_walk_refuses(
        depth: int, leaf: Any) -> None:
    value = _nest(leaf, depth)
    assert _outcome(lambda v, t: objects.prune(v, "spec", as_text=t), value, True) \
        == _outcome(lambda v, t: _walk(v, "spec", 0, t), value, True)


def test_the_result_is_a_copy_the_caller_may_change() -> None:
    labels = {"team": "a"}
    verbs = ["get", "list"]
    pruned = objects.prune({"labels": labels, "verbs": verbs})
    pruned["labels"]["team"] = "b"
    pruned["verbs"].append("watch")
    assert labels == {"team": "a"} and verbs == ["get", "list"]
    assert objects.prune(labels) is not labels and objects.prune(verbs) is not verbs


def _sorted(value: Any, _: bool) -> tuple[Any, bytes]:
    pruned = _walk(value, "spec", 0, False)
    return pruned, msgspec.json.encode(pruned, order="sorted")


@settings(max_examples=400)
@given(value=st.one_of(_values, st.builds(_nest, _values, st.integers(55, 70))))
def test_prune_sorted_gives_the_walk_and_its_sorted_json(value: Any) -> None:
    """The short cut (the value itself when its JSON shows nothing to prune) is taken
    only where the walk would return an equal copy: nulls, non-finite numbers, integers
    beyond 64 bits and nesting past the limit all go the long way."""
    assert _outcome(lambda v, _: objects.prune_sorted(v, "spec"), value, False) \
        == _outcome(_sorted, value, False)


@pytest.mark.parametrize("value", [
    {"a": 2**63 - 1}, {"a": 2**63}, {"a": -(2**63)}, {"a": -(2**63) - 1}, {"a": 2**70},
    {"a": "null"}, {"a": None}, {"a": [1.5, float("inf")]}, _nest("a", 64), _nest("a", 65),
])
def test_prune_sorted_at_the_edges(value: Any) -> None:
    assert _outcome(lambda v, _: objects.prune_sorted(v, "spec"), value, False) \
        == _outcome(_sorted, value, False)
