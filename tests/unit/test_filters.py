"""Resource filters and the namespace rule (README: Policy semantics): tables and properties.

The properties check the compiled matchers against a reference written straight from
the contract over the raw filter dicts, with ``fnmatch`` as an independent wildcard
matcher (the generated alphabets never contain ``[``, its only extra syntax).
"""

from __future__ import annotations

import fnmatch
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_api.errors import InvalidObject
from clearance_core.monitor.filters import (
    Dimension,
    Item,
    ResourceFilter,
    RuleView,
    compile_filter,
    hidden_by,
    text_of,
    visible,
)
from clearance_core.monitor.wildcard import NameSet


def flt(kind: str = "pods", visibility: str = "filtered", **filters: Any) -> ResourceFilter:
    return compile_filter({"type": kind, "visibility": visibility, "filters": filters})


def item(name: str = "web", namespace: str | None = "team-a", **kw: Any) -> Item:
    return Item(name=name, namespace=namespace, **kw)


def dim(allowed: list[str] | None = None, denied: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if allowed is not None:
        out["allowed"] = allowed
    if denied is not None:
        out["denied"] = denied
    return out


# Compilation ---------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "message"), [
    ("pods", "rules[0].resources[1] must be an object"),
    ({"visibility": "all"}, "rules[0].resources[1].type must be a non-empty string"),
    ({"type": ""}, ".type must be a non-empty string"),
    ({"type": 3}, ".type must be a non-empty string"),
    ({"type": "pods", "visibility": "some"}, ".visibility must be all, none or filtered"),
    ({"type": "pods", "filters": []}, ".filters must be an object"),
    ({"type": "pods", "filters": {"names": ["a"]}}, ".filters.names must be an object"),
    ({"type": "pods", "filters": {"names": {"allowed": "a"}}},
     ".filters.names.allowed must be a list of strings"),
    ({"type": "pods", "filters": {"namespaces": {"denied": ["a", {}]}}},
     ".filters.namespaces.denied[1] must be a string"),
    ({"type": "pods", "filters": {"labels": {"env": [1]}}},
     ".filters.labels.env must be a string"),
    ({"type": "pods", "filters": {"labels": ["env"]}}, ".filters.labels must be an object"),
    ({"type": "pvc", "filters": {"fields": {"size": ["1"]}}},
     ".filters.fields.size must be an object"),
    ({"type": "pvc", "filters": {"fields": {"size": {"denied": [[]]}}}},
     ".filters.fields.size.denied[0] must be a string"),
    ({"type": "pvc", "aggregations": {"include": "total"}},
     ".aggregations.include must be a list of strings"),
    ({"type": "pvc", "aggregations": {"exclude": [{}]}}, ".aggregations.exclude[0]"),
])
def test_bad_shapes_are_invalid_with_a_path(raw: Any, message: str) -> None:
    with pytest.raises(InvalidObject) as error:
        compile_filter(raw, "rules[0].resources[1]")
    assert message in error.value.message


def test_compile_normalises_the_type_and_keeps_the_filter_as_written() -> None:
    raw = {"type": "pod", "visibility": "filtered",
           "filters": {"names": {"allowed": ["web-*", "api"], "denied": ["*-canary"]}},
           "aggregations": {"include": ["a"], "exclude": ["b"]}}
    compiled = compile_filter(raw)
    assert compiled.type == "pods"
    assert compiled.raw is raw
    assert compiled.names.allowed == NameSet.of(["web-*", "api"])
    assert compiled.aggregations_include == ("a",)
    assert compiled.aggregations_exclude == ("b",)
    assert compile_filter({"type": "pvc"}).type == "pvc"  # custom types: exact name
    assert compile_filter({"type": "pvc"}).visibility == "all"  # the default


def test_numbers_and_booleans_in_string_lists_compare_in_json_form() -> None:
    compiled = compile_filter({"type": "pvc", "visibility": "filtered", "filters": {
        "names": {"allowed": [10, True, 1.5, None]},
        "labels": {"tier": 3},
        "fields": {"replicas": {"denied": [0]}}}})
    assert visible(compiled, item(name="10", labels={"tier": "3"}))
    assert visible(compiled, item(name="true", labels={"tier": "3"}))
    assert visible(compiled, item(name="1.5", labels={"tier": "3"}))
    assert not visible(compiled, item(name="11", labels={"tier": "3"}))
    assert not visible(compiled, item(name="10", labels={"tier": "3"}, fields={"replicas": 0}))
    assert visible(compiled, item(name="10", labels={"tier": "3"}, fields={"replicas": 2}))


