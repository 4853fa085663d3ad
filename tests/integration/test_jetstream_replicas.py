"""On a 3-node NATS cluster, CLEARANCE_JETSTREAM_REPLICAS=3 keeps three copies of the event
stream, the compiler's consumer, the lease bucket and the checkpoint record's bucket —
created so, or brought to it from one copy at start — and the services, given every
node's URL, answer as on one server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import nats.js.errors
import pytest

from clearance_runtime.messaging import bus, checkpoints, jetstream
from tests.cluster import NatsCluster
from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.support.policies import policy

pytestmark = pytest.mark.integration


@pytest.fixture
async def replicated(clean_servers: Servers, nats_cluster: NatsCluster,
                     tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    system = System(nats_cluster.url, clean_servers.redis_url, manifests,
                    jetstream_replicas=3)
    system.write("inventory.yaml", cluster("prod-east"))
    system.write("p.yaml", policy("p", users=["alice"], default="all"))
    yield system
    await system.close()


async def test_one_copy_is_brought_to_three_and_answers_follow(
        replicated: System, nats_cluster: NatsCluster) -> None:
    # As a deployment made before the setting left them: one copy each, the old 5 s TTL.
    nc = await nats_cluster.connect()
    js = nc.jetstream()
    await js.add_stream(bus.stream_config(jetstream.Topology(replicas=1)))
    await js.create_key_value(bucket=jetstream.DEFAULT_LEASE_BUCKET, ttl=5.0, history=1)
    # One copy, as every version before this one made it: a node's loss took the record
    # with it, and each of its writes then waited out its timeout.
    await js.create_key_value(bucket=checkpoints.BUCKET, history=1)
    try:
        await replicated.start()
        revision = await replicated.settle(timeout=60)
        reply = await replicated.check("alice", "prod-east", min_revision=revision)
        assert reply["decision"] == "allow"

        stream = await js.stream_info(jetstream.DEFAULT.stream)
        assert stream.config.num_replicas == 3
        assert stream.cluster is not None and len(stream.cluster.replicas or []) == 2
        consumer = await js.consumer_info(jetstream.DEFAULT.stream, "clearance-compiler")
        assert consumer.config.num_replicas == 3
        leases = await js.stream_info(jetstream.DEFAULT.lease_stream)
        assert leases.config.num_replicas == 3
        assert leases.config.max_age == pytest.approx(15.0)  # the lease outlasts elections

        async def record_at_three() -> bool:
            info = await js.stream_info(checkpoints.STREAM)
            try:
                entry = await (await js.key_value(checkpoints.BUCKET)).get(checkpoints.KEY)
            except nats.js.errors.KeyNotFoundError:
                return False
            record = checkpoints.parse(entry.value)
            return info.config.num_replicas == 3 and record is not None \
                and record[0] >= revision

        # Brought to three copies by the compiler, and the record written there.
        deadline = asyncio.get_running_loop().time() + 20
        while not await record_at_three():
            assert asyncio.get_running_loop().time() < deadline, "no record at 3 copies"
            await asyncio.sleep(0.05)
    finally:
        await nc.close()


async def test_a_count_the_cluster_cannot_hold_is_a_clear_error(
        nats_cluster: NatsCluster) -> None:
    nc = await nats_cluster.connect()
    try:
        js = nc.jetstream()
        await bus.ensure_stream(js, jetstream.Topology(replicas=1))
        with pytest.raises(jetstream.ReplicasRefused, match="CLEARANCE_JETSTREAM_REPLICAS"):
            await bus.ensure_stream(js, jetstream.Topology(replicas=5))
        assert (await js.stream_info(jetstream.DEFAULT.stream)).config.num_replicas == 1
    finally:
        await nc.close()
