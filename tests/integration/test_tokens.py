"""``token`` principals (docs/security.md): a Kubernetes bearer token, verified by a
TokenReview against kmock (a real HTTP server playing the API server), becomes the
principal it names — never an allow when anything about it fails."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import structlog.testing
from kmock import RawHandler

from clearance_api.errors import BadRequest, Unavailable
from clearance_api.wire import Principal
from clearance_runtime.edges.tokens import REVIEW_PATH, TokenReviews
from tests.conftest import Servers
from tests.integration.harness import System, cluster, group
from tests.support.policies import policy

# A plain HTTP server: the emulator would keep each TokenReview as an object (they have
# no name, so the second would conflict); a real API server keeps none.
pytestmark = pytest.mark.kmock(cls=RawHandler)

SERVICE_TOKEN = "decision-service-account-token"
USERS = {"alice-token": ("alice", ["team", "system:authenticated"]),
         "bob-token": ("bob", ["system:authenticated"])}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def api_server(kmock: RawHandler, *, status: int = 201,
               audiences: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """TokenReviews answered like an API server; returns the reviews it received.
    ``audiences``: token -> the audiences it was issued for; a review asking for
    audiences answers with those it shares with the token (none shared: not
    authenticated), as the API server does. Without it, the reviewer is not audience
    aware: it answers without ``audiences``."""
    received: list[dict[str, Any]] = []

    def review(request: Any) -> Any:
        body = request.data
        received.append(body)
        token = body["spec"]["token"]
        user = USERS.get(token)
        status_: dict[str, Any] = (
            {"authenticated": True, "user": {"username": user[0], "groups": user[1]}}
            if user else {"authenticated": False,
                          "error": "invalid bearer token, token has expired"})
        if user and audiences is not None:
            asked = body["spec"].get("audiences") or ["https://kubernetes.default.svc"]
            shared = [a for a in asked if a in audiences.get(token, [])]
            status_ = {**status_, "audiences": shared} if shared else {
                "authenticated": False, "error": "token audiences not valid"}
        return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": body["spec"], "status": status_}

    if status == 201:
        kmock[f"post {REVIEW_PATH}"] << 201 << review
    else:
        kmock[f"post {REVIEW_PATH}"] << status << {"kind": "Status", "code": status}
    return received


def kubeconfig(url: str, tmp_path: Path) -> Path:
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "test",
           "clusters": [{"name": "test", "cluster": {"server": url.rstrip("/")}}],
           "users": [{"name": "test", "user": {"token": SERVICE_TOKEN}}],
           "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
async def reviews(kmock: RawHandler, tmp_path: Path) -> AsyncIterator[TokenReviews]:
    tokens = TokenReviews(kubeconfig(str(kmock.url), tmp_path), clock=Clock())
    yield tokens
    await tokens.close()


async def test_a_token_becomes_the_user_the_api_server_names(
        kmock: RawHandler, reviews: TokenReviews) -> None:
    received = api_server(kmock)
    principal = await reviews.principal("alice-token")
    assert principal == Principal(username="alice", groups=["team", "system:authenticated"],
                                  email=None)
    (request,) = list(kmock)
    # Asked as the service itself, with the user's token only in the review's spec.
    assert request.headers["Authorization"] == f"Bearer {SERVICE_TOKEN}"
    assert received == [{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                         "spec": {"token": "alice-token"}}]


async def test_answers_are_cached_for_at_most_a_minute(
        kmock: RawHandler, reviews: TokenReviews) -> None:
    api_server(kmock)
    clock = reviews._clock
    assert isinstance(clock, Clock)
    for _ in range(3):
        assert (await reviews.principal("alice-token")).username == "alice"
    assert reviews.reviews == 1
    clock.now += 59
    await reviews.principal("alice-token")
    assert reviews.reviews == 1
    clock.now += 2  # 61 s after the review: asked again
    await reviews.principal("alice-token")
    assert reviews.reviews == 2


async def test_concurrent_requests_with_one_token_share_one_review(
        kmock: RawHandler, reviews: TokenReviews) -> None:
    api_server(kmock)
    principals = await asyncio.gather(*(reviews.principal("bob-token") for _ in range(20)))
    assert {p.username for p in principals} == {"bob"}
    assert reviews.reviews == 1


async def test_a_rejected_token_is_a_bad_request_and_stays_rejected_briefly(
        kmock: RawHandler, reviews: TokenReviews) -> None:
    api_server(kmock)
    for _ in range(2):
        with pytest.raises(BadRequest, match="token not authenticated: invalid bearer token"):
            await reviews.principal("stolen-token")
    assert reviews.reviews == 1
    clock = reviews._clock
    assert isinstance(clock, Clock)
    clock.now += 11
    with pytest.raises(BadRequest):
        await reviews.principal("stolen-token")
    assert reviews.reviews == 2


@pytest.mark.parametrize("status", [403, 500])
async def test_an_api_server_that_refuses_is_unavailable_and_not_cached(
        kmock: RawHandler, reviews: TokenReviews, status: int) -> None:
    api_server(kmock, status=status)
    for _ in range(2):
        with pytest.raises(Unavailable, match=str(status)):
            await reviews.principal("alice-token")
    assert reviews.reviews == 2


async def test_no_kubernetes_api_is_unavailable(tmp_path: Path) -> None:
    tokens = TokenReviews(tmp_path / "missing-kubeconfig")
    with pytest.raises(Unavailable, match="token principals need a Kubernetes API"):
        await tokens.principal("alice-token")
    await tokens.close()


async def test_a_token_for_another_audience_is_refused(
        kmock: RawHandler, tmp_path: Path) -> None:
    # alice's token was issued for Clearance, bob's for another service.
    api_server(kmock, audiences={"alice-token": ["clearance"], "bob-token": ["vault"]})
    tokens = TokenReviews(kubeconfig(str(kmock.url), tmp_path), audiences=["clearance"])
    try:
        assert (await tokens.principal("alice-token")).username == "alice"
        with pytest.raises(BadRequest, match="token not authenticated"):
            await tokens.principal("bob-token")
        asked = [request.data["spec"] for request in kmock]
        assert [spec.get("audiences") for spec in asked] == [["clearance"], ["clearance"]]
    finally:
        await tokens.close()


async def test_a_reviewer_that_ignores_audiences_is_not_trusted(
        kmock: RawHandler, tmp_path: Path) -> None:
    """Audiences configured, but the review's status names none of them — a reviewer
    that is not audience aware authenticated the token for its own audience: refused."""
    api_server(kmock)  # authenticated, no status.audiences at all
    tokens = TokenReviews(kubeconfig(str(kmock.url), tmp_path), audiences=["clearance"])
    try:
        with pytest.raises(BadRequest, match="names none of the audiences clearance"):
            await tokens.principal("alice-token")
    finally:
        await tokens.close()
    unaware = TokenReviews(kubeconfig(str(kmock.url), tmp_path))  # none configured: fine
    try:
        assert (await unaware.principal("alice-token")).username == "alice"
    finally:
        await unaware.close()


async def test_the_token_is_never_logged(kmock: RawHandler, reviews: TokenReviews) -> None:
    api_server(kmock)
    with structlog.testing.capture_logs() as logs:
        await reviews.principal("alice-token")
        with pytest.raises(BadRequest):
            await reviews.principal("stolen-token")
    assert logs  # the rejection is logged ...
    assert "alice-token" not in repr(logs) and "stolen-token" not in repr(logs)  # ... blind


# The whole system: the decision service resolves tokens for every principal request.


@pytest.fixture
async def system(clean_servers: Servers, kmock: RawHandler,
                 tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests,
                  kubeconfig=kubeconfig(str(kmock.url), tmp_path))
    # The kubeconfig is for TokenReviews only: objects come from the manifests.
    sys_.settings = msgspec.structs.replace(sys_.settings, kubernetes=False)
    sys_.write("inventory.yaml", cluster("prod-east"), group("team", "carol"))
    sys_.write("policies.yaml", policy("team", groups=["team"], rules=[
        {"selector": {"matchNames": ["prod-east"]}, "permissions": {"view": True}}]))
    await sys_.start()
    await sys_.settle()
    yield sys_
    await sys_.close()


def check(**who: Any) -> dict[str, Any]:
    return {**who, "action": "view", "resource": {"type": "cluster", "name": "prod-east"}}


async def test_a_check_with_a_token_is_answered_for_the_reviewed_user(
        system: System, kmock: RawHandler) -> None:
    api_server(kmock)
    alice = await system.request("clearance.v1.check", check(token="alice-token"))
    assert (alice["decision"], alice["policy"]) == ("allow", "ns/team")  # group team
    bob = await system.request("clearance.v1.check", check(token="bob-token"))
    assert bob["decision"] == "deny"
    again = await system.request("clearance.v1.check", check(token="alice-token"))
    assert again["cached"] is True  # the decision cache serves token requests too
    batch = await system.request("clearance.v1.check.batch", {
        "token": "alice-token", "checks": [{"action": "view", "resource": {
            "type": "cluster", "name": "prod-east"}}]})
    assert batch["results"][0]["decision"] == "allow"
    permissions = await system.request("clearance.v1.permissions", {"token": "alice-token"})
    assert permissions["clusters"]["prod-east"]["decision"] == "allow"
    assert len(list(kmock)) == 2  # one review per token, then the cache


@pytest.mark.parametrize(("body", "message"), [
    (check(token="stolen-token"), "token not authenticated"),
    (check(token=""), "length >= 1"),
    (check(token="alice-token", principal={"username": "root"}), "not both"),
    (check(), "a `principal` or a `token` is required"),
])
async def test_a_token_that_fails_is_never_an_allow(
        system: System, kmock: RawHandler, body: dict[str, Any], message: str) -> None:
    api_server(kmock)
    reply = await system.request("clearance.v1.check", body)
    assert set(reply) == {"error"}
    assert reply["error"]["code"] == "bad_request" and message in reply["error"]["message"]


async def test_an_unreachable_api_server_is_unavailable(
        system: System, kmock: RawHandler) -> None:
    api_server(kmock, status=403)
    reply = await system.request("clearance.v1.check", check(token="alice-token"))
    assert set(reply) == {"error"} and reply["error"]["code"] == "unavailable"
