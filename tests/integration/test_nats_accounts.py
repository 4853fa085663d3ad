"""deploy/nats/accounts.conf on a real nats-server.

Every user — the callers' roles and each of Clearance's own processes — may publish and
subscribe exactly where its work needs and nowhere else; no user reads another's replies;
the real services, each as its own user, answer every role with no permission refused;
the console needs nothing but ``operator``; the shipped ``tls`` block makes the server
require TLS. Everything runs against the nats-server from the installed wheel.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
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

from clearance_api import inboxes
from clearance_console import app as console_app
from clearance_gateway import tls
from clearance_runtime.process import servers
from tests import secured
from tests.conftest import Servers
from tests.integration.harness import System, cluster, group, stop_task
from tests.integration.test_gateway import APISERVER_REVIEW, Gateway
from tests.support.policies import policy
from tests.support.rbac import binding, cluster_role

EVENTS = "clearance.events.managedcluster.abc"
STATUS = "clearance.status.accesspolicy.ns.name"
CHANGED = "clearance.decisions.changed"
CLIENT = [
    "clearance.v1.check", "clearance.v1.check.batch", "clearance.v1.filter",
    "clearance.v1.metrics", "clearance.v1.custom-types", "clearance.v1.review.subject",
    "clearance.v1.review.rules", "clearance.v1.review.resource", "clearance.v1.search.filter",
    "clearance.v1.search.plan",
]
AUTHOR = [
    *CLIENT, "clearance.v1.effective", "clearance.v1.effective.reach",
    "clearance.v1.effective.simulate", "clearance.v1.policy-status", "clearance.v1.policies",
    "clearance.v1.permissions", "clearance.v1.who-can-see",
]
OPERATOR = [*AUTHOR, "clearance.v1.status", "clearance.v1.cache.clear"]
GATEWAY = ["clearance.v1.check.batch", "clearance.v1.review.subject"]
#: An inbox of each user the decision service replies to, as deploy/kubernetes/decision.yaml
#: lists them (only the decision user may publish there: the matrix checks the two agree).
INBOXES: dict[str, list[str]] = {}
for _prefix in inboxes.parse_prefixes(secured.reply_prefixes()):
    _owner = re.fullmatch(r"_INBOX[._]([a-z-]+)", _prefix)
    assert _owner is not None, _prefix
    INBOXES.setdefault(_owner[1], []).append(f"{_prefix}.forged")
assert set(INBOXES) == {"client", "author", "operator", "gateway", "watcher"}
#: Both spellings of a user's inbox prefix: _INBOX.<user> and _INBOX_<user>.
SPELLINGS = ("_INBOX.{}", "_INBOX_{}")
ALL_INBOXES = [inbox for listed in INBOXES.values() for inbox in listed]
assert all(len(listed) == len(SPELLINGS) for listed in INBOXES.values())


def own_inboxes(user: str) -> list[str]:
    """The subscriptions that read ``user``'s replies, in each spelling."""
    return [f"{spelling.format(user)}.>" for spelling in SPELLINGS]


