"""The README's client examples run against the real services: the aiohttp dashboard
backend (docs/examples/dashboard.py) and the FastStream subscriber
(docs/examples/subscriber.py), through one policy change."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from clearance_client import DecisionCache
from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.unit.policies import policy

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
ALICE = {"X-Forwarded-User": "alice", "X-Forwarded-Groups": "viewers"}


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"clearance_example_{name}",
                                                  EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.write("clusters.yaml", cluster("east"), cluster("west"))
    sys_.write("viewers.yaml", policy("viewers-east", namespace="dash", groups=["viewers"],
                                      rules=[{"selector": {"matchNames": ["east"]}}]))
    await sys_.start()
    await sys_.settle()
    yield sys_
    await sys_.close()


async def test_dashboard_and_subscriber_follow_a_policy_change(system: System) -> None:
    dashboard, subscriber = load("dashboard"), load("subscriber")
    broker, follower = subscriber.create(system.settings.nats_url)
    await broker.start()
    app = dashboard.create_app(system.settings.nats_url, cache=DecisionCache())
    try:
        async with TestClient(TestServer(app)) as http:
            assert (await http.get("/api/clusters/east")).status == 401  # no proxy header
            page = await http.get("/api/clusters/east", headers=ALICE)
            assert page.status == 200 and (await page.json())["decision"] == "allow"
            again = await (await http.get("/api/clusters/east", headers=ALICE)).json()
            assert again["cached"] is True
            assert (await http.get("/api/clusters/west", headers=ALICE)).status == 403
            listing = await (await http.get("/api/clusters", headers=ALICE)).json()
            assert set(listing) == {"east"}
            assert (await (await http.get("/api/status")).json())["healthy"] is True

            # the policy now denies the group everywhere
            system.write("viewers.yaml", policy(
                "viewers-east", namespace="dash", groups=["viewers"], effect="Deny",
                rules=[{"selector": {"matchNames": ["*"]}}]))
            await _until(lambda: any("viewers" in c.principals.groups
                                     for c in follower.changes))
            await _until(lambda: ("monitoraccesspolicy", "dash", "viewers-east")
                         in follower.statuses)
            assert follower.statuses[("monitoraccesspolicy", "dash", "viewers-east")]\
                .state == "Active"
            # the dashboard's cached allow went with the same event
            await _until_status(http, "/api/clusters/east", 403)
    finally:
        await broker.stop()


async def _until(condition: object, timeout: float = 10.0) -> None:
    assert callable(condition)
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.02)


async def _until_status(http: TestClient[web.Request, web.Application], path: str,
                        status: int) -> None:
    deadline = asyncio.get_running_loop().time() + 10.0
    while (await http.get(path, headers=ALICE)).status != status:
        assert asyncio.get_running_loop().time() < deadline, f"{path} never {status}"
        await asyncio.sleep(0.05)
