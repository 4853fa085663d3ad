"""A deployment made of real processes: nats-server (JetStream on disk), valkey-server
(append-only file) and each service as its own ``clearance run <name>``.

Faults act on these processes exactly as an operator or the kernel would: SIGKILL,
SIGSTOP/SIGCONT, a server killed and started again on the same port and data directory,
a FLUSHALL. Every process started here is stopped by :meth:`Deployment.close`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from clearance_api.wire import EVENTS_STREAM
from clearance_runtime import bus, servers

SERVICES = ("watcher", "compiler", "cache-invalidator", "decision")


class Deployment:
    def __init__(self, root: Path, *, log_level: str = "INFO") -> None:
        self.root = root
        self.manifests = root / "manifests"
        self.manifests.mkdir(parents=True, exist_ok=True)
        self.logs = root / "logs"
        self.logs.mkdir(exist_ok=True)
        self.nats, self.nats_url = servers.nats_server(root / "nats")
        self.valkey, self.redis_url = servers.valkey_server(root / "valkey", persist=True)
        self.log_level = log_level
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._clearance = str(Path(sys.executable).parent / "clearance")

    # -- servers ---------------------------------------------------------------------------
    def start_servers(self) -> None:
        self.nats.start()
        self.valkey.start()

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
        self.nats.stop()


async def create_stream(js: JetStreamContext) -> None:
    """The system's own stream configuration with unlimited history per subject.

    The services leave an existing stream alone (operators may tune it), and the suite
    needs every message ever appended to rebuild the reference at any revision."""
    with contextlib.suppress(NotFoundError):
        await js.delete_stream(EVENTS_STREAM)
    await js.add_stream(dataclasses.replace(bus.stream_config(), max_msgs_per_subject=-1))
