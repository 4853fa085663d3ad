"""The whole path on real servers: manifests -> watcher -> JetStream -> compiler -> Redis
-> decision, answered over NATS."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from tests.conftest import Servers
from tests.integration.harness import System, cluster, group
from tests.support.policies import policy


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.write("inventory.yaml", cluster("prod-east", env="prod"), cluster("dev-1", env="dev"),
               group("team", "alice"))
    sys_.write("policies.yaml",
               policy("team-prod", groups=["team"], rules=[
                   {"selector": {"matchLabels": {"env": "prod"}},
                    "permissions": {"view": True, "viewMetrics": True}}]))
    await sys_.start()
    await sys_.settle()
    yield sys_
    await sys_.close()


async def test_manifest_policy_answers_over_nats(system: System) -> None:
    reply = await system.check("alice", "prod-east", action="view_metrics")
    assert (reply["decision"], reply["allowed"], reply["policy"]) == ("allow", True, "ns/team-prod")
    assert reply["permissions"] == ["view", "view_metrics"]
    assert reply["filters"] is None and reply["revision"] >= 1
    assert (await system.check("alice", "dev-1"))["decision"] == "deny"
    assert (await system.check("mallory", "prod-east"))["decision"] == "deny"


async def test_second_answer_comes_from_the_cache_with_its_explanation(system: System) -> None:
    first = await system.check("alice", "prod-east", explain=True)
    second = await system.check("alice", "prod-east", explain=True)
    assert (first["cached"], second["cached"]) == (False, True)
    assert second["trace"] == first["trace"]
    assert second["trace"][0]["outcome"] == "decided"
    assert "trace" not in await system.check("alice", "prod-east")


async def test_policy_edit_is_reflected_in_the_next_check_with_min_revision(
        system: System) -> None:
    assert (await system.check("alice", "prod-east"))["decision"] == "allow"  # now cached
    system.write("policies.yaml", policy("team-prod", groups=["team"], effect="Deny",
                                         default="all"))
    revision = await _next_revision(system)
    reply = await system.check("alice", "prod-east", min_revision=revision)
    assert (reply["decision"], reply["cached"]) == ("deny", False)
    assert reply["revision"] >= revision


async def test_group_membership_change_invalidates_exactly_that_user(system: System) -> None:
    assert (await system.check("alice", "prod-east"))["decision"] == "allow"
    assert (await system.check("bob", "prod-east"))["decision"] == "deny"
    assert (await system.check("carol", "prod-east", groups=["team"]))["decision"] == "allow"
    system.write("inventory.yaml", cluster("prod-east", env="prod"), cluster("dev-1", env="dev"),
                 group("team", "bob"))
    revision = await _next_revision(system)
    assert (await system.check("alice", "prod-east", min_revision=revision))["decision"] == "deny"
    assert (await system.check("bob", "prod-east", min_revision=revision))["decision"] == "allow"
    # carol's answer did not depend on the Group object: it stays cached.
    carol = await system.check("carol", "prod-east", groups=["team"], min_revision=revision)
    assert (carol["decision"], carol["cached"]) == ("allow", True)


async def test_cluster_label_change_is_seen(system: System) -> None:
    assert (await system.check("alice", "dev-1"))["decision"] == "deny"
    system.write("inventory.yaml", cluster("prod-east", env="prod"), cluster("dev-1", env="prod"),
                 group("team", "alice"))
    revision = await _next_revision(system)
    assert (await system.check("alice", "dev-1", min_revision=revision))["decision"] == "allow"


async def test_deleting_the_file_deletes_the_policy(system: System) -> None:
    system.remove("policies.yaml")
    revision = await _next_revision(system)
    reply = await system.check("alice", "prod-east", min_revision=revision)
    assert reply["decision"] == "deny"
    assert (await system.status())["policies"] == 0


async def test_malformed_file_is_skipped_whole_and_keeps_previous_objects(
        system: System) -> None:
    before = await system.stream_last_seq()
    skipped = _malformed_manifests()
    assert system.manifests is not None
    (system.manifests / "policies.yaml").write_text(
        "apiVersion: clusterpulse.io/v1alpha1\nkind: MonitorAccessPolicy\n"
        "metadata: {name: other, namespace: ns}\n---\n: : not yaml [\n")
    # The watcher has read the file (and skipped it) once the counter moves; then a later
    # change is published, and it is the only event since: the malformed file published
    # nothing ("other") and deleted nothing (team-prod).
    for _ in range(500):
        if _malformed_manifests() > skipped:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the watcher never read the malformed file")
    system.write("inventory.yaml", cluster("prod-east", env="prod"),
                 cluster("dev-1", env="dev"), cluster("later"), group("team", "alice"))
    revision = await _next_revision(system)
    assert revision == before + 1
    reply = await system.check("alice", "prod-east", min_revision=revision)
    assert (reply["decision"], reply["policy"]) == ("allow", "ns/team-prod")
    assert (await system.status())["policies"] == 1


def _malformed_manifests() -> float:
    return REGISTRY.get_sample_value("clearance_malformed_total", {"where": "manifest"}) or 0.0


async def test_invalid_policy_withdraws_the_previous_version(system: System) -> None:
    assert (await system.check("alice", "prod-east"))["decision"] == "allow"
    broken = policy("team-prod", groups=["team"], rules=[{"selector": {"matchPattern": "(["}}])
    system.write("policies.yaml", broken)
    revision = await _next_revision(system)
    reply = await system.check("alice", "prod-east", min_revision=revision, explain=True)
    assert reply["decision"] == "deny"
    assert reply["trace"][0]["outcome"] == "skipped"
    assert reply["trace"][0]["reason"].startswith("invalid: ")


async def test_batch_answers_in_order(system: System) -> None:
    reply = await system.request("clearance.v1.check.batch", {
        "principal": {"username": "alice"},
        "checks": [{"action": "view", "resource": {"type": "cluster", "name": c}}
                   for c in ("prod-east", "dev-1", "prod-east", "nowhere")],
    })
    assert [r["decision"] for r in reply["results"]] == ["allow", "deny", "allow", "deny"]
    assert reply["revision"] >= 1


@pytest.mark.parametrize("body", [
    b"not json",
    b"[1, 2]",
    b"{}",
    b'{"principal": {"groups": ["team"]}, "action": "view", "resource": {"type": "cluster", '
    b'"name": "prod-east"}}',
    b'{"principal": {"username": "alice"}, "action": "edit", "resource": {"type": "cluster", '
    b'"name": "prod-east"}}',
    b'{"principal": {"username": "alice"}, "action": "view", "resource": {"type": "cluster"}}',
    b'{"principal": {"username": "alice"}, "action": "view", "resource": {"type": "pod", '
    b'"name": "x"}}',
    b'{"principal": {"username": 7}, "action": "view", "resource": {"type": "cluster", '
    b'"name": "prod-east"}}',
])
async def test_bad_requests_get_bad_request_never_an_allow(system: System, body: bytes) -> None:
    reply = await system.request("clearance.v1.check", body)
    assert reply["error"]["code"] == "bad_request"
    assert "decision" not in reply


async def test_request_id_is_echoed_in_results_and_errors(system: System) -> None:
    ok = await system.check("alice", "prod-east", request_id="r-1")
    bad = await system.request("clearance.v1.check", {"request_id": "r-2"})
    assert (ok["request_id"], bad["request_id"]) == ("r-1", "r-2")


async def test_min_revision_beyond_the_stream_is_stale(system: System) -> None:
    reply = await system.check("alice", "prod-east", min_revision=10**9, timeout_ms=100)
    assert reply["error"]["code"] == "stale"


async def test_status_reports_services_and_cache(system: System) -> None:
    await system.check("alice", "prod-east")
    await system.check("alice", "prod-east")
    status = await system.status()
    assert status["revision"] == await system.stream_last_seq()
    assert set(status["services"]) >= {"compiler", "cache-invalidator", "decision"}
    assert all(s["healthy"] for s in status["services"].values())
    assert status["policies"] == 1
    assert status["cache"]["entries"] >= 1
    assert status["cache"]["hits"] >= 1 and status["cache"]["misses"] >= 1


async def test_compiler_restart_loses_no_event(system: System) -> None:
    await system.stop("compiler")
    await system.apply("policies.yaml", policy("team-prod", groups=["team"], effect="Deny",
                                               default="all"))
    await system.start("compiler")
    await system.settle()
    assert (await system.check("alice", "prod-east"))["decision"] == "deny"


async def test_invalidator_restart_loses_no_invalidation(system: System) -> None:
    assert (await system.check("alice", "prod-east"))["decision"] == "allow"  # cached
    await system.stop("cache-invalidator")
    await system.apply("policies.yaml", policy("team-prod", groups=["team"], effect="Deny",
                                               default="all"))
    await system.start("cache-invalidator")
    revision = await system.settle()
    reply = await system.check("alice", "prod-east", min_revision=revision)
    assert reply["decision"] == "deny"


async def test_redis_flush_is_rebuilt_from_the_stream(system: System) -> None:
    r = aioredis.from_url(system.settings.redis_url)
    await r.flushall()
    await r.aclose()
    await system.settle()
    assert (await system.check("alice", "prod-east"))["decision"] == "allow"
    assert (await system.status())["policies"] == 1


async def test_decisions_changed_names_the_affected_principals(system: System) -> None:
    assert system.nc is not None
    sub = await system.nc.subscribe("clearance.decisions.changed")
    system.write("policies.yaml", policy("team-prod", groups=["team", "ops"], users=["zoe"],
                                         default="all"))
    msg = await sub.next_msg(timeout=5)
    await sub.unsubscribe()
    body = msgspec.json.decode(msg.data)
    assert set(body["principals"]["groups"]) == {"team", "ops"}
    assert body["principals"]["users"] == ["zoe"]
    assert body["all"] is False


async def _next_revision(system: System) -> int:
    """The stream sequence of the watcher's next publish."""
    before = await system.stream_last_seq()
    for _ in range(200):
        now = await system.stream_last_seq()
        if now > before:
            await asyncio.sleep(0.2)
            return await system.stream_last_seq()
        await asyncio.sleep(0.02)
    raise TimeoutError("the watcher published nothing")


