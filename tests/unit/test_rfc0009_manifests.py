"""The manifests of the README's RFC 0009 walkthrough (docs/rfc0009/) are the examples of
``test_inherit_merge``: each file, loaded as ``clearance up`` would (with
``platform.yaml``, which binds the examples' cluster set to the namespace ``platform``,
and the default admin namespaces), gives the effective rules that table states for its
namespace ``app`` — every policy accepted — and the ``Enforced`` conditions of its last
column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from clearance_core.inherit import hierarchy
from clearance_core.inherit.accesspolicy import compile_access_policy
from clearance_core.inherit.index import InheritanceIndex
from clearance_core.inherit.status import status_of
from tests.unit.accesspolicies import sources
from tests.unit.test_inherit_merge import HI, LO, RFC_EXAMPLES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rfc0009"

#: The README table's last column: per example, the higher (``platform``) and the lower
#: (``app``) policy's Enforced reason, and what its message says of the rules not in force
#: (or of its unset).
ENFORCED: dict[str, dict[str, tuple[str, str]]] = {
    "a1": {"platform": ("PartiallyEnforced", "a, b (not applied: its atomic defaults were "
                        "replaced as a whole by the rules of app/a1)"),
           "app": ("Enforced", "")},
    "b1": {"platform": ("Enforced", ""), "app": ("Enforced", "")},
    "b2": {"platform": ("PartiallyEnforced", "a (overridden by app/b2)"),
           "app": ("Enforced", "")},
    "c1": {"platform": ("Enforced", ""),
           "app": ("Overridden", "Policy has been overridden by platform/c1: b, c "
                   "(overridden by platform/c1)")},
    "d1": {"platform": ("Enforced", ""), "app": ("Enforced", "")},
    "d2": {"platform": ("Enforced", ""),
           "app": ("PartiallyEnforced", "a (overridden by platform/d2)")},
    "e1": {"platform": ("Overridden", "Policy is not in force on any target: metrics "
                        "(not applied: spec.overrides.when is false)"),
           "app": ("Enforced", "")},
    "e2": {"platform": ("PartiallyEnforced", "metrics (not applied: spec.overrides.when is "
                        "false)"),
           "app": ("Overridden", "metrics (overridden by platform/e2)")},
    "e3": {"platform": ("PartiallyEnforced", "metrics (not applied: spec.overrides.when is "
                        "false)"),
           "app": ("Overridden", "metrics (overridden by platform/e3)")},
    "f1": {"platform": ("PartiallyEnforced", "a (unset by app/f1)"), "app": ("Enforced", "")},
    "f2": {"platform": ("Enforced", ""),
           "app": ("Enforced", "unset of a has no effect: it is an override of platform/f2")},
}


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
        reason, says = ENFORCED[name][policy.namespace]
        enforced = conditions[1]
        assert (enforced.type, enforced.reason) == ("Enforced", reason), enforced
        assert says in enforced.message, enforced.message
        if reason == "Enforced" and not says:
            assert "unset" not in enforced.message and "not" not in enforced.message


def test_every_walkthrough_manifest_is_checked() -> None:
    assert sorted(p.stem for p in DOCS.glob("*.yaml")) == sorted(
        [str(case.id) for case in expectations()] + ["platform"])
