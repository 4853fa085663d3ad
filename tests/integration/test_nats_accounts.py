"""deploy/nats/accounts.conf on a real nats-server (CONTRACT section 9).

Each role may publish and subscribe exactly where the contract says and nowhere else; the
``service`` user is enough for Clearance's own processes; the shipped ``tls`` block makes
the server require TLS. Everything runs against the nats-server from the installed wheel.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from clearance_console import app as console_app
from clearance_runtime import servers
from tests.conftest import Servers
from tests.integration.harness import System, cluster, group
from tests.unit.policies import policy

pytestmark = pytest.mark.integration

ACCOUNTS = Path(__file__).resolve().parents[2] / "deploy" / "nats" / "accounts.conf"
ROLES = ("producer", "client", "author", "operator", "service")
PASSWORDS = {role: f"{role}-secret-pw" for role in ROLES}

EVENTS = "clearance.events.managedcluster.abc"
CLIENT = [
    "clearance.v1.check", "clearance.v1.check.batch", "clearance.v1.filter",
    "clearance.v1.metrics", "clearance.v1.custom-types", "clearance.v1.review.subject",
    "clearance.v1.review.rules", "clearance.v1.review.resource", "clearance.v1.search.filter",
    "clearance.v1.search.plan",
]
AUTHOR = [
    *CLIENT, "clearance.v1.effective", "clearance.v1.effective.reach",
    "clearance.v1.effective.simulate", "clearance.v1.policy-status", "clearance.v1.policies",
    "clearance.v1.permissions",
]
OPERATOR = [*AUTHOR, "clearance.v1.status", "clearance.v1.cache.clear"]
# Requests each role may send (everything else in PUBLISH_UNIVERSE must be refused).
MAY_REQUEST = {"producer": [], "client": CLIENT, "author": AUTHOR, "operator": OPERATOR}
PUBLISH_UNIVERSE = [
    EVENTS, *OPERATOR,
    "clearance.v1.unknown",                      # not a contract subject
    "clearance.status.accesspolicy.ns.name",     # only services publish status
    "clearance.decisions.changed",               # ... and invalidations
    "_INBOX.forged.reply",                       # nobody but services may answer requests
    "$JS.API.STREAM.DELETE.CLEARANCE_EVENTS",    # nor touch the stream
]
# Subjects each role may subscribe to; SUBSCRIBE_UNIVERSE minus these must be refused.
MAY_SUBSCRIBE = {
    "producer": [],
    "client": ["clearance.decisions.changed"],
    "author": ["clearance.decisions.changed", "clearance.status.>"],
    # The ops console counts the event flow per kind (README "Ops console").
    "operator": ["clearance.decisions.changed", "clearance.status.>", "clearance.events.>"],
}
SUBSCRIBE_UNIVERSE = [
    "clearance.decisions.changed", "clearance.status.>",
    "clearance.v1.check",      # would let a caller answer for the decision service
    "clearance.events.>",      # the raw stream
]


def _config(tmp: Path, port: int, *, tls_dir: Path | None) -> Path:
    """The shipped accounts.conf included by a minimal server config; without a
    certificate directory its tls block is removed, else pointed at that directory."""
    accounts = ACCOUNTS.read_text()
    if tls_dir is None:
        accounts, count = re.subn(r"^tls \{.*?^\}\n", "", accounts, flags=re.S | re.M)
        assert count == 1, "accounts.conf should have exactly one top-level tls block"
    else:
        accounts = accounts.replace("/etc/nats/tls", str(tls_dir))
    (tmp / "accounts.conf").write_text(accounts)
    main = tmp / "nats.conf"
    main.write_text(f'host: 127.0.0.1\nport: {port}\n'
                    f'jetstream {{ store_dir: "{tmp / "js"}" }}\ninclude accounts.conf\n')
    return main


def _start(tmp: Path, *, tls_dir: Path | None = None) -> tuple[servers.Server, str]:
    port = servers.free_port()
    conf = _config(tmp, port, tls_dir=tls_dir)
    server = servers.Server(name="nats-server", argv=[servers.nats_binary(), "-c", str(conf)],
                            port=port, log_path=tmp / "nats.log")
    with pytest.MonkeyPatch.context() as env:
        for role, password in PASSWORDS.items():
            env.setenv(f"CLEARANCE_NATS_{role.upper()}_PASSWORD", password)
        server.start()
    return server, f"nats://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server running the accounts (TLS removed); yields its URL without credentials."""
    server, url = _start(tmp_path_factory.mktemp("nats-accounts"))
    yield url
    server.stop()


