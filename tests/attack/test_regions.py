"""Attacks from a hostile region: a leaf node holding a region's credentials, on no accounts
of its own and with no bounds of its own side, against the hub (docs/regions.md).

The hub runs as in tests/regions (the shipped accounts, its leaf user from
``deploy/nats/regions/region-user.conf``, every service its own NATS user). The hostile
leaf's clients may publish and subscribe anything on their server; what reaches the hub
is what the region's user allows. Each test asserts the region lands nothing on the
hub's stream, its leases or its consumers, answers none of the hub's requests, hears
none of its replies, statuses or announcements, and stalls nothing: the hub keeps
folding changes and answering, every answer right.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import nats
import nats.errors
import pytest
import yaml
from nats.aio.client import Client
from nats.aio.msg import Msg

from clearance_api import inboxes
from clearance_core.folding.kinds import event_subject, ref_of
from clearance_runtime.process import servers
from tests import secured
from tests.integration.harness import cluster, group
from tests.regions import LEAF_PASSWORD, LEAF_USER, Region, Regions
from tests.support.policies import policy
from tests.support.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.attack]

#: Mallory is in the team the allow names; a Deny before it names her.
DENY = policy("no-mallory", namespace="security", priority=1, effect="Deny",
              users=["mallory"], default="all")
#: What the hostile region would like the hub to fold: an allow ahead of the Deny.
FORGED = policy("forged", namespace="security", priority=0, users=["mallory"],
                default="all")
MALLORY = {"principal": {"username": "mallory", "groups": ["team"]}, "action": "view",
           "resource": {"type": "cluster", "name": "prod-east"}}


@dataclass
class Hub:
    region: Region
    operator: Client
    watcher: Client  # reads the stream's state (its user may)
    hostile: Client  # a client of the hostile leaf node

    async def check(self, **extra: Any) -> dict[str, Any]:
        reply = await self.operator.request("clearance.v1.check",
                                            msgspec.json.encode({**MALLORY, **extra}),
                                            timeout=10)
        return dict(json.loads(reply.data))

    async def last_seq(self) -> int:
        return int((await self.watcher.jetstream().stream_info("CLEARANCE_EVENTS"))
                   .state.last_seq)

    async def settled(self) -> int:
        """The stream's last revision once the hub answers at it."""
        async def at() -> int:
            seq = await self.last_seq()
            reply = await self.check(min_revision=seq, timeout_ms=20_000)
            assert reply.get("decision") == "deny", reply
            return seq
        while (seq := await at()) != await self.last_seq():
            pass
        return seq

    def write(self, filename: str, *objects: dict[str, Any]) -> None:
        """A new manifest file, written whole before the watcher can see it."""
        assert self.region.manifests is not None
        staged = self.region.manifests / f".{filename}.tmp"
        staged.write_text(yaml.safe_dump_all(objects, sort_keys=False))
        staged.replace(self.region.manifests / filename)


def _hostile_leaf(directory: Path, leaf_port: int) -> tuple[servers.Server, str, int]:
    """A nats-server whose only configuration is a leafnode remote to the hub as the
    region's user: no accounts, no permissions, no deny lists of its own."""
    directory.mkdir(parents=True)
    port, monitor = servers.free_port(), servers.free_port()
    config = directory / "nats.conf"
    config.write_text(
        f'server_name: hostile\nhost: 127.0.0.1\nport: {port}\nhttp: "127.0.0.1:{monitor}"\n'
        f'leafnodes {{ reconnect: 1, remotes: [ {{ url: '
        f'"nats-leaf://{LEAF_USER}:{LEAF_PASSWORD}@127.0.0.1:{leaf_port}" }} ] }}\n')
    server = servers.Server(name="nats-server hostile",
                            argv=[servers.nats_binary(), "-c", str(config)], port=port,
                            log_path=directory / "nats.log")
    return server, f"nats://127.0.0.1:{port}", monitor


