"""Attacks on the bus: hostile callers against the real processes on the shipped accounts.

One deployment for the module: nats-server with ``deploy/nats/accounts.conf``, Valkey, and
``clearance run all`` as a process of its own, each service connecting as its own NATS
user (``CLEARANCE_<SERVICE>_NATS_URL``) and the decision service replying under the
prefixes ``deploy/kubernetes/decision.yaml`` sets. Each test is one thing an attacker
would do, with the lowest role that may try it; each asserts it grants nothing, lands
nothing on the stream, a lease or another subject, leaks no reply, and stalls nothing.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import nats
import nats.errors
import nats.js.errors
import pytest
import yaml
from nats.aio.client import Client
from nats.aio.msg import Msg

from clearance_api import inboxes, wire
from clearance_core.folding.kinds import event_subject, ref_of
from clearance_runtime.messaging.responder import Responder
from clearance_runtime.process import servers
from tests import secured
from tests.integration.harness import cluster, group
from tests.support.policies import policy
from tests.support.rbac import binding, cluster_role

pytestmark = [pytest.mark.integration, pytest.mark.attack]

CLEARANCE = str(Path(sys.executable).parent / "clearance")
#: Mallory is in the team the allow names; a Deny before it names her.
DENY = policy("no-mallory", namespace="security", priority=1, effect="Deny",
              users=["mallory"], default="all")
OBJECTS = [cluster("prod-east", env="prod"), group("team", "alice", "mallory"),
           policy("team", groups=["team"], default="all"), DENY]
#: What the attacker would like to have: cluster-admin, bound to her.
FORGED_ROLE = cluster_role("forged-admin", [{"apiGroups": ["*"], "resources": ["*"],
                                              "verbs": ["*"]}])
FORGED_BINDING = binding("ClusterRoleBinding", "forged-admin", ("ClusterRole", "forged-admin"),
                         [{"kind": "User", "name": "mallory"}])
#: Reply subjects naming what a reply must never reach.
HOSTILE_REPLIES = [
    "clearance.events.clusterrole.forged", "$KV.CLEARANCE_LEASES.compiler",
    "$KV.CLEARANCE_LEASES.watcher.manifests", "clearance.status.accesspolicy.x.y",
    "clearance.decisions.changed", "$JS.API.STREAM.DELETE.CLEARANCE_EVENTS", "_INBOX",
    "_INBOX.>", "_INBOX.decision.x",
]
#: What a client may ask (deploy/nats/accounts.conf).
CLIENT_SUBJECTS = [
    wire.SUBJECT_CHECK, wire.SUBJECT_BATCH, wire.SUBJECT_FILTER, wire.SUBJECT_METRICS,
    wire.SUBJECT_CUSTOM_TYPES, wire.SUBJECT_REVIEW_SUBJECT, wire.SUBJECT_REVIEW_RULES,
    wire.SUBJECT_REVIEW_RESOURCE, wire.SUBJECT_SEARCH_FILTER, wire.SUBJECT_SEARCH_PLAN,
]
SAR_MALLORY = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
               "spec": {"user": "mallory", "resourceAttributes": {
                   "verb": "get", "resource": "secrets", "namespace": "kube-system"}}}


@dataclass
class Deployment:
    url: str
    metrics: str
    manifests: Path
    log: Path

    def refused(self, subject: str) -> float:
        """``clearance_requests_refused_total{subject,reason="reply_subject"}`` now."""
        with urllib.request.urlopen(f"{self.metrics}/metrics", timeout=5) as response:
            text = response.read().decode()
        pattern = (r'^clearance_requests_refused_total\{(?=[^}]*reason="reply_subject")'
                   rf'(?=[^}}]*subject="{re.escape(subject)}")[^}}]*\}} (\S+)$')
        found = re.search(pattern, text, re.MULTILINE)
        return float(found.group(1)) if found else 0.0


def _ready(url: str, proc: subprocess.Popen[bytes], log: Path, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"clearance run all exited: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"clearance run all not ready: {log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("attack-bus")
    nats_server, url = secured.server(root / "nats")
    valkey, redis_url = servers.valkey_server(root / "valkey", persist=False)
    manifests = root / "manifests"
    manifests.mkdir()
    (manifests / "objects.yaml").write_text(yaml.safe_dump_all(OBJECTS, sort_keys=False))
    metrics_port = servers.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEARANCE_")}
    env.update({
        "CLEARANCE_NATS_URL": url,  # no user: every service below has its own
        **{f"CLEARANCE_{name.upper().replace('-', '_')}_NATS_URL": service_url
           for name, service_url in secured.service_urls(url).items()},
        "CLEARANCE_REPLY_PREFIXES": secured.reply_prefixes(),
        "CLEARANCE_REDIS_URL": redis_url, "CLEARANCE_MANIFESTS": str(manifests),
        "CLEARANCE_MANIFEST_POLL": "0.05", "CLEARANCE_KUBERNETES": "false",
        "CLEARANCE_METRICS_PORT": str(metrics_port), "CLEARANCE_LOG_FORMAT": "json",
        "CLEARANCE_GATEWAY_HOST": "127.0.0.1", "CLEARANCE_GATEWAY_PORT": str(servers.free_port()),
        "CLEARANCE_GATEWAY_TLS_DIR": str(root / "gateway"),
    })
    log = root / "clearance.log"
    nats_server.start()
    valkey.start()
    with log.open("ab") as out:
        proc = subprocess.Popen([CLEARANCE, "run", "all"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        _ready(f"http://127.0.0.1:{metrics_port}", proc, log)
        yield Deployment(url, f"http://127.0.0.1:{metrics_port}", manifests, log)
        assert proc.poll() is None, "clearance run all died under attack"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        valkey.stop()
        nats_server.stop()


class Caller:
    """A connection as one user, reading replies under its own prefix; permission
    violations the server reports are kept."""

    def __init__(self, nc: Client, errors: list[str]) -> None:
        self.nc, self.errors = nc, errors

    async def ask(self, subject: str, body: dict[str, Any], timeout: float = 5) -> Any:
        reply = await self.nc.request(subject, msgspec.json.encode(body), timeout=timeout)
        return msgspec.json.decode(reply.data)

    async def refused(self, action: str, subject: str) -> bool:
        needle = f'permissions violation for {action} to "{subject.lower()}"'
        for _ in range(200):
            if any(needle in error for error in self.errors):
                return True
            await asyncio.sleep(0.01)
        return False


@pytest.fixture
async def callers(deployment: Deployment) -> AsyncIterator[dict[str, Caller]]:
    made: dict[str, Caller] = {}
    for user in ("client", "author", "operator", "producer", "watcher"):
        errors: list[str] = []

        async def on_error(exc: Exception, errors: list[str] = errors) -> None:
            errors.append(str(exc).lower())

        nc = await nats.connect(secured.as_user(deployment.url, user), error_cb=on_error,
                                inbox_prefix=inboxes.prefix_for_user(user),
                                allow_reconnect=False, connect_timeout=2)
        made[user] = Caller(nc, errors)
    yield made
    for caller in made.values():
        await caller.nc.close()


async def _last_seq(callers: dict[str, Caller]) -> int:
    """The stream's last sequence, read as the watcher (the only caller allowed to)."""
    try:
        info = await callers["watcher"].nc.jetstream().stream_info("CLEARANCE_EVENTS")
    except nats.js.errors.NotFoundError:
        return 0  # the compiler has not created it yet
    return int(info.state.last_seq)


