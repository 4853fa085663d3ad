"""Two regions on loopback (docs/regions.md), as real processes: the example
(``python3 dev.py regions``) and tests/integration/test_regions.py both run this.

Region A, the hub: nats-server with JetStream domain ``hub`` and a leafnode port, its own
Valkey, and the watcher (on a manifest directory), compiler, cache-invalidator and
decision service, each ``clearance run <name>`` as its own NATS user. Region B: its own
nats-server (domain ``eu``), a leaf node of A's, with its own Valkey and a compiler,
cache-invalidator and decision service of its own, configured with
``CLEARANCE_STREAM_MIRROR=hub`` (the compiler creates B's stream as a mirror of A's).

Both servers use the shipped ``deploy/nats/accounts.conf`` (without its TLS block, as
tests/secured.py does); A's gains the region's leaf user from
``deploy/nats/regions/region-user.conf`` and includes ``hub.conf``'s leafnode block, B's
includes ``region.conf``. Only the ports, the directories and the passwords differ from
a deployment. B reaches A's leafnode port through :class:`Link`, a TCP relay that can be
cut and restored: a partition between the regions, with both sides up.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from clearance_runtime.process import servers
from tests import secured

ROOT = Path(__file__).resolve().parents[2]
REGIONS = ROOT / "deploy" / "nats" / "regions"
#: The JetStream domains of the two regions.
HUB, EU = "hub", "eu"
LEAF_USER = "region-eu"
LEAF_PASSWORD = "region-eu-secret-pw"
#: What each region runs (B has no watcher: its stream is a mirror).
SERVICES = {HUB: ("watcher", "compiler", "cache-invalidator", "decision"),
            EU: ("compiler", "cache-invalidator", "decision")}


def _without_tls(accounts: str) -> str:
    accounts, count = re.subn(r"^tls \{.*?^\}\n", "", accounts, flags=re.S | re.M)
    assert count == 1, "accounts.conf should have exactly one top-level tls block"
    return accounts


def _with_region_user(accounts: str) -> str:
    """The hub's accounts: the shipped file with region-user.conf's block added to the
    users of account CLEARANCE (where a deployment pastes it)."""
    block = "".join(line + "\n" for line in (REGIONS / "region-user.conf").read_text()
                    .splitlines() if not line.lstrip().startswith("#"))
    head, marker, tail = accounts.partition("  CLEARANCE {")
    users = "    users: [\n"
    assert marker and users in tail, "accounts.conf: no users list in account CLEARANCE"
    return head + marker + tail.replace(users, users + block, 1)


def _nats_config(directory: Path, *, name: str, port: int, domain: str, include: str,
                 accounts: str, variables: dict[str, str]) -> Path:
    """The server's nats.conf: listen, JetStream with its domain, the region's include
    (copied under ``regions/`` beside the configuration) and the accounts. A variable is
    seen only in the file that defines it: the passwords are defined above the accounts,
    ``variables`` in the file that names them."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "regions").mkdir(exist_ok=True)
    text = (REGIONS / include).read_text()

    def defined(body: str) -> str:
        return "".join(f'{key}: "{value}"\n' for key, value in variables.items()
                       if f"${key}" in body) + body

    (directory / "regions" / include).write_text(defined(text))
    (directory / "accounts.conf").write_text(
        "".join(f'{secured.password_variable(user)}: "{pw}"\n'
                for user, pw in secured.PASSWORDS.items()) + defined(accounts))
    config = directory / "nats.conf"
    config.write_text(f'server_name: {name}\nhost: 127.0.0.1\nport: {port}\n'
                      f'max_payload: 33554432\n'
                      f'jetstream {{ store_dir: "{directory / "js"}", domain: {domain} }}\n'
                      f'include regions/{include}\ninclude accounts.conf\n')
    return config


