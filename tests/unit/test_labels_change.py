"""A cluster's label change names the subjects of exactly the policies whose match of
that cluster it changes: skipping the policies whose ``matchLabels`` name none of the
changed keys loses none of them (compared with matching every policy before and after)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_core.folding.fold import Affected
from clearance_core.folding.folds.inventory import labels_change
from clearance_core.folding.model import Model
from clearance_core.monitor.evaluate import match_cluster
from clearance_core.monitor.policy import compile_policy
from tests.unit.policies import policy

KEYS = ("env", "tier", "region")
VALUES = ("prod", "dev", "1")
label_sets = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3)
selectors = st.one_of(
    label_sets.map(lambda labels: {"matchLabels": labels}),
    st.sampled_from([{"matchNames": ["c1"]}, {"matchNames": ["x*"]},
                     {"matchPattern": "c[0-9]"}, {"matchPattern": "z+"}]),
    st.tuples(label_sets, st.sampled_from(["c1", "nope"])).map(
        lambda pair: {"matchLabels": pair[0], "matchNames": [pair[1]]}))
policies = st.lists(st.tuples(st.lists(selectors, max_size=3),
                              st.sampled_from(["none", "all"])), max_size=8)


def brute_force(model: Model, name: str, before: dict[str, str],
                after: dict[str, str]) -> Affected:
    affected = Affected()
    for compiled in model.policies.values():
        if match_cluster(compiled, name, before) != match_cluster(compiled, name, after):
            affected.add_policy_subjects(compiled)
    return affected


@settings(max_examples=400)
@given(specs=policies, before=label_sets, after=label_sets)
def test_the_subjects_named_are_those_of_the_policies_whose_match_moved(
        specs: list[tuple[list[dict[str, Any]], str]], before: dict[str, str],
        after: dict[str, str]) -> None:
    model = Model()
    for n, (rules, default) in enumerate(specs):
        obj = policy(f"p{n}", users=[f"u{n}"], groups=[f"g{n}"], default=default,
                     rules=[{"selector": s, "permissions": {"view": True}} for s in rules])
        model.set_policy(f"ns/p{n}", compile_policy(obj), None)
    got = labels_change(model, "c1", before, after)
    want = brute_force(model, "c1", before, after)
    assert (got.users, got.groups) == (want.users, want.groups)
