"""A deployment made of real processes: nats-server (JetStream on disk), valkey-server
(append-only file) and each service as its own ``clearance run <name>``.

Faults act on these processes exactly as an operator or the kernel would: SIGKILL,
SIGSTOP/SIGCONT, a server killed and started again on the same port and data directory,
a FLUSHALL. Every process started here is stopped by :meth:`Deployment.close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from nats.js import JetStreamContext
from nats.js.errors import BadRequestError, NotFoundError

from clearance_api.wire import EVENTS_STREAM
from clearance_runtime.messaging import bus
from clearance_runtime.messaging.jetstream import Topology
from clearance_runtime.process import servers

SERVICES = ("watcher", "compiler", "cache-invalidator", "decision")


class Deployment:
    """``nats_nodes`` > 1: a NATS cluster of that many nodes on loopback, every service
    given all their URLs and ``CLEARANCE_JETSTREAM_REPLICAS`` = the node count."""

    def __init__(self, root: Path, *, log_level: str = "INFO", nats_nodes: int = 1) -> None:
        self.root = root
        self.manifests = root / "manifests"
        self.manifests.mkdir(parents=True, exist_ok=True)
        self.logs = root / "logs"
        self.logs.mkdir(exist_ok=True)
        self.replicas = nats_nodes
        if nats_nodes > 1:
            self.nats_nodes, self.nats_url = servers.nats_cluster(root / "nats", nats_nodes)
        else:
            node, self.nats_url = servers.nats_server(root / "nats")
            self.nats_nodes = [node]
        self.nats = self.nats_nodes[0]
        self.valkey, self.redis_url = servers.valkey_server(root / "valkey", persist=True)
        self.log_level = log_level
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        #: NATS nodes stopped with SIGSTOP.
        self.frozen: list[int] = []
        self._clearance = str(Path(sys.executable).parent / "clearance")

    # -- servers ---------------------------------------------------------------------------
    def start_servers(self) -> None:
        for node in self.nats_nodes:
            node.start()
        self.valkey.start()

    def kill_node(self, index: int) -> None:
        """kill -9 one node of the NATS cluster."""
        self.nats_nodes[index].kill()

    def start_node(self, index: int) -> None:
        self.nats_nodes[index].start()

    def freeze_node(self, index: int) -> None:
        """SIGSTOP one node of the NATS cluster: a machine gone without closing its
        connections, which its clients and peers notice only when it stops answering
        (killed at :meth:`close`)."""
        proc = self.nats_nodes[index].proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGSTOP)
        self.frozen.append(index)

    def kill_nats(self) -> None:
        self.nats.kill()

    def start_nats(self) -> None:
        self.nats.start()

    def kill_valkey(self, how: str) -> None:
        """``stop``: SIGTERM (valkey writes its append-only file out first); ``crash``:
        SIGKILL (the file may miss the last second); ``empty``: SIGKILL and the data
        directory wiped."""
        if how == "stop":
            self.valkey.stop()
            return
        self.valkey.kill()
        if how == "empty":
            data = self.root / "valkey" / "valkey"
            shutil.rmtree(data, ignore_errors=True)
            data.mkdir(parents=True)

    def start_valkey(self) -> None:
        self.valkey.start()

    # -- services --------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "CLEARANCE_NATS_URL": self.nats_url,
            "CLEARANCE_REDIS_URL": self.redis_url,
            "CLEARANCE_LOG_LEVEL": self.log_level,
            "CLEARANCE_MANIFESTS": str(self.manifests),
            "CLEARANCE_MANIFEST_POLL": "0.05",
            "CLEARANCE_KUBERNETES": "false",
            "CLEARANCE_JETSTREAM_REPLICAS": str(self.replicas),
        }

    def start(self, name: str, *, slot: str | None = None) -> None:
        """Start ``clearance run <name>`` (``slot`` names a second instance)."""
        key = slot or name
        current = self.procs.get(key)
        assert current is None or current.poll() is not None, f"{key} is running"
        with (self.logs / f"{key}.log").open("ab") as log:
            self.procs[key] = subprocess.Popen(
                [self._clearance, "run", name], env=self.env(), stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def start_all(self) -> None:
        for name in SERVICES:
            self.start(name)

    def signal(self, key: str, sig: signal.Signals) -> None:
        proc = self.procs[key]
        os.kill(proc.pid, sig)
        if sig == signal.SIGKILL:
            proc.wait()

    def exited(self) -> dict[str, int]:
        """Services that ended by themselves (a crash the suite did not cause)."""
        return {k: p.returncode for k, p in self.procs.items()
                if p.poll() is not None and p.returncode not in (-signal.SIGKILL, 0)}

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.valkey.stop()
        for index in self.frozen:
            self.nats_nodes[index].kill()  # SIGKILL ends a stopped process too
        servers.stop_all(self.nats_nodes, timeout=10.0)


async def create_stream(js: JetStreamContext, replicas: int = 1) -> None:
    """The system's own stream configuration with unlimited history per subject.

    The services leave an existing stream's limits alone (operators may tune it), and the
    suite needs every message ever appended to rebuild the reference at any revision."""
    with contextlib.suppress(NotFoundError):
        await js.delete_stream(EVENTS_STREAM)
    config = dataclasses.replace(bus.stream_config(Topology(replicas=replicas)),
                                 max_msgs_per_subject=-1)
    # A cluster's meta leader answers before every node has joined it: until then an R3
    # stream finds "no suitable peers for placement" (err_code 10005).
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        try:
            await js.add_stream(config)
            return
        except BadRequestError as exc:
            if exc.err_code != 10005 or asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)


async def stream_leader(js: JetStreamContext) -> int:
    """The index of the cluster node that leads the event stream now."""
    info = await js.stream_info(EVENTS_STREAM)
    assert info.cluster is not None and info.cluster.leader is not None
    return int(info.cluster.leader.removeprefix("n"))
