"""A NATS cluster on loopback for the tests: three nats-servers routed together, each
with its own JetStream store (clearance_runtime.process.servers.nats_cluster), and what the
fault scenarios need of it: who leads a stream, killing a node, bringing it back."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client

from clearance_api import nats_urls
from clearance_runtime.process import servers


class NatsCluster:
    def __init__(self, root: Path, nodes: int = 3) -> None:
        self.members, self.url = servers.nats_cluster(root, nodes)
        self.frozen: list[int] = []

    @property
    def urls(self) -> list[str]:
        return nats_urls.split(self.url)

    def start(self) -> None:
        for member in self.members:
            member.start()

    def stop(self) -> None:
        for index in self.frozen:
            self.members[index].kill()  # SIGKILL ends a stopped process too
        servers.stop_all(self.members, timeout=10.0)

    def kill(self, index: int) -> None:
        """kill -9: no goodbye to its peers or its clients."""
        self.members[index].kill()

    def freeze(self, index: int) -> None:
        """SIGSTOP: the node stops answering and closes nothing (a machine gone, a
        partition); killed at :meth:`stop`."""
        proc = self.members[index].proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGSTOP)
        self.frozen.append(index)

    def restart(self, index: int) -> None:
        self.members[index].start()

    def index_of_port(self, port: int | None) -> int:
        return [member.port for member in self.members].index(port)

    def index_of(self, server_name: str) -> int:
        return int(server_name.removeprefix("n"))

    def alive(self) -> list[str]:
        return [url for url, member in zip(self.urls, self.members, strict=True)
                if member.proc is not None and member.proc.poll() is None]

    async def connect(self) -> Client:
        return await nats.connect(self.alive(), max_reconnect_attempts=-1,
                                  reconnect_time_wait=0.2, connect_timeout=2)

    async def ready(self, timeout: float = 30.0) -> None:
        """Wait until JetStream answers (its meta leader is elected)."""
        nc = await self.connect()
        try:
            deadline = asyncio.get_running_loop().time() + timeout
            while True:
                try:
                    await nc.jetstream().account_info()
                    return
                except (nats.errors.Error, TimeoutError):
                    if asyncio.get_running_loop().time() > deadline:
                        raise
                    await asyncio.sleep(0.2)
        finally:
            await nc.close()

    async def leader(self, stream: str) -> int:
        """The index of the node that leads ``stream`` now."""
        nc = await self.connect()
        try:
            info = await nc.jetstream().stream_info(stream)
            assert info.cluster is not None and info.cluster.leader is not None
            return self.index_of(info.cluster.leader)
        finally:
            await nc.close()