class Conn:
    """A connection as one role, recording the permission violations the server reports."""

    def __init__(self, nc: Client, errors: list[str]) -> None:
        self.nc = nc
        self.errors = errors

    async def refused(self, action: str, subject: str, wait: float = 2.0) -> bool:
        """Whether the server reported a violation for this subject (within ``wait``: the
        -ERR comes asynchronously, possibly after the PONG of a flush)."""
        needle = f'permissions violation for {action} to "{subject}"'.lower()
        deadline = asyncio.get_running_loop().time() + wait
        while not any(needle in error for error in self.errors):
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.01)
        return True


async def _connect(url: str, role: str, **options: Any) -> Conn:
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc).lower())

    user_url = url.replace("://", f"://{role}:{PASSWORDS[role]}@")
    nc = await nats.connect(user_url, error_cb=on_error, allow_reconnect=False,
                            connect_timeout=2, **options)
    return Conn(nc, errors)


@pytest.fixture
async def conns(secured: str) -> AsyncIterator[dict[str, Conn]]:
    """One connection per role, and a service-side responder answering every request."""
    by_role = {role: await _connect(secured, role) for role in ROLES}

    async def respond(msg: Msg) -> None:
        if msg.reply and not msg.subject.startswith("clearance.events."):
            await msg.respond(msgspec.json.encode({"subject": msg.subject}))

    service = by_role["service"]
    await service.nc.subscribe("clearance.>", cb=respond)
    js = service.nc.jetstream()
    await js.add_stream(name="CLEARANCE_EVENTS", subjects=["clearance.events.>"])
    yield by_role
    await js.delete_stream("CLEARANCE_EVENTS")
    for conn in by_role.values():
        await conn.nc.close()


@pytest.mark.parametrize("role", ["producer", "client", "author", "operator"])
async def test_role_publishes_exactly_its_subjects(conns: dict[str, Conn], role: str) -> None:
    conn = conns[role]
    for subject in MAY_REQUEST[role]:
        reply = await conn.nc.request(subject, b"{}", timeout=2)
        assert msgspec.json.decode(reply.data) == {"subject": subject}
    if role == "producer":
        ack = await conn.nc.jetstream().publish(EVENTS, b'{"type": "ADDED", "object": {}}')
        assert ack.stream == "CLEARANCE_EVENTS"
        # What the producer needs to check the stream is there; nothing more of the API.
        info = await conn.nc.request("$JS.API.STREAM.INFO.CLEARANCE_EVENTS", b"", timeout=2)
        assert b'"CLEARANCE_EVENTS"' in info.data
    allowed = set(MAY_REQUEST[role]) | ({EVENTS} if role == "producer" else set())
    denied = [subject for subject in PUBLISH_UNIVERSE if subject not in allowed]
    for subject in denied:
        await conn.nc.publish(subject, b"{}", reply=conn.nc.new_inbox())
    assert [s for s in denied if await conn.refused("publish", s)] == denied
    assert len(conn.errors) == len(denied)  # and nothing allowed was refused


@pytest.mark.parametrize("role", ["producer", "client", "author", "operator"])
async def test_role_subscribes_exactly_its_subjects(conns: dict[str, Conn], role: str) -> None:
    conn, service = conns[role], conns["service"].nc
    for subject in MAY_SUBSCRIBE[role]:
        sub = await conn.nc.subscribe(subject)
        concrete = subject.replace(">", "accesspolicy.ns.name")
        for _ in range(20):  # until the server has the subscription
            await service.publish(concrete, b"{}")
            with contextlib.suppress(nats.errors.TimeoutError):
                assert (await sub.next_msg(timeout=0.1)).subject == concrete
                break
        else:
            pytest.fail(f"{role} received nothing on {subject}")
        await sub.unsubscribe()
    denied = [s for s in SUBSCRIBE_UNIVERSE if s not in MAY_SUBSCRIBE[role]]
    for subject in denied:
        await conn.nc.subscribe(subject)
    assert [s for s in denied if await conn.refused("subscription", s)] == denied


async def test_service_user_runs_the_stream_and_its_consumers(conns: dict[str, Conn]) -> None:
    await conns["producer"].nc.jetstream().publish(EVENTS, b'{"type": "ADDED", "object": {}}')
    service = conns["service"]
    sub = await service.nc.jetstream().pull_subscribe(EVENTS, durable="accounts-test")
    (msg,) = await sub.fetch(1, timeout=2)
    await msg.ack_sync(timeout=2)  # acknowledgements go to $JS.ACK.>
    await service.nc.publish("clearance.status.accesspolicy.ns.name", b"{}")
    await service.nc.publish("clearance.decisions.changed", b"{}")
    # A round trip after the publishes: any -ERR for them would have arrived before it.
    assert b'"api"' in (await service.nc.request("$JS.API.INFO", b"", timeout=2)).data
    assert service.errors == []