JS = "$JS.API"
WATCHER_JS = [
    f"{JS}.STREAM.INFO.CLEARANCE_EVENTS", f"{JS}.STREAM.CREATE.CLEARANCE_EVENTS",
    f"{JS}.CONSUMER.DELETE.CLEARANCE_EVENTS.clearance-watcher-manifests",
    f"{JS}.CONSUMER.MSG.NEXT.CLEARANCE_EVENTS.clearance-watcher-kubernetes",
    f"{JS}.STREAM.INFO.KV_CLEARANCE_LEASES", "$KV.CLEARANCE_LEASES.watcher.manifests",
]
COMPILER_JS = [
    f"{JS}.STREAM.INFO.CLEARANCE_EVENTS", f"{JS}.STREAM.CREATE.CLEARANCE_EVENTS",
    f"{JS}.CONSUMER.DELETE.CLEARANCE_EVENTS.clearance-compiler",
    f"{JS}.CONSUMER.MSG.NEXT.CLEARANCE_EVENTS.clearance-compiler",
    "$JS.ACK.CLEARANCE_EVENTS.clearance-compiler.1.1.1.1.0",
    f"{JS}.STREAM.INFO.KV_CLEARANCE_LEASES", "$KV.CLEARANCE_LEASES.compiler",
    f"{JS}.STREAM.INFO.KV_CLEARANCE_CHECKPOINTS", "$KV.CLEARANCE_CHECKPOINTS.compiler",
    f"{JS}.STREAM.UPDATE.KV_CLEARANCE_CHECKPOINTS",
]
#: The decision service reads the compiler's checkpoint record, and writes nothing there.
DECISION_JS = [
    f"{JS}.STREAM.INFO.KV_CLEARANCE_CHECKPOINTS",
    f"{JS}.DIRECT.GET.KV_CLEARANCE_CHECKPOINTS.$KV.CLEARANCE_CHECKPOINTS.compiler",
]
#: Subjects each user may publish to; everything else in PUBLISH_UNIVERSE is refused.
MAY_PUBLISH: dict[str, list[str]] = {
    "producer": [EVENTS],
    "client": CLIENT,
    "author": AUTHOR,
    "operator": OPERATOR,
    "gateway": GATEWAY,
    "watcher": [EVENTS, "clearance.v1.policy-status", *WATCHER_JS],
    "compiler": [STATUS, *COMPILER_JS, DECISION_JS[1]],
    "cache-invalidator": [CHANGED],
    "decision": [*ALL_INBOXES, *DECISION_JS],
}
PUBLISH_UNIVERSE = list(dict.fromkeys([
    EVENTS, *OPERATOR, STATUS, CHANGED, *ALL_INBOXES, *WATCHER_JS, *COMPILER_JS,
    *DECISION_JS,
    "clearance.v1.unknown",                            # not a contract subject
    "_INBOX.forged.reply",                             # nobody answers outside the inboxes
    f"{JS}.STREAM.DELETE.CLEARANCE_EVENTS",            # nor deletes, purges or reads the
    f"{JS}.STREAM.PURGE.CLEARANCE_EVENTS",             # stream but as the API subjects
    f"{JS}.STREAM.MSG.DELETE.CLEARANCE_EVENTS",        # above allow
    f"{JS}.STREAM.DELETE.KV_CLEARANCE_LEASES",
    f"{JS}.INFO",
    f"{JS}.CONSUMER.CREATE.CLEARANCE_EVENTS",          # a consumer the server names
    "$KV.CLEARANCE_LEASES.other",                     # a lease key nobody holds
]))
#: Subjects each user may subscribe to; SUBSCRIBE_UNIVERSE minus these is refused.
STATUS_KINDS = ["clearance.status.accesspolicy.>", "clearance.status.monitoraccesspolicy.>"]
MAY_SUBSCRIBE: dict[str, list[str]] = {
    "producer": own_inboxes("producer"),
    "client": [*own_inboxes("client"), CHANGED],
    "author": [*own_inboxes("author"), CHANGED, "clearance.status.>", *STATUS_KINDS],
    # The ops console counts the event flow per kind (docs/guide/console.md).
    "operator": [*own_inboxes("operator"), CHANGED, "clearance.status.>", *STATUS_KINDS,
                 "clearance.events.>"],
    "gateway": own_inboxes("gateway"),
    "watcher": [*own_inboxes("watcher"), *STATUS_KINDS],
    "compiler": own_inboxes("compiler"),
    "cache-invalidator": [],
    "decision": ["clearance.v1.check", "clearance.v1.>", *own_inboxes("decision")],
}
SUBSCRIBE_UNIVERSE = [
    CHANGED, "clearance.status.>", *STATUS_KINDS, "clearance.events.>",
    "clearance.v1.check",      # would let a caller answer for the decision service
    "clearance.v1.>",
    "_INBOX.>",                # everyone's replies
    *(inbox for user in ("producer", "client", "author", "operator", "gateway", "watcher",
                         "compiler", "decision") for inbox in own_inboxes(user)),
    "$KV.CLEARANCE_LEASES.>", "$JS.API.>", ">",
]
#: Who publishes a concrete subject an allowed subscription must then receive.
PUBLISHER = {CHANGED: ("cache-invalidator", CHANGED), "clearance.status.>": ("compiler", STATUS),
             "clearance.status.accesspolicy.>": ("compiler", STATUS),
             "clearance.status.monitoraccesspolicy.>": (
                 "compiler", "clearance.status.monitoraccesspolicy.ns.name"),
             "clearance.events.>": ("watcher", EVENTS),
             "clearance.v1.check": ("client", "clearance.v1.check"),
             "clearance.v1.>": ("client", "clearance.v1.check"),
             **{f"{inbox.rsplit('.', 1)[0]}.>": ("decision", inbox) for inbox in ALL_INBOXES}}