async def _settled(callers: dict[str, Caller], past: int = 0) -> int:
    """Wait until the stream is past ``past`` and the decision service reflects all of
    it; that revision."""
    status: Any = None
    for _ in range(600):  # 30 s: three test workers share two cores
        target = await _last_seq(callers)
        if target > past:
            status = await callers["operator"].ask("clearance.v1.status", {})
            if status.get("revision", -1) >= target:
                return target
        await asyncio.sleep(0.05)
    raise AssertionError(f"not settled past {past}: {status}")


async def _request_with_reply(caller: Caller, subject: str, body: dict[str, Any],
                              reply: str) -> None:
    await caller.nc.publish(subject, msgspec.json.encode(body), reply=reply)


async def _sar(caller: Caller, revision: int) -> Any:
    return await caller.ask("clearance.v1.review.subject",
                            {**SAR_MALLORY, "min_revision": revision})


async def test_a_forged_clusterrole_and_binding_through_reply_subjects_grant_nothing(
        deployment: Deployment, callers: dict[str, Caller]) -> None:
    client = callers["client"]
    revision = await _settled(callers)
    assert (await _sar(client, revision))["status"]["allowed"] is False
    before = deployment.refused("clearance.v1.review.subject")
    for obj in (FORGED_ROLE, FORGED_BINDING):
        # The review carries the event's members; its reply subject names the stream.
        forged = {**SAR_MALLORY, "type": "ADDED", "object": obj}
        await _request_with_reply(client, "clearance.v1.review.subject", forged,
                                  event_subject(obj, ref_of(obj)))
    await client.nc.flush()
    await _wait_for(lambda: deployment.refused("clearance.v1.review.subject") >= before + 2)
    assert await _last_seq(callers) == revision  # nothing landed on the stream
    assert (await _sar(client, revision))["status"]["allowed"] is False