def test_null_visibility_is_the_default() -> None:
    assert compile_filter({"type": "pods", "visibility": None}).visibility == "all"


def test_null_sections_mean_absent() -> None:
    compiled = compile_filter({"type": "pods", "visibility": "filtered", "filters": {
        "names": None, "namespaces": {"allowed": None}, "labels": None, "fields": None,
    }, "aggregations": None})
    assert not compiled.restricts
    assert visible(compiled, item())


@pytest.mark.parametrize(("visibility", "filters", "restricts"), [
    ("all", {"names": dim(["a"])}, False),
    ("none", {"names": dim(["a"])}, False),
    ("filtered", {}, False),
    ("filtered", {"names": dim([], [])}, False),
    ("filtered", {"fields": {"x": {}}}, False),
    ("filtered", {"names": dim(denied=["a"])}, True),
    ("filtered", {"labels": {"a": "b"}}, True),
    ("filtered", {"fields": {"x": dim(["1"])}}, True),
])
def test_restricts_only_when_filtered_with_a_dimension(
        visibility: str, filters: dict[str, Any], restricts: bool) -> None:
    assert flt(visibility=visibility, **filters).restricts is restricts


def test_compiled_filter_survives_msgpack() -> None:
    compiled = flt(names=dim(["web-*"], ["*-x"]), namespaces=dim(["a?"]), labels={"k": "v"},
                   fields={"n": dim(denied=["1"])})
    again = msgspec.msgpack.decode(msgspec.msgpack.encode(compiled), type=ResourceFilter)
    assert again == compiled
    for candidate in (item("web-1", "ab", labels={"k": "v"}), item("web-x", "ab")):
        assert hidden_by(again, candidate) == hidden_by(compiled, candidate)


# Values and dimensions -----------------------------------------------------------------


@pytest.mark.parametrize(("value", "text"), [
    ("abc", "abc"), (1, "1"), (-7, "-7"), (1.5, "1.5"), (2.0, "2.0"), (True, "true"),
    (False, "false"), (None, None), (float("nan"), None), (float("inf"), None), ("", ""),
])
def test_field_values_compare_in_their_json_form(value: Any, text: str | None) -> None:
    assert text_of(value) == text


@pytest.mark.parametrize(("allowed", "denied", "value", "passes"), [
    ([], [], "x", True),  # no inclusions: whatever is not excluded passes
    (["a*"], [], "abc", True),
    (["a*"], [], "bac", False),  # anchored at the start
    (["*c"], [], "cab", False),  # anchored at the end
    (["a?"], [], "ab", True),
    (["a?"], [], "abc", False),  # ? is exactly one character
    (["a?"], [], "a", False),
    (["*"], [], "", True),
    ([], ["a*"], "abc", False),
    ([], ["a*"], "bcd", True),
    (["a*"], ["ab*"], "abc", False),  # exclusions win over inclusions
    (["abc"], ["abc"], "abc", False),
    (["a+b"], [], "aab", False),  # regex metacharacters are literal
    (["a+b"], [], "a+b", True),
    (["a.b"], [], "axb", False),
    (["x"], [], None, False),  # absent matches no inclusion...
    ([], ["*"], None, True),  # ...and no exclusion
    ([], [], None, True),
])
def test_dimension_semantics(
        allowed: list[str], denied: list[str], value: str | None, passes: bool) -> None:
    dimension = Dimension(allowed=NameSet.of(allowed), denied=NameSet.of(denied))
    assert dimension.passes(value) is passes
    # The compiled matcher agrees (a field dimension sees the same value).
    compiled = flt("pvc", fields={"f": dim(allowed, denied)})
    assert visible(compiled, item(fields={"f": value})) is passes


# Single filters ------------------------------------------------------------------------


