"""Running Clearance's services inside a test, on the real servers of the session.

Each service runs as its own task with its own NATS and Redis connections (exactly what
``clearance run`` does), so a test can stop and restart one of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import nats
import nats.js.errors
import yaml
from nats.aio.client import Client

from clearance_api import inboxes
from clearance_cli.services import run_service
from clearance_runtime.settings import Settings


class System:
    """``nats_url`` is also this harness's own connection (its requests); ``service_urls``
    gives services their own NATS users, as ``CLEARANCE_<SERVICE>_NATS_URL`` does, and
    ``inspect_url`` the connection that reads the stream's state (default: ``nats_url``)."""

    def __init__(self, nats_url: str, redis_url: str, manifests: Path | None, *,
                 cache_ttl: int = 300, kubeconfig: Path | None = None,
                 service_urls: Mapping[str, str] | None = None,
                 reply_prefixes: str = "_INBOX", inspect_url: str | None = None) -> None:
        own = {f"{name.replace('-', '_')}_nats_url": url
               for name, url in (service_urls or {}).items()}
        self.settings = Settings(nats_url=nats_url, redis_url=redis_url, manifests=manifests,
                                 decision_cache_ttl=cache_ttl, manifest_poll_seconds=0.05,
                                 kubeconfig=kubeconfig, kubernetes=kubeconfig is not None,
                                 reply_prefixes=reply_prefixes, **own)
        self.manifests = manifests
        self._inspect_url = inspect_url
        self._inspector: Client | None = None
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.nc: Client | None = None

    async def start(self, *names: str) -> None:
        for name in names or ("watcher", "compiler", "cache-invalidator", "decision"):
            self.tasks[name] = asyncio.create_task(run_service(name, self.settings))
        if self.nc is None:
            self.nc = await nats.connect(self.settings.nats_url,
                                         inbox_prefix=inboxes.prefix_for(self.settings.nats_url))
        await asyncio.sleep(0)

    async def stop(self, *names: str) -> None:
        for name in names or tuple(self.tasks):
            await stop_task(self.tasks.pop(name))

    async def close(self) -> None:
        await self.stop()
        if self.nc is not None:
            await self.nc.close()
        if self._inspector is not None:
            await self._inspector.close()

    async def request(self, subject: str, body: Any, timeout: float = 5.0) -> dict[str, Any]:
        assert self.nc is not None
        data = body if isinstance(body, bytes) else msgspec.json.encode(body)
        deadline = asyncio.get_running_loop().time() + timeout
        while True:  # the decision service may still be subscribing
            try:
                reply = await self.nc.request(subject, data, timeout=timeout)
                return dict(json.loads(reply.data))
            except nats.errors.NoRespondersError:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.05)

    async def status(self) -> dict[str, Any]:
        return await self.request("clearance.v1.status", {})

    async def stream_last_seq(self) -> int:
        assert self.nc is not None
        inspector = self.nc
        if self._inspect_url is not None:
            if self._inspector is None:
                self._inspector = await nats.connect(
                    self._inspect_url, inbox_prefix=inboxes.prefix_for(self._inspect_url))
            inspector = self._inspector
        try:
            info = await inspector.jetstream().stream_info("CLEARANCE_EVENTS")
        except nats.js.errors.NotFoundError:
            return 0  # not created yet
        return int(info.state.last_seq)

    async def settle(self, timeout: float = 10.0) -> int:
        """Wait until every event in the stream is reflected; return that revision."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            target = await self.stream_last_seq()
            status = await self.status()
            if "revision" in status and status["revision"] >= target:
                await asyncio.sleep(0.3)  # the watcher may still be publishing
                if await self.stream_last_seq() == target:
                    return target
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"system stuck at {status} (stream at {target})")
            await asyncio.sleep(0.05)

    async def check(self, username: str, cluster: str, *, groups: list[str] | None = None,
                    action: str = "view", email: str | None = None, **extra: Any
                    ) -> dict[str, Any]:
        principal: dict[str, Any] = {"username": username, "groups": groups or []}
        if email:
            principal["email"] = email
        return await self.request("clearance.v1.check", {
            "principal": principal, "action": action,
            "resource": {"type": "cluster", "name": cluster}, **extra,
        })

    def write(self, filename: str, *objects: dict[str, Any]) -> None:
        assert self.manifests is not None
        path = self.manifests / filename
        path.write_text(yaml.safe_dump_all(objects, sort_keys=False))

    def remove(self, filename: str) -> None:
        assert self.manifests is not None
        (self.manifests / filename).unlink()


async def stop_task(task: asyncio.Task[None], *, attempts: int = 20) -> None:
    """Cancel a service task and wait for it, cancelling again if a cancellation was lost:
    on Python 3.11, ``asyncio.wait_for`` inside a client (nats-py, redis-py) can swallow
    one that arrives together with its reply, and a bare ``await task`` then waits for
    ever. A task still running after every attempt fails the test that stopped it."""
    for _ in range(attempts):
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=0.5)
        if done:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                task.result()
            return
    # Where it is stuck, for the failure's report (which service, awaiting what).
    task.print_stack(file=sys.stderr)
    raise RuntimeError(f"{task.get_name()} ignored {attempts} cancellations: {task.get_coro()}")


def cluster(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": name, "labels": labels}}


def group(name: str, *users: str) -> dict[str, Any]:
    return {"apiVersion": "user.openshift.io/v1", "kind": "Group", "metadata": {"name": name},
            "users": list(users)}


def write_kubeconfig(directory: Path, server: str) -> Path:
    """A kubeconfig in ``directory`` pointing at ``server`` (a kmock API) with a token."""
    kubeconfig = directory / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "k",
        "clusters": [{"name": "k", "cluster": {"server": server.rstrip("/")}}],
        "users": [{"name": "k", "user": {"token": "t"}}],
        "contexts": [{"name": "k", "context": {"cluster": "k", "user": "k"}}],
    }))
    return kubeconfig
