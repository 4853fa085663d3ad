"""Attacks on the HTTP surfaces: hostile clients of the gateway, the console and the probes.

The gateway (webhook authorizer, AuthZEN), the ops console and the metrics/probe port,
attacked on real servers — the session's NATS and Valkey, the services running as in
production (in this process, or as ``clearance`` processes where the address or the
memory of the process is the point). Each attack must fail to grant, stall, leak or
crash.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import nats
import pytest
from kmock import RawHandler

from clearance_gateway import tls
from clearance_runtime.process import servers
from tests.attack.clients import (
    head,
    held,
    listening_addresses,
    outside_address,
    peak_rss_mib,
    reachable,
)
from tests.conftest import Servers
from tests.integration.harness import System, cluster, group
from tests.integration.pki import Authority
from tests.integration.test_console_http import ALIAS_BOMB
from tests.integration.test_tokens import api_server, kubeconfig
from tests.support.policies import policy

pytestmark = [pytest.mark.integration, pytest.mark.attack]

CLEARANCE = str(Path(sys.executable).parent / "clearance")
#: The bounds the attacked servers run with here (seconds; connections).
HEAD_SECONDS = BODY_SECONDS = 1.0
MAX_CONNECTIONS = 40
#: How much later than its bound a connection may close (scheduling on a shared machine).
SLACK = 1.5
#: ``python3 dev.py attack --full``: the heavier variants.
FULL = os.environ.get("CLEARANCE_ATTACK_FULL") == "1"

ALICE = {"type": "user", "id": "alice"}
VIEW = {"name": "view"}
PODS_ON_C1 = {"type": "pods", "id": "*", "properties": {"cluster": "c1"}}


class Gateway:
    """The attacked gateway (mtls-or-token, as a gateway taking both kinds of caller
    would run) and a well-behaved, authenticated client of it."""

    def __init__(self, port: int, certificate: Path, client: tuple[Path, Path]) -> None:
        self.port = port
        self.url = f"https://127.0.0.1:{port}"
        self.tls = ssl.create_default_context(cafile=str(certificate))  # no certificate
        self.own = ssl.create_default_context(cafile=str(certificate))
        self.own.load_cert_chain(*client)
        self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=8))

    async def post(self, path: str, body: Any, **headers: str) -> tuple[int, Any]:
        async with self.http.post(self.url + path, data=msgspec.json.encode(body),
                                  ssl=self.own, headers=headers) as resp:
            text = await resp.text()
            try:
                return resp.status, msgspec.json.decode(text)
            except msgspec.DecodeError:
                return resp.status, text


@pytest.fixture
async def gateway(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[Gateway]:
    authority = Authority.make(tmp_path / "pki")
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    system = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    system.settings = msgspec.structs.replace(
        system.settings, gateway_port=servers.free_port(), gateway_tls_dir=tmp_path / "gw",
        gateway_client_ca=authority.path, gateway_auth="mtls-or-token",
        http_header_timeout=HEAD_SECONDS, http_body_timeout=BODY_SECONDS,
        gateway_max_connections=MAX_CONNECTIONS)
    system.write("fleet.yaml", cluster("c1"), cluster("c2"), group("team", "alice"))
    system.write("policies.yaml", policy("team", groups=["team"], rules=[
        {"selector": {"matchNames": ["c1"]}, "permissions": {"view": True},
         "resources": [{"type": "pods", "visibility": "filtered",
                        "filters": {"names": {"allowed": ["web-*"]}}}]}]))
    certificate, _ = tls.self_signed(tmp_path / "gw")
    await system.start("watcher", "compiler", "cache-invalidator", "decision", "gateway")
    await system.settle()
    client = Gateway(system.settings.gateway_port, certificate,
                     authority.client(tmp_path / "pki", "pep"))
    for _ in range(100):
        try:
            if (await client.post("/access/v1/evaluation", {
                    "subject": ALICE, "action": VIEW,
                    "resource": {"type": "cluster", "id": "c1"}}))[0] == 200:
                break
        except aiohttp.ClientConnectionError:
            await asyncio.sleep(0.05)
    yield client
    await client.http.close()
    await system.close()


# Who asks ----------------------------------------------------------------------------


async def test_an_unauthenticated_client_gets_no_decision(gateway: Gateway) -> None:
    async with aiohttp.ClientSession() as anonymous:
        for path, body in (("/access/v1/evaluation", {"subject": ALICE, "action": VIEW,
                                                     "resource": PODS_ON_C1}),
                           ("/access/v1/evaluations", {"evaluations": []}),
                           ("/authorize", {"kind": "SubjectAccessReview"})):
            for headers in ({}, {"Authorization": "Bearer forged"},
                            {"X-Remote-User": "system:admin"}):
                async with anonymous.post(gateway.url + path, json=body, ssl=gateway.tls,
                                          headers=headers) as resp:
                    text = await resp.text()
                    # No Kubernetes API to review the forged token with: 503, not 401 —
                    # either way a failure, never a decision.
                    assert resp.status in (401, 503), (path, headers)
                    assert "decision" not in text and "allowed" not in text
        async with anonymous.get(gateway.url + "/.well-known/authzen-configuration",
                                 ssl=gateway.tls) as resp:
            assert resp.status == 401


@pytest.mark.kmock(cls=RawHandler)
async def test_a_token_for_another_audience_grants_nothing(
        clean_servers: Servers, kmock: RawHandler, tmp_path: Path) -> None:
    """A token issued for another service (bob's, for "vault"), replayed to Clearance —
    as a principal over NATS, and as a gateway caller — is refused both ways."""
    api_server(kmock, audiences={"alice-token": ["clearance"], "bob-token": ["vault"]})
    (tmp_path / "m").mkdir()
    system = System(clean_servers.nats_url, clean_servers.redis_url, tmp_path / "m",
                    kubeconfig=kubeconfig(str(kmock.url), tmp_path))
    system.settings = msgspec.structs.replace(
        system.settings, kubernetes=False, token_audiences="clearance",
        gateway_port=servers.free_port(), gateway_tls_dir=tmp_path / "gw")
    system.write("all.yaml", cluster("c1"), policy("everyone", default="all",
                                                   groups=["system:authenticated"]))
    certificate, _ = tls.self_signed(tmp_path / "gw")
    await system.start("watcher", "compiler", "cache-invalidator", "decision", "gateway")
    try:
        await system.settle()
        check = {"action": "view", "resource": {"type": "cluster", "name": "c1"}}
        reply = await system.request("clearance.v1.check", {"token": "bob-token", **check})
        assert set(reply) == {"error"} and reply["error"]["code"] == "bad_request"
        assert (await system.request("clearance.v1.check", {"token": "alice-token",
                                                            **check}))["allowed"] is True
        context = ssl.create_default_context(cafile=str(certificate))
        async with aiohttp.ClientSession() as http:
            for _ in range(100):
                try:
                    async with http.post(
                            f"https://127.0.0.1:{system.settings.gateway_port}"
                            "/access/v1/evaluation", ssl=context,
                            headers={"Authorization": "Bearer bob-token"},
                            json={"subject": ALICE, "action": VIEW,
                                  "resource": {"type": "cluster", "id": "c1"}}) as resp:
                        assert resp.status == 401
                        assert "token not authenticated" in await resp.text()
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
            else:
                raise AssertionError("the gateway did not come up")
    finally:
        await system.close()


async def test_a_decision_only_pep_is_not_told_true_for_a_partial(gateway: Gateway) -> None:
    """alice may see only the pods named web-*: a PEP reading only ``decision`` must not
    show every pod."""
    status, reply = await gateway.post("/access/v1/evaluation", {
        "subject": ALICE, "action": VIEW, "resource": PODS_ON_C1})
    assert status == 200 and reply["decision"] is False
    assert reply["context"]["outcome"] == "partial"
    status, batch = await gateway.post("/access/v1/evaluations", {
        "subject": ALICE, "action": VIEW, "options": {
            "evaluations_semantic": "permit_on_first_permit"},
        "evaluations": [{"resource": PODS_ON_C1}] * 3})
    assert [e["decision"] for e in batch["evaluations"]] == [False] * 3


async def test_the_host_header_is_not_reflected(gateway: Gateway) -> None:
    for host in ("attacker.example", "attacker.example:443", "127.0.0.1:1", ""):
        async with gateway.http.get(gateway.url + "/.well-known/authzen-configuration",
                                    ssl=gateway.own, headers={"Host": host}) as resp:
            text = await resp.text()
            assert "attacker" not in text and ":1/" not in text
            if resp.status == 200:
                assert (await resp.json())["policy_decision_point"] == gateway.url


# What one client may hold ------------------------------------------------------------


async def test_slowloris_heads_are_cut_off_at_the_bound(gateway: Gateway) -> None:
    """Thirty connections dripping a request head a byte at a time (and one sending
    nothing after its handshake, one never finishing its handshake): each is closed
    within the head bound, and a real client is answered meanwhile."""
    slow_head = head("/access/v1/evaluation", "localhost", "Content-Type: application/json")
    attacks = [held(gateway.port, first=slow_head[:20], drip=slow_head[20:], tls=gateway.tls)
               for _ in range(30)]
    attacks.append(held(gateway.port, first=b"", tls=gateway.tls))
    attacks.append(held(gateway.port, first=b"\x16\x03\x01", drip=b"\x00" * 100))  # no TLS
    started = time.monotonic()
    tasks = [asyncio.create_task(attack) for attack in attacks]
    await asyncio.sleep(0.3)
    status, _ = await gateway.post("/access/v1/evaluation", {
        "subject": ALICE, "action": VIEW, "resource": {"type": "cluster", "id": "c1"}})
    assert status == 200 and time.monotonic() - started < HEAD_SECONDS
    durations = [duration for duration, _ in await asyncio.gather(*tasks)]
    assert max(durations) < HEAD_SECONDS + SLACK, durations


async def test_a_slow_body_is_cut_off_and_answered_408(gateway: Gateway) -> None:
    slow = head("/access/v1/evaluation", "localhost", "Content-Type: application/json",
                "Content-Length: 400") + b'{"subject": '
    duration, answer = await held(gateway.port, first=slow, drip=b" " * 100, every=0.1,
                                  tls=gateway.own)
    assert answer.startswith(b"HTTP/1.1 408")
    assert duration < BODY_SECONDS + 1.0 + SLACK  # the bound, then at most LINGER


async def test_beyond_the_connection_limit_a_client_is_turned_away_at_once(
        gateway: Gateway) -> None:
    openers = [held(gateway.port, first=b"", tls=gateway.tls) for _ in range(MAX_CONNECTIONS)]
    holding = [asyncio.create_task(opener) for opener in openers]
    await asyncio.sleep(0.4)  # all connected and idle
    duration, answer = await held(gateway.port, first=b"", tls=gateway.tls)
    assert answer.startswith(b"HTTP/1.1 503") and duration < 0.5
    durations = [d for d, _ in await asyncio.gather(*holding)]
    assert max(durations) < HEAD_SECONDS + SLACK
    status, _ = await gateway.post("/access/v1/evaluation", {  # all gone: served again
        "subject": ALICE, "action": VIEW, "resource": {"type": "cluster", "id": "c1"}})
    assert status == 200


async def test_a_flood_of_held_connections_is_gone_within_the_bound(
        gateway: Gateway) -> None:
    """1,500 connections at once (200 without ``--full``), each holding half a request
    head: most are turned away at once (over the limit), every one is closed within the
    head bound — none is held for ever — and then the gateway serves as before."""
    count = 1500 if FULL else 200
    partial = head("/access/v1/evaluation", "localhost")[:30]
    results = await asyncio.gather(*(held(gateway.port, first=partial, tls=gateway.tls)
                                     for _ in range(count)))
    # Attackers and gateway share this process's one loop: 1,500 TLS handshakes on each
    # side take it a moment more than the slack a few connections need.
    assert max(duration for duration, _ in results) < HEAD_SECONDS + SLACK + count / 1000
    # Most were turned away at once (503); the rest held a slot, or were dropped in a
    # handshake that outlasted the bound on this busy loop.
    assert sum(answer.startswith(b"HTTP/1.1 503") for _, answer in results) >= count // 2
    # Served again as soon as the flood's slots are free: a connection dropped in its
    # handshake keeps its slot for at most the handshake bound (and a second).
    deadline = time.monotonic() + HEAD_SECONDS + 1.0 + SLACK
    while (await gateway.post("/access/v1/evaluation", {
            "subject": ALICE, "action": VIEW,
            "resource": {"type": "cluster", "id": "c1"}}))[0] != 200:
        assert time.monotonic() < deadline, "not served after the flood"
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("framing", ["declared", "chunked"])
async def test_a_huge_body_is_refused_unread(gateway: Gateway, framing: str) -> None:
    size = 100 << 20
    if framing == "declared":  # refused on its Content-Length, before a byte is read
        first = head("/access/v1/evaluations", "localhost", "Content-Type: application/json",
                     f"Content-Length: {size}") + b"{"
        duration, answer = await held(gateway.port, first=first, tls=gateway.own, limit=5)
        assert answer.startswith(b"HTTP/1.1 413") and duration < 1.0 + SLACK
        return
    async def chunks() -> AsyncIterator[bytes]:  # no length announced: chunked
        for _ in range(size // 65536):
            yield b" " * 65536

    started = time.monotonic()
    try:
        async with gateway.http.post(gateway.url + "/access/v1/evaluations", data=chunks(),
                                     ssl=gateway.own) as resp:
            refused = resp.status == 413
    except aiohttp.ClientError:  # the server stopped reading and closed, mid-upload
        refused = True
    assert refused and time.monotonic() - started < 5  # not 100 MiB read


async def test_a_huge_body_to_the_console_is_refused_unread(
        processes: dict[str, int]) -> None:
    port = processes["console"]
    first = head("/api/play/simulate", f"127.0.0.1:{port}", "Content-Type: application/json",
                 f"Content-Length: {100 << 20}") + b'{"policy": "'
    duration, answer = await held(port, first=first, limit=5)
    assert answer.startswith(b"HTTP/1.1 413") and duration < 1.0 + SLACK


async def test_ten_thousand_evaluations_are_refused_and_big_requests_take_turns(
        gateway: Gateway) -> None:
    """A 10,000-evaluation request is refused (400) before anything is asked; requests
    of the most allowed (1,000 uncached evaluations each, a distinct subject per
    evaluation — the most work one request may cause) are asked in small batches, so the
    small requests measured meanwhile stay fast."""
    def evaluations(count: int, tag: str) -> dict[str, Any]:
        return {"action": VIEW, "resource": {"type": "cluster", "id": "c1"},
                "evaluations": [{"subject": {"type": "user", "id": f"{tag}-{i}"}}
                                for i in range(count)]}
    started = time.monotonic()
    status, reply = await gateway.post("/access/v1/evaluations", evaluations(10_000, "x"))
    assert status == 400 and "at most 1000 evaluations" in reply
    assert time.monotonic() - started < 1.0

    small = {"subject": ALICE, "action": VIEW, "resource": {"type": "cluster", "id": "c1"}}
    alone = []
    for _ in range(10):
        began = time.monotonic()
        assert (await gateway.post("/access/v1/evaluation", small))[0] == 200
        alone.append(time.monotonic() - began)

    big = [asyncio.create_task(gateway.post("/access/v1/evaluations",
                                            evaluations(1000, f"big{n}"))) for n in range(3)]
    beside = []
    while not all(task.done() for task in big):
        began = time.monotonic()
        assert (await gateway.post("/access/v1/evaluation", small))[0] == 200
        beside.append(time.monotonic() - began)
        await asyncio.sleep(0.02)
    for task in big:
        status, reply = task.result()
        assert status == 200 and len(reply["evaluations"]) == 1000
    print(f"small request alone: median {statistics.median(alone) * 1000:.1f} ms; beside "
          f"3x1000 evaluations: median {statistics.median(beside) * 1000:.1f} ms, "
          f"max {max(beside) * 1000:.1f} ms over {len(beside)}")
    assert max(beside) < 0.5


# Where they listen -------------------------------------------------------------------


@pytest.fixture
def processes(real_servers: Servers, tmp_path: Path) -> Iterator[dict[str, int]]:
    """``clearance run gateway`` (with its metrics port) and ``clearance console`` as
    processes, each with only the defaults for where to listen."""
    free: set[int] = set()
    while len(free) < 3:  # three distinct ones (a port may be offered twice)
        free.add(servers.free_port())
    ports = dict(zip(("gateway", "metrics", "console"), sorted(free), strict=True))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEARANCE_")}
    env.update(CLEARANCE_NATS_URL=real_servers.nats_url,
               CLEARANCE_REDIS_URL=real_servers.redis_url,
               CLEARANCE_GATEWAY_PORT=str(ports["gateway"]),
               CLEARANCE_METRICS_PORT=str(ports["metrics"]),
               CLEARANCE_GATEWAY_TLS_DIR=str(tmp_path / "gw"),
               CLEARANCE_HTTP_HEADER_TIMEOUT=str(HEAD_SECONDS),
               CLEARANCE_HTTP_BODY_TIMEOUT=str(BODY_SECONDS))
    console_env = {k: v for k, v in env.items() if k != "CLEARANCE_METRICS_PORT"}
    started = [subprocess.Popen([CLEARANCE, "run", "gateway"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
               subprocess.Popen([CLEARANCE, "console", "--port", str(ports["console"])],
                                env=console_env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 20
        # Read from the kernel, not by connecting: a connect to a port in the ephemeral
        # range that nothing listens on yet may connect to itself and take the port.
        while not all(listening_addresses(port) for port in ports.values()):
            assert all(p.poll() is None for p in started), "a process exited"
            assert time.monotonic() < deadline, "not listening"
            time.sleep(0.05)
        assert all(p.poll() is None for p in started), "a process exited"
        ports["console_pid"] = started[1].pid
        yield ports
        assert all(p.poll() is None for p in started), "a process exited under attack"
    finally:
        for process in started:
            process.terminate()
        for process in started:
            process.wait(10)


def test_by_default_nothing_listens_beyond_loopback(processes: dict[str, int]) -> None:
    outside = outside_address()
    for name in ("gateway", "metrics", "console"):
        assert listening_addresses(processes[name]) == {"127.0.0.1"}, name
        if outside is not None:  # from another address of this machine: nobody home
            assert not reachable(outside, processes[name]), (name, outside)


async def test_slowloris_on_the_console_and_the_probes(processes: dict[str, int]) -> None:
    console_head = head("/api/live", f"127.0.0.1:{processes['console']}", method="GET")
    attacks = [held(processes["console"], first=console_head[:10], drip=console_head[10:])
               for _ in range(10)]
    attacks += [held(processes["console"], first=head(
        "/api/play/explain", f"127.0.0.1:{processes['console']}",
        "Content-Type: application/json", "Content-Length: 300") + b"{", drip=b" " * 100,
        every=0.1) for _ in range(5)]
    probe_head = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
    attacks += [held(processes["metrics"], first=probe_head, drip=b"X" * 100)
                for _ in range(5)]
    results = await asyncio.gather(*attacks)
    console_bound = HEAD_SECONDS + 1.0 + SLACK  # a body: the bound, then at most LINGER
    assert max(d for d, _ in results[:15]) < console_bound
    assert all(answer.startswith(b"HTTP/1.1 408") for _, answer in results[10:15])
    assert max(d for d, _ in results[15:]) < 5.0 + SLACK  # the probes' own bound


async def test_cross_site_and_rebound_requests_reach_nothing(
        processes: dict[str, int], real_servers: Servers) -> None:
    """A page on another site POSTs text/plain (no preflight) to the dry run; a page on
    a rebound name (evil.example -> 127.0.0.1) reads the API. Nothing reaches NATS."""
    port = processes["console"]
    base = f"http://127.0.0.1:{port}"
    watcher = await nats.connect(real_servers.nats_url)
    asked = await watcher.subscribe("clearance.v1.>")
    try:
        async with aiohttp.ClientSession() as http:
            for headers, expected in (
                    ({"Content-Type": "text/plain", "Origin": "http://evil.example",
                      "Sec-Fetch-Site": "cross-site"}, 403),
                    ({"Content-Type": "text/plain"}, 415),
                    ({"Content-Type": "application/json", "Origin": "http://evil.example"},
                     403),
                    ({"Content-Type": "application/json", "Host": f"evil.example:{port}"},
                     403)):
                async with http.post(base + "/api/play/simulate", headers=headers,
                                     data=msgspec.json.encode({"policy": "a: 1"})) as resp:
                    assert resp.status == expected, headers
            for path in ("/", "/api/live", "/api/stream", "/login"):
                async with http.get(base + path,
                                    headers={"Host": f"evil.example:{port}"}) as resp:
                    assert resp.status == 403, path
                    assert "revision" not in await resp.text()
        await watcher.flush()
        with pytest.raises(TimeoutError):
            await asked.next_msg(timeout=0.3)
    finally:
        await watcher.close()


async def test_an_alias_bomb_to_the_dry_run_is_refused_fast_in_bounded_memory(
        processes: dict[str, int]) -> None:
    pid = processes["console_pid"]
    before = peak_rss_mib(pid)
    base = f"http://127.0.0.1:{processes['console']}"
    async with aiohttp.ClientSession() as http:
        for _ in range(5):
            started = time.monotonic()
            async with http.post(base + "/api/play/simulate",
                                 json={"policy": ALIAS_BOMB}) as resp:
                reply = await resp.json()
            assert resp.status == 400 and "refused" in reply["error"]["message"]
            assert time.monotonic() - started < 1.0
        async with http.get(base + "/api/live") as resp:  # still serving
            assert resp.status == 200
    assert peak_rss_mib(pid) - before < 20
