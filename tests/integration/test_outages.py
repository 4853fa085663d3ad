"""Losing Redis: the decision service answers ``unavailable`` (never an allow), keeps
retrying, and resumes by itself when the store is back."""

from __future__ import annotations

import asyncio
from pathlib import Path

from clearance_runtime.process import servers
from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.support.policies import policy


async def test_redis_outage_is_unavailable_then_recovers(
        clean_servers: Servers, tmp_path: Path) -> None:
    valkey, redis_url = servers.valkey_server(tmp_path / "own-valkey", persist=True)
    valkey.start()
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    system = System(clean_servers.nats_url, redis_url, manifests)
    system.write("all.yaml", cluster("c1"), policy("p", users=["alice"], default="all"))
    try:
        await system.start()
        await system.settle()
        assert (await system.check("alice", "c1"))["decision"] == "allow"
        valkey.kill()
        for _ in range(2):  # cached or not: the store is gone
            reply = await system.check("alice", "c1")
            assert reply["error"]["code"] == "unavailable", reply
        valkey.start()
        for _ in range(100):
            reply = await system.check("alice", "c1")
            if "decision" in reply:
                break
            assert reply["error"]["code"] == "unavailable"
            await asyncio.sleep(0.1)
        assert reply["decision"] == "allow"
    finally:
        await system.close()
        valkey.stop()
