"""Bounded work per object, on the real pipeline: hostile manifests never stall the
watcher, and hundreds of Fleet conditions never stall the compiler."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
import redis.asyncio as aioredis
from kmock import KubernetesEmulator, ResourceInfo
from prometheus_client import REGISTRY

from clearance_api.wire import EVENTS_STREAM
from clearance_core.folding.folds import accesspolicies
from clearance_core.inherit.index import PolicyApplied
from clearance_runtime.messaging import bus
from clearance_runtime.process import servers
from tests.conftest import Servers
from tests.integration.harness import System, cluster, write_kubeconfig
from tests.support.accesspolicies import access_policy, block, rule
from tests.support.policies import policy

#: Fleet-wide policies are written where the default authority lets them take part.
ADMIN = "clearance-system"

#: The dedicated server's max_payload: an object over it costs a test 300 KB, not 32 MB.
SMALL_PAYLOAD = 256 << 10
BOMB = """apiVersion: clusterpulse.io/v1alpha1
kind: MonitorAccessPolicy
metadata:
  name: laughs
  namespace: ns
  annotations:
    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
    e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
    f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
    g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
    h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
spec: {}
"""


@pytest.fixture
async def small_nats(tmp_path: Path, real_servers: Servers) -> AsyncIterator[tuple[str, str]]:
    """A nats-server of its own with a small max_payload, and the session's (flushed)
    Valkey."""
    port = servers.free_port()
    state = tmp_path / "small-nats"
    (state / "jetstream").mkdir(parents=True)
    config = state / "nats.conf"
    config.write_text(f'listen: "127.0.0.1:{port}"\nmax_payload: {SMALL_PAYLOAD}\n'
                      f'jetstream {{ store_dir: "{state / "jetstream"}" }}\n')
    server = servers.Server(name="nats-server", argv=[servers.nats_binary(), "-c",
                                                      str(config)],
                            port=port, log_path=state / "nats.log")
    server.start()
    r = aioredis.from_url(real_servers.redis_url)
    await r.flushall()
    await r.aclose()
    try:
        yield f"nats://127.0.0.1:{port}", real_servers.redis_url
    finally:
        server.stop()


def rejected(kind: str, reason: str) -> float:
    return REGISTRY.get_sample_value("clearance_watcher_rejected_total",
                                     {"kind": kind, "reason": reason}) or 0.0


async def decision(system: System, user: str, want: str, *, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while True:
        reply = await system.check(user, "c1")
        if reply.get("decision") == want:
            return
        assert time.monotonic() < deadline, f"{user}: {reply} (waiting for {want})"
        await asyncio.sleep(0.1)


async def status_message(system: System, name: str) -> str:
    reply = await system.request("clearance.v1.policy-status", {
        "kind": "MonitorAccessPolicy", "namespace": "ns", "name": name})
    return " ".join(c.get("message", "") for c in reply.get("conditions", []))


def oversized(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["annotations"] = {"padding": "x" * (SMALL_PAYLOAD + 1000)}
    return obj


async def test_hostile_manifests_never_stall_the_watcher_and_a_revocation_lands(
        small_nats: tuple[str, str], tmp_path: Path) -> None:
    nats_url, redis_url = small_nats
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    system = System(nats_url, redis_url, manifests)
    system.write("inventory.yaml", cluster("c1"))
    system.write("grant.yaml", policy("grant", users=["olga"], default="all"))
    before = {reason: rejected(kind, reason) for kind, reason in (
        ("file", "yaml_aliases"), ("monitoraccesspolicy", "payload_too_large"),
        ("monitoraccesspolicy", "name_too_long"))}
    try:
        await system.start()
        await decision(system, "olga", "allow")
        uid = policy("uid", users=["uma"], default="all")
        uid["metadata"]["uid"] = "u" * 5000  # NATS closed the connection over its subject
        system.write("uid.yaml", uid)
        (manifests / "bomb.yaml").write_text(BOMB)
        system.write("big.yaml", oversized(policy("big", users=["bob"], default="all")))
        system.write("long.yaml", policy("n" * 300, users=["nick"], default="all"))
        system.remove("grant.yaml")  # the revocation, in another file
        await decision(system, "olga", "deny")
        await decision(system, "uma", "allow")  # its uid counted as absent
        await decision(system, "bob", "deny")
        await decision(system, "nick", "deny")
        assert "max_payload" in await status_message(system, "big")
        assert rejected("file", "yaml_aliases") > before["yaml_aliases"]
        assert rejected("monitoraccesspolicy", "payload_too_large") > \
            before["payload_too_large"]
        assert rejected("monitoraccesspolicy", "name_too_long") > before["name_too_long"]
        assert not system.tasks["watcher"].done()
        # Every subject and message id stayed bounded (no connection was dropped).
        assert system.nc is not None
        js = system.nc.jetstream()
        last = (await js.stream_info(EVENTS_STREAM)).state.last_seq
        for seq in range(1, last + 1):
            msg = await js.get_msg(EVENTS_STREAM, seq)
            assert len(msg.subject) < 200
            assert len((msg.headers or {}).get("Nats-Msg-Id", "")) <= 512
    finally:
        await system.close()


async def test_a_valid_object_that_grows_unpublishable_is_withdrawn_not_kept(
        small_nats: tuple[str, str], tmp_path: Path) -> None:
    nats_url, redis_url = small_nats
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    system = System(nats_url, redis_url, manifests)
    system.write("inventory.yaml", cluster("c1"))
    system.write("grant.yaml", policy("grant", users=["olga"], default="all"))
    try:
        await system.start()
        await decision(system, "olga", "allow")
        system.write("grant.yaml", oversized(policy("grant", users=["olga"], default="all")))
        await decision(system, "olga", "deny")  # not silently left in force
        assert "rejected by the watcher" in await status_message(system, "grant")
        system.write("grant.yaml", policy("grant", users=["olga"], default="all"))
        await decision(system, "olga", "allow")  # publishable again: back in force
    finally:
        await system.close()


async def test_hundreds_of_fleet_conditions_do_not_stall_reads_of_a_later_event(
        clean_servers: Servers) -> None:
    """20 clusters, 300 Fleet AccessPolicies whose ``when`` is always true, each adding a
    rule, then a MonitorAccessPolicy: a check with ``min_revision`` at that last event is
    answered within 30 s. Bounded, each Fleet event costs at most one merge's budget per
    distinct set of policies on a path (one here: the clusters have none of their own),
    and the whole took 5-6 s on the reference machine (two busy cores). Unbounded, the
    compiler converted the accumulated policy for every condition of every target: 17 s
    with one cluster, and each cluster adds as much again (the bound fails by minutes)."""
    nc = await nats.connect(clean_servers.nats_url)
    system = System(clean_servers.nats_url, clean_servers.redis_url, None)
    try:
        js = nc.jetstream()
        await bus.ensure_stream(js)
        objects = [*(cluster(f"c{n}") for n in range(1, 21)), *(
            access_policy(f"p{i:03d}", namespace=ADMIN,
                          created=f"2025-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
                          defaults=block({f"r{i}": rule(users=[f"u{i}"])}, "merge",
                                         "size(self.rules) >= 0"))
            for i in range(300))]
        for n, obj in enumerate(objects):
            await js.publish(f"clearance.events.{obj['kind'].lower()}.o{n}",
                             msgspec.json.encode({"type": "ADDED", "object": obj}))
        ack = await js.publish("clearance.events.monitoraccesspolicy.late",
                               msgspec.json.encode({"type": "ADDED", "object": policy(
                                   "late", users=["olga"], default="all")}))
        started = time.monotonic()
        await system.start("compiler", "cache-invalidator", "decision")
        reply = await system.request("clearance.v1.check", {
            "principal": {"username": "olga", "groups": []}, "action": "view",
            "resource": {"type": "cluster", "name": "c1"}, "min_revision": int(ack.seq),
            "timeout_ms": 60_000}, timeout=65)
        elapsed = time.monotonic() - started
        assert reply.get("decision") == "allow", reply
        print(f"answered after {elapsed:.1f} s")
        assert elapsed < 30, elapsed
        effective = await system.request("clearance.v1.effective", {
            "target": {"kind": "Fleet", "name": "fleet"}})
        assert 100 < len(effective["rules"]) < 300  # the budget ran out, and said so
        last = await system.request("clearance.v1.policy-status", {
            "kind": "AccessPolicy", "namespace": ADMIN, "name": "p000"})
        assert any("budget" in c["message"] for c in last["conditions"]), last
    finally:
        await system.close()
        await nc.close()


async def test_a_long_fold_keeps_the_lease_and_the_event_loop(
        clean_servers: Servers, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fold longer than the lease's ttl (5 s): the lease is renewed meanwhile (the
    fold runs on a thread), so the batch is folded once; and the services sharing the
    process answer throughout. Folded on the event loop, the lease expired under it,
    and the compiler, having lost it, folded the same batch again."""
    calls: list[int] = []
    original = accesspolicies.follow

    def slow(model: Any, tx: Any, event: Any, seq: int) -> Any:
        if isinstance(event, PolicyApplied):
            calls.append(seq)
            time.sleep(7)  # synchronous, as a long merge is
        return original(model, tx, event, seq)

    monkeypatch.setattr(accesspolicies, "follow", slow)
    nc = await nats.connect(clean_servers.nats_url)
    system = System(clean_servers.nats_url, clean_servers.redis_url, None)
    try:
        js = nc.jetstream()
        await bus.ensure_stream(js)
        await js.publish("clearance.events.managedcluster.c1", msgspec.json.encode(
            {"type": "ADDED", "object": cluster("c1")}))
        ack = await js.publish("clearance.events.accesspolicy.p", msgspec.json.encode(
            {"type": "ADDED",
             "object": access_policy("p", namespace=ADMIN, rules={"a": rule(users=["u"])})}))
        await system.start("compiler", "cache-invalidator", "decision")
        while not calls:  # noqa: ASYNC110 - waiting for the fold to start
            await asyncio.sleep(0.05)
        slowest = 0.0
        while (await system.status()).get("revision", 0) < int(ack.seq):
            started = time.monotonic()
            await system.status()  # answered by the decision service, same event loop
            slowest = max(slowest, time.monotonic() - started)
            await asyncio.sleep(0.2)
        assert slowest < 1.0, slowest
        assert calls == [int(ack.seq)]  # folded once: the lease held
    finally:
        await system.close()
        await nc.close()


