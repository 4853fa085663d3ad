"""Who may ask the gateway, on real gateways and a real decision service: mutual TLS,
bearer tokens verified by TokenReviews against kmock (a real HTTP server playing the API
server), both, or none — and callers narrowed to those named. A caller that cannot prove
who it is gets 401 and never a decision."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
import structlog.testing
from kmock import RawHandler

from clearance_gateway import tls
from clearance_runtime.process import servers
from tests.conftest import Servers
from tests.integration.harness import System
from tests.integration.pki import Authority
from tests.integration.test_tokens import api_server, kubeconfig

pytestmark = [pytest.mark.integration, pytest.mark.kmock(cls=RawHandler)]

EVALUATION = {"subject": {"type": "user", "id": "alice"}, "action": {"name": "view"},
              "resource": {"type": "cluster", "id": "c1"}}
REVIEW = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
          "spec": {"user": "alice", "resourceAttributes": {"verb": "get",
                                                           "resource": "pods"}}}


class Client:
    """An HTTPS client of one gateway, with a certificate or not."""

    def __init__(self, url: str, certificate: Path) -> None:
        self.url, self.certificate = url, certificate

    async def post(self, path: str, body: Any, *, cert: tuple[Path, Path] | None = None,
                   **headers: str) -> tuple[int, Any, Any]:
        context = ssl.create_default_context(cafile=str(self.certificate))
        if cert is not None:
            context.load_cert_chain(*cert)
        async with aiohttp.ClientSession() as http, http.post(
                self.url + path, data=msgspec.json.encode(body), ssl=context,
                headers=headers) as resp:
            text = await resp.text()
            try:
                return resp.status, msgspec.json.decode(text), resp.headers
            except msgspec.DecodeError:
                return resp.status, text, resp.headers



Start = Callable[..., Awaitable[Client]]


@pytest.fixture
async def gateway(clean_servers: Servers, kmock: RawHandler,
                  tmp_path: Path) -> AsyncIterator[Start]:
    """The services (on an empty manifest directory), and a gateway per call with the
    settings given."""
    (tmp_path / "manifests").mkdir()
    decision = System(clean_servers.nats_url, clean_servers.redis_url, tmp_path / "manifests")
    await decision.start()
    await decision.settle()
    started: list[System] = [decision]
    certificate, _ = tls.self_signed(tmp_path / "gateway")

    async def start(**settings: Any) -> Client:
        system = System(clean_servers.nats_url, clean_servers.redis_url, None,
                        kubeconfig=kubeconfig(str(kmock.url), tmp_path))
        system.settings = msgspec.structs.replace(
            system.settings, kubernetes=False, gateway_port=servers.free_port(),
            gateway_tls_dir=tmp_path / "gateway", **settings)
        await system.start("gateway")
        started.append(system)
        port = system.settings.gateway_port
        for _ in range(200):  # until it listens
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                return Client(f"https://127.0.0.1:{port}", certificate)
            except OSError:
                await asyncio.sleep(0.05)
        raise AssertionError("the gateway did not come up")

    yield start
    for system in reversed(started):
        await system.close()


def answered(status: int, reply: Any) -> bool:
    return status == 200 and isinstance(reply, dict) and "decision" in reply


async def test_by_default_a_bearer_token_is_required(gateway: Start,
                                                     kmock: RawHandler) -> None:
    api_server(kmock)
    client = await gateway()  # no client CA: token
    for headers in ({}, {"Authorization": "Basic YWxpY2U6cHc="},
                    {"Authorization": "Bearer"}):
        status, reply, response = await client.post("/access/v1/evaluation", EVALUATION,
                                                     **headers)
        assert status == 401 and "decision" not in reply, headers
        assert response["WWW-Authenticate"] == "Bearer"
        status, reply, _ = await client.post("/authorize", REVIEW, **headers)
        assert status == 401 and "status" not in reply
    status, reply, _ = await client.post("/access/v1/evaluation", EVALUATION,
                                         Authorization="Bearer stolen-token")
    assert status == 401 and "token not authenticated" in reply
    status, reply, _ = await client.post("/access/v1/evaluation", EVALUATION,
                                         Authorization="Bearer alice-token")
    assert answered(status, reply)
    status, review, _ = await client.post("/authorize", REVIEW,
                                          Authorization="Bearer alice-token")
    assert status == 200 and review["status"]["allowed"] is False
    assert len([r for r in kmock if "tokenreviews" in str(r.url)]) == 2  # then cached


async def test_a_caller_token_for_another_audience_is_refused(
        gateway: Start, kmock: RawHandler) -> None:
    api_server(kmock, audiences={"alice-token": ["clearance-gateway"],
                                 "bob-token": ["vault"]})
    client = await gateway(token_audiences="clearance-gateway")
    status, reply, _ = await client.post("/access/v1/evaluation", EVALUATION,
                                         Authorization="Bearer bob-token")
    assert status == 401 and "token not authenticated" in reply
    status, reply, _ = await client.post("/access/v1/evaluation", EVALUATION,
                                         Authorization="Bearer alice-token")
    assert answered(status, reply)


async def test_allowed_callers_narrow_who_may_ask(gateway: Start, kmock: RawHandler) -> None:
    api_server(kmock)  # alice is in the group team; bob is not
    client = await gateway(gateway_allowed_callers="group:team, user:carol")
    status, reply, _ = await client.post("/access/v1/evaluation", EVALUATION,
                                         Authorization="Bearer bob-token")
    assert status == 403 and "not allowed to ask" in reply
    status, reply, _ = await client.post("/access/v1/evaluation", EVALUATION,
                                         Authorization="Bearer alice-token")
    assert answered(status, reply)


async def test_a_token_that_cannot_be_reviewed_is_503_never_an_answer(
        gateway: Start, kmock: RawHandler) -> None:
    api_server(kmock, status=403)  # the gateway may not create TokenReviews
    client = await gateway()
    status, reply, _ = await client.post("/access/v1/evaluation", EVALUATION,
                                         Authorization="Bearer alice-token")
    assert status == 503 and "refused the TokenReview" in reply


async def test_mutual_tls_names_the_caller_by_its_certificate(
        gateway: Start, tmp_path: Path) -> None:
    authority = Authority.make(tmp_path / "ca")
    stranger = Authority.make(tmp_path / "other-ca", "other-ca")
    client = await gateway(gateway_client_ca=authority.path,  # mtls, named callers
                           gateway_allowed_callers="kube-apiserver,group:system:masters")
    for cert in (None, stranger.client(tmp_path / "other-ca", "kube-apiserver")):
        with pytest.raises(aiohttp.ClientError):  # no handshake without a good one
            await client.post("/authorize", REVIEW, cert=cert)
    apiserver = authority.client(tmp_path / "ca", "kube-apiserver")
    status, review, _ = await client.post("/authorize", REVIEW, cert=apiserver)
    assert status == 200 and review["status"]["allowed"] is False
    admin = authority.client(tmp_path / "ca", "admin", "system:masters")
    assert answered(*(await client.post("/access/v1/evaluation", EVALUATION, cert=admin))[:2])
    other = authority.client(tmp_path / "ca", "someone")
    status, reply, _ = await client.post("/authorize", REVIEW, cert=other)
    assert status == 403 and "'someone' is not allowed" in reply


async def test_either_a_certificate_or_a_token(gateway: Start, kmock: RawHandler,
                                               tmp_path: Path) -> None:
    api_server(kmock)
    authority = Authority.make(tmp_path / "ca")
    client = await gateway(gateway_client_ca=authority.path, gateway_auth="mtls-or-token")
    status, reply, _ = await client.post("/access/v1/evaluation", EVALUATION)
    assert status == 401 and "a client certificate or an Authorization" in reply
    assert answered(*(await client.post("/access/v1/evaluation", EVALUATION,
                                        Authorization="Bearer alice-token"))[:2])
    pep = authority.client(tmp_path / "ca", "pep")
    assert answered(*(await client.post("/access/v1/evaluation", EVALUATION, cert=pep))[:2])
    stranger = Authority.make(tmp_path / "other-ca", "other-ca")
    with pytest.raises(aiohttp.ClientError):  # a certificate it did not sign: no handshake
        await client.post("/access/v1/evaluation", EVALUATION,
                          cert=stranger.client(tmp_path / "other-ca", "pep"),
                          Authorization="Bearer alice-token")


async def test_none_answers_anyone_and_says_so_loudly(gateway: Start) -> None:
    with structlog.testing.capture_logs() as logs:
        client = await gateway(gateway_auth="none")
    assert any(line["event"] == "gateway_unauthenticated"
               and line["log_level"] == "warning" for line in logs)
    assert answered(*(await client.post("/access/v1/evaluation", EVALUATION))[:2])


@pytest.mark.parametrize(("settings", "message"), [
    ({"gateway_auth": "mtls"}, "needs CLEARANCE_GATEWAY_CLIENT_CA"),
    ({"gateway_allowed_callers": "role:admin"}, "is not user:NAME, group:NAME or NAME"),
])
async def test_a_configuration_that_cannot_authenticate_does_not_start(
        clean_servers: Servers, tmp_path: Path, settings: dict[str, Any],
        message: str) -> None:
    from clearance_gateway.app import Gateway  # noqa: PLC0415 - the service's own import

    system = System(clean_servers.nats_url, clean_servers.redis_url, None)
    bad = msgspec.structs.replace(system.settings, gateway_tls_dir=tmp_path, **settings)
    with pytest.raises(SystemExit, match=message):
        Gateway(None, bad)  # type: ignore[arg-type]  (refused before any connection)
