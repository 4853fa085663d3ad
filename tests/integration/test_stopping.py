"""A stop must end every service loop, even when a client swallowed the cancellation.

On Python 3.11 ``asyncio.wait_for`` inside redis-py or nats-py can lose a cancellation
that arrives together with its reply. A loop inside a TaskGroup (the watcher's heartbeat)
then ran on while the group waited for it, and ``clearance run`` never stopped. Every
service loop now honours, once a turn, a cancellation its task still carries
(``health.stop_if_asked``: the beat, the manifest and Kubernetes watch loops, the lease's
renewal).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from clearance_runtime.process import health
from clearance_watcher.manifests import ManifestSource
from tests.conftest import Servers


async def test_a_loop_that_swallowed_its_cancellation_stops_at_its_next_beat(
        real_servers: Servers) -> None:
    r = aioredis.from_url(real_servers.redis_url)
    beats = 0
    beating = asyncio.Event()

    async def heartbeat() -> None:
        nonlocal beats
        swallowed = False
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed = True  # what a client's wait_for can do on 3.11
            await health.beat(r, "stopping-test", 1)
            beats += 1
            if beats >= 3:
                beating.set()

    async def service() -> None:  # the watcher's shape: its loops in one TaskGroup
        async with asyncio.TaskGroup() as group:
            group.create_task(heartbeat())

    task = asyncio.create_task(service())
    try:
        await asyncio.wait_for(beating.wait(), 5.0)
        task.cancel()  # the group cancels its loop once, and the loop swallows it
        done, _ = await asyncio.wait({task}, timeout=3.0)
        assert task in done, "the service ignored its stop"
        assert task.cancelled()
    finally:
        task.cancel()
        await r.delete("clr:svc:stopping-test")
        await r.aclose()


async def test_a_manifest_watcher_whose_publish_swallowed_its_stop_stops(
        tmp_path: Path) -> None:
    # The watcher's manifest loop publishes through nats-py (wait_for inside): one
    # publish that swallows the stop must not leave the loop polling for ever.
    (tmp_path / "a.yaml").write_text(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n")
    synced = asyncio.Event()

    class Swallowing:
        async def sync(self, objects: Iterable[dict[str, Any]], *, kinds: Iterable[str]
                       ) -> None:
            synced.set()
            # What a client's wait_for can do on 3.11: the reply came, and no error.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(10)

        async def apply(self, event_type: str, obj: dict[str, Any]) -> None:
            raise AssertionError("a manifest directory reports snapshots only")

    async def service() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(ManifestSource(tmp_path, Swallowing(), poll_seconds=0.01).run())

    task = asyncio.create_task(service())
    try:
        await asyncio.wait_for(synced.wait(), 5.0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=3.0)
        assert task in done, "the manifest watcher ignored its stop"
        assert task.cancelled()
    finally:
        task.cancel()
