"""``when`` conditions at bounded cost: the estimate, the cached ``self``, the budget."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_api.errors import InvalidObject
from clearance_core.inherit import cel_cost, cel_tree, conditions, merge
from clearance_core.inherit.accesspolicy import compile_access_policy
from clearance_core.inherit.hierarchy import FLEET, Target
from clearance_core.inherit.index import InheritanceIndex, PolicyApplied
from clearance_core.inherit.merge import effective_policy
from clearance_core.inherit.status import status_of
from tests.unit.accesspolicies import ANYONE, access_policy, block, rule
from tests.unit.test_inherit_properties import CLUSTERS, labels

EMPTY = {"rules": {}, "unset": []}


def tree(expression: str) -> cel_tree.Tree:
    return conditions._program(expression).tree


def shaped(rules: int, unset: int, rule_size: int = 40) -> cel_cost.Shape:
    return cel_cost.self_shape(1 + rules * (rule_size + 8), rules, 8, rule_size,
                               1 + unset * 11, unset, 11)


def test_the_estimate_reads_the_engines_tree() -> None:
    found = cel_tree.parse(conditions._ENV.compile(
        "self.rules.exists(k, k.startsWith('team-')) && 'a' in self.unset").serialize())
    assert found.root.kind == "call" and found.root.name == "_&&_"
    assert [arg.kind for arg in found.root.args] == ["comprehension", "call"]
    with pytest.raises(cel_tree.Malformed):
        cel_tree.parse(b"\x0a\x05hello")


@pytest.mark.parametrize("expression", [
    "size(self.rules) >= 0",
    "has(self.rules.ops) && self.rules.ops.permissions.viewMetrics == true",
    "self.rules.exists(k, k.startsWith('team-'))",
    "self.rules.all(k, self.rules[k].effect == 'Allow')",
    "self.unset.filter(x, x.size() > 2).size() > 0",
])
def test_everyday_conditions_cost_little_even_for_a_large_policy(expression: str) -> None:
    assert cel_cost.cost(tree(expression), shaped(100, 100)) < conditions.PER_EVALUATION


def test_the_cost_grows_with_self_where_the_work_does() -> None:
    cheap, linear = tree("has(self.rules.ops)"), tree("'x' in self.unset")
    assert cel_cost.cost(cheap, shaped(10, 10)) == cel_cost.cost(cheap, shaped(5000, 5000))
    assert cel_cost.cost(linear, shaped(10, 5000)) > 100 * cel_cost.cost(linear,
                                                                         shaped(10, 10))


shapes = st.tuples(*(st.integers(0, 5000) for _ in range(7)))
EXPRESSIONS = (
    "size(self.rules) >= 0", "'a' in self.unset", "self == self",
    "self.unset.map(x, x + x).size() > 1",
    "self.rules.all(k, self.rules.all(j, k == j))",
    "(self.unset + self.unset + self.unset).exists(x, x.matches(self.unset[0]))",
    "self.rules.exists(k, self.rules[k].subjects.users.exists(u, u.contains('a')))",
)


@settings(max_examples=200, deadline=None)
@given(expression=st.sampled_from(EXPRESSIONS), small=shapes, grow=shapes)
def test_the_cost_is_monotone_in_every_dimension_of_self(
        expression: str, small: tuple[int, ...], grow: tuple[int, ...]) -> None:
    big = tuple(s + g for s, g in zip(small, grow, strict=True))
    assert cel_cost.cost(tree(expression), cel_cost.self_shape(*small)) <= \
        cel_cost.cost(tree(expression), cel_cost.self_shape(*big))


@pytest.mark.parametrize(("expression", "reason"), [
    ("[" + ",".join(map(str, range(98))) + "]" + ".all(a, [" + ",".join(map(str, range(98)))
     + "].all(b, (string(a) + 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!')"
       ".matches('^(a|aa)+$') || true))", "even for an empty policy"),
    ("[1].map(a, [1].map(b, [1].map(c, [1].map(d, [1].map(e, [1].map(f, [1].map(g, "
     "g))))))).size() > 0", "cannot be bounded"),
])
def test_a_condition_too_costly_for_any_policy_makes_the_policy_invalid(
        expression: str, reason: str) -> None:
    with pytest.raises(InvalidObject, match=reason):
        conditions.check(expression, "spec.defaults.when")


def test_a_copy_bomb_is_refused_before_it_runs() -> None:
    """Eight copies of ``unset`` in two nested loops: with 98-element loops, 3.6 s and
    1.3 GB for 100 names, 36 s and 12 GB for 1,000, in one unbounded evaluation
    (measured). Cheap for an empty policy, so it compiles; refused before the engine
    starts once ``unset`` has grown."""
    loop = "[" + ",".join(map(str, range(20))) + "]"
    copies = " + ".join(["self.unset"] * 8)
    bomb = f"{loop}.all(a, {loop}.all(b, size({copies}) > 0))"
    conditions.check(bomb, "when")
    view = conditions.View({"rules": {}, "unset": [f"name-{i}" for i in range(1000)]})
    started = time.perf_counter()
    result, error = conditions.evaluate_in(bomb, view, conditions.Budget())
    assert time.perf_counter() - started < 0.1
    assert result is False and error is not None and "worst-case cost" in error


def test_self_is_converted_once_per_state_and_charged_once() -> None:
    rules = {f"r{i}": rule(users=[f"u{i}"]) for i in range(2000)}
    view = conditions.View({"rules": rules, "unset": []})
    budget = conditions.Budget()
    first = time.perf_counter()
    assert conditions.evaluate_in("size(self.rules) == 2000", view, budget) == (True, None)
    first = time.perf_counter() - first
    charged = conditions.BUDGET - budget.left
    assert charged >= view.size
    again = time.perf_counter()
    for _ in range(20):
        assert conditions.evaluate_in("has(self.rules.r7)", view, budget) == (True, None)
    again = (time.perf_counter() - again) / 20
    assert again < first / 5  # no conversion
    assert conditions.BUDGET - budget.left - charged < 20 * 100  # nor its charge


def test_a_spent_budget_fails_every_later_condition_with_a_reason() -> None:
    budget = conditions.Budget(units=1000)
    big = conditions.View({"rules": {f"r{i}": rule() for i in range(100)}, "unset": []})
    small = conditions.View(EMPTY)
    assert conditions.evaluate_in("true", small, budget) == (True, None)
    result, error = conditions.evaluate_in("size(self.rules) > 0", big, budget)
    assert result is False and error == conditions.BUDGET_SPENT
    assert conditions.evaluate_in("true", small, budget) == (False, conditions.BUDGET_SPENT)


def test_a_policy_too_large_for_conditions_fails_them_with_the_limit() -> None:
    users = [f"user-{i:06d}" for i in range(conditions.MAX_SELF // 10)]
    view = conditions.View({"rules": {"a": rule(users=users)}, "unset": []})
    result, error = conditions.evaluate_in("true", view, conditions.Budget())
    assert result is False and error is not None and "conditions see at most" in error


def fleet_policies(count: int, *, when: str | None, strategy: str = "merge"
                   ) -> list[Any]:
    return [compile_access_policy(access_policy(
        f"p{i:04d}", created=f"2025-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
        defaults=block({f"r{i}": rule(users=[f"u{i}"])}, strategy, when)))
        for i in range(count)]


def test_hundreds_of_fleet_conditions_merge_within_the_budget_and_say_so() -> None:
    """The attack: a few hundred Fleet policies whose ``when`` is always true, each
    adding a rule (so each changes ``self``). Unbounded, one merge converted ``self``
    300 times at a growing size (0.4 s per event at 300 policies, measured); bounded, the
    merge stops converting once the budget is spent, and the later conditions say so."""
    found = fleet_policies(300, when="size(self.rules) >= 0")
    started = time.perf_counter()
    effective = effective_policy(FLEET, found)
    assert time.perf_counter() - started < 1.0
    assert 100 < len(effective.rules) < 300
    spent = [key for key, error in effective.errors.items() if "budget" in error]
    assert spent and len(spent) + len(effective.rules) == 300
    index = InheritanceIndex.build(found, {}, (), authority=ANYONE)
    status = status_of(index, spent[-1])
    assert status is not None
    enforced = next(c for c in status if c.type == "Enforced")
    assert enforced.status == "Unknown" and "budget" in enforced.message


def test_atomic_defaults_that_change_nothing_share_one_conversion() -> None:
    found = fleet_policies(1000, when="size(self.rules) >= 0", strategy="atomic")
    effective = effective_policy(FLEET, found)
    assert not effective.errors and len(effective.rules) == 1


def test_targets_with_the_same_policies_share_one_merge_but_keep_their_names() -> None:
    found = fleet_policies(50, when="size(self.rules) > 3")
    clusters = {name: {} for name in CLUSTERS}
    index = InheritanceIndex.build(found, clusters, (), authority=ANYONE)
    for target in index.targets():
        assert index.effective[target] == effective_policy(target, index.on_path(target))
    extra = compile_access_policy(access_policy("late", defaults=block(
        {"late": rule(users=["x"])}, "merge", "size(self.rules) > 3")))
    change = index.apply(PolicyApplied(extra))
    assert {t.name for t in change.effective} == {"fleet", *CLUSTERS}
    for target, effective in change.effective.items():
        assert effective.target == target
        assert effective == effective_policy(target, index.on_path(target))


def straightforward(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every condition evaluated as before: ``self`` built and converted afresh, with no
    estimate and no budget."""
    monkeypatch.setattr(merge._Accumulator, "view",
                        lambda acc: conditions.View(acc.self_value()))
    monkeypatch.setattr(conditions, "evaluate_in",
                        lambda expression, view, budget: conditions.evaluate(expression,
                                                                             view.value))


