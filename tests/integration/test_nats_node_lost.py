"""A NATS node that stops answering without closing anything (a machine gone, a
partition: SIGSTOP here) is noticed by the services' pings, and their connection moves
to another node of the cluster before a JetStream election is over (4-9 s)."""

from __future__ import annotations

import asyncio
import time

import pytest

from clearance_runtime.messaging import bus
from tests.cluster import NatsCluster

pytestmark = pytest.mark.integration

#: Two pings missed, then a reconnection to a live node — after, at worst, an attempt at
#: the frozen one, whose port still accepts connections and never answers (the margin:
#: a loaded machine). nats-py's default pings would take four minutes.
NOTICED_WITHIN = ((bus.MAX_OUTSTANDING_PINGS + 1) * bus.PING_INTERVAL
                  + bus.CONNECT_TIMEOUT + 1.0)


async def test_a_node_that_stops_answering_is_left_within_seconds(
        nats_cluster: NatsCluster) -> None:
    nc = await bus.connect(nats_cluster.url, name="clearance-test")
    try:
        assert nc.connected_url is not None
        frozen = nats_cluster.index_of_port(nc.connected_url.port)
        nats_cluster.freeze(frozen)
        started = time.monotonic()
        while nc.connected_url is None or nc.connected_url.port == nats_cluster.members[
                frozen].port or not nc.is_connected:
            assert time.monotonic() - started < NOTICED_WITHIN, "still on the frozen node"
            await asyncio.sleep(0.05)
        # Working on the new node: a round trip through it.
        await nc.flush(timeout=2)
        moved = time.monotonic() - started
    finally:
        await nc.close()
    print(f"\nleft the frozen node after {moved:.1f} s")
    assert moved < NOTICED_WITHIN
