"""The watcher process: a manifest directory and/or a Kubernetes API, into the stream."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions
from nats.aio.client import Client

from clearance_runtime.messaging import bus
from clearance_runtime.process import health, logs, metrics, probes, retries
from clearance_runtime.process.settings import Settings
from clearance_watcher.ledger import Ledger
from clearance_watcher.manifests import ManifestSource

log = logs.get(__name__)


class Watcher:
    def __init__(self, nc: Client, settings: Settings, redis: aioredis.Redis) -> None:
        self._nc = nc
        self._settings = settings
        self._r = redis
        self._ledgers: list[Ledger] = []

    async def run(self) -> None:
        js = self._nc.jetstream()
        topology = self._settings.topology
        # Its NATS user may create the stream, not update it: the compiler reconciles.
        # An outage here (a NATS election: the stream without a leader for seconds) is
        # waited out like any other, not a service failure: restarting the watcher cost
        # its reconnection and its supervisor's back-off on top of the election.
        await retries.forever("watcher start", lambda: bus.ensure_stream(
            js, topology, reconcile=False))
        sources: list[Coroutine[Any, Any, None]] = [self._heartbeat()]
        if self._settings.manifests is not None:
            ledger = Ledger(js, source="manifests", nc=self._nc, topology=topology)
            # A load cut short is started over (it only ever sets each object to its
            # last message on the stream).
            await retries.forever("ledger load", ledger.load, source="manifests")
            self._ledgers.append(ledger)
            sources.append(ManifestSource(
                self._settings.manifests, ledger,
                poll_seconds=self._settings.manifest_poll_seconds,
                max_bytes=self._settings.manifest_max_bytes).run())
        if self._settings.kubernetes:
            ledger = Ledger(js, source="kubernetes", nc=self._nc, topology=topology)
            await retries.forever("ledger load", ledger.load, source="kubernetes")
            self._ledgers.append(ledger)
            sources.append(self._kubernetes(ledger))
        if len(sources) == 1:
            log.warning("watcher_idle", hint="set CLEARANCE_MANIFESTS and/or "
                        "CLEARANCE_KUBECONFIG (or run in a cluster)")
        try:
            async with asyncio.TaskGroup() as group:
                for source in sources:
                    group.create_task(source)
        finally:
            metrics.forget("watcher")  # back to standby, or stopped: not this one's work

    async def _kubernetes(self, ledger: Ledger) -> None:
        from clearance_watcher import kube  # noqa: PLC0415  (only when watching an API)

        async with await kube.api_client(self._settings.kubeconfig) as api:
            if not self._settings.write_status:
                await kube.KubeSource(api, ledger).run()
                return
            from clearance_watcher.statuses import StatusWriter  # noqa: PLC0415

            writer = StatusWriter(self._nc, api, ledger)
            async with asyncio.TaskGroup() as group:
                group.create_task(writer.run())
                group.create_task(kube.KubeSource(api, ledger, observer=writer).run())

    async def _heartbeat(self) -> None:
        """The watcher reports like every service: a dead watcher shows as unhealthy in
        ``clearance.v1.status``; its revision is the last sequence it wrote or loaded."""
        while True:
            probes.turn("watcher")  # alive whatever the store answers (liveness)
            try:
                revision = max((ledger.last_seq for ledger in self._ledgers), default=0)
                await health.beat(self._r, "watcher", revision)
            except redis.exceptions.RedisError as exc:
                log.warning("heartbeat_failed", error=str(exc))
            await asyncio.sleep(1.0)