@pytest.mark.parametrize(("compiled", "candidate", "reason"), [
    (flt(visibility="none"), item(), "visibility"),
    (flt(visibility="all", names=dim(["nope"])), item(), None),  # all shows every item
    (flt(), item(), None),  # filtered with no filters shows everything
    (flt(names=dim(["web"])), item("web"), None),
    (flt(names=dim(["web"])), item("api"), "names"),
    (flt(names=dim(denied=["w*"])), item("web"), "names"),
    (flt(namespaces=dim(["team-*"])), item(namespace="team-b"), None),
    (flt(namespaces=dim(["team-*"])), item(namespace="kube-system"), "namespaces"),
    (flt(namespaces=dim(denied=["kube-*"])), item(namespace="kube-system"), "namespaces"),
    (flt(names=dim(["x"]), namespaces=dim(["y"])), item("a", "b"), "names"),  # first dimension
    # Labels: every listed label must be equal; a missing label fails.
    (flt(labels={"app": "web", "tier": "fe"}), item(labels={"app": "web", "tier": "fe"}), None),
    (flt(labels={"app": "web", "tier": "fe"}), item(labels={"app": "web"}), "labels"),
    (flt(labels={"app": "web"}), item(labels={"app": "api"}), "labels"),
    (flt(labels={"app": "web"}), item(), "labels"),
    # Fields compare string forms; absent fields match neither list.
    (flt("pvc", fields={"size": dim(["1"])}), item(fields={"size": 1}), None),
    (flt("pvc", fields={"size": dim(["1.5"])}), item(fields={"size": 1.5}), None),
    (flt("pvc", fields={"size": dim(["1"])}), item(fields={"size": 1.0}), "fields.size"),
    (flt("pvc", fields={"ok": dim(["true"])}), item(fields={"ok": True}), None),
    (flt("pvc", fields={"ok": dim(denied=["false"])}), item(fields={"ok": False}), "fields.ok"),
    (flt("pvc", fields={"class": dim(["gp*"])}), item(fields={"class": "gp3"}), None),
    (flt("pvc", fields={"class": dim(["gp*"])}), item(fields={}), "fields.class"),
    (flt("pvc", fields={"class": dim(["gp*"])}), item(fields={"class": None}), "fields.class"),
    (flt("pvc", fields={"class": dim(denied=["gp*"])}), item(fields={}), None),
    # Absent is not "" (ClusterPulse compared a missing field as "").
    (flt("pvc", fields={"class": dim(denied=[""])}), item(fields={}), None),
    (flt("pvc", fields={"a": dim(["1"]), "b": dim(["2"])}),
     item(fields={"a": "1", "b": "3"}), "fields.b"),
    # A cluster-scoped item has no namespace: an allowlist of namespaces hides it.
    (flt("nodes", namespaces=dim(["a"])), item(namespace=None), "namespaces"),
    (flt("nodes", namespaces=dim(denied=["a"])), item(namespace=None), None),
    # A namespace is its own namespace: both dimensions see its name.
    (flt("namespaces", names=dim(["team-*"])), item("team-a", None), None),
    (flt("namespaces", names=dim(["team-*"])), item("kube-system", None), "names"),
    (flt("namespaces", namespaces=dim(denied=["kube-*"])), item("kube-system", None),
     "namespaces"),
    # Operators: any namespace they are available in; ``*`` passes; else their own.
    (flt("operators", namespaces=dim(["team-*"])),
     item("op", None, namespaces=["kube-system", "team-a"]), None),
    (flt("operators", namespaces=dim(["team-*"])),
     item("op", None, namespaces=["kube-system"]), "namespaces"),
    (flt("operators", namespaces=dim(["team-*"])), item("op", None, namespaces=["*"]), None),
    (flt("operators", namespaces=dim(["team-*"])), item("op", "team-b"), None),
    (flt("operators", namespaces=dim(["team-*"])), item("op", "kube", namespaces=[]),
     "namespaces"),
    # Only operators carry availability: a pod cannot claim ``*``.
    (flt("pods", namespaces=dim(["team-*"])), item("p", "kube", namespaces=["*"]),
     "namespaces"),
])
def test_hidden_by(compiled: ResourceFilter, candidate: Item, reason: str | None) -> None:
    assert hidden_by(compiled, candidate) == reason
    assert visible(compiled, candidate) is (reason is None)


