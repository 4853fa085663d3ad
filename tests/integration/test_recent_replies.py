"""Replies the decision service reuses for a request asked again (clearance_decision.recent)
stay exact on real servers: the same bytes give the same reply only while no invalidation
has run; once the system revision shows a change, the next check without ``min_revision``
answers from the new state; a ``cache.clear`` ends reuse even when the entry it would
have removed had already left Valkey (expired or evicted) behind the reply's back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis

from clearance_runtime.storage import keys
from tests.conftest import Servers
from tests.integration.harness import System, cluster, group
from tests.support.policies import policy

QUESTION = msgspec.json.encode({"principal": {"username": "alice"}, "action": "view",
                                "resource": {"type": "cluster", "name": "prod-east"}})


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.write("inventory.yaml", cluster("prod-east", env="prod"), group("team", "alice"))
    sys_.write("policies.yaml", policy("team-prod", groups=["team"], rules=[
        {"selector": {"matchLabels": {"env": "prod"}}, "permissions": {"view": True}}]))
    await sys_.start()
    await sys_.settle()
    yield sys_
    await sys_.close()


async def _ask(system: System) -> tuple[bytes, dict[str, Any]]:
    assert system.nc is not None
    reply = await system.nc.request("clearance.v1.check", QUESTION, timeout=5)
    return reply.data, msgspec.json.decode(reply.data)


async def test_a_repeated_check_gets_the_same_reply_until_a_change_lands(
        system: System) -> None:
    _, first = await _ask(system)  # a miss: cached
    hit, second = await _ask(system)  # read from the cache: kept
    again, third = await _ask(system)  # reused
    assert (first["cached"], second["cached"], third["cached"]) == (False, True, True)
    assert again == hit and third["decision"] == "allow"
    system.write("policies.yaml", policy("team-prod", groups=["team"], effect="Deny",
                                         default="all"))
    revision = await system.settle()  # the system revision has reached the edit
    _, after = await _ask(system)  # no min_revision: the state at least as of the probe
    assert after["decision"] == "deny" and after["revision"] >= revision


async def test_a_clear_ends_reuse_even_of_an_entry_already_gone(
        system: System, clean_servers: Servers) -> None:
    await _ask(system)
    await _ask(system)  # kept
    _, reused = await _ask(system)
    assert reused["cached"] is True
    r = aioredis.from_url(clean_servers.redis_url)
    try:  # the entry expires (or is evicted): nothing moves
        entries = [k for k in await r.keys(f"{keys.ENTRY_PREFIX}*")]
        assert len(entries) == 1
        await r.delete(*entries)
    finally:
        await r.aclose()
    cleared = await system.request("clearance.v1.cache.clear",
                                   {"principal": {"username": "alice"}})
    assert cleared["cleared"] == 0  # nothing left to remove in Valkey...
    _, after = await _ask(system)
    assert after["cached"] is False  # ...and the kept reply is not sent again


async def test_a_request_id_is_answered_with_its_own(system: System) -> None:
    assert system.nc is not None
    await _ask(system)
    await _ask(system)
    for rid in ("a", "b"):
        body = msgspec.json.encode({**msgspec.json.decode(QUESTION), "request_id": rid})
        reply = msgspec.json.decode((await system.nc.request(
            "clearance.v1.check", body, timeout=5)).data)
        assert (reply["request_id"], reply["cached"]) == (rid, True)
