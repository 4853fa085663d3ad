"""Which Namespace targets concern a principal (``placement.NamespaceIndex``), and the
filters a whole-type answer carries when some namespaces are excluded or kept
(``spread.excluding``, ``spread.only_in``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_api.errors import BadRequest
from clearance_core.inherit.accesspolicy import AccessRule
from clearance_core.inherit.decide import matching
from clearance_core.inherit.hierarchy import namespace as namespace_target
from clearance_core.inherit.merge import EffectivePolicy, EffectiveRule
from clearance_core.kube.principal import Identity
from clearance_core.monitor.filters import Item, RuleView, compile_filter
from clearance_core.questions.placement import NamespaceIndex, spreads
from clearance_core.questions.spread import excluding, only_in

USERS = ("u1", "u2", "sa")
GROUPS = ("g1", "g2", "g3")
NAMES = ("r1", "r2", "r3")


def _rule(users: tuple[str, ...], groups: tuple[str, ...], deny: bool,
          source: str) -> EffectiveRule:
    rule = AccessRule(effect="Deny" if deny else "Allow", users=users, groups=groups,
                      service_accounts=("sa",) if "sa" in users else ())
    return EffectiveRule(rule=rule, source=source, block="rules")


effective_rules = st.builds(
    _rule, st.lists(st.sampled_from(USERS), max_size=2, unique=True).map(tuple),
    st.lists(st.sampled_from(GROUPS), max_size=2, unique=True).map(tuple),
    st.booleans(), st.sampled_from(["ns/p", "ns/q"]))
rule_sets = st.dictionaries(st.sampled_from(NAMES), effective_rules, max_size=3)
identities = st.builds(
    lambda user, groups: Identity(username=user, email=None, groups=frozenset(groups)),
    st.sampled_from(USERS), st.lists(st.sampled_from(GROUPS), max_size=2))
#: ("put", namespace, rules | None) or ("rebase", rules)
steps = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(["a", "b", "c", "d"]),
              st.one_of(st.none(), rule_sets)),
    st.tuples(st.just("rebase"), rule_sets))


def _effective(namespace: str, rules: dict[str, EffectiveRule]) -> EffectivePolicy:
    return EffectivePolicy(target=namespace_target("c1", namespace), rules=rules)


@settings(max_examples=400, derandomize=True, database=None, deadline=None)
@given(rule_sets, st.lists(steps, max_size=12), identities)
def test_the_index_finds_exactly_the_targets_that_answer_otherwise(
        base: dict[str, EffectiveRule], history: list[Any], identity: Identity) -> None:
    """Kept current step by step, the index names exactly the targets whose matching
    rules differ from the cluster's (a brute-force scan of every target), and agrees
    with an index built from scratch."""
    index = NamespaceIndex(base)
    targets: dict[str, EffectivePolicy] = {}
    for step in history:
        if step[0] == "put":
            _, namespace, rules = step
            found = None if rules is None else _effective(namespace, rules)
            index.put(namespace, found)
            if found is None:
                targets.pop(namespace, None)
            else:
                targets[namespace] = found
        else:
            base = step[1]
            index.rebase(base)
    expected = {namespace: found for namespace, found in sorted(targets.items())
                if matching(found.rules, identity) != matching(base, identity)}
    assert index.concerning(identity) == expected
    assert NamespaceIndex(base, targets).concerning(identity) == expected
    assert list(index.concerning(identity)) == sorted(expected)


def test_a_target_that_differs_only_for_others_does_not_concern_a_principal() -> None:
    base = {"r1": _rule(("u1",), (), False, "ns/p")}
    index = NamespaceIndex(base, {
        "vault": _effective("vault", {**base, "r2": _rule((), ("g2",), True, "ns/q")}),
        "same": _effective("same", dict(base)),
        "gone": _effective("gone", {})})
    u1 = Identity(username="u1", email=None, groups=frozenset({"g1"}))
    g2 = Identity(username="u9", email=None, groups=frozenset({"g2"}))
    assert list(index.concerning(u1)) == ["gone"]  # its rule r1 is not there
    assert list(index.concerning(g2)) == ["vault"]


@pytest.mark.parametrize(("type_", "name", "namespace", "expected"), [
    ("pods", "*", None, True), ("pod", "web-0", None, True), ("pvc", "x", None, True),
    ("pods", "*", "shop", False), ("pods", "web-0", "shop", False),
    ("namespaces", "*", None, True), ("namespaces", "shop", None, False),
    ("namespaces", "*", "shop", False), ("nodes", "*", None, False),
    ("cluster", "c1", None, False), ("node", "n1", "shop", False),
])
def test_what_spreads_over_the_namespace_targets(
        type_: str, name: str, namespace: str | None, expected: bool) -> None:
    assert spreads(type_, name, namespace) is expected


def test_spreads_refuses_a_namespace_named_inside_another() -> None:
    with pytest.raises(BadRequest):
        spreads("namespaces", "vault", "web")


def _shows(filters: dict[str, Any], kind: str, **item: Any) -> bool:
    view = RuleView.of(compile_filter(raw) for raw in filters.values())
    return view.item_visible(kind, Item(**item))[0]


@pytest.mark.parametrize("written", [
    None,
    {"pods": {"type": "pod", "visibility": "all"}},
    {"pods": {"type": "pods", "visibility": "filtered",
              "filters": {"labels": {"tier": "web"}, "namespaces": {"denied": ["x"]}}}},
    {"pods": {"type": "pods", "visibility": "filtered",
              "filters": {"namespaces": {"allowed": ["vault", "web", "x"]}}},
     "namespaces": {"type": "namespaces", "visibility": "filtered",
                    "filters": {"names": {"denied": ["kube-system"]}}}},
])
def test_excluding_hides_those_namespaces_and_keeps_the_rest(written: Any) -> None:
    filters = excluding(written, "pods", ["vault"])
    labels = {"tier": "web"}
    assert not _shows(filters, "pods", name="p", namespace="vault", labels=labels)
    assert not _shows(filters, "pods", name="p", labels=labels)  # it may live in vault
    for namespace in ("web", "x", "kube-system"):  # elsewhere, what was written holds
        for item_labels in ({}, labels):
            assert _shows(filters, "pods", name="p", namespace=namespace,
                          labels=item_labels) == _shows(
                written or {}, "pods", name="p", namespace=namespace, labels=item_labels)
    if written is not None and "namespaces" in written:
        assert filters["namespaces"] == written["namespaces"]  # the namespace rule stays


def test_excluding_namespaces_of_the_namespaces_type() -> None:
    filters = excluding(None, "namespaces", ["vault"])
    assert not _shows(filters, "namespaces", name="vault")
    assert _shows(filters, "namespaces", name="web")


@pytest.mark.parametrize("written", [
    None,
    {"certs": {"type": "certs", "visibility": "filtered",
               "filters": {"namespaces": {"allowed": ["shop", "lab"]},
                           "names": {"denied": ["old"]}}}},
])
def test_only_in_shows_those_namespaces_only(written: Any) -> None:
    filters = only_in(written, "certs", ["shop", "web"])
    assert _shows(filters, "certs", name="c", namespace="shop")
    assert not _shows(filters, "certs", name="c", namespace="lab")
    assert not _shows(filters, "certs", name="c")
    assert _shows(filters, "certs", name="c", namespace="web") is (written is None)
    if written is not None:
        assert not _shows(filters, "certs", name="old", namespace="shop")


def test_only_in_never_widens_through_a_wildcard_or_an_empty_list() -> None:
    assert only_in(None, "pods", ["te*m"]) == {"pods": {"type": "pods", "visibility": "none"}}
    none = only_in({"pods": {"type": "pods", "visibility": "filtered",
                             "filters": {"namespaces": {"allowed": ["a"]}}}}, "pods", ["b"])
    assert not _shows(none, "pods", name="p", namespace="b")
    assert not _shows(none, "pods", name="p", namespace="a")
