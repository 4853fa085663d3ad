"""The warning rules (``clearance_core.questions.unknown_names``): which names are unknown, what
the warning says and suggests, and — over random fleets with both policy kinds — that a
principal warned of as unnamed is answered exactly as anyone unnamed ("others")."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_api.wire import Resource
from clearance_core.kube.principal import Identity
from clearance_core.monitor.evaluate import candidates
from clearance_core.questions import answers, unknown_names
from clearance_core.questions.audience import UNNAMED
from clearance_runtime.reading.snapshot import Snapshot
from tests.support.fleets import CLUSTERS, GROUPS, NOW, UNKNOWN, USERS, Fleet, fleets

INVENTORY = sorted(["prod-us-east", "prod-us-west", "prod-eu-central", "dev-1", "dev-2"])


def test_a_cluster_in_the_inventory_is_not_warned_of() -> None:
    assert unknown_names.cluster_warning("dev-1", {"dev-1"}, INVENTORY) is None


def test_a_misspelled_cluster_gets_the_closest_name() -> None:
    assert unknown_names.cluster_warning("prod-us-eas", set(), INVENTORY) == (
        'cluster "prod-us-eas" is not in the inventory (did you mean "prod-us-east"?)')
    # Case alone: the same name.
    assert unknown_names.closest("DEV-1", INVENTORY) == "dev-1"


def test_a_cluster_like_no_other_is_said_without_a_suggestion() -> None:
    expected = 'cluster "zzz" is not in the inventory (no ManagedCluster has that name)'
    assert unknown_names.cluster_warning("zzz", set(), INVENTORY) == expected
    assert unknown_names.cluster_warning("zzz", set(), None) == expected
    assert unknown_names.cluster_warning("zzz", set(), []) == expected


def test_a_suggestion_compares_a_bounded_number_of_names(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A random name asked about in a fleet of 100,000 clusters costs a few dozen
    comparisons, the names nearest to it in sort order."""
    compared: list[int] = []
    real = difflib.get_close_matches

    def counting(word: str, possibilities: Sequence[str], **kw: Any) -> list[str]:
        compared.append(len(possibilities))
        return real(word, possibilities, **kw)

    monkeypatch.setattr(unknown_names.difflib, "get_close_matches", counting)
    inventory = sorted(f"cluster-{i:06d}" for i in range(100_000))
    assert unknown_names.closest("cluster-0420007", inventory) == "cluster-042007"
    assert compared == [unknown_names.COMPARED]


@pytest.mark.parametrize("type_name", ["pod", "pods", "cluster", "clusters", "namespace",
                                       "nodes", "operator", "alerts", "event", "pvc"])
def test_built_in_and_declared_types_are_known(type_name: str) -> None:
    assert unknown_names.type_warning(type_name, {"pvc"}) is None


def test_an_undeclared_type_is_said_hidden_with_the_closest_known_type() -> None:
    assert unknown_names.type_warning("pdos", set()) == (
        'type "pdos" is neither a built-in type nor declared by a MetricSource: its items '
        'are hidden (did you mean "pods"?)')
    assert unknown_names.type_warning("pvcs", {"pvc"}) == (
        'type "pvcs" is neither a built-in type nor declared by a MetricSource: its items '
        'are hidden (did you mean "pvc"?)')


def _unnamed_state(fleet: Fleet, identity: Identity) -> Snapshot:
    """The principal's snapshot as the decision service reads it: only the candidate
    MonitorAccessPolicies (those naming it), found by name."""
    state = fleet.state(identity)
    state.policies = candidates(fleet.policies, identity)
    return state


#: Who is asked: a username of the fleets (named by some, by none) or one no fleet names,
#: with or without a group.
ASKED = st.tuples(st.sampled_from([*USERS, "u9"]),
                  st.lists(st.sampled_from([*GROUPS, "g9"]), max_size=1))
QUESTIONS = [Resource(type=kind, name=name, cluster=cluster, namespace=namespace)
             for cluster in (*CLUSTERS, UNKNOWN)
             for kind, name, namespace in (
                 ("cluster", cluster, None), ("pods", "*", None), ("pods", "*", "vault"),
                 ("pods", "p1", None), ("namespaces", "shop", None), ("pvc", "*", "a"))]


@settings(max_examples=150, deadline=None)
@given(fleet=fleets(), asked=ASKED)
def test_a_principal_warned_of_as_unnamed_is_answered_as_anyone_unnamed(
        fleet: Fleet, asked: tuple[str, list[str]]) -> None:
    """The subject warning's claim, over random fleets: wherever it is given, the answer
    is the one ``others`` gets (who-can-see's unnamed username, no group) — decision,
    deciding policy, permissions and filters. And where nothing decides for the principal
    by name, no warning is missed: a principal named by nothing is warned of."""
    username, groups = asked
    identity = fleet.identity(username, groups)
    state = _unnamed_state(fleet, identity)
    nobody = Identity(username=UNNAMED, email=None, groups=frozenset())
    others = _unnamed_state(fleet, nobody)
    for action in ("view", "view_metrics"):
        for resource in QUESTIONS:
            cluster = resource.cluster or resource.name
            warned = unknown_names.check_warnings(
                state, identity, resource, cluster, known=state.known_clusters,
                inventory=sorted(fleet.clusters))
            if warned.subject is None:
                continue
            mine = answers.check(state, identity, action, resource, cluster=cluster,
                                 now=NOW, explain=False)
            theirs = answers.check(others, nobody, action, resource, cluster=cluster,
                                   now=NOW, explain=False)
            assert (mine.decision, mine.policy, mine.permissions, mine.filters) == (
                theirs.decision, theirs.policy, theirs.permissions, theirs.filters), (
                resource, action)
    named_anywhere = any(username in p.users or set(identity.groups) & set(p.groups)
                         for p in fleet.policies)
    if not named_anywhere and not any(
            unknown_names.names_principal(identity, [], [e.rules])
            for e in fleet.index.effective.values()):
        assert unknown_names.list_warnings(state, identity, CLUSTERS) == [
            f'no policy names principal "{username}" or any of its groups: it is answered '
            'as anyone unnamed is ("others" in who-can-see)']


def test_a_principal_a_policy_names_by_a_group_is_known() -> None:
    identity = Identity(username="nobody-names-me", email=None, groups=frozenset({"sre"}))
    assert unknown_names.subject_warning(identity, [], []) is not None
    # A candidate MonitorAccessPolicy was found by one of its names or groups.
    assert unknown_names.subject_warning(identity, [object()], []) is None  # type: ignore[list-item]
