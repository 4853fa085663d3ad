"""The command line's TARGET syntax (``clearance effective``): what ``reach`` and
``simulate`` print can be pasted back into ``effective``."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clearance_api.wire import EffectiveReply, ExcludedPolicy, Target
from clearance_cli.inherited import parse_target, policy_ref, render_effective, target_text

NAMES = st.text(st.characters(exclude_characters="/", exclude_categories=["Cs"]),
                min_size=1, max_size=20)
TARGETS = st.one_of(
    st.just(Target(kind="Fleet", name="fleet")),
    st.builds(lambda n: Target(kind="ClusterSet", name=n), NAMES),
    st.builds(lambda n: Target(kind="Cluster", name=n), NAMES),
    st.builds(lambda c, n: Target(kind="Namespace", cluster=c, name=n), NAMES, NAMES))


@given(TARGETS)
def test_printed_targets_parse_back(target: Target) -> None:
    assert parse_target(target_text(target)) == target


@pytest.mark.parametrize(("text", "target"), [
    ("fleet", Target(kind="Fleet", name="fleet")),
    ("Fleet/fleet", Target(kind="Fleet", name="fleet")),
    ("clusterset/prod", Target(kind="ClusterSet", name="prod")),
    ("Cluster/east", Target(kind="Cluster", name="east")),
    ("namespace/east/shop", Target(kind="Namespace", cluster="east", name="shop")),
])
def test_kinds_are_case_insensitive(text: str, target: Target) -> None:
    assert parse_target(text) == target


@pytest.mark.parametrize("text", [
    "", "east", "fleet/other", "cluster", "cluster/", "cluster/a/b", "namespace/shop",
    "namespace/east/", "namespace//shop", "namespace/a/b/c", "planet/earth"])
def test_malformed_targets_are_usage_errors(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="a target is fleet"):
        parse_target(text)


def test_policy_references_are_namespace_slash_name() -> None:
    assert policy_ref("platform/fleet-baseline") == ("platform", "fleet-baseline")
    for text in ("fleet-baseline", "/x", "x/", "a/b/c"):
        with pytest.raises(argparse.ArgumentTypeError):
            policy_ref(text)


def test_effective_prints_the_policies_that_take_no_part_only_when_there_are_some() -> None:
    reply = EffectiveReply(target=Target(kind="Fleet", name="fleet"), revision=7)
    assert render_effective(reply)[-1] == "rules from: none"
    reply.excluded = [ExcludedPolicy(policy="team-a/grab", reason="Unauthorized",
                                     message="Policy namespace team-a may not govern it"),
                      ExcludedPolicy(policy="x/broken", reason="Invalid", message="bad")]
    assert render_effective(reply)[-3:] == [
        "taking no part (aimed at it or above it):",
        "  team-a/grab  Unauthorized  Policy namespace team-a may not govern it",
        "  x/broken     Invalid       bad"]