# The rule view and the namespace rule ----------------------------------------------------


NS_FILTER = {"type": "namespaces", "visibility": "filtered",
             "filters": {"names": {"allowed": ["team-*"], "denied": ["team-secret"]}}}


def view(*raws: dict[str, Any]) -> RuleView:
    return RuleView.of([compile_filter(raw) for raw in raws])


def test_filter_for_accepts_singular_and_plural() -> None:
    rule = view(NS_FILTER, {"type": "pod"}, {"type": "pvc"})
    assert rule.filter_for("namespace") is rule.filter_for("namespaces")
    assert rule.filter_for("pods") is not None
    assert rule.filter_for("pvc") is not None
    assert rule.filter_for("pvcs") is None  # custom types by exact name
    assert rule.filter_for("nodes") is None


def test_filters_map_uses_plural_keys_and_the_filter_as_written() -> None:
    pods = {"type": "pod", "visibility": "none"}
    assert view(NS_FILTER, pods).filters_map() == {"namespaces": NS_FILTER, "pods": pods}
    assert view().filters_map() == {}


def test_first_entry_of_a_type_wins() -> None:
    rule = view({"type": "pods", "visibility": "none"}, {"type": "pod"})
    assert rule.type_decision("pods") == "deny"
    assert rule.filters_map()["pods"] == {"type": "pods", "visibility": "none"}


@pytest.mark.parametrize(("raws", "namespace", "expected"), [
    ([], "anything", True),
    ([NS_FILTER], "team-a", True),
    ([NS_FILTER], "kube-system", False),
    ([NS_FILTER], "team-secret", False),
    ([NS_FILTER], None, False),  # no namespace against an allowlist
    ([{"type": "namespaces", "visibility": "none"}], "team-a", False),
    ([{"type": "namespaces", "visibility": "all", "filters": {"names": dim(["x"])}}], "a", True),
    ([{"type": "namespaces", "visibility": "filtered"}], "a", True),
    # The namespaces dimension of the namespaces filter also names namespaces.
    ([{"type": "namespaces", "visibility": "filtered",
       "filters": {"namespaces": dim(denied=["kube-*"])}}], "kube-system", False),
    # Labels of a namespace are unknown for a pod: they do not cascade.
    ([{"type": "namespaces", "visibility": "filtered", "filters": {"labels": {"a": "b"}}}],
     "team-a", True),
])
def test_namespace_visible(raws: list[dict[str, Any]], namespace: str | None,
                           expected: bool) -> None:
    assert view(*raws).namespace_visible(namespace) is expected