async def test_any_producer_may_append_and_malformed_messages_are_skipped(
        system: System) -> None:
    assert system.nc is not None
    js = system.nc.jetstream()
    await js.publish("clearance.events.monitoraccesspolicy.x", b"{not json")
    await js.publish("clearance.events.group.y", b'{"type": "ADDED", "object": {"kind": "Group"}}')
    await js.publish("clearance.events.bogus.z", b'{"type": "EXPLODED", "object": {}}')
    ack = await js.publish(
        "clearance.events.monitoraccesspolicy.direct",
        msgspec.json.encode({"type": "ADDED", "object": policy(
            "direct", users=["mallory"], default="all")}),
    )
    reply = await system.check("mallory", "prod-east", min_revision=ack.seq)
    assert (reply["decision"], reply["policy"]) == ("allow", "ns/direct")
    assert (await system.status())["revision"] >= ack.seq


async def test_a_cached_allow_never_outlives_not_after(system: System) -> None:
    from datetime import UTC, datetime, timedelta  # noqa: PLC0415

    soon = (datetime.now(UTC) + timedelta(seconds=1.5)).isoformat()
    system.write("policies.yaml", policy("brief", users=["tim"], default="all", not_after=soon))
    revision = await _next_revision(system)
    first = await system.check("tim", "prod-east", min_revision=revision)
    second = await system.check("tim", "prod-east")
    assert (first["decision"], second["decision"], second["cached"]) == ("allow", "allow", True)
    await asyncio.sleep(2.0)
    assert (await system.check("tim", "prod-east"))["decision"] == "deny"


