"""Who gains or loses access where, through the real decision service
(docs/api/inherited.md: ``clearance.v1.effective.simulate``), on the example fleet.

The dry run of the sample that drops the payments filter says that group ``sre`` (and
olivia, whom the Group lists) would see every namespace of both production clusters;
every row's ``before`` is what ``clearance.v1.check`` answers now, and — the policy then
applied for real — every row's ``after`` is what it answers then. A MonitorAccessPolicy
that decides a cluster makes an inherited Allow there "no change"; the rows are cut at
``CLEARANCE_SIMULATE_ACCESS_ROWS`` and the reply says how many there were.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from tests.conftest import Servers
from tests.integration.harness import System, example_fleet

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = yaml.safe_load((ROOT / "docs/walkthrough/guardrails-without-payments.yaml")
                        .read_text())
SIMULATE = "clearance.v1.effective.simulate"


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    """The example fleet, as ``clearance up`` loads it."""
    async with example_fleet(clean_servers.nats_url, clean_servers.redis_url,
                             tmp_path) as sys_:
        yield sys_


def principal_of(subject: dict[str, str]) -> dict[str, Any]:
    """How a row's subject is asked (as ``who-can-see`` asks it): a group as a member of it
    alone, under a username nothing names."""
    if subject["kind"] == "group":
        return {"username": "impact-test-stranger", "groups": [subject["name"]]}
    return {"username": subject["name"]}


def resource_of(row: dict[str, Any]) -> dict[str, Any]:
    target = row["target"]
    cluster = target["cluster"] if target["kind"] == "Namespace" else target["name"]
    return {"name": "*", **row["resource"], "cluster": cluster}


async def answer(system: System, row: dict[str, Any]) -> dict[str, Any]:
    reply = await system.request("clearance.v1.check", {
        "principal": principal_of(row["subject"]), "action": "view",
        "resource": resource_of(row)})
    return {key: reply[key] for key in ("decision", "policy", "permissions", "filters")}


def key_of(row: dict[str, Any]) -> tuple[str, str, str]:
    target = row["target"]
    where = target["name"] if target["kind"] == "Cluster" else \
        f"{target['cluster']}/{target['name']}"
    return (where, f"{row['subject']['kind']}:{row['subject']['name']}",
            row["resource"]["type"])


async def test_the_dry_run_says_who_gains_what_and_check_agrees_before_and_after(
        system: System) -> None:
    reply = await system.request(SIMULATE, {"policy": SAMPLE, "operation": "apply"})
    assert "truncated" not in reply or reply["truncated"] is None
    rows = {key_of(row): row for row in reply["access"]}
    for cluster in ("prod-eu-west", "prod-us-east"):
        for subject in ("group:sre", "user:olivia"):
            gained = rows[(cluster, subject, "namespaces")]
            assert gained["move"] == "gains"
            assert "namespaces payments no longer hidden" in gained["detail"]
            assert gained["before"]["decision"] == "partial"
            assert gained["after"]["decision"] == "allow"
            assert rows[(cluster, subject, "cluster")]["detail"] == "no change"
    assert {where for where, _, _ in rows} == {"prod-eu-west", "prod-us-east",
                                               "prod-us-east/shop"}
    # Before: what check answers now.
    for row in reply["access"]:
        assert await answer(system, row) == row["before"], row
    # After: applied for real, check answers what the dry run said.
    documents = [doc for doc in yaml.safe_load_all(
        (system.manifests or Path()).joinpath("accesspolicies.yaml").read_text())]
    system.write("accesspolicies.yaml", *[
        SAMPLE if doc["metadata"]["name"] == "production-guardrails" else doc
        for doc in documents])
    await system.settle()
    for row in reply["access"]:
        assert await answer(system, row) == row["after"], row
    again = await system.request(SIMULATE, {"policy": SAMPLE, "operation": "apply"})
    assert again["targets"] == [] and again["access"] == []  # nothing left to change


async def test_an_allow_where_a_monitor_access_policy_decides_is_no_change(
        system: System) -> None:
    grant = {"apiVersion": "clearance.io/v1alpha1", "kind": "AccessPolicy",
             "metadata": {"name": "devs", "namespace": "staging-us-east"},
             "spec": {"targetRef": {"kind": "Cluster", "name": "staging-us-east"},
                      "rules": {"devs": {"subjects": {"groups": ["developers"]},
                                         "permissions": {"view": True}}}}}
    reply = await system.request(SIMULATE, {"policy": grant})
    rows = {key_of(row): row for row in reply["access"]}
    developers = rows[("staging-us-east", "group:developers", "cluster")]
    assert developers["move"] == "none" and developers["detail"] == "no change"
    assert developers["after"]["policy"] == "clusterpulse/developers-non-prod"
    assert {subject for _, subject, _ in rows} == {"group:developers", "user:bob",
                                                  "user:dave"}
    assert all(row["move"] == "none" for row in reply["access"])


async def test_rows_over_the_limit_are_cut_and_counted(system: System) -> None:
    whole = await system.request(SIMULATE, {"policy": SAMPLE})
    await system.stop("decision")
    system.settings = msgspec.structs.replace(system.settings, simulate_access_rows=3)
    await system.start("decision")
    cut = await system.request(SIMULATE, {"policy": SAMPLE})
    assert cut["access"] == whole["access"][:3]
    assert cut["truncated"]["listed"] == 3
    assert cut["truncated"]["total"] == len(whole["access"])
    assert "CLEARANCE_SIMULATE_ACCESS_ROWS" in cut["truncated"]["reason"]
    assert cut["targets"] == whole["targets"]  # the rule diff is never cut