@pytest.mark.parametrize(("raws", "kind", "candidate", "expected"), [
    # Built-in types not listed are visible, subject to the namespace rule.
    ([], "pods", item(), (True, None)),
    ([], "node", item(namespace=None), (True, None)),
    ([NS_FILTER], "pods", item(namespace="team-a"), (True, None)),
    ([NS_FILTER], "pod", item(namespace="kube-system"), (False, "namespace")),
    ([NS_FILTER], "alerts", item(namespace="team-secret"), (False, "namespace")),
    ([NS_FILTER], "events", item(namespace="kube-system"), (False, "namespace")),
    ([NS_FILTER], "pods", item(namespace=None), (False, "namespace")),
    ([NS_FILTER], "operators", item(namespace=None), (False, "namespace")),
    # A cluster-wide alert or event is inside no namespace: name lists cannot hide it.
    ([NS_FILTER], "alerts", item(namespace=None), (True, None)),
    ([NS_FILTER], "events", item(namespace=None), (True, None)),
    ([{"type": "namespaces", "visibility": "filtered",
       "filters": {"namespaces": dim(["team-*"])}}], "event", item(namespace=None), (True, None)),
    ([{"type": "namespaces", "visibility": "none"}], "pods", item(), (False, "namespace")),
    ([{"type": "namespaces", "visibility": "none"}], "events", item(namespace=None),
     (False, "namespace")),
    ([NS_FILTER], "nodes", item(namespace="kube-system"), (True, None)),  # not namespaced
    # The type's own filter applies too, and reports its own dimension.
    ([NS_FILTER, {"type": "pods", "visibility": "filtered", "filters": {"names": dim(["w*"])}}],
     "pods", item("api", "team-a"), (False, "names")),
    ([NS_FILTER, {"type": "pods", "visibility": "all"}], "pods", item(namespace="kube"),
     (False, "namespace")),
    ([{"type": "pods", "visibility": "none"}], "pods", item(), (False, "visibility")),
    # The namespaces type: its own filter on the item's name.
    ([NS_FILTER], "namespaces", item("team-b", None), (True, None)),
    ([NS_FILTER], "namespace", item("kube-system", None), (False, "names")),
    # Custom types not listed are invisible; listed ones follow their filter.
    ([], "pvc", item(), (False, "unlisted")),
    ([{"type": "pvc"}], "pvc", item(), (True, None)),
    ([{"type": "pvc"}], "unknown-type", item(), (False, "unlisted")),
    # Operators: any available namespace passes; ``*`` passes unless namespaces are none.
    ([NS_FILTER], "operators", item("op", None, namespaces=["kube", "team-a"]), (True, None)),
    ([NS_FILTER], "operators", item("op", None, namespaces=["kube"]), (False, "namespace")),
    ([NS_FILTER], "operators", item("op", None, namespaces=["*"]), (True, None)),
    ([{"type": "namespaces", "visibility": "none"}], "operators",
     item("op", None, namespaces=["*"]), (False, "namespace")),
    ([NS_FILTER], "operators", item("op", "team-a"), (True, None)),  # no info: own namespace
    ([NS_FILTER], "operators", item("op", "kube"), (False, "namespace")),
])
def test_item_visible(raws: list[dict[str, Any]], kind: str, candidate: Item,
                      expected: tuple[bool, str | None]) -> None:
    assert view(*raws).item_visible(kind, candidate) == expected


@pytest.mark.parametrize(("raws", "kind", "decision"), [
    ([], "pods", "allow"),
    ([], "nodes", "allow"),
    ([], "pvc", "deny"),  # unlisted custom type
    ([], "no-such-type", "deny"),
    ([{"type": "pvc"}], "pvc", "allow"),
    ([{"type": "pvc", "visibility": "none"}], "pvc", "deny"),
    ([{"type": "pvc", "visibility": "filtered"}], "pvc", "allow"),  # nothing to filter on
    ([{"type": "pvc", "visibility": "filtered", "filters": {"fields": {"a": dim(["1"])}}}],
     "pvc", "partial"),
    ([{"type": "pvc", "visibility": "all", "filters": {"names": dim(["a"])}}], "pvc", "allow"),
    ([{"type": "pods", "visibility": "none"}], "pod", "deny"),
    ([{"type": "namespaces", "visibility": "none"}], "pods", "deny"),
    ([{"type": "namespaces", "visibility": "none"}], "operators", "deny"),
    ([{"type": "namespaces", "visibility": "none"}], "nodes", "allow"),
    ([{"type": "namespaces", "visibility": "none"}], "namespaces", "deny"),
    ([NS_FILTER], "pods", "partial"),  # the namespace rule could hide a pod
    ([NS_FILTER], "events", "partial"),
    ([NS_FILTER], "namespaces", "partial"),
    ([NS_FILTER], "nodes", "allow"),
    ([{"type": "namespaces", "visibility": "filtered", "filters": {"labels": {"a": "b"}}}],
     "pods", "allow"),  # namespace labels do not cascade
    ([{"type": "namespaces", "visibility": "all"}], "pods", "allow"),
])
def test_type_decision(raws: list[dict[str, Any]], kind: str, decision: str) -> None:
    assert view(*raws).type_decision(kind) == decision


def test_filter_items_keeps_input_order() -> None:
    rule = view(NS_FILTER)
    items = [item("c", "team-a"), item("b", "kube"), item("a", "team-b")]
    assert [i.name for i in rule.filter_items("pods", items)] == ["c", "a"]
    assert rule.filter_items("pvc", items) == []
    assert rule.filter_items("nodes", items) == items


# Properties ----------------------------------------------------------------------------

