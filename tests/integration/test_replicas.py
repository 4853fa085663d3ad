"""Two compilers at once, as a rolling update runs them: one active through the lease on
NATS, the standby takes over when the active one is killed mid-burst, nothing is lost."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
import redis.asyncio as aioredis

from clearance_runtime.messaging.lease import BUCKET
from clearance_runtime.storage import keys
from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.support.policies import policy

CLEARANCE = str(Path(sys.executable).parent / "clearance")


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.write("inventory.yaml", cluster("prod-east"))
    await sys_.start("watcher", "cache-invalidator", "decision")
    yield sys_
    await sys_.close()


def compiler(servers_: Servers) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEARANCE_")}
    env.update(CLEARANCE_NATS_URL=servers_.nats_url, CLEARANCE_REDIS_URL=servers_.redis_url,
               # A quick handover: this test is about the standby taking over, not timing.
               CLEARANCE_LEASE_TTL_S="6", CLEARANCE_LEASE_RENEW_S="2")
    return subprocess.Popen([CLEARANCE, "run", "compiler"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def holder_pid(system: System) -> int:
    assert system.nc is not None
    kv = await system.nc.jetstream().key_value(BUCKET)
    entry = await kv.get("compiler")
    assert entry.value is not None
    return int(entry.value.decode().split("-")[-2])


async def test_the_standby_compiler_takes_over_from_a_killed_one(
        system: System, clean_servers: Servers) -> None:
    procs = [compiler(clean_servers), compiler(clean_servers)]
    r = aioredis.from_url(clean_servers.redis_url)
    try:
        await system.settle(timeout=30)
        active = await holder_pid(system)
        assert active in {p.pid for p in procs}
        assert system.nc is not None
        js = system.nc.jetstream()
        for n in range(300):
            await js.publish(f"clearance.events.monitoraccesspolicy.p{n}",
                             msgspec.json.encode({"type": "ADDED", "object": policy(
                                 f"p{n}", users=[f"u{n}"], default="all")}))
            if n == 100:
                os.kill(active, signal.SIGKILL)  # mid-burst, no chance to hand over
        revision = await system.settle(timeout=30)
        assert await r.hlen(keys.POLICIES) == 300  # nothing lost
        assert int(await r.get(keys.REV) or 0) == revision
        assert await holder_pid(system) != active  # the standby holds the lease now
        reply = await system.check("u299", "prod-east", min_revision=revision)
        assert reply["decision"] == "allow"
    finally:
        await r.aclose()
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        await asyncio.sleep(0)