@pytest.fixture(scope="module")
def secured_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server running the accounts (TLS removed); yields its URL without credentials."""
    server, url = secured.server(tmp_path_factory.mktemp("nats-accounts"))
    server.start()
    yield url
    server.stop()


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A server of its own (no user may delete the stream another test left): its URL and
    its log, which must show no permission refused when the real services run."""
    server, url = secured.server(tmp_path / "nats")
    server.start()
    yield url, server.log_path
    server.stop()


class Conn:
    """A connection as one user (reading replies under its own inbox prefix), recording
    the permission violations the server reports."""

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


async def connect(url: str, user: str, **options: Any) -> Conn:
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc).lower())

    options.setdefault("inbox_prefix", inboxes.prefix_for_user(user))
    nc = await nats.connect(secured.as_user(url, user), error_cb=on_error,
                            allow_reconnect=False, connect_timeout=2, **options)
    return Conn(nc, errors)


@pytest.fixture
async def conns(secured_url: str) -> AsyncIterator[dict[str, Conn]]:
    """One connection per user; the decision user answers every request it hears with
    the subject asked, and the stream exists (created by the watcher)."""
    by_user = {user: await connect(secured_url, user) for user in secured.USERS}

    async def respond(msg: Msg) -> None:
        if msg.reply:
            await msg.respond(msgspec.json.encode({"subject": msg.subject}))

    await by_user["decision"].nc.subscribe("clearance.v1.>", cb=respond)
    await by_user["decision"].nc.flush()
    js = by_user["watcher"].nc.jetstream()
    with contextlib.suppress(nats.js.errors.BadRequestError):  # already there
        await js.add_stream(name="CLEARANCE_EVENTS", subjects=["clearance.events.>"])
    yield by_user
    for conn in by_user.values():
        await conn.nc.close()


@pytest.mark.parametrize("user", secured.USERS)
async def test_user_publishes_exactly_its_subjects(conns: dict[str, Conn], user: str) -> None:
    conn = conns[user]
    requests = [s for s in MAY_PUBLISH[user] if s.startswith("clearance.v1.")]
    for subject in requests:  # answered, into this user's own inbox
        reply = await conn.nc.request(subject, b"{}", timeout=2)
        assert msgspec.json.decode(reply.data) == {"subject": subject}
    if user in ("producer", "watcher"):
        ack = await conn.nc.jetstream().publish(EVENTS, b'{"type": "ADDED", "object": {}}')
        assert ack.stream == "CLEARANCE_EVENTS"
    for subject in MAY_PUBLISH[user]:
        if subject not in requests:
            await conn.nc.publish(subject, b"{}")
    denied = [subject for subject in PUBLISH_UNIVERSE if subject not in MAY_PUBLISH[user]]
    for subject in denied:
        await conn.nc.publish(subject, b"{}", reply=conn.nc.new_inbox())
    assert [s for s in denied if await conn.refused("publish", s)] == denied
    await conn.nc.flush()
    assert len(conn.errors) == len(denied), conn.errors  # and nothing allowed was refused


@pytest.mark.parametrize("user", secured.USERS)
async def test_user_subscribes_exactly_its_subjects(conns: dict[str, Conn], user: str) -> None:
    conn = conns[user]
    for subject in MAY_SUBSCRIBE[user]:
        sub = await conn.nc.subscribe(subject)
        if subject in PUBLISHER:
            publisher, concrete = PUBLISHER[subject]
            for _ in range(20):  # until the server has the subscription
                await conns[publisher].nc.publish(concrete, b"{}")
                with contextlib.suppress(nats.errors.TimeoutError):
                    assert (await sub.next_msg(timeout=0.1)).subject == concrete
                    break
            else:
                pytest.fail(f"{user} received nothing on {subject}")
        await sub.unsubscribe()
    denied = [s for s in SUBSCRIBE_UNIVERSE if s not in MAY_SUBSCRIBE[user]]
    for subject in denied:
        await conn.nc.subscribe(subject)
    assert [s for s in denied if await conn.refused("subscription", s)] == denied
    await conn.nc.flush()
    assert len(conn.errors) == len(denied), conn.errors