def _leafs(monitor: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/leafz", timeout=2) as reply:
        return len(json.loads(reply.read()).get("leafs") or [])


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[Hub]:
    regions = Regions(tmp_path / "regions")
    region = regions.hub
    assert region.manifests is not None
    (region.manifests / "objects.yaml").write_text(yaml.safe_dump_all(
        [cluster("prod-east"), group("team", "alice", "mallory"),
         policy("team", groups=["team"], default="all"), DENY], sort_keys=False))
    hostile, hostile_url, monitor = _hostile_leaf(tmp_path / "hostile", regions.leaf_port)
    clients: list[Client] = []
    try:
        await regions.start(eu=False)
        hostile.start()
        for user in ("operator", "watcher"):
            url = region.url_as(user)
            clients.append(await nats.connect(url, inbox_prefix=inboxes.prefix_for(url)))
        clients.append(await nats.connect(hostile_url))
        hub = Hub(region, *clients)
        await until(lambda: _leafs(monitor) == 1, what="the hostile leaf connected")
        await until_answering(hub)
        yield hub
    finally:
        for nc in clients:
            await nc.close()
        hostile.stop()
        await regions.close()


async def until_answering(hub: Hub) -> None:
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        try:
            if (await hub.check()).get("decision") == "deny":
                return
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            pass
        assert asyncio.get_running_loop().time() < deadline, "the hub never answered"
        await asyncio.sleep(0.1)


async def _unanswered(nc: Client, subject: str, body: bytes = b"{}") -> bool:
    """Whether a request gets no reply at all (no responder, or silence)."""
    try:
        await nc.request(subject, body, timeout=1.0)
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
        return True
    return False


async def _still_folding(hub: Hub, before: int) -> None:
    """A change made in the hub after the attack is folded as the next event, and only
    it: nothing the region sent landed on the stream, and the compiler's consumer is
    intact."""
    hub.write("more.yaml", cluster("prod-west"))
    deadline = asyncio.get_running_loop().time() + 20
    while await hub.last_seq() == before:  # the watcher publishes it
        assert asyncio.get_running_loop().time() < deadline, "the hub's watcher stalled"
        await asyncio.sleep(0.02)
    revision = await hub.settled()
    assert revision == before + 1
    assert (await hub.check(min_revision=revision))["decision"] == "deny"


async def test_a_hostile_region_lands_nothing_on_the_hub(hub: Hub) -> None:
    before = await hub.settled()
    body = msgspec.json.encode({"type": "ADDED", "object": FORGED})
    subject = event_subject(FORGED, ref_of(FORGED))
    # The forged allow, as the watcher would publish it (and as JetStream would ack it).
    await hub.hostile.publish(subject, body)
    assert await _unanswered(hub.hostile, subject, body)
    # The hub's JetStream API beyond the mirror's one call: delete, purge, update the
    # stream; delete or take over the compiler's consumer; write its lease.
    for api in ("STREAM.DELETE.CLEARANCE_EVENTS", "STREAM.PURGE.CLEARANCE_EVENTS",
                "STREAM.UPDATE.CLEARANCE_EVENTS",
                "CONSUMER.DELETE.CLEARANCE_EVENTS.clearance-compiler",
                "CONSUMER.DURABLE.CREATE.CLEARANCE_EVENTS.clearance-compiler",
                "CONSUMER.CREATE.CLEARANCE_EVENTS.clearance-compiler",
                "STREAM.MSG.GET.KV_CLEARANCE_LEASES",
                "$KV.CLEARANCE_LEASES.compiler"):
        assert await _unanswered(hub.hostile, f"$JS.hub.API.{api}"), api
        assert await _unanswered(hub.hostile, f"$JS.API.{api}"), api
    for raw in ("$KV.CLEARANCE_LEASES.compiler", "$KV.CLEARANCE_CHECKPOINTS.compiler"):
        await hub.hostile.publish(raw, b"999999 forged")
    # The one call it may make, naming the compiler's durable consumer, its answer asked
    # where a mirror's answers come back: refused (the name-less form makes ephemeral
    # consumers only).
    answers = await hub.hostile.subscribe("$JSC.R.attack")
    await hub.hostile.publish(
        "$JS.hub.API.CONSUMER.CREATE.CLEARANCE_EVENTS",
        msgspec.json.encode({"stream_name": "CLEARANCE_EVENTS",
                             "config": {"durable_name": "clearance-compiler",
                                        "ack_policy": "none"}}), reply="$JSC.R.attack")
    taken = await answers.next_msg(timeout=5)
    assert "error" in json.loads(taken.data), taken.data
    await hub.hostile.flush()
    # The region's credentials as a client of the hub: refused (leaf nodes only), where
    # a user's are taken.
    def login(user: str, password: str) -> Any:
        return nats.connect(hub.region.nats_url, user=user, password=password,
                            allow_reconnect=False, max_reconnect_attempts=0,
                            connect_timeout=2)

    await (await login("operator", secured.PASSWORDS["operator"])).close()
    with pytest.raises((nats.errors.Error, OSError)):
        await login(LEAF_USER, LEAF_PASSWORD)
    await _still_folding(hub, before)


async def test_a_hostile_region_answers_and_hears_nothing_of_the_hub(hub: Hub) -> None:
    heard: list[str] = []

    async def answer(msg: Msg) -> None:
        heard.append(msg.subject)
        if msg.reply:
            await msg.respond(b'{"decision": "allow", "revision": 999999}')

    # As the decision service's queue group, and as a plain subscriber to everything.
    await hub.hostile.subscribe("clearance.v1.>", queue="clearance-decision", cb=answer)
    await hub.hostile.subscribe(">", cb=answer)
    await hub.hostile.flush()
    before = await hub.settled()
    for _ in range(20):
        assert (await hub.check())["decision"] == "deny"
    await _still_folding(hub, before)  # statuses, announcements, replies all flowed
    # With the hub's own decision service gone, the hub's callers get no responder:
    # never the region's answer.
    decision = hub.region.procs["decision"]
    decision.terminate()
    decision.wait(10)
    assert await _unanswered(hub.operator, "clearance.v1.check",
                             msgspec.json.encode(MALLORY))
    assert heard == [], heard  # nothing of the hub's reached the region's clients
