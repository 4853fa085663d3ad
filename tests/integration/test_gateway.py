"""The gateway over HTTPS on the real harness: the Kubernetes webhook authorizer (a
SubjectAccessReview as kube-apiserver sends it) and AuthZEN 1.0, both answered by the
decision service over NATS. Clients authenticate with mutual TLS, as in deploy/ (the
other ways in: test_gateway_auth.py)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from clearance_gateway import tls
from clearance_runtime.process import servers
from tests.conftest import Servers
from tests.integration.harness import System, cluster, group
from tests.integration.pki import Authority
from tests.support.policies import policy
from tests.support.rbac import binding, cluster_role

SERVICES = ("watcher", "compiler", "cache-invalidator", "decision", "gateway")
OBJECTS = [
    cluster_role("pod-reader", [{"apiGroups": [""], "resources": ["pods", "pods/log"],
                                 "verbs": ["get", "list", "watch"]}]),
    cluster_role("healthz", [{"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]),
    binding("RoleBinding", "readers", ("ClusterRole", "pod-reader"),
            [{"kind": "Group", "name": "sre"}], namespace="shop"),
    binding("ClusterRoleBinding", "health", ("ClusterRole", "healthz"),
            [{"kind": "User", "name": "monitor"}]),
    group("sre", "alice"),
]


class Gateway:
    """An HTTPS client of the gateway that trusts exactly its self-signed certificate
    and presents ``client`` (a certificate and key), if given."""

    def __init__(self, url: str, certificate: Path,
                 client: tuple[Path, Path] | None = None) -> None:
        self.url = url
        self.ssl = ssl.create_default_context(cafile=str(certificate))
        if client is not None:
            self.ssl.load_cert_chain(*client)
        self.session = aiohttp.ClientSession()

    async def get(self, path: str, **headers: str) -> tuple[int, Any]:
        async with self.session.get(self.url + path, ssl=self.ssl, headers=headers) as resp:
            text = await resp.text()
            try:
                return resp.status, msgspec.json.decode(text)
            except msgspec.DecodeError:
                return resp.status, text

    async def post(self, path: str, body: Any, **headers: str) -> tuple[int, Any, Any]:
        data = body if isinstance(body, bytes) else msgspec.json.encode(body)
        async with self.session.post(self.url + path, data=data, ssl=self.ssl,
                                     headers=headers) as resp:
            text = await resp.text()
            try:
                doc: Any = msgspec.json.decode(text)
            except msgspec.DecodeError:
                doc = text
            return resp.status, doc, resp.headers

    async def ready(self) -> None:
        for _ in range(200):
            try:
                async with self.session.get(self.url + "/healthz", ssl=self.ssl) as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.05)
        raise AssertionError("the gateway did not come up")


@pytest.fixture
def authority(tmp_path: Path) -> Authority:
    return Authority.make(tmp_path / "pki")


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path,
                 authority: Authority) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    # Mutual TLS with the API server's client CA, as deploy/kubernetes/gateway.yaml.
    sys_.settings = msgspec.structs.replace(
        sys_.settings, gateway_port=servers.free_port(),
        gateway_tls_dir=tmp_path / "gateway", gateway_client_ca=authority.path)
    sys_.write("rbac.yaml", *OBJECTS)
    sys_.write("fleet.yaml", cluster("c1"), cluster("c2"), cluster("c3"), group("team", "alice"))
    sys_.write("policies.yaml", policy("team", groups=["team"], rules=[
        {"selector": {"matchNames": ["c1", "c3"]},
         "permissions": {"view": True, "viewMetrics": False},
         "resources": [{"type": "pods", "visibility": "filtered",
                        "filters": {"names": {"allowed": ["web-*"]}}}]}]))
    await sys_.start(*SERVICES)
    await sys_.settle()
    yield sys_
    await sys_.close()


@pytest.fixture
async def gateway(system: System, tmp_path: Path,
                  authority: Authority) -> AsyncIterator[Gateway]:
    client = Gateway(f"https://127.0.0.1:{system.settings.gateway_port}",
                     tmp_path / "gateway" / tls.CERT_FILE,
                     authority.client(tmp_path / "pki", "kube-apiserver"))
    await client.ready()
    yield client
    await client.session.close()


# The webhook authorizer ----------------------------------------------------------------

#: What kube-apiserver POSTs to the webhook for `kubectl logs web-0 -n shop` by alice.
APISERVER_REVIEW = {
    "kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
    "metadata": {"creationTimestamp": None},
    "spec": {"resourceAttributes": {"namespace": "shop", "verb": "get", "version": "v1",
                                    "resource": "pods", "subresource": "log",
                                    "name": "web-0"},
             "user": "alice", "groups": ["system:authenticated"],
             "extra": {"authentication.kubernetes.io/credential-id": ["JTI=abc"]},
             "uid": "b3c1f5e2"},
    "status": {"allowed": False},
}


async def test_a_kube_apiserver_review_is_answered_with_its_status(gateway: Gateway) -> None:
    status, reply, _ = await gateway.post("/authorize", APISERVER_REVIEW)
    assert status == 200
    assert reply["apiVersion"] == "authorization.k8s.io/v1"
    assert reply["kind"] == "SubjectAccessReview"
    assert reply["spec"] == APISERVER_REVIEW["spec"]  # as sent
    assert reply["status"]["allowed"] is True  # via the OpenShift Group sre
    assert 'RoleBinding "readers/shop"' in reply["status"]["reason"]
    assert "denied" not in reply["status"]


async def test_a_no_is_no_opinion_and_the_same_as_can_i(gateway: Gateway,
                                                        system: System) -> None:
    review = {**APISERVER_REVIEW, "spec": {**APISERVER_REVIEW["spec"], "resourceAttributes": {
        "namespace": "payments", "verb": "get", "resource": "pods"}}}
    status, reply, _ = await gateway.post("/authorize", review)
    over_nats = await system.request("clearance.v1.review.subject", review)
    assert status == 200 and reply["status"]["allowed"] is False
    assert "denied" not in reply["status"]  # the API server asks its next authorizer
    assert reply["status"]["reason"] == over_nats["status"]["reason"]


async def test_v1beta1_reviews_name_their_groups_group(gateway: Gateway) -> None:
    review = {"apiVersion": "authorization.k8s.io/v1beta1", "kind": "SubjectAccessReview",
              "spec": {"user": "bob", "group": ["sre"],
                       "resourceAttributes": {"namespace": "shop", "verb": "list",
                                              "resource": "pods"}}}
    status, reply, _ = await gateway.post("/authorize", review)
    assert status == 200 and reply["status"]["allowed"] is True
    assert reply["apiVersion"] == "authorization.k8s.io/v1beta1"
    assert reply["spec"] == review["spec"]  # its own spelling back


async def test_non_resource_requests(gateway: Gateway) -> None:
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": "monitor",
                       "nonResourceAttributes": {"path": "/healthz", "verb": "get"}}}
    assert (await gateway.post("/authorize", review))[1]["status"]["allowed"] is True


@pytest.mark.parametrize(("body", "reason"), [
    (b"{not json", "not valid JSON"),
    (b"[]", "not a JSON object"),
    ({"apiVersion": "v1", "kind": "Pod", "spec": {}}, "expected a SubjectAccessReview"),
    ({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview"}, "no spec"),
    ({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
      "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}}, "user"),
])
async def test_a_malformed_review_is_400_with_a_reason_never_allowed(
        gateway: Gateway, body: Any, reason: str) -> None:
    status, reply, _ = await gateway.post("/authorize", body)
    assert status == 400
    assert reply["status"]["allowed"] is False and reason in reply["status"]["reason"]


async def test_without_a_decision_service_the_webhook_fails(gateway: Gateway,
                                                            system: System) -> None:
    await system.stop("decision")
    status, reply, _ = await gateway.post("/authorize", APISERVER_REVIEW)
    assert status == 503  # a failure to the API server: no allow, retried with back-off
    assert reply["status"]["allowed"] is False
    assert "unreachable over NATS" in reply["status"]["evaluationError"]


async def test_only_https(system: System, gateway: Gateway) -> None:
    async with aiohttp.ClientSession() as plain:
        with pytest.raises(aiohttp.ClientError):
            await plain.post(f"http://127.0.0.1:{system.settings.gateway_port}/authorize",
                             json=APISERVER_REVIEW)


# AuthZEN: the specification's examples, in Clearance's types -----------------------------
# (subjects of type user; actions view / view_metrics; resources are Clearance resources,
# here the clusters c1, c2, c3 where the group team may view c1 and c3 only.)

ALICE = {"type": "user", "id": "alice"}
VIEW = {"name": "view"}


def on(name: str) -> dict[str, Any]:
    return {"type": "cluster", "id": name}


async def test_access_evaluation_example(gateway: Gateway) -> None:
    # Spec: the Access Evaluation Request example (can_read an account, with action
    # properties and a context), with its X-Request-ID.
    request = {"subject": ALICE, "resource": on("c1"),
               "action": {"name": "view", "properties": {"method": "GET"}},
               "context": {"time": "1985-10-26T01:22-07:00"}}
    rid = "bfe9eb29-ab87-4ca3-be83-a1d5d8305716"
    status, reply, headers = await gateway.post("/access/v1/evaluation", request,
                                                **{"X-Request-ID": rid})
    assert status == 200 and headers["X-Request-ID"] == rid
    assert reply["decision"] is True
    assert reply["context"]["outcome"] == "allow" and reply["context"]["policy"] == "ns/team"
    assert reply["context"]["revision"] >= 1


async def test_a_denial_carries_its_reason_in_the_context(gateway: Gateway) -> None:
    _, reply, _ = await gateway.post("/access/v1/evaluation",
                                     {"subject": ALICE, "action": VIEW, "resource": on("c2")})
    assert reply["decision"] is False and reply["context"]["outcome"] == "deny"
    assert reply["context"]["reason"]


async def test_a_name_clearance_does_not_know_is_warned_of_in_the_context(
        gateway: Gateway) -> None:
    _, reply, _ = await gateway.post("/access/v1/evaluation",
                                     {"subject": ALICE, "action": VIEW, "resource": on("c11")})
    assert reply["decision"] is False
    assert reply["context"]["warnings"] == [
        'cluster "c11" is not in the inventory (did you mean "c1"?)']
    _, known, _ = await gateway.post("/access/v1/evaluation",
                                     {"subject": ALICE, "action": VIEW, "resource": on("c2")})
    assert "warnings" not in known["context"]


async def test_subject_properties_carry_groups(gateway: Gateway) -> None:
    subject = {"type": "user", "id": "zed", "properties": {"groups": ["team"],
                                                           "department": "Sales"}}
    _, reply, _ = await gateway.post("/access/v1/evaluation",
                                     {"subject": subject, "action": VIEW, "resource": on("c3")})
    assert reply["decision"] is True


async def test_evaluations_without_defaults(gateway: Gateway) -> None:
    context = {"time": "2024-05-31T15:22-07:00"}
    request = {"evaluations": [{"subject": ALICE, "action": VIEW, "resource": on(name),
                                "context": context} for name in ("c1", "c2", "c3")]}
    _, reply, _ = await gateway.post("/access/v1/evaluations", request)
    assert [e["decision"] for e in reply["evaluations"]] == [True, False, True]
    assert "decision" not in reply  # RECOMMENDED: omitted beside evaluations


async def test_evaluations_with_defaults_and_an_override(gateway: Gateway) -> None:
    # Spec: subject and context as defaults, a default action the third overrides
    # (can_edit there; view_metrics here, which team does not have on c3).
    request = {"subject": ALICE, "context": {"time": "2024-05-31T15:22-07:00"},
               "action": VIEW,
               "evaluations": [{"resource": on("c1")}, {"resource": on("c3")},
                               {"action": {"name": "view_metrics"}, "resource": on("c3")}]}
    _, reply, _ = await gateway.post("/access/v1/evaluations", request)
    assert [e["decision"] for e in reply["evaluations"]] == [True, True, False]


@pytest.mark.parametrize(("semantic", "expected"), [
    ("execute_all", [True, False, True]),
    ("deny_on_first_deny", [True, False]),
    ("permit_on_first_permit", [True]),
])
async def test_evaluations_semantics(gateway: Gateway, semantic: str,
                                     expected: list[bool]) -> None:
    # Spec: "read" three documents under each of the three semantics.
    request = {"subject": ALICE, "action": VIEW, "options": {"evaluations_semantic": semantic},
               "evaluations": [{"resource": on(n)} for n in ("c1", "c2", "c3")]}
    _, reply, _ = await gateway.post("/access/v1/evaluations", request)
    assert [e["decision"] for e in reply["evaluations"]] == expected


async def test_an_evaluation_that_cannot_be_asked_is_a_closed_decision_with_an_error(
        gateway: Gateway) -> None:
    # Spec, "Errors": per-evaluation errors in the payload; decisions default to false.
    request = {"subject": ALICE, "action": VIEW, "evaluations": [
        {"resource": on("c1")}, {"action": {"name": "can_edit"}, "resource": on("c1")},
        {"resource": {"type": "pods", "id": "web-0"}}, {"resource": on("c3")}]}
    status, reply, _ = await gateway.post("/access/v1/evaluations", request)
    assert status == 200
    first, edit, pods, last = reply["evaluations"]
    assert first["decision"] is True and last["decision"] is True
    assert edit == {"decision": False, "context": {"error": {
        "status": 400, "message": "evaluations[1]: action 'can_edit': Clearance's actions "
                                  "are view, view_metrics"}}}
    assert pods["decision"] is False and "cluster" in pods["context"]["error"]["message"]


async def test_evaluations_without_an_array_is_one_evaluation(gateway: Gateway) -> None:
    _, reply, _ = await gateway.post("/access/v1/evaluations",
                                     {"subject": ALICE, "action": VIEW, "resource": on("c1")})
    assert reply["decision"] is True and "evaluations" not in reply


@pytest.mark.parametrize("body", [
    b"nope", {"subject": ALICE, "action": VIEW},
    {"subject": {"type": "group", "id": "team"}, "action": VIEW, "resource": on("c1")},
    {"subject": ALICE, "action": "view", "resource": on("c1")},
])
async def test_a_malformed_evaluation_is_400_with_a_message(gateway: Gateway,
                                                            body: Any) -> None:
    status, reply, _ = await gateway.post("/access/v1/evaluation", body)
    assert status == 400 and isinstance(reply, str) and reply


async def test_without_a_decision_service_evaluations_fail(gateway: Gateway,
                                                           system: System) -> None:
    await system.stop("decision")
    status, _, _ = await gateway.post("/access/v1/evaluation",
                                      {"subject": ALICE, "action": VIEW, "resource": on("c1")})
    assert status == 503


async def test_the_well_known_metadata(gateway: Gateway) -> None:
    expected = {
        "policy_decision_point": gateway.url,
        "access_evaluation_endpoint": f"{gateway.url}/access/v1/evaluation",
        "access_evaluations_endpoint": f"{gateway.url}/access/v1/evaluations",
    }
    # Identical to the identifier the well-known URI was built from (spec, validation):
    # the configured address, whatever Host the request names.
    assert await gateway.get("/.well-known/authzen-configuration") == (200, expected)
    assert await gateway.get("/.well-known/authzen-configuration",
                             Host="attacker.example") == (200, expected)


async def test_the_metadata_names_the_configured_url(
        clean_servers: Servers, tmp_path: Path, authority: Authority) -> None:
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, None)
    sys_.settings = msgspec.structs.replace(
        sys_.settings, gateway_port=servers.free_port(), gateway_tls_dir=tmp_path / "gw",
        gateway_client_ca=authority.path, gateway_url="https://pdp.example.com/")
    certificate, _ = tls.self_signed(tmp_path / "gw")  # made now, reused by the gateway
    await sys_.start("gateway")
    client = Gateway(f"https://127.0.0.1:{sys_.settings.gateway_port}", certificate,
                     authority.client(tmp_path, "pep"))
    try:
        await client.ready()
        status, metadata = await client.get("/.well-known/authzen-configuration",
                                            Host="evil.example:8443")
        assert status == 200
        assert metadata["access_evaluation_endpoint"] == \
            "https://pdp.example.com/access/v1/evaluation"
    finally:
        await client.session.close()
        await sys_.close()


# AuthZEN and Clearance's partial decisions: never a bare true ---------------------------

PODS_ON_C1 = {"type": "pods", "id": "*", "properties": {"cluster": "c1"}}
ACCEPTS_PARTIAL = {"clearance": {"accept_partial": True}}


async def test_a_partial_is_false_for_a_pep_that_reads_only_the_decision(
        gateway: Gateway) -> None:
    _, reply, _ = await gateway.post("/access/v1/evaluation",
                                     {"subject": ALICE, "action": VIEW, "resource": PODS_ON_C1})
    assert reply["decision"] is False  # a decision-only PEP would show every pod
    assert reply["context"]["outcome"] == "partial"
    assert reply["context"]["filters"]["pods"]  # what a filtering PEP would apply


async def test_a_partial_is_true_only_where_the_pep_accepts_filters(gateway: Gateway) -> None:
    _, reply, _ = await gateway.post("/access/v1/evaluation", {
        "subject": ALICE, "action": VIEW, "resource": PODS_ON_C1,
        "context": ACCEPTS_PARTIAL})
    assert reply["decision"] is True and reply["context"]["outcome"] == "partial"
    assert "web-*" in msgspec.json.encode(reply["context"]["filters"]).decode()
    # Per evaluation: the request's context is each evaluation's default; an own context
    # without the opt-in replaces it; anything but exactly true is no.
    _, batch, _ = await gateway.post("/access/v1/evaluations", {
        "subject": ALICE, "action": VIEW, "resource": PODS_ON_C1, "context": ACCEPTS_PARTIAL,
        "evaluations": [{}, {"context": {"time": "now"}},
                        {"context": {"clearance": {"accept_partial": "yes"}}},
                        {"resource": on("c1")}]})
    assert [e["decision"] for e in batch["evaluations"]] == [True, False, False, True]
    assert [e["context"]["outcome"] for e in batch["evaluations"]] == [
        "partial", "partial", "partial", "allow"]
    # permit_on_first_permit stops at the first true, which a partial is not by default.
    _, first, _ = await gateway.post("/access/v1/evaluations", {
        "subject": ALICE, "action": VIEW, "options": {
            "evaluations_semantic": "permit_on_first_permit"},
        "evaluations": [{"resource": PODS_ON_C1}, {"resource": on("c2")},
                        {"resource": on("c3")}]})
    assert [e["decision"] for e in first["evaluations"]] == [False, False, True]
