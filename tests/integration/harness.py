"""Running Clearance's services inside a test, on the real servers of the session.

Each service runs as its own task with its own NATS and Redis connections (exactly what
``clearance run`` does), so a test can stop and restart one of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import shutil
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import nats
import nats.js.errors
import redis.asyncio as aioredis
import yaml
from nats.aio.client import Client

from clearance_api import inboxes, nats_urls
from clearance_cli.services import run_service
from clearance_runtime.process.settings import Settings
from clearance_runtime.storage import keys


class System:
    """``nats_url`` is also this harness's own connection (its requests); ``service_urls``
    gives services their own NATS users, as ``CLEARANCE_<SERVICE>_NATS_URL`` does, and
    ``inspect_url`` the connection that reads the stream's state (default: ``nats_url``)."""

    def __init__(self, nats_url: str, redis_url: str, manifests: Path | None, *,
                 cache_ttl: int = 300, kubeconfig: Path | None = None,
                 service_urls: Mapping[str, str] | None = None,
                 reply_prefixes: str = "_INBOX", inspect_url: str | None = None,
                 **settings: Any) -> None:
        own = {f"{name.replace('-', '_')}_nats_url": url
               for name, url in (service_urls or {}).items()}
        self.settings = Settings(nats_url=nats_url, redis_url=redis_url, manifests=manifests,
                                 decision_cache_ttl=cache_ttl, manifest_poll_seconds=0.05,
                                 kubeconfig=kubeconfig, kubernetes=kubeconfig is not None,
                                 reply_prefixes=reply_prefixes, **own, **settings)
        self.manifests = manifests
        self._inspect_url = inspect_url
        self._inspector: Client | None = None
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.nc: Client | None = None
        #: Events the stream should hold before settle() trusts a quiet moment.
        self._floor = 0

    async def start(self, *names: str) -> None:
        started = names or ("watcher", "compiler", "cache-invalidator", "decision")
        if "watcher" in started and self.manifests is not None:
            # A fresh stream holds at least one event per object once the watcher has read
            # the directory: settle() waits for that much (the watcher may pause longer
            # between two publishes than settle's quiet period on a loaded machine).
            self._floor = max(self._floor, _objects_in(self.manifests))
        for name in started:
            self.tasks[name] = asyncio.create_task(run_service(name, self.settings))
        if self.nc is None:
            self.nc = await nats.connect(nats_urls.split(self.settings.nats_url),
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

    async def cache_entries(self) -> int:
        """Live decision-cache entries, as the store lists them."""
        r = aioredis.from_url(self.settings.redis_url)
        try:
            return int(await r.zcard(keys.CACHE_ALL))
        finally:
            await r.aclose()

    async def stream_last_seq(self) -> int:
        assert self.nc is not None
        inspector = self.nc
        if self._inspect_url is not None:
            if self._inspector is None:
                self._inspector = await nats.connect(
                    nats_urls.split(self._inspect_url),
                    inbox_prefix=inboxes.prefix_for(self._inspect_url))
            inspector = self._inspector
        try:
            info = await inspector.jetstream().stream_info(self.settings.stream_name)
        except nats.js.errors.NotFoundError:
            return 0  # not created yet
        return int(info.state.last_seq)

    async def settle(self, timeout: float = 10.0) -> int:
        """Wait until every event in the stream is reflected; return that revision."""
        deadline = asyncio.get_running_loop().time() + timeout
        floor_until = asyncio.get_running_loop().time() + min(timeout, 5.0)
        while True:
            target = await self.stream_last_seq()
            if target < self._floor and asyncio.get_running_loop().time() < floor_until:
                # A directory may hold objects the watcher refuses or duplicates: the floor
                # is waited for a few seconds at most, then settle goes on as it would.
                await asyncio.sleep(0.05)
                continue
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

    async def apply(self, filename: str, *objects: dict[str, Any],
                    timeout: float = 10.0) -> int:
        """Write a manifest file and wait until the watcher has published what changed
        (the stream moves): the revision it reached. The file must change something."""
        before = await self.stream_last_seq()
        self.write(filename, *objects)
        deadline = asyncio.get_running_loop().time() + timeout
        while (seq := await self.stream_last_seq()) <= before:
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"the watcher published nothing for {filename}")
            await asyncio.sleep(0.01)
        return seq

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


async def publish(system: System, kind: str, obj: dict[str, Any], *,
                  deleted: bool = False) -> int:
    """Append one MODIFIED (or DELETED) event for ``obj`` straight to the stream, as a
    watcher would: its revision. The subject's token is the object's namespace/name hashed
    (what the watcher does), so a later event for the same object replaces it."""
    assert system.nc is not None
    meta = obj["metadata"]
    token = hashlib.blake2b(f"{meta.get('namespace')}/{meta['name']}".encode(),
                            digest_size=8).hexdigest()
    body = msgspec.json.encode({"type": "DELETED" if deleted else "MODIFIED", "object": obj})
    for _ in range(100):  # the compiler creates the stream as it starts
        try:
            ack = await system.nc.jetstream().publish(f"clearance.events.{kind}.{token}", body)
            return int(ack.seq)
        except nats.js.errors.NoStreamResponseError:
            await asyncio.sleep(0.05)
    raise TimeoutError("no events stream")


async def publish_object(system: System, obj: dict[str, Any], *, deleted: bool = False) -> int:
    """:func:`publish` under the object's own kind."""
    return await publish(system, obj["kind"].lower(), obj, deleted=deleted)


def _objects_in(directory: Path) -> int:
    """How many objects the manifest files under ``directory`` hold (``List`` items each)."""
    count = 0
    for path in sorted(directory.rglob("*")):
        if path.suffix not in (".yaml", ".yml", ".json") or not path.is_file():
            continue
        try:
            documents = list(yaml.safe_load_all(path.read_text()))
        except (yaml.YAMLError, UnicodeDecodeError):
            continue
        for document in documents:
            if isinstance(document, dict) and document.get("kind") == "List":
                count += len(document.get("items") or [])
            elif isinstance(document, dict) and "kind" in document:
                count += 1
    return count


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@contextlib.asynccontextmanager
async def example_fleet(nats_url: str, redis_url: str, directory: Path,
                        extra: Mapping[str, Sequence[dict[str, Any]]] | None = None
                        ) -> AsyncIterator[System]:
    """The whole pipeline on a copy of ``examples/`` (as ``clearance up`` loads it), with
    ``extra`` manifest files beside it (file name -> objects), started and settled."""
    manifests = directory / "manifests"
    shutil.copytree(EXAMPLES, manifests)
    system = System(nats_url, redis_url, manifests)
    for name, objects in (extra or {}).items():
        system.write(name, *objects)
    await system.start()
    try:
        await system.settle()
        yield system
    finally:
        await system.close()

