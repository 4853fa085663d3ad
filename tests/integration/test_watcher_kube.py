"""The Kubernetes API source against kmock, a real HTTP server emulating the Kubernetes API.

The ledger here is a recording fake: these tests check what the source asks of the API
and what it hands to the ledger; the real ledger is tested against real NATS elsewhere.
Watch streams are scripted per request with kmock slices (``[:1]`` serves the first
matching request, ``[1:]`` the rest); ``(b"", ...)`` is a stream that sends its headers
and then stays open, as a quiet watch does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

import kubernetes_asyncio.client
import pytest
import structlog.testing
from aiohttp import web
from aiohttp.test_utils import TestServer
from kmock import KubernetesEmulator, ResourceInfo

from clearance_core.folding.registry import WATCHED as KINDS
from clearance_watcher import kube

MAP = "clusterpulse.io/v1alpha1/monitoraccesspolicies"
MAP_VERSION = "clusterpulse.io/v1alpha1"
ONLY_MAP = {"monitoraccesspolicy": KINDS["monitoraccesspolicy"]}
OPEN = (b"", ...)
TOKEN = "sesame"


class FakeLedger:
    """Records every call, and the thread it came on."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.threads: set[int] = set()

    async def sync(self, objects: Iterable[dict[str, Any]], *, kinds: Iterable[str]) -> None:
        self.threads.add(threading.get_ident())
        self.calls.append(("SYNC", (sorted(kinds), list(objects))))

    async def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        self.threads.add(threading.get_ident())
        self.calls.append((event_type, obj))

    def objects(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for what, arg in self.calls:
            out.extend(arg[1] if what == "SYNC" else [arg])
        return out

    def summary(self) -> list[str]:
        def brief(obj: dict[str, Any]) -> str:
            return f"{obj['metadata']['name']}@{obj['metadata'].get('resourceVersion')}"

        return [
            f"SYNC {','.join(arg[0])} [{' '.join(brief(o) for o in arg[1])}]"
            if what == "SYNC" else f"{what} {brief(arg)}"
            for what, arg in self.calls
        ]


def obj(name: str, rv: str, namespace: str = "team-a") -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": rv}
    return {"metadata": meta, "spec": {"owner": name}}


def event(event_type: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"type": event_type, "object": body}


def bookmark(rv: str) -> dict[str, Any]:
    body = {"apiVersion": MAP_VERSION, "kind": "MonitorAccessPolicy",
            "metadata": {"resourceVersion": rv}}
    return event("BOOKMARK", body)


def listing(rv: str, *items: dict[str, Any]) -> dict[str, Any]:
    # Like the real API: the list has kind and apiVersion, its items have neither.
    return {"apiVersion": MAP_VERSION, "kind": "MonitorAccessPolicyList",
            "metadata": {"resourceVersion": rv}, "items": list(items)}


async def until(condition: Callable[[], object]) -> None:
    for _ in range(250):  # 5 s: the source reacts in milliseconds here
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


@contextlib.asynccontextmanager
async def running(source: kube.KubeSource) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(source.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def client_for(url: str, tmp_path: Path) -> kubernetes_asyncio.client.ApiClient:
    # Through a kubeconfig file, so that the helper the watcher uses is what is tested.
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": url.rstrip("/")}}],
        "users": [{"name": "test", "user": {"token": TOKEN}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(kubeconfig))  # JSON is YAML
    return await kube.api_client(path)


@pytest.fixture
async def api(kmock: KubernetesEmulator,
              tmp_path: Path) -> AsyncIterator[kubernetes_asyncio.client.ApiClient]:
    kmock.resources[MAP] = ResourceInfo(kind="MonitorAccessPolicy", namespaced=True)
    client = await client_for(str(kmock.url), tmp_path)
    yield client
    await client.close()


def watch_versions(kmock: KubernetesEmulator) -> list[str | None]:
    return [req.params.get("resourceVersion") for req in kmock[f"watch {MAP}"]]


async def test_list_then_watch(kmock: KubernetesEmulator, api: Any) -> None:
    kmock[f"list {MAP}"] << listing("10", obj("a", "5"))
    kmock[f"watch {MAP}"] << (
        event("ADDED", obj("b", "11")),
        event("MODIFIED", obj("a", "12")),
        event("DELETED", obj("b", "13")),
        ...,
    )
    ledger = FakeLedger()
    async with running(kube.KubeSource(api, ledger, kinds=ONLY_MAP)):
        await until(lambda: len(ledger.calls) == 4)

    assert ledger.summary() == [
        "SYNC monitoraccesspolicy [a@5]", "ADDED b@11", "MODIFIED a@12", "DELETED b@13",
    ]
    # As served, plus the apiVersion and kind the list items lack.
    assert ledger.objects()[0] == {**obj("a", "5"), "apiVersion": MAP_VERSION,
                                   "kind": "MonitorAccessPolicy"}
    assert all(o["apiVersion"] == MAP_VERSION and o["kind"] == "MonitorAccessPolicy"
               for o in ledger.objects())
    assert ledger.threads == {threading.get_ident()}  # always on the event loop
    (watch,) = kmock[f"watch {MAP}"]
    assert watch.params["resourceVersion"] == "10"
    assert watch.params["allowWatchBookmarks"] == "true"
    assert watch.params["timeoutSeconds"] == "300"
    # Discovery, list and watch all authenticate.
    assert len(kmock) == 3
    assert all(req.headers.get("Authorization") == f"Bearer {TOKEN}" for req in kmock)


async def test_gone_relists_and_the_snapshot_drops_vanished(
    kmock: KubernetesEmulator, api: Any
) -> None:
    kmock[f"list {MAP}"][:1] << listing("10", obj("a", "5"), obj("b", "6"))
    kmock[f"list {MAP}"][1:] << listing("20", obj("a", "5"))
    gone = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
            "code": 410, "reason": "Expired", "message": "too old resource version: 10 (15)"}
    kmock[f"watch {MAP}"][:1] << (event("ERROR", gone),)
    kmock[f"watch {MAP}"][1:] << OPEN
    ledger = FakeLedger()
    async with running(kube.KubeSource(api, ledger, kinds=ONLY_MAP)):
        await until(lambda: len(kmock[f"watch {MAP}"]) == 2)

    assert ledger.summary() == [
        "SYNC monitoraccesspolicy [a@5 b@6]", "SYNC monitoraccesspolicy [a@5]",
    ]
    assert watch_versions(kmock) == ["10", "20"]


async def test_a_watch_refused_with_410_relists(kmock: KubernetesEmulator, api: Any) -> None:
    # The status of the watch request itself, rather than an ERROR event in its stream.
    kmock[f"list {MAP}"][:1] << listing("10", obj("a", "5"))
    kmock[f"list {MAP}"][1:] << listing("30", obj("a", "25"))
    gone = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 410,
            "reason": "Expired", "message": "too old resource version: 10 (28)"}
    kmock[f"watch {MAP}"][:1] << 410 << gone
    kmock[f"watch {MAP}"][1:] << OPEN
    ledger = FakeLedger()
    async with running(kube.KubeSource(api, ledger, kinds=ONLY_MAP)):
        await until(lambda: len(kmock[f"watch {MAP}"]) == 2)

    assert ledger.summary() == [
        "SYNC monitoraccesspolicy [a@5]", "SYNC monitoraccesspolicy [a@25]",
    ]
    assert watch_versions(kmock) == ["10", "30"]


async def test_bookmarks_move_the_resource_version_only(
    kmock: KubernetesEmulator, api: Any
) -> None:
    kmock[f"list {MAP}"] << listing("10")
    kmock[f"watch {MAP}"][:1] << (bookmark("15"),)
    kmock[f"watch {MAP}"][1:2] << (event("ADDED", obj("c", "16")), bookmark("17"))
    kmock[f"watch {MAP}"][2:] << OPEN
    ledger = FakeLedger()
    async with running(kube.KubeSource(api, ledger, kinds=ONLY_MAP)):
        await until(lambda: len(kmock[f"watch {MAP}"]) == 3)

    assert ledger.summary() == ["SYNC monitoraccesspolicy []", "ADDED c@16"]
    assert watch_versions(kmock) == ["10", "15", "17"]  # re-watched without a relist
    assert len(kmock[f"list {MAP}"]) == 1


async def test_errors_back_off_and_resume_from_the_last_version(
    kmock: KubernetesEmulator, api: Any
) -> None:
    unavailable = {"apiVersion": "v1", "kind": "Status", "code": 503, "status": "Failure",
                   "reason": "ServiceUnavailable", "message": "etcd is sulking"}
    kmock[f"list {MAP}"][:1] << 503 << unavailable
    kmock[f"list {MAP}"][1:] << listing("10")
    # A failure mid-stream: kmock ends the stream with an ERROR event of code 500.
    kmock[f"watch {MAP}"][:1] << (event("ADDED", obj("c", "11")), RuntimeError("boom"))
    kmock[f"watch {MAP}"][1:] << OPEN
    ledger = FakeLedger()
    async with running(kube.KubeSource(api, ledger, kinds=ONLY_MAP)):
        await until(lambda: len(kmock[f"watch {MAP}"]) == 2)

    assert len(kmock[f"list {MAP}"]) == 2  # the failed list was retried
    assert ledger.summary() == ["SYNC monitoraccesspolicy []", "ADDED c@11"]
    assert watch_versions(kmock) == ["10", "11"]  # resumed, not relisted


async def test_kinds_whose_api_is_not_served_are_skipped(
    kmock: KubernetesEmulator, api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    captured = structlog.testing.CapturingLogger()
    monkeypatch.setattr(kube, "log", captured)
    kmock[f"list {MAP}"] << listing("10", obj("a", "5"))
    kmock[f"watch {MAP}"] << OPEN

    def skipped() -> set[str]:
        return {c.kwargs["kind"] for c in captured.calls if c.args == ("kind_skipped",)}

    ledger = FakeLedger()
    async with running(kube.KubeSource(api, ledger)) as task:  # every kind in KINDS
        await until(lambda: len(skipped()) == len(KINDS) - 1 and len(ledger.calls) == len(KINDS))
        assert not task.done()

    # Absent groups (404), an absent plural in a served group (metricsources), and an
    # absent core resource (namespaces) alike.
    assert skipped() == set(KINDS) - {"monitoraccesspolicy"}
    assert all(c.method_name == "warning" for c in captured.calls if c.args == ("kind_skipped",))
    # An unserved kind is synced empty: whatever the stream still holds of it (its CRD was
    # removed while we were away) is deleted, failing closed.
    assert sorted(ledger.summary()) == sorted(
        ["SYNC monitoraccesspolicy [a@5]"]
        + [f"SYNC {k} []" for k in KINDS if k != "monitoraccesspolicy"]
    )


async def test_cancellation_is_prompt_and_leaves_no_thread(
    kmock: KubernetesEmulator, api: Any
) -> None:
    kmock[f"list {MAP}"] << listing("10")
    kmock[f"watch {MAP}"] << OPEN
    task = asyncio.create_task(kube.KubeSource(api, FakeLedger(), kinds=ONLY_MAP).run())
    await until(lambda: len(kmock[f"watch {MAP}"]) == 1)
    await asyncio.sleep(0.2)  # the watch thread is now blocked reading a quiet stream

    started = time.monotonic()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 1.0
    await until(lambda: not [t for t in threading.enumerate() if t.name.startswith("kube")])


async def test_core_namespaces(tmp_path: Path) -> None:
    # kmock 0.8 cannot serve /api/v1/namespaces (its path parser fails on it), so the core
    # path is checked against a minimal hand-written server.
    ns = {"metadata": {"name": "default", "uid": "ns-uid", "resourceVersion": "3"}}
    watches: list[dict[str, str]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.path == "/api/v1":
            return web.json_response({"kind": "APIResourceList", "groupVersion": "v1",
                                      "resources": [{"name": "namespaces", "kind": "Namespace",
                                                     "namespaced": False}]})
        if request.path == "/api/v1/namespaces" and request.query.get("watch") != "true":
            return web.json_response({"kind": "NamespaceList", "apiVersion": "v1",
                                      "metadata": {"resourceVersion": "4"}, "items": [ns]})
        if request.path == "/api/v1/namespaces":
            watches.append(dict(request.query))
            resp = web.StreamResponse()
            await resp.prepare(request)
            added = {**ns, "metadata": {**ns["metadata"], "name": "team-a", "uid": "u2",
                                        "resourceVersion": "5"}}
            await resp.write(json.dumps(event("ADDED", added)).encode() + b"\n")
            await asyncio.Event().wait()  # a quiet watch, until the client goes away
        return web.json_response({"kind": "Status", "code": 404}, status=404)

    server = TestServer(web.Application())
    server.app.router.add_route("GET", "/{tail:.*}", handle)
    async with server:
        client = await client_for(str(server.make_url("/")), tmp_path)
        ledger = FakeLedger()
        source = kube.KubeSource(client, ledger, kinds={"namespace": KINDS["namespace"]})
        async with running(source):
            await until(lambda: len(ledger.calls) == 2)
        await client.close()

    assert ledger.summary() == ["SYNC namespace [default@3]", "ADDED team-a@5"]
    assert ledger.objects()[0] == {**ns, "apiVersion": "v1", "kind": "Namespace"}
    assert watches[0]["resourceVersion"] == "4"