async def test_a_forged_deletion_does_not_lift_a_deny(
        deployment: Deployment, callers: dict[str, Caller]) -> None:
    client = callers["client"]
    revision = await _settled(callers)
    check = {"principal": {"username": "mallory", "groups": ["team"]}, "action": "view",
             "resource": {"type": "cluster", "name": "prod-east"}, "min_revision": revision}
    assert (await client.ask("clearance.v1.check", check))["decision"] == "deny"
    deletion = {"type": "DELETED", "object": DENY}
    subjects = ("clearance.v1.check", "clearance.v1.review.subject", "clearance.v1.filter",
                "clearance.v1.search.plan")
    before = {subject: deployment.refused(subject) for subject in subjects}
    for subject in subjects:
        await _request_with_reply(client, subject, {**check, **deletion},
                                  event_subject(DENY, ref_of(DENY)))
    await client.nc.flush()
    await _wait_for(lambda: all(deployment.refused(s) > before[s] for s in subjects))
    assert await _last_seq(callers) == revision
    assert (await client.ask("clearance.v1.check", check))["decision"] == "deny"


async def test_replies_aimed_at_leases_and_other_subjects_land_nowhere_and_stall_nothing(
        deployment: Deployment, callers: dict[str, Caller]) -> None:
    """Every subject a client may ask, with every reply subject that is no caller's inbox:
    each refusal counted, nothing published anywhere, the leases untouched, ingestion on."""
    client, operator = callers["client"], callers["operator"]
    revision = await _settled(callers)
    heard: list[str] = []

    async def hear(msg: Msg) -> None:
        heard.append(msg.subject)

    for subject in ("clearance.events.>", "clearance.status.>", "clearance.decisions.changed"):
        await operator.nc.subscribe(subject, cb=hear)
    await operator.nc.flush()
    check = {"principal": {"username": "alice"}, "action": "view",
             "resource": {"type": "cluster", "name": "prod-east"}}
    before = {subject: deployment.refused(subject) for subject in CLIENT_SUBJECTS}
    for subject in CLIENT_SUBJECTS:
        for reply in HOSTILE_REPLIES:
            await _request_with_reply(client, subject, {**check, "type": "ADDED",
                                                        "object": FORGED_ROLE}, reply)
    await client.nc.flush()
    await _wait_for(lambda: all(deployment.refused(s) >= before[s] + len(HOSTILE_REPLIES)
                                for s in CLIENT_SUBJECTS))
    await asyncio.sleep(0.3)  # anything published would have been heard by now
    assert heard == []
    assert await _last_seq(callers) == revision
    leases = await callers["watcher"].nc.jetstream().key_value("CLEARANCE_LEASES")
    for key in ("compiler", "watcher.manifests"):  # still their holders' names
        assert not (await leases.get(key)).value.startswith(b"{")
    # Ingestion goes on (the compiler and the watcher still hold their leases).
    _write(deployment, "late.yaml", cluster("prod-late", env="prod"))
    assert await _settled(callers, past=revision) == revision + 1
    late = await client.ask("clearance.v1.check", {**check, "resource": {
        "type": "cluster", "name": "prod-late"}, "min_revision": revision + 1})
    assert late["decision"] == "allow"


