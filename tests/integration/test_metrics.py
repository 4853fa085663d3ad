"""What an operator sees of a running system: ``/metrics`` scraped over HTTP and
``clearance.v1.status``, on the real servers. Every metric the shipped alert rules and
Grafana dashboard use is one the running services export."""

from __future__ import annotations

import asyncio
import contextlib
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from clearance_runtime.process import probes, servers
from tests import observability
from tests.conftest import Servers
from tests.integration.harness import System, cluster, group
from tests.support.accesspolicies import access_policy, rule
from tests.support.policies import policy

SERVICES = ("watcher", "compiler", "cache-invalidator", "decision")
MONITOR = {"Active": 1, "Inactive": 1, "Error": 1, "Expired": 1}
ACCESS = {"Enforced": 1, "TargetNotFound": 1, "Invalid": 1}


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[tuple[System, int]]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.write("inventory.yaml", cluster("prod-east", env="prod"), group("team", "alice"))
    sys_.write("policies.yaml",
               policy("active", groups=["team"]),
               policy("disabled", groups=["team"], enabled=False),
               policy("broken", groups=["team"], priority=-1),
               policy("expired", groups=["team"], not_after="2020-01-01T00:00:00Z"))
    invalid = access_policy("no-target", rules={"r": rule(groups=["team"], view=True)})
    del invalid["spec"]["targetRef"]
    sys_.write("accesspolicies.yaml",
               access_policy("fleet", namespace="clearance-system",
                             rules={"r": rule(groups=["team"], view=True)}),
               access_policy("lost", target=("Cluster", "nowhere"),
                             rules={"r": rule(groups=["team"], view=True)}),
               invalid)
    port = servers.free_port()
    endpoint = asyncio.create_task(probes.serve(port, max_lag=1000))
    await sys_.start()
    await sys_.settle()
    yield sys_, port
    await sys_.close()
    endpoint.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await endpoint


def _get(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        assert reply.status == 200
        return str(reply.read().decode())


async def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """series name -> [(labels, value)] from ``/metrics`` over HTTP."""
    text = await asyncio.to_thread(_get, port)
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        found.setdefault(family.name, [])  # a family with no series yet still exists
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def by(series: list[tuple[dict[str, str], float]], *labels: str) -> dict[Any, float]:
    return {tuple(s[label] for label in labels) if len(labels) > 1 else s[labels[0]]: value
            for s, value in series}


async def eventually(port: int, check: Any, timeout: float = 15.0) -> Any:
    """Scrape until ``check`` holds (the census is taken every 2 s)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = await scrape(port)
        try:
            check(found)
            return found
        except (AssertionError, KeyError):
            if asyncio.get_running_loop().time() > deadline:
                raise
        await asyncio.sleep(0.2)


def census_holds(found: dict[str, list[tuple[dict[str, str], float]]]) -> None:
    policies = by(found["clearance_policies"], "kind", "state")
    assert {s: int(v) for (k, s), v in policies.items()
            if k == "MonitorAccessPolicy" and v} == MONITOR
    assert {s: int(v) for (k, s), v in policies.items() if k == "AccessPolicy" and v} == ACCESS


async def test_the_scrape_shows_build_revisions_policies_connections_and_lag(
        system: tuple[System, int]) -> None:
    sys_, port = system
    revision = (await sys_.status())["revision"]
    found = await eventually(port, census_holds)

    (build,) = found["clearance_build_info"]
    assert build[0]["version"] and build[0]["python"] and build[1] == 1
    revisions = by(found["clearance_revision"], "service")
    assert set(revisions) >= set(SERVICES)
    assert revisions["compiler"] >= revision and revisions["cache-invalidator"] >= revision
    assert by(found["clearance_connection_up"], "target") == {"nats": 1, "redis": 1}
    lags = by(found["clearance_consumer_lag"], "service", "consumer")
    assert lags[("compiler", "clearance-compiler")] == 0
    assert lags[("cache-invalidator", "change-log")] == 0
    ages = by(found["clearance_heartbeat_age_seconds"], "service")
    assert set(ages) >= set(SERVICES) and all(age < 5 for age in ages.values())


async def test_every_metric_of_the_rules_and_the_dashboard_is_exported(
        system: tuple[System, int]) -> None:
    sys_, port = system
    assert (await sys_.check("alice", "prod-east"))["decision"] == "allow"  # request series
    text = await asyncio.to_thread(_get, port)
    exported = observability.exposed_names(text_string_to_metric_families(text))
    used = observability.metric_names(
        [expr for _, expr in observability.rule_expressions()]
        + [expr for _, expr in observability.dashboard_expressions()])
    assert used <= exported, used - exported
    assert "clearance_revision_total" not in exported  # names by type, not every suffix


async def test_status_carries_lag_heartbeat_age_and_policies_by_state(
        system: tuple[System, int]) -> None:
    sys_, port = system
    found = await eventually(port, census_holds)
    status = await sys_.status()
    for name in SERVICES:
        service = status["services"][name]
        assert service["healthy"] is True
        assert service["lag"] == 0 and 0 <= service["heartbeat_age_s"] < 5
    by_state = status["policies_by_state"]
    assert by_state == {kind: {state: int(v) for (k, state), v in
                               by(found["clearance_policies"], "kind", "state").items()
                               if k == kind}
                        for kind in ("MonitorAccessPolicy", "AccessPolicy")}
    assert by_state["MonitorAccessPolicy"]["Expired"] == 1
    assert by_state["AccessPolicy"]["TargetNotFound"] == 1


async def test_a_policy_changing_state_moves_in_the_census(system: tuple[System, int]) -> None:
    sys_, port = system
    await eventually(port, census_holds)
    sys_.write("policies.yaml", policy("active", groups=["team"]),
               policy("disabled", groups=["team"]))  # enabled; two others deleted
    await sys_.settle()

    def moved(found: dict[str, list[tuple[dict[str, str], float]]]) -> None:
        policies = by(found["clearance_policies"], "kind", "state")
        assert {s: int(v) for (k, s), v in policies.items()
                if k == "MonitorAccessPolicy" and v} == {"Active": 2}

    await eventually(port, moved)
    status = await sys_.status()
    assert status["policies_by_state"]["MonitorAccessPolicy"] == {
        "Active": 2, "Inactive": 0, "Error": 0, "Expired": 0}


async def test_a_stopped_compiler_reports_no_revision_or_policies(
        system: tuple[System, int]) -> None:
    sys_, port = system
    await eventually(port, census_holds)
    await sys_.stop("compiler")
    found = await scrape(port)
    assert "compiler" not in by(found.get("clearance_revision", []), "service")
    assert not found.get("clearance_policies")
    assert ("compiler", "clearance-compiler") not in by(
        found.get("clearance_consumer_lag", []), "service", "consumer")
