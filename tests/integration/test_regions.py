"""Two regions on loopback (docs/regions.md), as real processes on the shipped NATS
accounts: region A (the hub) runs the watcher; region B, a leaf node of A's server with a
mirror of A's stream, its own Valkey, compiler, invalidator and decision service.

A policy change made in A is answered in B at the same revision number; a check in B
asking for A's revision waits for it; with the link between the regions cut, B answers
from its last state (and says ``stale`` to a revision it does not have), and catches up
when the link returns. No answer anywhere is an allow the policy does not give, and B's
decision service never answers A's requests."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import nats.errors
import nats.js.errors
import pytest
import yaml
from nats.aio.client import Client

from clearance_api import inboxes
from clearance_runtime.messaging import bus
from clearance_runtime.messaging.jetstream import StreamMismatch, Topology
from tests.conftest import Servers
from tests.integration.harness import cluster
from tests.regions import Region, Regions
from tests.support.policies import policy

pytestmark = pytest.mark.integration


@pytest.fixture
async def regions(tmp_path: Path) -> AsyncIterator[Regions]:
    both = Regions(tmp_path)
    write(both.hub, "inventory.yaml", cluster("prod-east"))
    write(both.hub, "p.yaml", policy("p", users=["alice"], default="all"))
    await both.start()
    try:
        yield both
    finally:
        await both.close()


def write(region: Region, filename: str, *objects: dict[str, Any]) -> None:
    """Replace a manifest file at once (the watcher polls: a file rewritten in place may
    be read empty in between, its objects deleted for a moment)."""
    assert region.manifests is not None
    staged = region.manifests / f".{filename}.tmp"
    staged.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    staged.replace(region.manifests / filename)


async def connect(region: Region) -> Client:
    """The ``operator`` user of ``region``'s own server (it may ask checks and status)."""
    url = region.url_as("operator")
    return await nats.connect(url, inbox_prefix=inboxes.prefix_for(url))


async def ask(nc: Client, user: str, *, timeout: float = 5.0,
              **extra: Any) -> dict[str, Any]:
    """``user``'s check of cluster prod-east (retried while no decision service listens
    yet or the region is still building its state)."""
    body = msgspec.json.encode({"principal": {"username": user, "groups": []},
                                "action": "view",
                                "resource": {"type": "cluster", "name": "prod-east"},
                                **extra})
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        try:
            reply: dict[str, Any] = json.loads((await nc.request(
                "clearance.v1.check", body, timeout=timeout)).data)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            reply = {"error": {"code": "no_responders"}}
        code = reply.get("error", {}).get("code")
        if code not in ("no_responders", "unavailable"):
            return reply
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"no answer for {user}: {reply}")
        await asyncio.sleep(0.1)


async def answer_at_least(nc: Client, user: str, revision: int) -> dict[str, Any]:
    """``user``'s answer once the region has reached ``revision``."""
    return await ask(nc, user, min_revision=revision, timeout_ms=30_000, timeout=35.0)


async def changed(nc: Client, user: str, after: int) -> dict[str, Any]:
    """``user``'s first answer at a revision past ``after`` (the change has been folded)."""
    deadline = asyncio.get_running_loop().time() + 30
    while (reply := await ask(nc, user))["revision"] <= after:
        assert reply["decision"] == "deny", reply  # never an allow before the change
        assert asyncio.get_running_loop().time() < deadline, f"A stuck at {reply}"
        await asyncio.sleep(0.05)
    return reply


async def allowed(nc: Client, user: str) -> dict[str, Any]:
    """``user``'s first allow: the region may answer before it has folded every file it
    started with (the inventory before the policy, say)."""
    deadline = asyncio.get_running_loop().time() + 30
    while (reply := await ask(nc, user))["decision"] != "allow":
        assert asyncio.get_running_loop().time() < deadline, f"never allowed: {reply}"
        await asyncio.sleep(0.05)
    return reply


