"""Hostile requests on real servers (docs/api/README.md: Conventions): each request's failure is its
own error reply, limits are ``bad_request`` naming the limit, and every request gets a
reply — however the decision service batches requests inside."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis

from clearance_api.wire import CheckRequest
from clearance_api.wire.limits import MAX_DEPTH, MAX_GROUPS
from clearance_core.kube.resources import decision_digest, principal_digest
from clearance_runtime.storage import keys
from tests.conftest import Servers
from tests.integration.harness import System, cluster
from tests.support.policies import policy

HUGE = 2**70  # a valid JSON number that fits no 64-bit integer
ALICE = {"username": "alice"}


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    # pvc is a custom type: it exists only while a MetricSource declares it.
    sys_.write("inventory.yaml", cluster("prod"), {
        "apiVersion": "clusterpulse.io/v1alpha1", "kind": "MetricSource",
        "metadata": {"name": "pvc", "namespace": "monitoring"},
        "spec": {"rbac": {"resourceTypeName": "pvc", "filterableFields": ["size"]}}})
    sys_.write("policies.yaml", policy("alice", users=["alice"], rules=[{
        "selector": {"matchNames": ["prod"]},
        "resources": [{"type": "pvc", "visibility": "filtered",
                       "filters": {"fields": {"size": {"denied": [str(HUGE)]}}}}]}]))
    await sys_.start()
    await sys_.settle()
    yield sys_
    await sys_.close()


def pvc_check(size: object, request_id: str) -> dict[str, Any]:
    return {"principal": ALICE, "action": "view", "request_id": request_id,
            "resource": {"type": "pvc", "cluster": "prod", "name": "data",
                         "fields": {"size": size}}}


def deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


async def together(system: System, subject: str, bodies: list[bytes]) -> list[dict[str, Any]]:
    """Send every body at once, so the service answers them in one batch."""
    assert system.nc is not None
    replies = await asyncio.gather(*(system.nc.request(subject, body, timeout=5)
                                     for body in bodies))
    return [msgspec.json.decode(reply.data) for reply in replies]


@pytest.mark.parametrize(("hostile", "echoed"), [
    (msgspec.json.encode(pvc_check(HUGE, "hostile")), "hostile"),
    (b'{"request_id": "hostile", "x": ' + deep(5000) + b"}", None),  # unreadable: no id
], ids=["huge-int", "deep-nesting"])
async def test_a_hostile_check_never_changes_the_answers_of_its_neighbours(
        system: System, hostile: bytes, echoed: str | None) -> None:
    good = [msgspec.json.encode(pvc_check(i, f"good-{i}")) for i in range(40)]
    for _ in range(2):  # misses, then cache hits: both paths batch requests
        replies = await together(system, "clearance.v1.check", [*good[:20], hostile, *good[20:]])
        bad = replies.pop(20)
        assert bad.get("request_id") == echoed
        assert bad.get("error", {}).get("code", "bad_request") == "bad_request"
        assert [(r["decision"], r["request_id"]) for r in replies] == [
            ("allow", f"good-{i}") for i in range(40)]


async def test_huge_integers_compare_in_their_json_form(system: System) -> None:
    hidden = await system.request("clearance.v1.check", pvc_check(HUGE, "h"))
    shown = await system.request("clearance.v1.check", pvc_check(HUGE + 1, "s"))
    assert (hidden["decision"], shown["decision"]) == ("deny", "allow")
    batch = await system.request("clearance.v1.check.batch", {
        "principal": ALICE, "checks": [pvc_check(HUGE, "")] * 2 + [pvc_check(-HUGE, "")]})
    assert [r["decision"] for r in batch["results"]] == ["deny", "deny", "allow"]
    listed = await system.request("clearance.v1.filter", {
        "principal": ALICE, "cluster": "prod", "type": "pvc",
        "items": [{"name": "a", "fields": {"size": HUGE}}, {"name": "b", "fields": {"size": 1}}]})
    assert [i["name"] for i in listed["items"]] == ["b"]


async def test_an_unreadable_cache_entry_fails_only_its_own_check(system: System) -> None:
    """Not every failure is a bad request: a cache entry no replica can read (a torn
    write, or one left by another version) must fail that one check, not its batch."""
    broken = pvc_check(1000, "broken")
    request = msgspec.convert(broken, CheckRequest)
    key = keys.cache_entry(decision_digest(
        principal_digest(request.principal), request.action, request.resource, "prod"))
    redis = aioredis.from_url(system.settings.redis_url)
    await redis.set(key, b"\xc1 not msgpack", px=60_000)
    await redis.aclose()
    good = [msgspec.json.encode(pvc_check(i, f"good-{i}")) for i in range(20)]
    replies = await together(system, "clearance.v1.check",
                             [*good[:10], msgspec.json.encode(broken), *good[10:]])
    bad = replies.pop(10)
    assert (bad["error"]["code"], bad["request_id"]) == ("internal", "broken")
    assert [r.get("decision") for r in replies] == ["allow"] * 20


async def test_a_bad_batch_item_makes_the_batch_a_bad_request_naming_it(system: System) -> None:
    checks = [pvc_check(1, ""), {"action": "view", "resource": {"type": "pvc", "name": "x"}}]
    reply = await system.request("clearance.v1.check.batch",
                                 {"principal": ALICE, "checks": checks, "request_id": "b"})
    assert reply["error"]["code"] == "bad_request" and reply["request_id"] == "b"
    assert reply["error"]["message"].startswith("checks[1]: resource.cluster is required")


def nested(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


async def test_nesting_beyond_the_limit_is_a_bad_request_naming_it(system: System) -> None:
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": "alice", "nonResourceAttributes": {"path": "/x", "verb": "get"}}}
    # The review object is level 1: a member nests 63 more levels (64), then 64 (65).
    at_limit = await system.request("clearance.v1.review.subject",
                                    {**review, "extra": nested(MAX_DEPTH - 1)})
    assert "extra" not in at_limit  # answered; a member it does not know is not sent back
    assert at_limit["status"]["allowed"] is False
    over = await system.request("clearance.v1.review.subject",
                                {**review, "extra": nested(MAX_DEPTH), "request_id": "r"})
    assert over["error"]["code"] == "bad_request" and over["request_id"] == "r"
    assert f"limit of {MAX_DEPTH} levels" in over["error"]["message"]


async def test_groups_beyond_the_limit_are_a_bad_request_naming_it(system: System) -> None:
    groups = [f"g{i}" for i in range(MAX_GROUPS + 1)]
    reply = await system.request("clearance.v1.check", {
        "principal": {"username": "alice", "groups": groups}, "action": "view",
        "resource": {"type": "cluster", "name": "prod"}})
    assert reply["error"]["code"] == "bad_request"
    assert f"<= {MAX_GROUPS}" in reply["error"]["message"]
    allowed = await system.request("clearance.v1.check", {
        "principal": {"username": "alice", "groups": groups[:-1]}, "action": "view",
        "resource": {"type": "cluster", "name": "prod"}})
    assert allowed["decision"] == "allow"


async def test_a_reply_too_large_for_the_server_is_a_bad_request_naming_the_limit(
        system: System) -> None:
    """A review comes back with its status added: sent at the payload limit, its answer
    cannot be delivered, and the client is told so instead of timing out."""
    assert system.nc is not None
    limit = system.nc.max_payload
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "request_id": "big", "spec": {"user": "alice", "groups": ["sre"],
                                            "resourceAttributes": {"verb": "get",
                                                                   "resource": "pods"}}}
    def padded(size: int) -> dict[str, Any]:  # metadata is sent back with the status
        return {**review, "metadata": {"annotations": {"pad": "x" * size}}}

    body = msgspec.json.encode(padded(0))
    body = msgspec.json.encode(padded(limit - len(body)))
    assert len(body) == limit
    reply = await system.request("clearance.v1.review.subject", body, timeout=10)
    assert (reply["error"]["code"], reply["request_id"]) == ("bad_request", "big")
    assert f"max_payload of {limit} bytes" in reply["error"]["message"]
    fits = await system.request("clearance.v1.review.subject", padded(1000))
    assert fits["status"]["allowed"] is False
    assert len(fits["metadata"]["annotations"]["pad"]) == 1000
