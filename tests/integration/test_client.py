"""The Python client (``clearance_client``) against the real services, NATS and Valkey:
every request/reply subject answered with its reply Struct, error replies raised as the
contract's errors, and the local cache dropping what ``clearance.decisions.changed`` names."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from clearance_api import wire
from clearance_api.errors import BadRequest, NotFound, RequestError, Stale, Unavailable
from clearance_api.wire import (
    CheckRequest,
    Principal,
    Resource,
)
from clearance_client import METHODS, ClearanceClient, DecisionCache
from tests.conftest import Servers
from tests.integration.harness import System, example_fleet, group
from tests.support.policies import policy

SRE = Principal(username="sre-alice", groups=["sre"])
NOBODY = Principal(username="nobody")


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    """The example fleet (``examples/``), as ``clearance up`` loads it."""
    async with example_fleet(clean_servers.nats_url, clean_servers.redis_url,
                             tmp_path) as sys_:
        yield sys_


@pytest.fixture
async def client(system: System) -> AsyncIterator[ClearanceClient]:
    async with await ClearanceClient.connect(system.settings.nats_url,
                                             cache=DecisionCache(ttl=60)) as c:
        yield c


def _cluster(name: str) -> Resource:
    return Resource(type="cluster", name=name)


#: One valid request per subject, and what its reply must show.
CALLS: dict[str, Callable[[ClearanceClient], Awaitable[Any]]] = {
    wire.SUBJECT_CHECK: lambda c: c.check(CheckRequest(
        principal=SRE, action="view", resource=_cluster("prod-us-east"))),
    wire.SUBJECT_BATCH: lambda c: c.check_batch(wire.BatchRequest(principal=SRE, checks=[
        wire.BatchItem(action="view", resource=_cluster("prod-us-east"))])),
    wire.SUBJECT_STATUS: lambda c: c.status(),
    wire.SUBJECT_FILTER: lambda c: c.filter(wire.FilterRequest(
        principal=SRE, cluster="prod-us-east", type="namespaces",
        items=[wire.ListItem(name="shop")])),
    wire.SUBJECT_METRICS: lambda c: c.metrics(wire.MetricsRequest(
        principal=SRE, cluster="prod-us-east",
        namespaces=[wire.NamespaceMetrics(name="shop", pods=3)])),
    wire.SUBJECT_CUSTOM_TYPES: lambda c: c.custom_types(wire.CustomTypesRequest(principal=SRE)),
    wire.SUBJECT_REVIEW_SUBJECT: lambda c: c.review_subject(wire.SubjectAccessReview(
        spec=wire.SubjectAccessReviewSpec(user="sre-alice", groups=["sre"],
            resource_attributes=wire.ResourceAttributes(verb="list", resource="pods",
                                                        namespace="shop")))),
    wire.SUBJECT_REVIEW_RULES: lambda c: c.review_rules(wire.RulesReviewRequest(
        user="sre-alice", groups=["sre"], spec=wire.RulesReviewSpec(namespace="shop"))),
    wire.SUBJECT_REVIEW_RESOURCE: lambda c: c.review_resource(wire.ResourceReviewRequest(
        verb="list", resource="pods", namespace="shop")),
    wire.SUBJECT_SEARCH_FILTER: lambda c: c.search_filter(wire.SearchFilterRequest(
        principal=SRE, items=[wire.SearchResult(cluster="local-cluster", group="",
                                                resource="pods", namespace="shop",
                                                name="web")])),
    wire.SUBJECT_SEARCH_PLAN: lambda c: c.search_plan(wire.PrincipalRequest(principal=SRE)),
    wire.SUBJECT_PERMISSIONS: lambda c: c.permissions(wire.PrincipalRequest(principal=SRE)),
    wire.SUBJECT_POLICIES: lambda c: c.policies(wire.PrincipalRequest(principal=SRE)),
    wire.SUBJECT_CACHE_CLEAR: lambda c: c.cache_clear(),
    wire.SUBJECT_POLICY_STATUS: lambda c: c.policy_status(wire.PolicyStatusRequest(
        kind="AccessPolicy", namespace="clearance-system", name="fleet-baseline")),
    wire.SUBJECT_EFFECTIVE: lambda c: c.effective(wire.EffectiveRequest(
        target=wire.Target(kind="Cluster", name="prod-us-east"))),
    wire.SUBJECT_EFFECTIVE_REACH: lambda c: c.effective_reach(wire.ReachRequest(
        namespace="clearance-system", name="fleet-baseline")),
    wire.SUBJECT_EFFECTIVE_SIMULATE: lambda c: c.effective_simulate(wire.SimulateRequest(
        policy={"kind": "AccessPolicy", "metadata": {"namespace": "clearance-system",
                                                     "name": "fleet-baseline"}},
        operation="delete")),
    wire.SUBJECT_WHO_CAN_SEE: lambda c: c.who_can_see(wire.WhoCanSeeRequest(
        cluster="prod-us-east", type="pods", namespace="shop")),
}


async def test_every_subject_is_answered_with_its_reply_struct(
        system: System, client: ClearanceClient) -> None:
    assert set(CALLS) == set(wire.REQUESTS) == set(METHODS)
    revision = (await client.status()).revision
    assert revision > 0
    for subject, call in CALLS.items():
        reply = await call(client)
        assert type(reply) is wire.REQUESTS[subject][1], subject
        assert msgspec.structs.asdict(reply)["revision"] >= revision, subject
    # what a user would look at, a few of them
    allowed = await CALLS[wire.SUBJECT_CHECK](client)
    assert allowed.allowed and allowed.decision == "allow"
    permissions = await CALLS[wire.SUBJECT_PERMISSIONS](client)
    assert "prod-us-east" in permissions.clusters
    reach = await CALLS[wire.SUBJECT_EFFECTIVE_REACH](client)
    assert {t.name for t in reach.targets} >= {"fleet"}
    who = await CALLS[wire.SUBJECT_WHO_CAN_SEE](client)
    assert wire.SubjectDecision(kind="user", name="bob", decision="partial",
                                policy="shop/shop-intent") in who.subjects
    assert who.others == wire.OthersDecision(decision="deny", policy=None)


async def test_error_replies_raise_the_contracts_errors_never_answers(
        system: System, client: ClearanceClient) -> None:
    with pytest.raises(NotFound):
        await client.policy_status(wire.PolicyStatusRequest(
            kind="AccessPolicy", namespace="platform", name="no-such-policy"))
    with pytest.raises(NotFound, match="nowhere"):
        await client.who_can_see(wire.WhoCanSeeRequest(cluster="nowhere"))
    with pytest.raises(BadRequest, match="length <= 10000"):
        await client.check_batch(wire.BatchRequest(principal=SRE, checks=[
            wire.BatchItem(action="view", resource=_cluster("x"))] * 10_001))
    revision = (await client.status()).revision
    with pytest.raises(Stale):
        await client.check(CheckRequest(principal=SRE, action="view",
                                        resource=_cluster("prod-us-east"), timeout_ms=100),
                           min_revision=revision + 1000)
    with pytest.raises(Unavailable, match="no decision service"):
        await client.request("clearance.v1.nothing-here", wire.StatusRequest(),
                             wire.StatusReply)
    assert issubclass(Stale, RequestError)


async def test_min_revision_reads_a_write_and_the_cache_does_not_answer_older(
        system: System, client: ClearanceClient) -> None:
    ask = CheckRequest(principal=Principal(username="newbie"), action="view",
                       resource=_cluster("dev-sandbox"))
    assert not (await client.check(ask)).allowed
    assert await _local_hit(client, ask)
    system.write("newbie.yaml", policy("newbie", namespace="ns", users=["newbie"],
                                       rules=[{"selector": {"matchNames": ["dev-sandbox"]}}]))
    target = await _stream_grows(system)
    fresh = await client.check(ask, min_revision=target)
    assert fresh.allowed and isinstance(fresh.revision, int) and fresh.revision >= target


async def test_a_policy_change_drops_the_cached_answer(
        system: System, client: ClearanceClient) -> None:
    """The freshness promise: cached, then the policy naming the user changes, and the
    next check is the new answer (not the cached one), without any min_revision."""
    assert client.cache is not None
    erin = CheckRequest(principal=Principal(username="erin", email="erin@example.com"),
                        action="view", resource=_cluster("dev-sandbox"))
    other = CheckRequest(principal=Principal(username="zed", groups=["nobody-names-this"]),
                         action="view", resource=_cluster("dev-sandbox"))
    first = await client.check(erin)
    await client.check(other)
    assert await _local_hit(client, erin) and len(client.cache) == 2
    system.write("erin.yaml", policy("erin-deny", namespace="ns", priority=1,
                                     effect="Deny", users=["erin@example.com"],
                                     rules=[{"selector": {"matchNames": ["*"]}}]))
    await _until(lambda: len(client.cache or ()) == 1)  # exactly erin's answer went
    assert await _local_hit(client, other)  # zed is named by no change
    assert not await _local_hit(client, erin)
    after = await client.check(erin)
    assert not after.allowed and after.decision == "deny"
    assert first.decision != after.decision or first.reason != after.reason


async def test_a_group_change_drops_by_group_and_all_drops_everything(
        system: System) -> None:
    cache = DecisionCache(complete_groups=True)
    async with await ClearanceClient.connect(system.settings.nats_url, cache=cache) as client:
        sre = CheckRequest(principal=SRE, action="view", resource=_cluster("prod-us-east"))
        nobody = CheckRequest(principal=NOBODY, action="view", resource=_cluster("dev-sandbox"))
        await client.check(sre)
        await client.check(nobody)
        system.write("sre.yaml", policy("sre-extra", namespace="ns", groups=["sre", "pager"],
                                        rules=[{"selector": {"matchNames": ["*"]}}]))
        await _until(lambda: len(cache) == 1)
        assert await _local_hit(client, nobody)
        # a Group listing a user: its membership change names the user
        system.write("pager.yaml", group("pager", "nobody"))
        await _until(lambda: len(cache) == 0)
        await client.check(nobody)
        await client.check(sre)
        # a cluster appearing may change anyone's answer: `all`
        system.write("cluster-extra.yaml", {
            "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": "brand-new", "labels": {}}})
        await _until(lambda: len(cache) == 0)


async def test_a_reconnect_drops_everything(system: System) -> None:
    """The client's connection is cut (through a TCP relay, as a network would): events
    published meanwhile may be lost, so nothing cached before is trusted afterwards."""
    relay = _Relay(system.settings.nats_url)
    await relay.start()
    cache = DecisionCache()
    ask = CheckRequest(principal=SRE, action="view", resource=_cluster("prod-us-east"))
    try:
        async with await ClearanceClient.connect(relay.url, cache=cache,
                                                 reconnect_time_wait=0.05) as client:
            await client.check(ask)
            assert len(cache) == 1 and await _local_hit(client, ask)
            relay.cut()
            await _until(lambda: client.nc.stats["reconnects"] >= 1
                         and client.nc.is_connected and len(cache) == 0)
            assert not await _local_hit(client, ask)
            await client.check(ask)  # kept again, now that the events are followed again
            assert await _local_hit(client, ask)
    finally:
        await relay.stop()


class _Relay:
    """A TCP relay to NATS whose connections the test can cut."""

    def __init__(self, nats_url: str) -> None:
        host_port = nats_url.split("://", 1)[1]
        self._host, port = host_port.rsplit(":", 1)
        self._port = int(port)
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"nats://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self._host, self._port)
        self._writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        for writer in self._writers:
            writer.close()
        self._writers.clear()

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()


async def test_undecodable_replies_are_internal_errors(system: System) -> None:
    """A responder that is not Clearance: what it sends is never taken for an answer."""
    assert system.nc is not None

    async def liar(msg: Any) -> None:
        await msg.respond(b'{"allowed": true, "decision": "allow"')

    sub = await system.nc.subscribe("clearance.test.liar", cb=liar)
    try:
        async with await ClearanceClient.connect(system.settings.nats_url) as client:
            with pytest.raises(RequestError, match="undecodable"):
                await client.request("clearance.test.liar", CheckRequest(
                    principal=SRE, action="view", resource=_cluster("x")), wire.CheckResult)
    finally:
        await sub.unsubscribe()


async def _local_hit(client: ClearanceClient, request: CheckRequest) -> bool:
    """Whether the client's own cache answered (``cached`` is also true for the decision
    service's cache)."""
    assert client.cache is not None
    hits = client.cache.hits
    result = await client.check(request)
    assert result.cached or client.cache.hits == hits
    return client.cache.hits > hits


async def _stream_grows(system: System) -> int:
    start = await system.stream_last_seq()
    await _until_async(system.stream_last_seq, lambda seq: seq > start)
    return await system.stream_last_seq()


async def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.02)


async def _until_async(value: Callable[[], Awaitable[Any]], ok: Callable[[Any], bool],
                       timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not ok(await value()):
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.02)


def test_request_structs_encode_as_the_schemas_say() -> None:
    body = msgspec.json.decode(msgspec.json.encode(CheckRequest(
        principal=SRE, action="view", resource=_cluster("a"))))
    assert body["principal"]["username"] == "sre-alice"