async def test_a_reply_reaches_only_the_caller_that_asked(conns: dict[str, Conn]) -> None:
    """Every role's replies arrive under its own prefix, which no other role may read."""
    seen: list[str] = []

    async def spy(msg: Msg) -> None:
        seen.append(msg.subject)

    for user in ("client", "author", "operator", "gateway", "producer"):
        await conns[user].nc.subscribe("_INBOX.>", cb=spy)
    for user in ("client", "author", "operator", "gateway"):
        reply = await conns[user].nc.request("clearance.v1.check.batch", b"{}", timeout=2)
        assert reply.subject.startswith(f"_INBOX.{user}.")
    assert seen == []
    for user in ("client", "author", "operator", "gateway", "producer"):
        assert await conns[user].refused("subscription", "_INBOX.>")


async def test_the_producer_appends_from_its_own_account(conns: dict[str, Conn]) -> None:
    """Its publishes reach the stream (acknowledged, de-duplicated), but a reply subject it
    names is in its own account: the stream's acknowledgement lands on no lease key and no
    subject of Clearance's."""
    producer, watcher = conns["producer"], conns["watcher"]
    js = producer.nc.jetstream()
    first = await js.publish(EVENTS, b'{"type": "ADDED", "object": {}}',
                             headers={"Nats-Msg-Id": "accounts-test-1"})
    again = await js.publish(EVENTS, b'{"type": "ADDED", "object": {}}',
                             headers={"Nats-Msg-Id": "accounts-test-1"})
    assert (again.seq, again.duplicate) == (first.seq, True)
    kv = await watcher.nc.jetstream().create_key_value(bucket="CLEARANCE_LEASES", ttl=5,
                                                        history=1)
    await kv.put("watcher.manifests", b"holder")
    changed = await conns["client"].nc.subscribe(CHANGED)
    await conns["client"].nc.flush()
    for reply in ("$KV.CLEARANCE_LEASES.watcher.manifests", CHANGED):
        await producer.nc.publish(EVENTS, b'{"type": "ADDED", "object": {}}', reply=reply)
    await producer.nc.flush()
    for _ in range(100):  # both stored (the stream stores after the flush's PONG) ...
        info = await watcher.nc.jetstream().stream_info("CLEARANCE_EVENTS")
        if info.state.last_seq >= first.seq + 2:
            break
        await asyncio.sleep(0.05)
    assert info.state.last_seq >= first.seq + 2
    assert (await kv.get("watcher.manifests")).value == b"holder"  # ... no ack on the lease
    with pytest.raises(nats.errors.TimeoutError):
        await changed.next_msg(timeout=0.3)  # ... nor on decisions.changed


def _run_services_as_their_users(url: str, redis_url: str, manifests: Path,
                                 caller: str = "operator") -> System:
    return System(secured.as_user(url, caller), redis_url, manifests,
                  service_urls=secured.service_urls(url),
                  reply_prefixes=secured.reply_prefixes(),
                  inspect_url=secured.as_user(url, "watcher"))


