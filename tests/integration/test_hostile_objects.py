"""Hostile objects on the real pipeline: none stops, stalls or crash-loops it, and each
is withdrawn whole with its reason in its status."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from clearance_core.folding import fold
from clearance_runtime.process import metrics
from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.support.policies import policy


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.write("inventory.yaml", cluster("prod-east"), cluster("a" * 40))
    await sys_.start()
    await sys_.settle()
    yield sys_
    await sys_.close()


async def publish(system: System, kind: str, body: Any, token: str = "x") -> int:
    assert system.nc is not None
    data = body if isinstance(body, bytes) else msgspec.json.encode(body)
    ack = await system.nc.jetstream().publish(f"clearance.events.{kind}.{token}", data)
    return int(ack.seq)


def added(obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": "ADDED", "object": obj}


def _deep(depth: int) -> bytes:
    return b'{"type":"ADDED","object":' + b"[" * depth + b"]" * depth + b"}"


def hostile_events() -> list[tuple[str, bytes | dict[str, Any]]]:
    bomb = policy("bomb", users=["eve"], rules=[{"selector": {"matchPattern": "(a|aa)*c"}}])
    huge = policy("huge", users=["eve"], default="all")
    huge["spec"]["identity"]["priority"] = 2**70
    deep_filter = policy("deep", users=["eve"], rules=[{
        "selector": {"matchNames": ["*"]},
        "resources": [{"type": "pods", "visibility": "filtered",
                       "filters": {"fields": {"f": {"allowed": [10**40]}}}}]}])
    overflow = policy("overflow", users=["eve"], rules=[{
        "selector": {"matchPattern": "a{4294967296}"}}])
    return [
        ("monitoraccesspolicy", added(bomb)),
        ("monitoraccesspolicy", added(huge)),
        ("monitoraccesspolicy", added(deep_filter)),
        ("monitoraccesspolicy", added(overflow)),
        ("monitoraccesspolicy", _deep(5000)),
        ("monitoraccesspolicy", b'{"type":"ADDED","object":{"metadata":{"name":"\xed\xa0"}}}'),
        ("metricsource", added({"metadata": {"name": "m", "namespace": "x"},
                                "spec": {"rbac": {"resourceTypeName": "t"}, "aggregations": [
                                    {"name": "n", "function": "count", "filter": {
                                        "field": "f", "operator": "matches",
                                        "value": "(x+x+)+y"}}]}})),
        ("group", added({"kind": "Group", "metadata": {"name": "g"},
                         "users": [2**90, "eve"]})),
        ("managedcluster", added({"metadata": {"name": "c", "labels": {"a": 2**90}}})),
        ("clusterrole", added({"kind": "ClusterRole", "metadata": {"name": "r"},
                               "rules": [{"verbs": [2**90]}]})),
        ("namespace", added({"metadata": {"name": "n" * 100_000}})),
    ]


async def test_hostile_objects_never_stop_the_pipeline(system: System) -> None:
    for kind, body in hostile_events():
        await publish(system, kind, body)
    seq = await publish(system, "monitoraccesspolicy",
                        added(policy("after", users=["eve"], default="all")))
    reply = await system.check("eve", "prod-east", min_revision=seq)
    assert (reply["decision"], reply["policy"]) == ("allow", "ns/after")
    # The backtracking bomb answers at once against the 40-character name it targets.
    reply = await system.check("eve", "a" * 40, min_revision=seq, explain=True)
    assert reply["decision"] == "allow"
    assert all(not task.done() for task in system.tasks.values())
    status = await system.request("clearance.v1.policy-status",
                                  {"kind": "MonitorAccessPolicy", "namespace": "ns",
                                   "name": "huge"})
    assert status["state"] == "Error" and "64-bit" in status["message"]


async def test_an_unexpected_failure_withdraws_the_object_and_moves_on(
        system: System, monkeypatch: pytest.MonkeyPatch) -> None:
    seq = await publish(system, "monitoraccesspolicy",
                        added(policy("boom", users=["ann"], default="all")))
    assert (await system.check("ann", "prod-east", min_revision=seq))["decision"] == "allow"

    real = fold.compile_policy

    def explode(obj: dict[str, Any]) -> Any:
        if obj["metadata"]["name"] == "boom":
            raise ZeroDivisionError("a defect, not the author's fault")
        return real(obj)

    monkeypatch.setattr(fold, "compile_policy", explode)
    failures = metrics.OBJECT_FAILURES.labels(kind="monitoraccesspolicy")._value.get()
    changed = policy("boom", users=["ann"], default="all")
    changed["spec"]["identity"]["priority"] = 5
    seq = await publish(system, "monitoraccesspolicy", added(changed))
    # The previous valid version is withdrawn, not kept in force.
    assert (await system.check("ann", "prod-east", min_revision=seq))["decision"] == "deny"
    status = await system.request("clearance.v1.policy-status",
                                  {"kind": "MonitorAccessPolicy", "namespace": "ns",
                                   "name": "boom"})
    assert status["state"] == "Error" and "ZeroDivisionError" in status["message"]
    assert metrics.OBJECT_FAILURES.labels(
        kind="monitoraccesspolicy")._value.get() == failures + 1

    # No crash loop: a restarted compiler starts after the failed event.
    await system.stop("compiler")
    await system.start("compiler")
    seq = await publish(system, "monitoraccesspolicy",
                        added(policy("other", users=["ann"], default="all")))
    assert (await system.check("ann", "prod-east", min_revision=seq))["decision"] == "allow"
    assert not system.tasks["compiler"].done()


async def test_a_crashing_service_is_restarted_without_the_others(
        system: System, monkeypatch: pytest.MonkeyPatch) -> None:
    from clearance_invalidator import app  # noqa: PLC0415

    crashes: list[int] = []
    real = app.Invalidator

    class Flaky(real):  # type: ignore[misc, valid-type]
        async def run(self) -> None:
            if not crashes:
                crashes.append(1)
                raise RuntimeError("injected defect")
            await super().run()

    monkeypatch.setattr(app, "Invalidator", Flaky)
    await system.stop("cache-invalidator")
    await system.start("cache-invalidator")
    seq = await publish(system, "monitoraccesspolicy",
                        added(policy("late", users=["lee"], default="all")))
    reply = await system.check("lee", "prod-east", min_revision=seq, timeout_ms=5000)
    assert reply["decision"] == "allow"
    assert crashes == [1]
    assert all(not task.done() for task in system.tasks.values())
    await asyncio.sleep(0)