class Link:
    """A TCP relay from a local port to ``target``: the network between two regions.
    ``cut`` drops every connection and refuses new ones until ``restore``."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = servers.free_port()
        self._server: asyncio.Server | None = None
        self._relays: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._relay(reader, writer))
        self._relays.add(task)
        task.add_done_callback(self._relays.discard)

    async def _relay(self, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:  # cut: both sides dropped at once, as a partition does
            writer.transport.abort()
            up_writer.transport.abort()

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._relays):
            task.cancel()
        await asyncio.gather(*self._relays, return_exceptions=True)

    async def restore(self) -> None:
        if self._server is None:
            await self.start()


@dataclass
class Region:
    name: str
    domain: str
    root: Path
    nats: servers.Server
    nats_url: str
    valkey: servers.Server
    redis_url: str
    manifests: Path | None = None
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def url_as(self, user: str) -> str:
        return secured.as_user(self.nats_url, user)

    def env(self, service: str) -> dict[str, str]:
        env = {**os.environ,
               "CLEARANCE_NATS_URL": self.url_as(service),
               "CLEARANCE_REDIS_URL": self.redis_url,
               "CLEARANCE_KUBERNETES": "false",
               "CLEARANCE_LOG_LEVEL": os.environ.get("CLEARANCE_LOG_LEVEL", "INFO"),
               "CLEARANCE_REPLY_PREFIXES": secured.reply_prefixes(),
               # A restarted service takes its lease over at once, not after the TTL.
               "CLEARANCE_LEASE_TTL_S": "6", "CLEARANCE_LEASE_RENEW_S": "1"}
        if self.manifests is not None:
            env |= {"CLEARANCE_MANIFESTS": str(self.manifests),
                    "CLEARANCE_MANIFEST_POLL": "0.05"}
        if self.domain != HUB:
            env["CLEARANCE_STREAM_MIRROR"] = HUB
        return env

    def start_services(self) -> None:
        clearance = str(Path(sys.executable).parent / "clearance")
        logs = self.root / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for name in SERVICES[self.domain]:
            with (logs / f"{name}.log").open("ab") as log:
                self.procs[name] = subprocess.Popen(
                    [clearance, "run", name], env=self.env(name), stdout=log,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def exited(self) -> dict[str, int | None]:
        return {name: proc.returncode for name, proc in self.procs.items()
                if proc.poll() is not None}

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(6)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.valkey.stop()
        self.nats.stop()


class Regions:
    """Region A (:attr:`hub`) and region B (:attr:`eu`) under ``root``; B's leaf link
    runs through :attr:`link`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        leaf_port = servers.free_port()
        self.link = Link(leaf_port)
        accounts = _without_tls(secured.ACCOUNTS.read_text())
        self.hub = self._region(HUB, "a", accounts=_with_region_user(accounts),
                                include="hub.conf", leaf_port=leaf_port,
                                variables={"CLEARANCE_NATS_REGION_EU_PASSWORD":
                                           LEAF_PASSWORD})
        self.eu = self._region(EU, "b", accounts=accounts, include="region.conf",
                               variables={"CLEARANCE_NATS_HUB_LEAF_URL":
                                          f"nats-leaf://{LEAF_USER}:{LEAF_PASSWORD}"
                                          f"@127.0.0.1:{self.link.port}"})
        self.hub.manifests = root / "a" / "manifests"
        self.hub.manifests.mkdir(parents=True, exist_ok=True)

    def _region(self, domain: str, name: str, *, accounts: str, include: str,
                variables: dict[str, str], leaf_port: int | None = None) -> Region:
        directory = self.root / name
        port = servers.free_port()
        config = _nats_config(directory / "nats", name=name, port=port, domain=domain,
                              include=include, accounts=accounts, variables=variables)
        if leaf_port is not None:  # hub.conf's port, moved to a free one on loopback
            text = (directory / "nats" / "regions" / include).read_text()
            (directory / "nats" / "regions" / include).write_text(
                text.replace("port: 7422", f'listen: "127.0.0.1:{leaf_port}"'))
        nats_server = servers.Server(name=f"nats-server {domain}",
                                     argv=[servers.nats_binary(), "-c", str(config)],
                                     port=port, log_path=directory / "nats" / "nats.log")
        valkey, redis_url = servers.valkey_server(directory / "valkey", persist=False)
        return Region(name=name, domain=domain, root=directory, nats=nats_server,
                      nats_url=f"nats://127.0.0.1:{port}", valkey=valkey,
                      redis_url=redis_url)

    async def start(self, *, eu: bool = True) -> None:
        """Both regions' servers, the link, then the services (A's first: B's compiler
        creates its mirror of A's stream, which A's compiler creates). ``eu=False``:
        region A alone, its leafnode port open."""
        for region in (self.hub, self.eu) if eu else (self.hub,):
            region.nats.start()
            region.valkey.start()
        await self.link.start()
        self.hub.start_services()
        if eu:
            self.eu.start_services()

    @property
    def leaf_port(self) -> int:
        """A's leafnode port (where :attr:`link` leads)."""
        return self.link.target

    async def close(self) -> None:
        await self.link.cut()
        for region in (self.eu, self.hub):
            region.stop()
