"""Status written back: from a policy in the Kubernetes API (kmock), through the stream,
the compiler and the decision service, to a PATCH of its status subresource.

The emulator here bumps ``metadata.resourceVersion`` on every write, as the API server
does, so a status write is a new version of the object on the watch: exactly what must
not come back through the stream.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import msgspec
import pytest
import structlog.testing
from kmock import KubernetesEmulator, ResourceInfo

from clearance_watcher import statuses
from tests.conftest import Servers
from tests.integration.harness import System, write_kubeconfig
from tests.support.policies import policy
from tests.support.waiting import until

MAP = "clusterpulse.io/v1alpha1/monitoraccesspolicies"
AP = "clearance.io/v1alpha1/accesspolicies"
MAP_PATH = "/apis/clusterpulse.io/v1alpha1/namespaces/ns/monitoraccesspolicies"
AP_PATH = "/apis/clearance.io/v1alpha1/namespaces/platform/accesspolicies"
_versions = itertools.count(100)


@attrs.define(kw_only=True)
class Versioned(KubernetesEmulator):
    """kmock's emulator, plus a new resourceVersion on every create and update."""

    async def _handle(self, request: Any) -> Any:
        key = (request.resource, request.namespace, request.name)
        if request.method == "PATCH" and key in self.objects and not self.objects[key].deleted:
            # Moved first, without an event: the emulator's own patch then reports it.
            self.objects[key].patch({"metadata": {"resourceVersion": str(next(_versions))}})
        return await super()._handle(request)


def served(obj: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    meta = obj["metadata"]
    return {**obj, "metadata": {**meta, "uid": f"uid-{meta['name']}", "resourceVersion": "1",
                                "generation": generation}}


def access_policy(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "clearance.io/v1alpha1", "kind": "AccessPolicy",
            "metadata": {"name": name, "namespace": "platform"},
            "spec": {"targetRef": {"kind": "Fleet", "name": "fleet"}, **spec}}


RULES = {"sre": {"subjects": {"groups": ["sre"]}, "permissions": {"view": True}}}


def status_patches(kmock: KubernetesEmulator, path: str) -> list[dict[str, Any]]:
    return [req.data for req in kmock if req.method == "PATCH"
            and req.url.path == f"{path}/status"]


def without_times(status: dict[str, Any]) -> dict[str, Any]:
    conditions = [{k: v for k, v in c.items() if k != "lastTransitionTime"}
                  for c in status.get("conditions", [])]
    assert all(isinstance(c.get("lastTransitionTime"), str)
               for c in status.get("conditions", []))
    return {**status, "conditions": conditions}


@pytest.fixture
async def system(clean_servers: Servers, kmock: KubernetesEmulator,
                 tmp_path: Path) -> AsyncIterator[System]:
    kmock.resources[MAP] = ResourceInfo(kind="MonitorAccessPolicy", namespaced=True,
                                        subresources={"status"})
    kmock.resources[AP] = ResourceInfo(kind="AccessPolicy", namespaced=True,
                                       subresources={"status"})
    kubeconfig = write_kubeconfig(tmp_path, str(kmock.url))
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, None, kubeconfig=kubeconfig)
    try:
        yield sys_
    finally:
        await sys_.close()


async def stream_kinds(sys_: System) -> list[tuple[str, str]]:
    assert sys_.nc is not None
    js = sys_.nc.jetstream()
    last = await sys_.stream_last_seq()
    out = []
    for seq in range(1, last + 1):
        body = msgspec.json.decode((await js.get_msg("CLEARANCE_EVENTS", seq)).data or b"")
        out.append((body["type"], body["object"]["metadata"]["name"]))
    return out


async def api_patch(kmock: KubernetesEmulator, path: str, body: dict[str, Any]) -> None:
    async with aiohttp.ClientSession() as session, session.patch(
            f"{str(kmock.url).rstrip('/')}{path}", json=body,
            headers={"Content-Type": "application/merge-patch+json"}) as resp:
        assert resp.status == 200, await resp.text()