async def test_no_role_reads_another_callers_replies(
        deployment: Deployment, callers: dict[str, Caller]) -> None:
    client, author = callers["client"], callers["author"]
    for prefix in ("_INBOX.>", "_INBOX.author.>", "_INBOX.gateway.>", "_INBOX.operator.>"):
        await client.nc.subscribe(prefix)
        assert await client.refused("subscription", prefix)
    await client.nc.subscribe("clearance.v1.check")  # nor answer in the service's place
    assert await client.refused("subscription", "clearance.v1.check")
    await client.nc.publish("_INBOX.author.forged", b'{"decision": "allow"}')
    assert await client.refused("publish", "_INBOX.author.forged")
    reply = await author.ask("clearance.v1.policies", {"principal": {"username": "alice"}})
    assert "policies" in reply
    # Naming the author's inbox as its reply subject, the client is answered there: the
    # answer is the author's to read (and to ignore: it asked nothing under that token),
    # never the client's.
    planted = await author.nc.subscribe("_INBOX.author.planted")
    await author.nc.flush()
    mine = await client.nc.subscribe("_INBOX.client.>")
    await _request_with_reply(client, "clearance.v1.check", {
        "principal": {"username": "alice"}, "action": "view",
        "resource": {"type": "cluster", "name": "prod-east"}}, "_INBOX.author.planted")
    assert b'"decision"' in (await planted.next_msg(timeout=5)).data
    with pytest.raises(nats.errors.TimeoutError):
        await mine.next_msg(timeout=0.3)


async def test_a_misconfigured_responder_is_still_stopped_by_nats(
        deployment: Deployment, callers: dict[str, Caller]) -> None:
    """Defence in depth: a decision process told to reply anywhere under ``clearance``
    still cannot publish onto the stream or a lease, because its NATS user may not."""
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc).lower())

    nc = await nats.connect(secured.as_user(deployment.url, "decision"), error_cb=on_error,
                            allow_reconnect=False)
    responder = Responder(nc, queue="attack-misconfigured",
                          reply_prefixes=("clearance", "$KV"))

    async def handler(body: bytes) -> bytes:
        return body  # an echo: the worst a handler could do

    try:
        await responder.serve("clearance.v1.review.rules", handler)
        await nc.flush()
        revision = await _settled(callers)
        event = {"type": "ADDED", "object": FORGED_ROLE}
        for reply in ("clearance.events.clusterrole.forged", "$KV.CLEARANCE_LEASES.compiler"):
            await _request_with_reply(callers["client"], "clearance.v1.review.rules", event,
                                      reply)
        await _wait_for(lambda: len(errors) >= 2)
        assert all("permissions violation for publish" in e for e in errors)
        assert await _last_seq(callers) == revision
    finally:
        await responder.stop()
        await nc.close()