async def test_clearance_runs_as_service_and_answers_client_and_operator(
        secured: str, clean_servers: Servers, tmp_path: Path) -> None:
    """The real services on the secured server: ``service`` is all they need."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    service_url = secured.replace("://", f"://service:{PASSWORDS['service']}@")
    system = System(service_url, clean_servers.redis_url, manifests)
    system.write("all.yaml", cluster("prod-east", env="prod"), group("team", "alice"),
                 policy("team", groups=["team"], default="all"))
    client = await _connect(secured, "client")
    operator = await _connect(secured, "operator")
    try:
        await system.start()
        revision = await system.settle()
        check = {"principal": {"username": "alice"}, "action": "view",
                 "resource": {"type": "cluster", "name": "prod-east"},
                 "min_revision": revision}
        reply = msgspec.json.decode(
            (await client.nc.request("clearance.v1.check", msgspec.json.encode(check),
                                     timeout=5)).data)
        assert (reply["decision"], reply["policy"]) == ("allow", "ns/team")
        status = msgspec.json.decode(
            (await operator.nc.request("clearance.v1.status", b"{}", timeout=5)).data)
        assert status["revision"] >= revision
        await client.nc.publish("clearance.v1.status", b"{}", reply=client.nc.new_inbox())
        assert await client.refused("publish", "clearance.v1.status")
    finally:
        await client.nc.close()
        await operator.nc.close()
        await system.close()
        cleanup = await nats.connect(service_url)  # the other tests make their own stream
        await cleanup.jetstream().delete_stream("CLEARANCE_EVENTS")
        await cleanup.close()


async def test_ops_console_works_as_operator(
        secured: str, clean_servers: Servers, tmp_path: Path) -> None:
    """The console needs nothing but the operator role: it sees the event flow per kind
    (no permission refused), the status, policies by state, and answers the playground."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    service_url = secured.replace("://", f"://service:{PASSWORDS['service']}@")
    operator_url = secured.replace("://", f"://operator:{PASSWORDS['operator']}@")
    system = System(service_url, clean_servers.redis_url, manifests)
    port = servers.free_port()
    started = asyncio.Event()
    console = asyncio.create_task(console_app.run(operator_url, port=port, started=started))
    base = f"http://127.0.0.1:{port}"
    try:
        await asyncio.wait_for(started.wait(), 10)
        await system.start()
        system.write("all.yaml", cluster("prod-east", env="prod"), group("team", "alice"),
                     policy("team", groups=["team"], default="all"))
        await system.settle()
        async with aiohttp.ClientSession() as http:
            for _ in range(100):
                async with http.get(f"{base}/api/live") as response:
                    live = await response.json()
                if (live["revision"] and "events.monitoraccesspolicy" in live["flows"]
                        and live["policies"]["counts"]["Active"] == 1):
                    break
                await asyncio.sleep(0.1)
            assert live["events_denied"] is None
            assert {"events.managedcluster", "events.group", "decisions.changed",
                    "status.monitoraccesspolicy"} <= set(live["flows"])
            assert [s["healthy"] for s in live["services"]] == [True] * 4
            async with http.post(f"{base}/api/play/explain", json={
                    "username": "alice", "cluster": "prod-east"}) as response:
                reply = (await response.json())["reply"]
        assert (reply["decision"], reply["trace"][0]["outcome"]) == ("allow", "decided")
    finally:
        console.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await console
        await system.close()
        cleanup = await nats.connect(service_url)
        await cleanup.jetstream().delete_stream("CLEARANCE_EVENTS")
        await cleanup.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl for a test cert")
async def test_shipped_tls_block_requires_tls(tmp_path: Path) -> None:
    certs = tmp_path / "tls"
    certs.mkdir()
    _self_signed(certs)
    server, url = _start(tmp_path, tls_dir=certs)
    try:
        with pytest.raises(Exception):  # noqa: B017  (untrusted certificate, any error)
            await _connect(url, "client", max_reconnect_attempts=0)
        trusted = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        conn = await _connect(url, "operator", tls=trusted)
        with pytest.raises(nats.errors.NoRespondersError):  # allowed, nobody answering
            await conn.nc.request("clearance.v1.status", b"{}", timeout=2)
        await conn.nc.close()
    finally:
        server.stop()


def _self_signed(directory: Path) -> None:
    """A throwaway CA and a server certificate for 127.0.0.1, named as accounts.conf expects."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run("req", "-x509", *ec, "-days", "1", "-subj", "/CN=clearance-test-ca",
        "-keyout", "ca.key", "-out", "ca.crt")
    run("req", *ec, "-subj", "/CN=nats", "-keyout", "tls.key", "-out", "tls.csr")
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "1", "-extfile", "san.ext", "-out", "tls.crt")
