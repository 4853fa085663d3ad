"""The watcher process: a manifest directory and/or a Kubernetes API, into the stream."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from nats.aio.client import Client

from clearance_runtime import bus, logs
from clearance_runtime.settings import Settings
from clearance_watcher.ledger import Ledger
from clearance_watcher.manifests import ManifestSource

log = logs.get(__name__)


class Watcher:
    def __init__(self, nc: Client, settings: Settings) -> None:
        self._nc = nc
        self._settings = settings

    async def run(self) -> None:
        js = self._nc.jetstream()
        await bus.ensure_stream(js)
        sources: list[Coroutine[Any, Any, None]] = []
        if self._settings.manifests is not None:
            ledger = Ledger(js, source="manifests")
            await ledger.load()
            sources.append(ManifestSource(self._settings.manifests, ledger,
                                          poll_seconds=self._settings.manifest_poll_seconds).run())
        if self._settings.kubernetes:
            from clearance_watcher.kube import KubeSource, api_client  # noqa: PLC0415

            ledger = Ledger(js, source="kubernetes")
            await ledger.load()
            sources.append(KubeSource(api_client(self._settings.kubeconfig), ledger).run())
        if not sources:
            log.warning("watcher_idle", hint="set CLEARANCE_MANIFESTS and/or "
                        "CLEARANCE_KUBECONFIG (or run in a cluster)")
            await asyncio.Event().wait()
        async with asyncio.TaskGroup() as group:
            for source in sources:
                group.create_task(source)