# Small alphabets so that patterns and values collide often; ``+`` and ``.`` check that
# regex metacharacters stay literal.
CHARS = "ab.+"
values = st.text(CHARS, max_size=4)
patterns = st.text(CHARS + "*?", max_size=4)
pattern_lists = st.lists(patterns, max_size=3)
dimensions = st.fixed_dictionaries({}, optional={"allowed": pattern_lists,
                                                 "denied": pattern_lists})
FIELD_NAMES = ("f", "g")
field_values = st.one_of(st.none(), values, st.integers(-2, 2), st.sampled_from([1.5, True]))


@st.composite
def raw_filters(draw: st.DrawFn, kind: str | None = None) -> dict[str, Any]:
    filters = draw(st.fixed_dictionaries({}, optional={
        "names": dimensions,
        "namespaces": dimensions,
        "labels": st.dictionaries(st.sampled_from("kl"), st.sampled_from("xy"), max_size=2),
        "fields": st.dictionaries(st.sampled_from(FIELD_NAMES), dimensions, max_size=2),
    }))
    return {"type": kind or draw(st.sampled_from(["pods", "operators", "nodes", "pvc"])),
            "visibility": draw(st.sampled_from(["all", "none", "filtered", "filtered"])),
            "filters": filters}


items_ = st.builds(
    Item,
    name=values,
    namespace=st.one_of(st.none(), values),
    labels=st.dictionaries(st.sampled_from("kl"), st.sampled_from("xy"), max_size=2),
    fields=st.dictionaries(st.sampled_from(FIELD_NAMES), field_values, max_size=2),
    namespaces=st.one_of(st.none(), st.lists(st.one_of(values, st.just("*")), max_size=3)),
)


def ref_passes(raw_dim: dict[str, Any] | None, value: str | None) -> bool:
    """Reference: exclusions win; no inclusions passes; absent matches neither."""
    raw_dim = raw_dim or {}
    allowed, denied = raw_dim.get("allowed") or [], raw_dim.get("denied") or []
    if value is None:
        return not allowed
    if any(fnmatch.fnmatchcase(value, p) for p in denied):
        return False
    return not allowed or any(fnmatch.fnmatchcase(value, p) for p in allowed)


def ref_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else repr(value)


def ref_visible(raw: dict[str, Any], it: Item) -> bool:
    """Reference for one filter, straight from README: Policy semantics."""
    if raw["visibility"] == "none":
        return False
    if raw["visibility"] == "all":
        return True
    filters, kind = raw["filters"], raw["type"]
    if not ref_passes(filters.get("names"), it.name):
        return False
    if "namespaces" in filters:
        if kind == "operators" and it.namespaces:
            ok = "*" in it.namespaces or any(
                ref_passes(filters["namespaces"], ns) for ns in it.namespaces)
        else:
            ok = ref_passes(filters["namespaces"], it.namespace)
        if not ok:
            return False
    if any(it.labels.get(k) != v for k, v in filters.get("labels", {}).items()):
        return False
    return all(ref_passes(d, ref_text(it.fields.get(f)))
               for f, d in filters.get("fields", {}).items())


@settings(max_examples=400)
@given(raw_filters(), items_)
def test_compiled_filters_agree_with_the_reference(raw: dict[str, Any], it: Item) -> None:
    compiled = compile_filter(raw)
    assert visible(compiled, it) is ref_visible(raw, it)
    assert (hidden_by(compiled, it) is None) is ref_visible(raw, it)
    again = msgspec.msgpack.decode(msgspec.msgpack.encode(compiled), type=ResourceFilter)
    assert visible(again, it) is ref_visible(raw, it)


@settings(max_examples=200)
@given(st.lists(raw_filters(), max_size=3), st.sampled_from(["pods", "operators", "nodes",
       "namespaces", "events", "pvc", "other"]), st.lists(items_, max_size=12))
def test_filtering_a_list_equals_checking_each_item_alone(
        raws: list[dict[str, Any]], kind: str, items: list[Item]) -> None:
    rule = RuleView.of([compile_filter(raw) for raw in raws])
    kept = rule.filter_items(kind, items)
    assert kept == [it for it in items if rule.item_visible(kind, it)[0]]
    assert len(kept) <= len(items)
    decision = rule.type_decision(kind)
    if decision == "deny":
        assert kept == []
    if decision == "allow":
        assert kept == items