async def test_clearance_runs_as_its_users_and_answers_every_role(
        fresh: tuple[str, Path], clean_servers: Servers, tmp_path: Path) -> None:
    """The real services, each as its own user, on the secured server: nothing they do is
    refused (the server's log shows no violation), restarts and rebuilds included, and
    client, author, operator and the gateway get their answers."""
    url, log = fresh
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    system = _run_services_as_their_users(url, clean_servers.redis_url, manifests)
    system.settings = msgspec.structs.replace(
        system.settings, gateway_host="127.0.0.1", gateway_port=servers.free_port(),
        gateway_tls_dir=tmp_path / "gateway",
        gateway_auth="none")  # this test is about its NATS user, not its HTTP clients
    system.write("all.yaml", cluster("prod-east", env="prod"), group("team", "alice"),
                 group("sre", "alice"), policy("team", groups=["team"], default="all"),
                 cluster_role("pod-reader", [{"apiGroups": [""], "resources": ["pods", "pods/log"],
                                              "verbs": ["get"]}]),
                 binding("RoleBinding", "readers", ("ClusterRole", "pod-reader"),
                         [{"kind": "Group", "name": "sre"}], namespace="shop"))
    users = {user: await connect(url, user) for user in ("client", "author", "operator")}
    # NATS's other custom spelling of a caller's inbox prefix is answered just as well.
    users["client_"] = await connect(url, "client", inbox_prefix="_INBOX_client")
    gateway: Gateway | None = None
    try:
        await system.start("watcher", "compiler", "cache-invalidator", "decision", "gateway")
        revision = await system.settle()
        check = msgspec.json.encode({
            "principal": {"username": "alice"}, "action": "view",
            "resource": {"type": "cluster", "name": "prod-east"}, "min_revision": revision})
        reply = msgspec.json.decode(
            (await users["client"].nc.request("clearance.v1.check", check, timeout=5)).data)
        assert (reply["decision"], reply["policy"]) == ("allow", "ns/team")
        spelled = await users["client_"].nc.request("clearance.v1.check", check, timeout=5)
        assert spelled.subject.startswith("_INBOX_client.")
        assert msgspec.json.decode(spelled.data)["decision"] == "allow"
        effective = msgspec.json.decode((await users["author"].nc.request(
            "clearance.v1.policy-status", msgspec.json.encode(
                {"kind": "MonitorAccessPolicy", "namespace": "ns", "name": "team"}),
            timeout=5)).data)
        assert effective["state"] == "Active"
        status = msgspec.json.decode(
            (await users["operator"].nc.request("clearance.v1.status", b"{}", timeout=5)).data)
        assert status["revision"] >= revision
        certificate = tmp_path / "gateway" / tls.CERT_FILE
        for _ in range(100):  # written as the gateway starts
            if certificate.exists():
                break
            await asyncio.sleep(0.05)
        gateway = Gateway(f"https://127.0.0.1:{system.settings.gateway_port}", certificate)
        await gateway.ready()
        code, review, _ = await gateway.post("/authorize", APISERVER_REVIEW)
        assert (code, review["status"]["allowed"]) == (200, True)
        # Restarts: the compiler takes its lease back over its deletion marker, the
        # watcher reads its own objects back; a flushed store is rebuilt from the stream.
        await system.stop("compiler", "watcher")
        system.write("more.yaml", cluster("prod-west", env="prod"))
        await system.start("compiler", "watcher")
        await system.settle(timeout=20)
        reply = msgspec.json.decode((await users["client"].nc.request(
            "clearance.v1.check", check.replace(b"prod-east", b"prod-west"), timeout=5)).data)
        assert reply["decision"] == "allow"
        await users["client"].nc.publish("clearance.v1.status", b"{}",
                                         reply=users["client"].nc.new_inbox())
        assert await users["client"].refused("publish", "clearance.v1.status")
    finally:
        if gateway is not None:
            await gateway.session.close()
        for conn in users.values():
            await conn.nc.close()
        await system.close()
    violations = [line for line in log.read_text().splitlines() if "Violation" in line]
    assert violations == [
        line for line in violations if "user:client" in line and "clearance.v1.status" in line]


async def test_ops_console_works_as_operator(
        fresh: tuple[str, Path], clean_servers: Servers, tmp_path: Path) -> None:
    """The console needs nothing but the operator role: it sees the event flow per kind
    (no permission refused), the status, policies by state, and answers the playground."""
    url, _ = fresh
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    system = _run_services_as_their_users(url, clean_servers.redis_url, manifests)
    port = servers.free_port()
    started = asyncio.Event()
    console = asyncio.create_task(console_app.run(secured.as_user(url, "operator"), port=port,
                                                  started=started))
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
        await stop_task(console)  # cancelled again if a client swallowed it (3.11)
        await system.close()


def test_a_missing_password_keeps_the_server_from_starting(tmp_path: Path) -> None:
    conf = secured.config(tmp_path, servers.free_port())
    accounts = conf.parent / "accounts.conf"
    text = accounts.read_text()
    accounts.write_text(text.replace(
        f'{secured.password_variable("decision")}: "decision-secret-pw"\n', ""))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEARANCE_NATS_")}
    test = subprocess.run([servers.nats_binary(), "-t", "-c", str(conf)], env=env,
                          capture_output=True, text=True, check=False)
    assert test.returncode != 0
    assert "CLEARANCE_NATS_DECISION_PASSWORD" in test.stdout + test.stderr


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl for a test cert")
async def test_shipped_tls_block_requires_tls(tmp_path: Path) -> None:
    certs = tmp_path / "tls"
    certs.mkdir()
    _self_signed(certs)
    server, url = secured.server(tmp_path / "nats", tls_dir=certs)
    server.start()
    try:
        with pytest.raises(Exception):  # noqa: B017  (untrusted certificate, any error)
            await connect(url, "client", max_reconnect_attempts=0)
        trusted = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        conn = await connect(url, "operator", tls=trusted)
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
