"""safeyaml: what PyYAML's safe loader reads, except documents whose aliases expand past
a bound (or into themselves), which are refused before any object is built."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from clearance_runtime.edges import safeyaml

scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
documents = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(min_size=1, max_size=6), inner, max_size=4), max_leaves=30)


def expanded(value: Any) -> int:
    """Nodes of ``value`` with every shared part counted as a copy (YAML's view)."""
    if isinstance(value, list):
        return 1 + sum(expanded(v) for v in value)
    if isinstance(value, dict):
        return 1 + sum(1 + expanded(v) for v in value.values())
    return 1


@given(st.lists(documents, min_size=1, max_size=3))
def test_without_aliases_it_reads_what_pyyaml_reads(docs: list[Any]) -> None:
    text = yaml.safe_dump_all(docs)
    assert safeyaml.load_all(text) == list(yaml.safe_load_all(text))


def chain(levels: int, width: int) -> str:
    """Each level a list of ``width`` aliases of the one before: width**levels leaves."""
    lines = ["l0: &l0 [" + ", ".join(["x"] * width) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]"
              for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def distinct(text: str) -> int:
    """The distinct nodes of a document as composed (an alias is no node of its own)."""
    seen: set[int] = set()
    stack = [yaml.compose(text)]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node.value, list):
            for part in node.value:
                stack.extend(part if isinstance(part, tuple) else (part,))
    return len(seen)


@given(st.integers(1, 6), st.integers(1, 6), st.integers(10, 5_000))
def test_a_document_is_refused_exactly_when_its_aliases_add_past_the_bound(
        levels: int, width: int, bound: int) -> None:
    text = chain(levels, width)
    added = expanded(yaml.safe_load(text)) - distinct(text)
    # Each level but the last is reached from its key and `width` times from the next:
    # every reach but the first is an alias.
    aliases = (levels - 1) * width
    if added > bound:
        with pytest.raises(safeyaml.Refused, match=f"more than {bound:,} values"):
            safeyaml.load_all(text, max_expansion=bound, max_aliases=10_000)
    else:
        assert safeyaml.load_all(text, max_expansion=bound,
                                 max_aliases=10_000) == [yaml.safe_load(text)]
    if aliases > 3 and added <= bound:
        with pytest.raises(safeyaml.Refused, match="more than 3 aliases"):
            safeyaml.load_all(text, max_expansion=bound, max_aliases=3)


def test_a_large_document_without_aliases_is_read_whole() -> None:
    """The bound is on what aliases add, not on size: a Group of 50,000 users loads."""
    users = [f"user-{i}" for i in range(50_000)]
    text = yaml.safe_dump({"kind": "Group", "users": users})
    assert safeyaml.load(text)["users"] == users


def test_a_billion_laughs_is_refused_in_a_blink() -> None:
    with pytest.raises(safeyaml.Refused):
        safeyaml.load_all(chain(10, 10))  # 10**10 leaves in 300 bytes


@pytest.mark.parametrize("text", ["a: &a [*a]\n", "a: &a {b: *a}\n", "- &a [1, [*a]]\n",
                                  "a: &a {<<: *a}\n"])
def test_a_recursive_document_is_refused(text: str) -> None:
    with pytest.raises(safeyaml.Refused):
        safeyaml.load_all(text)


def test_merge_keys_and_a_few_aliases_are_fine() -> None:
    text = "base: &b {x: 1}\nuse: {<<: *b, y: 2}\nagain: *b\n---\nplain: 1\n"
    assert safeyaml.load_all(text) == [{"base": {"x": 1}, "use": {"x": 1, "y": 2},
                                        "again": {"x": 1}}, {"plain": 1}]


def test_not_yaml_is_a_yaml_error() -> None:
    with pytest.raises(yaml.YAMLError):
        safeyaml.load_all("a: [1, 2\n")


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    """libyaml's composer recurses on the C stack (a segmentation fault at this depth):
    the loader is Python's, whose RecursionError the callers report."""
    with pytest.raises(RecursionError):
        safeyaml.load_all("[" * 50_000 + "]" * 50_000)