async def test_a_change_in_a_is_answered_in_b_at_the_same_revision_and_b_outlives_the_link(
        regions: Regions) -> None:
    a, b = await connect(regions.hub), await connect(regions.eu)
    try:
        # Both regions up: A's state, and B's from its mirror, at the same revision.
        first = await allowed(a, "alice")  # once A has folded both manifest files
        in_b = await answer_at_least(b, "alice", first["revision"])
        assert in_b.get("decision") == "allow", in_b
        assert (await ask(b, "bob"))["decision"] == "deny"

        # A policy change in A: B answers it at A's revision, waiting for it if need be.
        write(regions.hub, "p.yaml", policy("p", users=["alice", "bob"], default="all"))
        bob_in_a = await changed(a, "bob", first["revision"])
        assert bob_in_a["decision"] == "allow"
        seen_in_a = asyncio.get_running_loop().time()
        bob_in_b = await answer_at_least(b, "bob", bob_in_a["revision"])
        print(f"B answered the change {asyncio.get_running_loop().time() - seen_in_a:.2f} s "
              f"after A did")
        assert (bob_in_b["decision"], bob_in_b["revision"]) == \
            ("allow", bob_in_a["revision"])

        # The link cut: A goes on alone, B answers from its last state.
        await regions.link.cut()
        write(regions.hub, "p.yaml",
              policy("p", users=["alice", "bob", "carol"], default="all"))
        carol_in_a = await changed(a, "carol", bob_in_a["revision"])
        assert carol_in_a["decision"] == "allow"
        carol_in_b = await ask(b, "carol")
        assert (carol_in_b["decision"], carol_in_b["revision"]) == \
            ("deny", bob_in_a["revision"])
        assert (await ask(b, "bob"))["decision"] == "allow"
        stale = await ask(b, "carol", min_revision=carol_in_a["revision"], timeout_ms=300)
        assert stale["error"]["code"] == "stale"

        # A check in B asking for A's revision waits, and is answered once the link is
        # back and B has caught up.
        waiting = asyncio.create_task(answer_at_least(b, "carol", carol_in_a["revision"]))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        restored = asyncio.get_running_loop().time()
        await regions.link.restore()
        caught_up = await waiting
        print(f"B caught up {asyncio.get_running_loop().time() - restored:.1f} s "
              f"after the link came back")
        assert (caught_up["decision"], caught_up["revision"]) == \
            ("allow", carol_in_a["revision"])

        # B's decision service is no member of A's queue group: with A's own gone, a
        # request in A finds no responder rather than B's answer.
        regions.hub.procs["decision"].terminate()
        regions.hub.procs["decision"].wait(10)
        with pytest.raises(nats.errors.NoRespondersError):
            await a.request("clearance.v1.check", b"{}", timeout=2)
        assert regions.hub.exited() == {"decision": 0} and regions.eu.exited() == {}
    finally:
        await a.close()
        await b.close()


async def test_a_stream_of_the_other_kind_is_refused(clean_servers: Servers) -> None:
    """A region configured as a mirror never folds a stream that takes publishes (nor
    creates one), and a region configured as the source never uses a mirror. (On the
    session's server, cleaned: the source takes clearance.events.>, which no other
    stream may hold meanwhile.)"""
    source, mirror = Topology(stream="REGIONS_SOURCE"), \
        Topology(stream="REGIONS_MIRROR", mirror="hub")
    nc = await nats.connect(clean_servers.nats_url)
    js = nc.jetstream()
    try:
        await bus.ensure_stream(js, source)
        await bus.ensure_stream(js, mirror)  # created as the mirror (its source away)
        created = (await js.stream_info(mirror.stream)).config
        assert created.subjects in (None, []) and created.mirror is not None
        assert created.mirror.external is not None
        assert created.mirror.external.api == "$JS.hub.API"
        await bus.ensure_stream(js, mirror)  # and accepted as such
        with pytest.raises(StreamMismatch, match="not a mirror of REGIONS_SOURCE in domain hub"):
            await bus.ensure_stream(js, Topology(stream="REGIONS_SOURCE", mirror="hub"))
        with pytest.raises(StreamMismatch, match="takes no publishes: set CLEARANCE_STREAM_MIRROR"):
            await bus.ensure_stream(js, Topology(stream="REGIONS_MIRROR"))
        with pytest.raises(StreamMismatch, match="not a mirror of REGIONS_MIRROR in domain eu"):
            await bus.ensure_stream(js, Topology(stream="REGIONS_MIRROR", mirror="eu"))
    finally:
        for topology in (source, mirror):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.delete_stream(topology.stream)
        await nc.close()
