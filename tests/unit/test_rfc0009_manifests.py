"""The manifests of the README's RFC 0009 walkthrough (docs/rfc0009/) are the examples of
``test_inherit_merge``: each file, loaded as ``clearance up`` would (with
``platform.yaml``, which binds the examples' cluster set to the namespace ``platform``,
and the default admin namespaces), gives the effective rules that table states for its
namespace ``app`` — every policy accepted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from clearance_core import hierarchy
from clearance_core.accesspolicy import compile_access_policy
from clearance_core.inherit_index import InheritanceIndex
from clearance_core.inherit_status import status_of
from tests.unit.accesspolicies import sources
from tests.unit.test_inherit_merge import HI, LO, RFC_EXAMPLES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rfc0009"


def expectations() -> list[Any]:
    cases = []
    for example in RFC_EXAMPLES:
        name = str(example.id).split("-")[0].lower()
        _, _, expected = example.values
        assert isinstance(expected, dict)
        renamed = {rule: source.replace(HI, f"platform/{name}").replace(LO, f"app/{name}")
                   for rule, source in expected.items()}
        cases.append(pytest.param(name, renamed, id=name))
    # E3 has no row in that table (its point is the rule's content): the override wins.
    cases.append(pytest.param("e3", {"metrics": "platform/e3:overrides"}, id="e3"))
    return cases


@pytest.mark.parametrize(("name", "expected"), expectations())
def test_each_walkthrough_manifest_is_its_rfc_example(name: str,
                                                      expected: dict[str, str]) -> None:
    documents = [*yaml.safe_load_all((DOCS / f"{name}.yaml").read_text()),
                 *yaml.safe_load_all((DOCS / "platform.yaml").read_text())]
    clusters: dict[str, dict[str, str]] = {
        doc["metadata"]["name"]: doc["metadata"].get("labels") or {}
        for doc in documents if doc["kind"] == "ManagedCluster"}
    sets = [doc["metadata"]["name"] for doc in documents if doc["kind"] == "ManagedClusterSet"]
    bindings = {(doc["metadata"]["namespace"], doc["metadata"]["name"]): doc["spec"]["clusterSet"]
                for doc in documents if doc["kind"] == "ManagedClusterSetBinding"}
    policies = [compile_access_policy(doc) for doc in documents
                if doc["kind"] == "AccessPolicy"]
    index = InheritanceIndex.build(policies, clusters, sets, bindings=bindings)
    assert sources(index, hierarchy.namespace(name, "app")) == expected
    for policy in policies:
        conditions = status_of(index, policy.key)
        assert conditions is not None and conditions[0].reason == "Accepted", conditions


def test_every_walkthrough_manifest_is_checked() -> None:
    assert sorted(p.stem for p in DOCS.glob("*.yaml")) == sorted(
        [str(case.id) for case in expectations()] + ["platform"])
