"""The agreement property: every subject answers as ``check`` does on each item where it
lives, over random fleets with both policy kinds (``tests/unit/fleets.py``).

For one principal of a random fleet, on each cluster (and one the inventory does not
know), over a universe of items in every namespace a policy names, one none names, and
none at all:

* ``filter`` shows an item iff ``check`` allows it where it lives (its namespace; a
  namespace item in itself; an operator in any namespace it is available in, ``*``
  meaning any); its decision is the whole-type ``check``'s; aggregations count exactly
  the shown items ``check`` allows ``view_metrics`` on;
* a whole-type ``check``: ``allow`` ⇒ every item allowed, ``deny`` ⇒ none; ``partial`` ⇒
  a client applying its ``filters`` shows only allowed items — at most the allowed ones,
  and exactly them when no rule of the fleet filters the type (one set of filters cannot
  say exactly what several rules show, each with its own filters: showing less is the
  safe side). The same inside each namespace;
* ``metrics`` counts exactly the namespaces and nodes ``check`` allows ``view_metrics`` on;
* ``custom-types`` lists a type iff its whole-type ``check`` is not ``deny`` (per
  cluster; the fleet's is the union); ``permissions`` per cluster is ``check`` on the
  cluster object for each action.

The mutation tests make one subject read the cluster's target only and show the property
finds a counterexample. ``CLEARANCE_AGREEMENT_EXAMPLES`` sets the number of fleets (the
suite's default keeps the test near 15 s; a campaign runs thousands).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from clearance_core.questions import answers, spread
from clearance_core.questions.placed import Placed
from tests.unit.fleets import Fleet, disagreements, fleets, principals

EXAMPLES = int(os.environ.get("CLEARANCE_AGREEMENT_EXAMPLES", "800"))
cases = st.tuples(fleets(), st.lists(principals, min_size=1, max_size=2))


def _all(case: tuple[Fleet, list[tuple[str, list[str]]]]) -> list[str]:
    fleet, asked = case
    return [found for username, groups in asked
            for found in disagreements(fleet, username, groups)]


@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(cases)
def test_every_subject_agrees_with_check(case: tuple[Fleet, list[Any]]) -> None:
    found = _all(case)
    assert not found, "\n".join([repr(case[0]), *found[:8]])


def _here_only_visible(self: Placed, type_name: str, items: Any) -> Any:
    return self.here.filter_items(type_name, items)


def _metrics_here_only(original: Callable[..., Any]) -> Callable[..., Any]:
    def skipping(here: Any, namespaces: Any, nodes: Any, **_: Any) -> Any:
        return original(here, namespaces, nodes)
    return skipping


def _aggregations_of_all(original: Callable[..., Any]) -> Callable[..., Any]:
    def counting(*args: Any, **kwargs: Any) -> Any:
        listed = original(*args, **kwargs)
        return listed._replace(counted=listed.shown)
    return counting


#: One subject at a time made to skip the Namespace targets (read the cluster's only).
MUTATIONS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "check-whole-type": lambda mp: mp.setattr(
        spread, "whole_type", lambda kind, cluster, here, there, **_: here),
    "check-item-without-namespace": lambda mp: mp.setattr(
        spread, "bare_item", lambda kind, name, cluster, here, there, **_: here),
    "filter-items": lambda mp: mp.setattr(Placed, "visible", _here_only_visible),
    "filter-operators": lambda mp: mp.setattr(
        Placed, "_available",
        lambda self, kind, item, namespace: self.here.item_visible(kind, item)[0]),
    "filter-aggregations": lambda mp: mp.setattr(
        answers, "filtered", _aggregations_of_all(answers.filtered)),
    "metrics": lambda mp: mp.setattr(
        answers, "cluster_metrics", _metrics_here_only(answers.cluster_metrics)),
    "custom-types": lambda mp: mp.setattr(
        Placed, "custom_types", lambda self: self.here.custom_types()),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_the_property_catches_a_subject_that_skips_a_target(
        mutation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    MUTATIONS[mutation](monkeypatch)
    found = find(cases, lambda case: bool(_all(case)),
                 settings=settings(max_examples=2000, derandomize=True, database=None,
                                   deadline=None, phases=(Phase.generate,),
                                   suppress_health_check=list(HealthCheck)))
    assert _all(found)