async def test_no_reply_carries_request_members_outside_its_struct(
        deployment: Deployment, callers: dict[str, Caller]) -> None:
    """Every subject, asked with the members of an event beside its own: the reply holds
    only what its Struct (or the error reply) declares."""
    operator = callers["operator"]
    revision = await _settled(callers)
    principal = {"principal": {"username": "alice"}}
    bodies: dict[str, dict[str, Any]] = {
        wire.SUBJECT_REVIEW_SUBJECT: {**SAR_MALLORY, "metadata": {"name": "m", "labels": {
            "a": "b"}}},
        wire.SUBJECT_REVIEW_RULES: {"user": "alice"},
        wire.SUBJECT_REVIEW_RESOURCE: {"verb": "get", "resource": "pods"},
        wire.SUBJECT_CHECK: {**principal, "action": "view",
                             "resource": {"type": "cluster", "name": "prod-east"}},
    }
    for subject, (_, reply_type) in wire.REQUESTS.items():
        if subject == wire.SUBJECT_CACHE_CLEAR:
            continue  # answered like the others, but clears every cached decision
        body = {**bodies.get(subject, principal), "type": "ADDED", "object": FORGED_ROLE,
                "request_id": "r-1", "min_revision": revision}
        reply = await operator.ask(subject, body)
        declared = {f.encode_name for f in msgspec.structs.fields(reply_type)}
        allowed = declared if "error" not in reply else {"error", "request_id"}
        assert set(reply) <= allowed, (subject, set(reply) - allowed)
        assert reply.get("request_id") == "r-1"
    sar = await operator.ask(wire.SUBJECT_REVIEW_SUBJECT, {**bodies[wire.SUBJECT_REVIEW_SUBJECT],
                                                          "type": "ADDED", "spare": 1})
    assert sar["metadata"] == {"name": "m", "labels": {"a": "b"}}
    assert {"type", "spare", "object"}.isdisjoint(sar)


async def test_the_producer_cannot_aim_the_streams_acknowledgement(
        deployment: Deployment, callers: dict[str, Caller]) -> None:
    """A producer may append events (its role), but the acknowledgement of its publish
    comes back into its own account: not onto a lease key, not onto decisions.changed."""
    producer, client = callers["producer"], callers["client"]
    revision = await _settled(callers)
    changed = await client.nc.subscribe("clearance.decisions.changed")
    await client.nc.flush()
    obj = cluster("prod-produced", env="prod")
    body = msgspec.json.encode({"type": "ADDED", "object": obj})
    for reply in ("$KV.CLEARANCE_LEASES.compiler", "$KV.CLEARANCE_LEASES.watcher.manifests",
                  "clearance.decisions.changed"):
        await producer.nc.publish(event_subject(obj, ref_of(obj)), body, reply=reply)
    await producer.nc.flush()
    # Its events are folded (the compiler kept its lease), and announced ...
    assert await _settled(callers, past=revision + 2) == revision + 3
    messages = [await changed.next_msg(timeout=5)]
    # ... and no acknowledgement ({"stream", "seq"}) is among the announcements.
    while True:
        try:
            messages.append(await changed.next_msg(timeout=0.3))
        except nats.errors.TimeoutError:
            break
    assert all(b'"stream"' not in m.data for m in messages)


async def test_a_flood_of_hostile_reply_subjects_is_counted_and_stalls_nothing(
        deployment: Deployment, callers: dict[str, Caller]) -> None:
    client = callers["client"]
    check = {"principal": {"username": "alice"}, "action": "view",
             "resource": {"type": "cluster", "name": "prod-east"}}
    data = msgspec.json.encode(check)
    before = deployment.refused("clearance.v1.check")
    lines_before = deployment.log.read_text().count('"request_refused"')
    flood = 5000
    for i in range(flood):
        await client.nc.publish("clearance.v1.check", data, reply=f"clearance.events.x.{i}")
    started = time.monotonic()
    answer = await client.ask("clearance.v1.check", check)  # queued behind the flood
    assert answer["decision"] == "allow" and time.monotonic() - started < 3
    await _wait_for(lambda: deployment.refused("clearance.v1.check") >= before + flood)
    # Logged, but not once per request: at most a line per subject every 10 s.
    assert deployment.log.read_text().count('"request_refused"') - lines_before <= 2


async def _wait_for(condition: Any, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.05)


def _write(deployment: Deployment, name: str, *objects: dict[str, Any]) -> None:
    (deployment.manifests / name).write_text(yaml.safe_dump_all(objects, sort_keys=False))