ON_PATH = ("Fleet", ("ClusterSet", "s1"), ("Cluster", "c1"))
WHEN = ("size(self.rules) > 1", "'a' in self.unset", "!('b' in self.unset)",
        "has(self.rules.b)", "self.rules.c.effect == 'Deny'",
        "self.rules.exists(k, k == 'd')", "size(self.unset) == 1")
NAMES = ("a", "b", "c", "d")
RULES = (rule(groups=["g1"]), rule(groups=["g2"], effect="Deny"), rule(users=["u"]))


@st.composite
def on_path(draw: st.DrawFn, number: int) -> dict[str, Any]:
    """A policy on the path of cluster c1, dense in conditions and unset names."""
    spec: dict[str, Any] = {}
    for kind in draw(st.sampled_from([("rules",), ("defaults",), ("overrides",),
                                      ("defaults", "overrides")])):
        rules = draw(st.dictionaries(st.sampled_from(NAMES), st.sampled_from(RULES),
                                     max_size=3))
        if kind == "rules":
            spec["rules"] = rules
        else:
            spec[kind] = block(rules, draw(st.sampled_from([None, "merge"])),
                               draw(st.sampled_from((None, *WHEN))))
    return access_policy(f"p{number}", target=draw(st.sampled_from(ON_PATH)),
                         created=f"2025-01-01T00:00:{draw(st.integers(0, 59)):02d}Z",
                         unset=draw(st.lists(st.sampled_from(NAMES), max_size=2)) or None,
                         **spec)


