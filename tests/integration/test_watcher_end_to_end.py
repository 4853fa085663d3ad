"""From a Kubernetes API (kmock) and a manifest directory at once, through the stream and
the compiler, to answers over NATS."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from kmock import KubernetesEmulator, ResourceInfo

from tests.conftest import Servers
from tests.integration.harness import System, cluster, write_kubeconfig
from tests.support.policies import policy

MAP = "clusterpulse.io/v1alpha1/monitoraccesspolicies"


def served(obj: dict[str, Any], rv: str) -> dict[str, Any]:
    """As the API server serves it: uid and resourceVersion set, no apiVersion/kind in lists."""
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    body["metadata"] = {**obj["metadata"], "uid": "3f1c9a2e-0000-4000-8000-000000000001",
                        "resourceVersion": rv}
    return body


async def test_kubernetes_and_manifests_feed_the_same_decisions(
        clean_servers: Servers, kmock: KubernetesEmulator, tmp_path: Path) -> None:
    kmock.resources[MAP] = ResourceInfo(kind="MonitorAccessPolicy", namespaced=True)
    denied = policy("ops", users=["olga"], effect="Deny", default="all")
    allowed = policy("ops", users=["olga"], default="all")
    kmock[f"list {MAP}"] << {"apiVersion": "clusterpulse.io/v1alpha1",
                             "kind": "MonitorAccessPolicyList",
                             "metadata": {"resourceVersion": "10"},
                             "items": [served(denied, "5")]}
    kmock[f"watch {MAP}"] << (
        {"type": "MODIFIED", "object": {"apiVersion": "clusterpulse.io/v1alpha1",
                                        "kind": "MonitorAccessPolicy", **served(allowed, "11")}},
        (b"", ...),
    )
    kubeconfig = write_kubeconfig(tmp_path, str(kmock.url))
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    system = System(clean_servers.nats_url, clean_servers.redis_url, manifests,
                    kubeconfig=kubeconfig)
    system.write("inventory.yaml", cluster("c1"))
    try:
        await system.start()
        for _ in range(100):
            reply = await system.check("olga", "c1")
            if reply.get("policy") == "ns/ops" and reply["decision"] == "allow":
                break
            await system.settle()
        assert (reply["decision"], reply["policy"]) == ("allow", "ns/ops")
        # The stream holds the API's history of the object, tagged with its source.
        assert system.nc is not None
        js = system.nc.jetstream()
        info = await js.stream_info("CLEARANCE_EVENTS")
        seen = []
        for seq in range(1, info.state.last_seq + 1):
            msg = await js.get_msg("CLEARANCE_EVENTS", seq)
            body = msgspec.json.decode(msg.data or b"")
            seen.append((body["type"], body["object"]["kind"],
                         (msg.headers or {}).get("Clearance-Source")))
        assert ("ADDED", "ManagedCluster", "manifests") in seen
        assert [s for s in seen if s[1] == "MonitorAccessPolicy"] == [
            ("ADDED", "MonitorAccessPolicy", "kubernetes"),
            ("MODIFIED", "MonitorAccessPolicy", "kubernetes")]
    finally:
        await system.close()