async def test_a_rejected_api_object_gets_its_status_written_back(
        clean_servers: Servers, kmock: KubernetesEmulator, tmp_path: Path) -> None:
    """The Kubernetes source: an AccessPolicy the watcher cannot publish (a name no API
    server would serve, which this emulator does) has the reason written to its status
    subresource, like any invalid policy."""
    resource = "clearance.io/v1alpha1/accesspolicies"
    kmock.resources[resource] = ResourceInfo(kind="AccessPolicy", namespaced=True,
                                             subresources={"status"})
    name = "n" * 300
    obj = access_policy(name, namespace="platform", rules={"a": rule(users=["u"])})
    obj["metadata"].update(uid="uid-long", resourceVersion="1", generation=2)
    kmock.objects[resource, "platform", name] = obj
    kubeconfig = write_kubeconfig(tmp_path, str(kmock.url))
    system = System(clean_servers.nats_url, clean_servers.redis_url, None,
                    kubeconfig=kubeconfig)
    path = f"/apis/clearance.io/v1alpha1/namespaces/platform/accesspolicies/{name}/status"
    try:
        await system.start()
        deadline = time.monotonic() + 20
        while not (patches := [r.data for r in kmock if r.method == "PATCH"
                               and r.url.path == path]):
            assert time.monotonic() < deadline, "no status written"
            await asyncio.sleep(0.1)
        status = patches[-1]["status"]
        assert status["state"] == "Invalid" and status["observedGeneration"] == 2
        assert "rejected by the watcher: metadata.name is 300 characters" in status["message"]
    finally:
        await system.close()