async def test_permissions_cover_every_inventory_cluster(system: System) -> None:
    reply = await system.request("clearance.v1.permissions",
                                 {"principal": {"username": "alice"}})
    assert reply["clusters"] == {
        "dev-1": {"decision": "deny", "permissions": []},
        "prod-east": {"decision": "allow", "permissions": ["view", "view_metrics"]},
    }


async def test_policies_lists_matching_policies_in_order_with_how_they_matched(
        system: System) -> None:
    system.write("policies.yaml",
                 policy("team-prod", groups=["team"], priority=5, default="all"),
                 policy("by-user", users=["alice"], priority=5, effect="Deny", enabled=False),
                 policy("other", users=["bob"], default="all"))
    revision = await _next_revision(system)
    reply = await system.request("clearance.v1.policies", {
        "principal": {"username": "alice", "groups": ["zz"]}, "min_revision": revision})
    assert [(p["name"], p["matched_by"], p["in_force"], p["valid"]) for p in reply["policies"]] \
        == [("by-user", "user", False, True), ("team-prod", "group:team", True, True)]


async def test_cache_clear_for_one_principal_and_for_all(system: System) -> None:
    await system.check("alice", "prod-east")
    await system.check("alice", "dev-1")
    await system.check("bob", "prod-east")
    one = await system.request("clearance.v1.cache.clear", {"principal": {"username": "alice"}})
    assert one["cleared"] == 2
    assert (await system.check("bob", "prod-east"))["cached"] is True
    assert (await system.check("alice", "prod-east"))["cached"] is False
    everything = await system.request("clearance.v1.cache.clear", {})
    assert everything["cleared"] == 2
    assert (await system.status())["cache"]["entries"] == 0
