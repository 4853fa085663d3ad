"""The watcher's Kubernetes source: LIST then WATCH of N objects from a fake API server.

The fake API server (aiohttp, in a child process, so its CPU is not counted) serves
discovery, a paginated LIST of ``--objects`` MonitorAccessPolicies (~1 KB each) and a
WATCH that sends as many MODIFIED events and then stays open, as a quiet watch does. The
source (``clearance_watcher.kube.KubeSource``) hands them to a ledger that only counts.
Reported: objects/s and events/s (wall clock) and CPU per object and per event (this
process's CPU time, all its threads included).

    python bench/kube_watch.py [--objects 20000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import multiprocessing
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from aiohttp import web

GROUP_VERSION = "clusterpulse.io/v1alpha1"
PLURAL = "monitoraccesspolicies"
LISTED_AT = 1_000_000


def _policy(i: int, rv: int) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION, "kind": "MonitorAccessPolicy",
        "metadata": {"name": f"policy-{i}", "namespace": f"team-{i % 50}",
                     "uid": f"00000000-0000-4000-8000-{i:012d}", "resourceVersion": str(rv),
                     "labels": {"team": f"team-{i % 50}", "tier": "gold"},
                     "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "identity": {"subjects": {"users": [f"user-{i}@example.com"],
                                      "groups": [f"team-{i % 50}", "sre"]},
                         "priority": i % 100},
            "access": {"effect": "Allow", "enabled": True},
            "scope": {"clusters": {"default": "none", "rules": [
                {"selector": {"matchLabels": {"env": "prod", "region": f"r{i % 7}"}},
                 "permissions": {"view": True, "viewMetrics": True},
                 "namespaces": {"allowed": [f"team-{i % 50}-*"], "denied": ["kube-*"]},
                 "pods": {"allowed": ["*"], "denied": ["*-debug"]}}]}},
        },
    }


def _serve(port: int, objects: int) -> None:
    """The fake API server (runs in the child process)."""
    page_size = 500
    items = [_policy(i, i + 1) for i in range(objects)]
    for item in items:  # LIST items carry neither apiVersion nor kind
        del item["apiVersion"], item["kind"]
    pages: list[bytes] = []
    for start in range(0, objects, page_size):
        more = start + page_size < objects
        meta = {"resourceVersion": str(LISTED_AT), **({"continue": str(start + page_size)}
                                                       if more else {})}
        pages.append(json.dumps({"apiVersion": GROUP_VERSION,
                                 "kind": "MonitorAccessPolicyList", "metadata": meta,
                                 "items": items[start:start + page_size]}).encode())
    events = b"".join(
        json.dumps({"type": "MODIFIED", "object": _policy(i, LISTED_AT + 1 + i)}).encode()
        + b"\n" for i in range(objects))

    async def discovery(_: web.Request) -> web.Response:
        return web.json_response({"kind": "APIResourceList", "groupVersion": GROUP_VERSION,
                                  "resources": [{"name": PLURAL, "namespaced": True,
                                                 "kind": "MonitorAccessPolicy"}]})

    async def collection(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") not in ("true", "1", "True"):
            index = int(request.query.get("continue") or 0) // page_size
            return web.Response(body=pages[index], content_type="application/json")
        resp = web.StreamResponse()
        resp.content_type = "application/json"
        await resp.prepare(request)
        if request.query.get("resourceVersion") == str(LISTED_AT):
            for start in range(0, len(events), 1 << 16):
                await resp.write(events[start:start + (1 << 16)])
        await asyncio.Event().wait()  # a quiet watch, until the client goes away
        return resp

    async def not_found(_: web.Request) -> web.Response:
        return web.json_response({"kind": "Status", "code": 404}, status=404)

    app = web.Application()
    app.router.add_get(f"/apis/{GROUP_VERSION}", discovery)
    app.router.add_get(f"/apis/{GROUP_VERSION}/{PLURAL}", collection)
    app.router.add_get("/{tail:.*}", not_found)
    web.run_app(app, host="127.0.0.1", port=port, print=None, handle_signals=True)


class CountingLedger:
    def __init__(self, objects: int) -> None:
        self.objects = objects
        self.listed = asyncio.Event()
        self.watched = asyncio.Event()
        self.events = 0
        self.marks: dict[str, tuple[float, float]] = {}

    async def sync(self, objects: Iterable[dict[str, Any]], *, kinds: Iterable[str]) -> None:
        if len(list(objects)) == self.objects:
            self.marks["listed"] = (time.perf_counter(), time.process_time())
            self.listed.set()

    async def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        self.events += 1
        if self.events == self.objects:
            self.marks["watched"] = (time.perf_counter(), time.process_time())
            self.watched.set()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _maybe_await(value: Any) -> Any:
    # The source's client helpers are awaitable with kubernetes_asyncio and plain with the
    # synchronous client: either can be measured (an older checkout, for comparison).
    return await value if inspect.isawaitable(value) else value


async def _one_run(url: str, objects: int, workdir: Path) -> dict[str, float]:
    from clearance_core.folding.registry import WATCHED  # noqa: PLC0415
    from clearance_watcher import kube  # noqa: PLC0415

    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "bench",
        "clusters": [{"name": "bench", "cluster": {"server": url}}],
        "users": [{"name": "bench", "user": {"token": "t"}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
    }))
    api = await _maybe_await(kube.api_client(kubeconfig))
    ledger = CountingLedger(objects)
    source = kube.KubeSource(api, ledger,
                             kinds={"monitoraccesspolicy": WATCHED["monitoraccesspolicy"]})
    start = (time.perf_counter(), time.process_time())
    task = asyncio.create_task(source.run())
    try:
        async with asyncio.timeout(600):
            await ledger.watched.wait()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await _maybe_await(api.close())
    (listed_wall, listed_cpu), (watched_wall, watched_cpu) = (ledger.marks["listed"],
                                                              ledger.marks["watched"])
    return {
        "list_per_s": objects / (listed_wall - start[0]),
        "list_cpu_us": (listed_cpu - start[1]) / objects * 1e6,
        "watch_per_s": objects / (watched_wall - listed_wall),
        "watch_cpu_us": (watched_cpu - listed_cpu) / objects * 1e6,
    }


async def _measure(url: str, objects: int, runs: int) -> list[dict[str, float]]:
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for _ in range(runs):
            results.append(await _one_run(url, objects, Path(workdir)))
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from clearance_runtime.process import logs  # noqa: PLC0415

    logs.configure("WARNING", service="bench")
    port = _free_port()
    server = multiprocessing.get_context("spawn").Process(
        target=_serve, args=(port, args.objects), daemon=True)
    server.start()
    try:
        for _ in range(200):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port),
                                                                        0.2):
                break
            time.sleep(0.05)
        results = asyncio.run(_measure(f"http://127.0.0.1:{port}", args.objects, args.runs))
    finally:
        server.kill()  # its watches are still open: no graceful shutdown to wait for
        server.join(5)
    from clearance_watcher import kube  # noqa: PLC0415

    client = "kubernetes_asyncio" if "kubernetes_asyncio" in sys.modules else "kubernetes"
    print(f"{client} ({kube.__file__}), {args.objects} objects, median of {args.runs} runs:")
    for key, label in (("list_per_s", "LIST   objects/s"), ("list_cpu_us", "LIST   CPU µs/object"),
                       ("watch_per_s", "WATCH  events/s"), ("watch_cpu_us", "WATCH  CPU µs/event")):
        values = [r[key] for r in results]
        print(f"  {label:22} {statistics.median(values):10,.1f}   "
              f"(runs: {', '.join(f'{v:,.1f}' for v in values)})")


if __name__ == "__main__":
    main()
