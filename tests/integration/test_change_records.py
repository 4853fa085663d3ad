"""A change names two audiences: whom to announce, and which cached decisions to drop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.unit.policies import policy

pytestmark = pytest.mark.integration
RBAC = "rbac.authorization.k8s.io/v1"


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.write("inventory.yaml", cluster("prod-east"))
    sys_.write("policies.yaml", policy("alice", users=["alice"], default="all"))
    await sys_.start()
    await sys_.settle()
    yield sys_
    await sys_.close()


def binding(user: str) -> dict[str, Any]:
    return {"apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": "view"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "name": user}]}


async def test_a_binding_change_is_announced_but_keeps_cached_checks(system: System) -> None:
    assert system.nc is not None
    heard: list[dict[str, Any]] = []

    async def hear(msg: Any) -> None:
        heard.append(msgspec.json.decode(msg.data))

    sub = await system.nc.subscribe("clearance.decisions.changed", cb=hear)
    await system.check("alice", "prod-east")
    assert (await system.check("alice", "prod-east"))["cached"] is True
    system.write("rbac.yaml", {"apiVersion": RBAC, "kind": "ClusterRole",
                               "metadata": {"name": "view"},
                               "rules": [{"apiGroups": [""], "resources": ["pods"],
                                          "verbs": ["get"]}]}, binding("alice"))
    await asyncio.sleep(0.3)
    revision = await system.settle()
    reply = await system.check("alice", "prod-east", min_revision=revision)
    assert (reply["decision"], reply["cached"]) == ("allow", True)  # checks never read RBAC
    await asyncio.sleep(0.1)
    assert any("alice" in m["principals"]["users"] for m in heard)  # reviews did change
    # A policy change, by contrast, drops alice's cached check.
    system.write("policies.yaml", policy("alice", users=["alice"], effect="Deny",
                                         default="all"))
    await asyncio.sleep(0.3)
    revision = await system.settle()
    reply = await system.check("alice", "prod-east", min_revision=revision)
    assert (reply["decision"], reply["cached"]) == ("deny", False)
    await sub.unsubscribe()