@st.composite
def paths(draw: st.DrawFn) -> list[dict[str, Any]]:
    return [draw(on_path(n)) for n in range(draw(st.integers(1, 8)))]


@settings(max_examples=400, deadline=None)
@given(objs=paths(), budget=st.sampled_from([None, None, 50, 200, 800, 3000]))
def test_bounded_evaluation_gives_the_straightforward_result_within_the_budget(
        objs: list[dict[str, Any]], budget: int | None) -> None:
    unique = list(map(compile_access_policy, objs))
    index = InheritanceIndex.build(unique, {"c1": labels("s1")}, ["s1"],
                                   authority=ANYONE)
    target = Target(kind="Cluster", name="c1")
    ran_out: list[int] = []

    class Watched(conditions.Budget):
        def spend(self, units: int) -> bool:
            spent = super().spend(units)
            if not spent:
                ran_out.append(units)
            return spent

    with pytest.MonkeyPatch.context() as patch:
        if budget is not None:  # small budgets, so that some merges run out
            patch.setattr(conditions, "BUDGET", budget)
        patch.setattr(conditions, "Budget", Watched)
        bounded = effective_policy(target, index.on_path(target))
    with pytest.MonkeyPatch.context() as patch:
        straightforward(patch)
        reference = effective_policy(target, index.on_path(target))
    if not ran_out:
        assert bounded == reference
    else:  # only the small budgets run out on paths this small
        assert budget is not None


def test_a_condition_sees_a_rule_replaced_since_the_last_condition() -> None:
    lowest = access_policy("low", target=("Cluster", "c1"), created="2025-01-03T00:00:00Z",
                           defaults=block({"c": rule(groups=["g"], effect="Allow")},
                                          "merge", "size(self.rules) == 0"))
    middle = access_policy("mid", target=("Cluster", "c1"), created="2025-01-02T00:00:00Z",
                           overrides=block({"c": rule(groups=["g"], effect="Deny")}, "merge",
                                           "self.rules.c.effect == 'Allow'"))
    top = access_policy("top", target=("Cluster", "c1"), created="2025-01-01T00:00:00Z",
                        overrides=block({"seen": rule(users=["x"])}, "merge",
                                        "self.rules.c.effect == 'Deny'"))
    found = [compile_access_policy(obj) for obj in (lowest, middle, top)]
    effective = effective_policy(Target(kind="Cluster", name="c1"), found)
    assert set(effective.rules) == {"c", "seen"} and not effective.errors


def test_a_condition_sees_names_unset_since_the_last_condition() -> None:
    lowest = access_policy("low", target=("Cluster", "c1"), created="2025-01-03T00:00:00Z",
                           defaults=block({"c": rule(groups=["g"])}, "merge", "false"),
                           unset=["guard"])
    top = access_policy("top", target=("Cluster", "c1"), created="2025-01-01T00:00:00Z",
                        overrides=block({"guard": rule(users=["x"])}, "merge",
                                        "'guard' in self.unset"))
    found = [compile_access_policy(obj) for obj in (lowest, top)]
    effective = effective_policy(Target(kind="Cluster", name="c1"), found)
    assert set(effective.rules) == {"guard"}
