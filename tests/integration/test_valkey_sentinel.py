"""The store client behind a ``redis+sentinel://`` URL follows the primary: after a
kill -9 and Sentinel's promotion, and when the server it holds connections to is demoted
(``READONLY``). Real Valkey, one replica, three Sentinels (tests/support/valkeyha.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from clearance_runtime.process import outages
from clearance_runtime.storage import store
from tests.support.valkeyha import FAST, SERVICE, ValkeyHA


@pytest.fixture
def valkey_ha(tmp_path: Path) -> Iterator[ValkeyHA]:
    # What a client does across a failover, not how long Sentinel takes to decide one
    # (test_valkey_failover.py measures that, with the deployed timing).
    group = ValkeyHA(tmp_path / "ha", timing=FAST)
    group.start()
    yield group
    group.stop()


async def _write_until_it_lands(client: aioredis.Redis, key: str, value: str,
                                timeout: float = 20.0) -> float:
    """Seconds until a write succeeds, retrying only what ``outages`` calls an outage
    (anything else fails the test)."""
    started = time.monotonic()
    while True:
        try:
            await client.set(key, value)
            return time.monotonic() - started
        except Exception as exc:
            assert outages.is_transient(exc), f"not classified as an outage: {exc!r}"
            assert time.monotonic() - started < timeout, f"still failing: {exc!r}"
            await asyncio.sleep(0.05)


async def test_follows_the_promoted_replica_and_never_the_old_primary_back_empty(
        valkey_ha: ValkeyHA) -> None:
    client = store.connect(valkey_ha.url, socket_timeout=1.0)
    try:
        await client.set("before", "1")
        valkey_ha.wait(lambda: valkey_ha.client(1).get("before") == b"1",
                       what="the write to replicate")
        valkey_ha.kill(0)
        stall = await _write_until_it_lands(client, "after", "2")
        assert valkey_ha.primary_index() == 1
        assert stall < 10.0
        # The old primary returns empty, as a primary, until Sentinel demotes it: the
        # client never writes there, and the write it made is on the new primary.
        valkey_ha.restart_empty(0)
        for n in range(20):
            await client.set(f"k{n}", n)
        assert await client.get("before") == b"1"
        with valkey_ha.client(1) as new_primary:
            assert new_primary.get("k19") == b"19"
        # Nothing of the client's reached the node back empty (whether and when Sentinel
        # demotes it is Sentinel's business: seen after 14 s, and not within 40 s).
        with valkey_ha.client(0) as empty:
            if valkey_ha.role(0) == "master":
                assert empty.get("k19") is None and empty.get("after") is None
    finally:
        await client.aclose()


async def test_a_demoted_primary_answering_readonly_is_left_for_the_new_one(
        valkey_ha: ValkeyHA) -> None:
    client = store.connect(valkey_ha.url, socket_timeout=1.0)
    try:
        await client.set("warm", "1")  # holds a connection to node 0
        # A planned failover: node 0 stays up and becomes a replica, so the client's
        # connection meets READONLY rather than a closed socket.
        def failover() -> bool:
            try:
                with redis.Redis(port=valkey_ha.sentinel_ports[0]) as sentinel:
                    sentinel.execute_command("SENTINEL", "FAILOVER", SERVICE)
                return True
            except redis.ResponseError:  # NOGOODSLAVE until Sentinel trusts the replica
                return False
        valkey_ha.wait(failover, timeout=30, what="Sentinel to accept a failover")
        valkey_ha.wait(lambda: valkey_ha.role(0) == "slave", timeout=30,
                       what="node 0 to be demoted")
        await _write_until_it_lands(client, "moved", "yes")
        with valkey_ha.client(1) as new_primary:
            assert new_primary.get("moved") == b"yes"
    finally:
        await client.aclose()