@pytest.mark.kmock(cls=Versioned)
async def test_policies_get_their_status_written_back_once(
        system: System, kmock: KubernetesEmulator) -> None:
    kmock.objects[MAP, "ns", "ops"] = served(policy("ops", users=["olga"]), generation=3)
    kmock.objects[MAP, "ns", "broken"] = served(
        policy("broken", effect="Maybe"), generation=2)
    kmock.objects[AP, "platform", "both"] = served(
        access_policy("both", rules=RULES, defaults={"rules": RULES}))
    await system.start()
    await until(lambda: all(status_patches(kmock, p) for p in (
        f"{MAP_PATH}/ops", f"{MAP_PATH}/broken", f"{AP_PATH}/both")))

    (ops,) = status_patches(kmock, f"{MAP_PATH}/ops")
    assert without_times(ops["status"]) == {
        "state": "Active", "message": "compiled and in force", "observedGeneration": 3,
        "conditions": [
            {"type": "Compiled", "status": "True", "reason": "Compiled",
             "message": "compiled", "observedGeneration": 3},
            {"type": "Active", "status": "True", "reason": "Active",
             "message": "compiled and in force", "observedGeneration": 3}]}
    # A merge patch of the status subresource, nothing else.
    (req,) = [r for r in kmock if r.method == "PATCH" and r.url.path.endswith("/ops/status")]
    assert req.headers["Content-Type"] == "application/merge-patch+json"
    assert set(req.data) == {"status"}

    # Invalid: the state says so and the message says why, as policy-status does.
    (broken,) = status_patches(kmock, f"{MAP_PATH}/broken")
    assert broken["status"]["state"] == "Error"
    assert "effect" in broken["status"]["message"]
    assert broken["status"]["observedGeneration"] == 2
    (both,) = status_patches(kmock, f"{AP_PATH}/both")
    reply = await system.request("clearance.v1.policy-status", {
        "kind": "AccessPolicy", "namespace": "platform", "name": "both"})
    accepted = next(c for c in reply["conditions"] if c["type"] == "Accepted")
    assert (both["status"]["state"], both["status"]["message"]) == (
        "Invalid", accepted["message"])
    assert [c["type"] for c in both["status"]["conditions"]] == [
        c["type"] for c in reply["conditions"]]
    # The API shows it (what kubectl get prints: .status.state, .status.message).
    assert kmock.objects[MAP, "ns", "ops"]["status"]["state"] == "Active"

    # The watch brought the watcher's own writes back: not one became an event, and a
    # new event whose status did not move (a label) patches nothing.
    await api_patch(kmock, f"{MAP_PATH}/ops", {"metadata": {"labels": {"team": "a"}}})
    for _ in range(100):
        if ("MODIFIED", "ops") in await stream_kinds(system):
            break
        await asyncio.sleep(0.05)
    await system.settle()
    await asyncio.sleep(0.5)
    assert sorted(await stream_kinds(system)) == [
        ("ADDED", "both"), ("ADDED", "broken"), ("ADDED", "ops"), ("MODIFIED", "ops")]
    assert len(status_patches(kmock, f"{MAP_PATH}/ops")) == 1
    assert len(status_patches(kmock, f"{MAP_PATH}/broken")) == 1
    assert len(status_patches(kmock, f"{AP_PATH}/both")) == 1

    # A change of spec moves the state and observedGeneration, and keeps the time of the
    # condition that did not flip.
    await api_patch(kmock, f"{MAP_PATH}/ops", {"metadata": {"generation": 4},
                                               "spec": {"access": {"enabled": False}}})
    await until(lambda: len(status_patches(kmock, f"{MAP_PATH}/ops")) == 2)
    second = status_patches(kmock, f"{MAP_PATH}/ops")[1]["status"]
    assert (second["state"], second["observedGeneration"]) == ("Inactive", 4)
    compiled = [c["lastTransitionTime"] for c in (ops["status"]["conditions"][0],
                                                  second["conditions"][0])]
    assert compiled[0] == compiled[1]


@pytest.mark.kmock(cls=Versioned)
async def test_a_restarted_watcher_reconciles_what_changed_while_it_was_away(
        system: System, kmock: KubernetesEmulator) -> None:
    kmock.objects[MAP, "ns", "ops"] = served(policy("ops", users=["olga"]))
    await system.start()
    await until(lambda: status_patches(kmock, f"{MAP_PATH}/ops"))
    await system.settle()

    await system.stop("watcher")
    # Someone else scribbles on the status meanwhile; nothing about the spec changes.
    await api_patch(kmock, f"{MAP_PATH}/ops/status", {"status": {"state": "Bogus"}})
    await system.start("watcher")
    await until(lambda: len(status_patches(kmock, f"{MAP_PATH}/ops")) == 3)
    assert kmock.objects[MAP, "ns", "ops"]["status"]["state"] == "Active"

    # Restarted again with nothing to change: no write at all.
    await system.stop("watcher")
    await system.start("watcher")
    await system.settle()
    await asyncio.sleep(1.0)
    assert len(status_patches(kmock, f"{MAP_PATH}/ops")) == 3


@pytest.mark.kmock(cls=Versioned)
async def test_an_object_gone_before_its_patch_is_dropped_quietly(
        system: System, kmock: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
    captured = structlog.testing.CapturingLogger()
    monkeypatch.setattr(statuses, "log", captured)
    kept = served(policy("kept", users=["olga"]))
    ghost = served(policy("ghost", users=["olga"]))
    # The LIST still shows "ghost", which the API no longer has: its PATCH is a 404.
    kmock.objects[MAP, "ns", "kept"] = kept
    kmock[f"list {MAP}"] << {"apiVersion": "clusterpulse.io/v1alpha1",
                             "kind": "MonitorAccessPolicyList",
                             "metadata": {"resourceVersion": "10"}, "items": [ghost, kept]}
    kmock[f"watch {MAP}"] << (b"", ...)
    await system.start()
    await until(lambda: status_patches(kmock, f"{MAP_PATH}/kept")
                and status_patches(kmock, f"{MAP_PATH}/ghost"))
    await system.settle()
    await asyncio.sleep(1.0)
    assert len(status_patches(kmock, f"{MAP_PATH}/ghost")) == 1  # not retried
    assert kmock.objects[MAP, "ns", "kept"]["status"]["state"] == "Active"
    assert [c.args[0] for c in captured.calls if c.method_name in ("warning", "error")] == []
    assert any(c.args == ("status_target_gone",) for c in captured.calls)


@pytest.mark.kmock(cls=Versioned)
async def test_a_conflict_is_retried(system: System, kmock: KubernetesEmulator) -> None:
    kmock.objects[MAP, "ns", "ops"] = served(policy("ops", users=["olga"]))
    conflict = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 409,
                "reason": "Conflict", "message": "the object has been modified"}
    kmock[f"patch {MAP}"][:1] << 409 << conflict
    await system.start()
    await until(lambda: len(status_patches(kmock, f"{MAP_PATH}/ops")) == 2)
    first, second = status_patches(kmock, f"{MAP_PATH}/ops")
    assert without_times(first["status"]) == without_times(second["status"])
    await until(lambda: kmock.objects[MAP, "ns", "ops"].get("status", {}).get("state")
                == "Active")
