"""A store that refuses writes for a while (a primary demoted to a replica: ``READONLY``)
is an outage the compiler waits out: the policy it was folding is committed when the
store takes writes again, never withdrawn because the *store* failed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import redis.asyncio as aioredis

from clearance_runtime.process import servers
from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.support.policies import policy


async def test_a_deny_folded_while_the_store_is_read_only_is_in_force_after(
        clean_servers: Servers, tmp_path: Path) -> None:
    valkey, redis_url = servers.valkey_server(tmp_path / "own-valkey", persist=False)
    valkey.start()
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    system = System(clean_servers.nats_url, redis_url, manifests)
    system.write("base.yaml", cluster("c1"),
                 policy("allow", users=["alice"], default="all", priority=10))
    admin = aioredis.from_url(redis_url)
    try:
        await system.start()
        await system.settle()
        assert (await system.check("alice", "c1"))["decision"] == "allow"
        # A replica of a primary nobody runs: it keeps its data, serves reads, and
        # refuses every write with READONLY — what a demoted primary answers.
        await admin.execute_command("REPLICAOF", "127.0.0.1", str(servers.free_port()))
        seq = await system.apply("deny.yaml", policy(
            "deny", users=["alice"], default="all", effect="Deny", priority=1))
        # Long enough for the compiler to fail the commit several times over.
        deadline = asyncio.get_running_loop().time() + 3.0
        while asyncio.get_running_loop().time() < deadline:
            assert int(await admin.get("clr:rev") or 0) < seq  # nothing was written
            await asyncio.sleep(0.1)
        await admin.execute_command("REPLICAOF", "NO", "ONE")
        await system.settle(timeout=30)
        reply = await system.check("alice", "c1", min_revision=seq)
        assert reply["decision"] == "deny", reply
        status = await system.request("clearance.v1.policy-status", {
            "kind": "MonitorAccessPolicy", "namespace": "ns", "name": "deny"})
        assert status.get("state") not in ("invalid", "failed"), status
    finally:
        await admin.execute_command("REPLICAOF", "NO", "ONE")
        await admin.aclose()
        await system.close()
        valkey.stop()
