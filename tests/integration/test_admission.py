"""A scan of the cache (a flood of distinct questions) is answered exactly as any other
traffic, without storing an entry per answer; a question that comes back is stored and
then hit; at a human pace every answer is stored (services/decision/.../admission.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from tests.conftest import Servers
from tests.integration.harness import System, cluster, group, publish
from tests.support.policies import policy

FLOOD = 1500


@pytest.fixture
async def system(clean_servers: Servers) -> AsyncIterator[System]:
    # A low scan rate, so that the test's flood is a scan on any machine.
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, None,
                  decision_scan_misses=200)
    await sys_.start("compiler", "cache-invalidator", "decision")
    await publish(sys_, "managedcluster", cluster("prod-1", env="prod"))
    await publish(sys_, "managedcluster", cluster("dev-1", env="dev"))
    await publish(sys_, "group", group("devs", "alice"))
    await publish(sys_, "monitoraccesspolicy", policy(
        "devs", groups=["devs"], priority=50,
        rules=[{"selector": {"matchLabels": {"env": "dev"}}, "permissions": {"view": True}}]))
    await sys_.settle()
    yield sys_
    await sys_.close()


def question(n: int) -> dict[str, Any]:
    """The n-th distinct question: a user of its own (in devs for even n) and a cluster."""
    return {"principal": {"username": f"user-{n}", "groups": ["devs"] if n % 2 == 0 else []},
            "action": "view",
            "resource": {"type": "cluster", "name": "dev-1" if n % 3 else "prod-1"}}


def expected(n: int) -> bool:
    return n % 2 == 0 and n % 3 != 0



async def flood(system: System, numbers: range) -> list[dict[str, Any]]:
    assert system.nc is not None
    nc = system.nc
    bodies = [msgspec.json.encode(question(n)) for n in numbers]
    replies: list[dict[str, Any]] = [{}] * len(bodies)
    slots = asyncio.Semaphore(64)

    async def ask(i: int) -> None:
        async with slots:
            reply = await nc.request("clearance.v1.check", bodies[i], timeout=10)
            replies[i] = msgspec.json.decode(reply.data)

    await asyncio.gather(*(ask(i) for i in range(len(bodies))))
    return replies


async def test_a_scan_is_answered_exactly_without_an_entry_per_answer(system: System) -> None:
    replies = await flood(system, range(FLOOD))
    assert [r["allowed"] for r in replies] == [expected(n) for n in range(FLOOD)]
    assert not any(r["cached"] for r in replies)
    stored = await system.cache_entries()
    assert stored < FLOOD // 2, f"{stored} of {FLOOD} answers stored during a scan"
    # A question of the scan asked again is stored then, and hit from then on.
    again = question(FLOOD - 2)
    first = await system.request("clearance.v1.check", again)
    second = await system.request("clearance.v1.check", again)
    assert (first["allowed"], second["allowed"]) == (True, True)
    assert second["cached"] is True


async def test_at_a_human_pace_every_answer_is_stored_and_hit(system: System) -> None:
    for n in range(20):
        first = await system.request("clearance.v1.check", question(n))
        assert first["allowed"] is expected(n) and first["cached"] is False
        second = await system.request("clearance.v1.check", question(n))
        assert second["allowed"] is expected(n) and second["cached"] is True
    assert await system.cache_entries() == 20
