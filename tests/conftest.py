"""Test harness: real servers on free ports.

One nats-server (JetStream) and one valkey-server per test session, from the wheels the
project installs. Tests that need isolation get a fresh stream and a flushed database
(``clean_servers``); nothing here is a fake.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from hypothesis import settings

from clearance_api.wire import EVENTS_STREAM
from clearance_runtime.process import servers
from tests.cluster import NatsCluster
from tests.support.streams import delete_streams

# Hypothesis judges a test by what it finds, not by how long one example took: the full
# test command runs three workers on two cores, where a 0.1 ms example sometimes takes
# 300 ms, and its default 200 ms deadline then fails a correct test ("Unreliable test
# timings"). Tests that bound their own time say so with their own settings.
settings.register_profile("clearance", deadline=None)
settings.load_profile("clearance")

#: Each directory's marker: a test is marked by where it lives, so ``-m "not integration"``
#: selects exactly the tests that need no servers (a module cannot forget its marker).
MARKERS = {"integration": ("integration",), "freshness": ("integration",),
           "chaos": ("integration", "chaos"), "attack": ("integration", "attack"),
           "fuzz": ("integration",)}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.relative_to(Path(__file__).parent).parts
        for marker in MARKERS.get(parts[0], ()) if len(parts) > 1 else ():
            if item.get_closest_marker(marker) is None:
                item.add_marker(getattr(pytest.mark, marker))


class Servers:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.nats, self.nats_url = servers.nats_server(root / "nats")
        self.valkey, self.redis_url = servers.valkey_server(root / "valkey", persist=False)

    def start(self) -> None:
        self.nats.start()
        self.valkey.start()

    def stop(self) -> None:
        self.nats.stop()
        self.valkey.stop()


@pytest.fixture(scope="session")
def real_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    srv = Servers(tmp_path_factory.mktemp("servers"))
    srv.start()
    os.environ["CLEARANCE_NATS_URL"] = srv.nats_url
    os.environ["CLEARANCE_REDIS_URL"] = srv.redis_url
    yield srv
    srv.stop()


@pytest.fixture
async def nats_cluster(tmp_path: Path) -> AsyncIterator[NatsCluster]:
    """Three routed nats-servers with JetStream (a fresh cluster per test: the fault
    scenarios kill its nodes)."""
    cluster = NatsCluster(tmp_path / "nats-cluster")
    cluster.start()
    try:
        await cluster.ready()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
async def clean_servers(real_servers: Servers) -> AsyncIterator[Servers]:
    """Empty stream and empty Redis before each test that asks for it."""
    # No lease left over from a killed process, nor a checkpoint of another test's stream.
    await delete_streams(real_servers.nats_url, EVENTS_STREAM, "KV_CLEARANCE_LEASES",
                         "KV_CLEARANCE_CHECKPOINTS", state_dir=real_servers.root / "nats")
    r = aioredis.from_url(real_servers.redis_url)
    await r.flushall()
    await r.aclose()
    yield real_servers