@settings(max_examples=300)
@given(raw_filters(), st.lists(items_, max_size=10),
       st.sampled_from(["names", "namespaces", "f"]), patterns)
def test_adding_an_exclusion_never_shows_more(
        raw: dict[str, Any], items: list[Item], where: str, pattern: str) -> None:
    before = [visible(compile_filter(raw), it) for it in items]
    filters = dict(raw["filters"])
    if where == "f":
        fields = dict(filters.get("fields", {}))
        fields["f"] = {**fields.get("f", {}), "denied": [*fields.get("f", {}).get("denied", []),
                                                          pattern]}
        filters["fields"] = fields
    else:
        filters[where] = {**filters.get(where, {}),
                          "denied": [*filters.get(where, {}).get("denied", []), pattern]}
    after = [visible(compile_filter({**raw, "filters": filters}), it) for it in items]
    assert all(b or not a for b, a in zip(before, after, strict=True))


@st.composite
def pattern_and_instance(draw: st.DrawFn) -> tuple[str, str]:
    """A pattern and a value it matches (each ``*`` and ``?`` filled in)."""
    pattern = draw(patterns)
    out = []
    for char in pattern:
        if char == "*":
            out.append(draw(st.text(CHARS, max_size=2)))
        elif char == "?":
            out.append(draw(st.sampled_from(CHARS)))
        else:
            out.append(char)
    return pattern, "".join(out)


@settings(max_examples=300)
@given(raw_filters(kind="pods"), pattern_and_instance(), pattern_lists, pattern_lists,
       st.sampled_from(["names", "namespaces"]))
def test_exclusion_beats_inclusion(raw: dict[str, Any], matched: tuple[str, str],
                                   allowed: list[str], denied: list[str], where: str) -> None:
    pattern, value = matched
    filters = {**raw["filters"], where: {"allowed": [*allowed, pattern],
                                         "denied": [*denied, pattern]}}
    compiled = compile_filter({**raw, "visibility": "filtered", "filters": filters})
    it = Item(name=value, namespace=value) if where == "names" else Item(name="n", namespace=value)
    assert not visible(compiled, it)
    assert hidden_by(compiled, it) in ("names", where)


@settings(max_examples=300)
@given(raw_filters(kind="namespaces"), st.one_of(st.none(), raw_filters(kind="pods")),
       st.lists(items_, max_size=10), st.sampled_from(["pods", "alerts", "events"]))
def test_nothing_is_visible_inside_a_hidden_namespace(
        ns_raw: dict[str, Any], own_raw: dict[str, Any] | None, items: list[Item],
        kind: str) -> None:
    raws = [ns_raw] + ([{**own_raw, "type": kind}] if own_raw else [])
    rule = RuleView.of([compile_filter(raw) for raw in raws])
    for it in rule.filter_items(kind, items):
        if it.namespace is None and kind != "pods":
            assert ns_raw["visibility"] != "none"  # alerts and events inside no namespace
            continue
        assert rule.namespace_visible(it.namespace)
        # ... and the namespace, as a namespaces item, passes the namespaces filter's
        # visibility and names (its labels and fields do not cascade).
        assert ns_raw["visibility"] != "none"
        if ns_raw["visibility"] == "filtered":
            assert ref_passes(ns_raw["filters"].get("names"), it.namespace)
    if ns_raw["visibility"] == "none":
        assert rule.filter_items(kind, items) == []
        assert not any(rule.item_visible(kind, it)[0] for it in items)
        assert rule.type_decision(kind) == "deny"


@settings(max_examples=300)
@given(st.lists(raw_filters(), max_size=3),
       st.sampled_from(["pods", "operators", "alerts", "events", "nodes", "pvc"]),
       st.lists(items_, max_size=10))
def test_a_namespace_that_hides_a_type_shows_none_of_its_items(
        raws: list[dict[str, Any]], kind: str, items: list[Item]) -> None:
    rule = RuleView.of([compile_filter(raw) for raw in raws])
    for it in items:
        if it.namespace is None or it.namespaces:
            continue  # a check names one namespace and knows no availability elsewhere
        if rule.namespace_hides(kind, it.namespace) is not None:
            assert rule.item_visible(kind, it)[0] is False
