"""The lease's timing: a holder cut off from NATS stops working before its key can expire
(so a standby never works beside it), and a bucket left with a shorter TTL than this
copy's is fenced by the bucket's."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

import nats
import pytest

from clearance_runtime.messaging import bus
from clearance_runtime.messaging.lease import Lease
from clearance_runtime.process import servers

pytestmark = pytest.mark.integration


def test_a_ttl_shorter_than_three_renewals_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 3 x renew"):
        Lease(None, "x", service="compiler", ttl=5.0, renew=2.0)  # type: ignore[arg-type]


async def test_a_holder_cut_off_stops_before_its_key_can_expire(tmp_path: Path) -> None:
    server, url = servers.nats_server(tmp_path / "nats")
    server.start()
    nc = await bus.connect(url, name="lease-test")
    ttl, renew = 3.0, 1.0
    lease = Lease(nc.jetstream(), "compiler", service="compiler", ttl=ttl, renew=renew)
    working, stopped = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    async def work() -> None:
        working.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    holding = asyncio.create_task(lease.hold(work))
    try:
        await asyncio.wait_for(working.wait(), 10)
        await asyncio.sleep(renew * 1.5)  # at least one renewal went through
        cut = loop.time()
        server.kill()  # no renewal can land from now on
        await asyncio.wait_for(stopped.wait(), ttl + renew)
        # The key was last written at most ``cut``: it expires at cut + ttl at the
        # earliest; the holder stopped ttl - 2 x renew after its last renewal at most.
        assert loop.time() - cut < ttl - renew
        assert not lease.held
    finally:
        holding.cancel()
        await asyncio.gather(holding, return_exceptions=True)
        with contextlib.suppress(Exception):  # the server is gone
            await nc.close()
        server.stop()


async def test_a_bucket_with_a_shorter_ttl_fences_the_holder_by_it(tmp_path: Path) -> None:
    server, url = servers.nats_server(tmp_path / "nats")
    server.start()
    try:
        setup = await nats.connect(url)
        await setup.jetstream().create_key_value(bucket="CLEARANCE_LEASES", ttl=3.0, history=1)
        await setup.close()
        nc = await bus.connect(url, name="lease-test")
        # A watcher may not update the bucket: it must fence by the bucket's 3 s.
        lease = Lease(nc.jetstream(), "watcher.x", service="watcher", reconcile=False)
        await lease._bucket()
        assert (lease._ttl, lease._renew) == (3.0, 1.0)
        await nc.close()
    finally:
        server.stop()


async def test_a_dead_holder_of_this_machine_is_taken_over_at_once(tmp_path: Path) -> None:
    """A restarted compiler does not wait out the 15 s TTL of its dead predecessor's key;
    a live holder's lease is never taken."""
    server, url = servers.nats_server(tmp_path / "nats")
    server.start()
    nc = await bus.connect(url, name="lease-test")
    sleeper = await asyncio.create_subprocess_exec(sys.executable, "-c",
                                                   "import time; time.sleep(60)")
    dead = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await dead.wait()
    try:
        js = nc.jetstream()
        ours = Lease(js, "compiler", service="compiler")
        kv = await ours._bucket()

        def holder_with(pid: int) -> bytes:
            host, boot, _, rand = ours.holder.rsplit("-", 3)
            return f"{host}-{boot}-{pid}-{rand}".encode()

        await kv.put("compiler", holder_with(sleeper.pid))  # alive: waited for
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2 * 3.0 + 0.5):
                await ours._acquire(kv)
        await kv.put("compiler", holder_with(dead.pid))  # gone: taken at once
        async with asyncio.timeout(1.0):
            await ours._acquire(kv)
        assert (await kv.get("compiler")).value == ours.holder.encode()
    finally:
        sleeper.kill()
        await sleeper.wait()
        await nc.close()
        server.stop()
