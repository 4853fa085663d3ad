"""A running Clearance for the fuzzers, and the two fuzz targets as procedures.

The services run as ``clearance run all`` in a child process (exactly what operators run),
on real NATS and Valkey servers — the test session's (``real_servers``) or the runner's
own. A child process, not tasks in the fuzzer's event loop: a hostile input that wedges a
service (a regex that backtracks for minutes, a loop that never yields) then shows up as
missing replies or a stalled pipeline, counted, instead of freezing the fuzzer itself.

- :func:`request_burst` sends hostile requests to one subject concurrently with the
  known-good requests (:class:`Goods`) and judges every reply (:mod:`tests.fuzz.oracle`).
- :func:`event_burst` publishes hostile events, then flips the sentinel policy and checks
  that the flip takes effect within a bound, then asks probe questions about the
  principal the hostile policies name.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import nats
import nats.errors
import nats.js.errors
import redis.asyncio as aioredis
from nats.aio.client import Client

from clearance_api.wire import EVENTS_STREAM
from clearance_runtime.process import servers
from tests.fuzz.hostile import HostileEvent
from tests.fuzz.oracle import Finding, answer, judge

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CLEARANCE = Path(sys.executable).parent / "clearance"
CHECK = "clearance.v1.check"


class LiveSystem:
    """``clearance run all`` on given servers, with the example fleet as its manifests."""

    def __init__(self, nats_url: str, redis_url: str, workdir: Path, *,
                 reply_timeout: float = 5.0) -> None:
        self.nats_url = nats_url
        self.redis_url = redis_url
        self.workdir = workdir
        self.reply_timeout = reply_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.nc: Client | None = None
        self.starts = 0

    @property
    def log_path(self) -> Path:
        return self.workdir / "services.log"

    async def reset_state(self) -> None:
        """Empty stream and empty store (what the harness's ``clean_servers`` does)."""
        nc = await nats.connect(self.nats_url)
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await nc.jetstream().delete_stream(EVENTS_STREAM)
        await nc.close()
        r = aioredis.from_url(self.redis_url)
        await r.flushall()
        await r.aclose()

    async def start(self, *, fresh: bool = True) -> None:
        if fresh:
            await self.reset_state()
        manifests = self.workdir / "manifests"
        shutil.rmtree(manifests, ignore_errors=True)
        shutil.copytree(EXAMPLES, manifests)
        env = {**os.environ, "CLEARANCE_NATS_URL": self.nats_url,
               "CLEARANCE_REDIS_URL": self.redis_url, "CLEARANCE_MANIFESTS": str(manifests),
               "CLEARANCE_KUBERNETES": "false", "CLEARANCE_LOG_LEVEL": "WARNING",
               "CLEARANCE_MANIFEST_POLL": "0.1",
               # `run all` includes the gateway: on a port of its own, beside other runs.
               "CLEARANCE_GATEWAY_PORT": str(servers.free_port()),
               "CLEARANCE_GATEWAY_TLS_DIR": str(self.workdir / "gateway")}
        env.pop("CLEARANCE_METRICS_PORT", None)
        self._spawn(env)
        self.starts += 1
        if self.nc is None:
            self.nc = await nats.connect(self.nats_url, max_reconnect_attempts=-1)
        await self.settle(timeout=30.0)

    def _spawn(self, env: dict[str, str]) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen([str(CLEARANCE), "run", "all"], env=env,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                await asyncio.to_thread(self.proc.wait, 10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait)
        self.proc = None

    async def close(self) -> None:
        await self.stop()
        if self.nc is not None:
            await self.nc.close()
            self.nc = None

    async def restart(self) -> None:
        """After a wedged or dead service: kill it, start over on empty state."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait)
        self.proc = None
        await self.start(fresh=True)

    async def request(self, subject: str, body: bytes, timeout: float | None = None
                      ) -> bytes | None:
        """The raw reply, or None when none came (timeout, or no responder at all)."""
        assert self.nc is not None
        try:
            msg = await self.nc.request(subject, body, timeout=timeout or self.reply_timeout)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            return None
        return bytes(msg.data)

    async def ask(self, subject: str, doc: Any, timeout: float | None = None) -> Any:
        reply = await self.request(subject, msgspec.json.encode(doc), timeout)
        try:
            return None if reply is None else json.loads(reply)
        except ValueError:
            return None

    async def publish(self, subject: str, body: bytes) -> int:
        assert self.nc is not None
        ack = await self.nc.jetstream().publish(subject, body, stream=EVENTS_STREAM)
        return int(ack.seq)

    async def stream_last_seq(self) -> int:
        assert self.nc is not None
        try:
            info = await self.nc.jetstream().stream_info(EVENTS_STREAM)
        except nats.js.errors.NotFoundError:
            return 0
        return int(info.state.last_seq)

    async def settle(self, timeout: float = 10.0) -> int:
        """Wait until every event in the stream is reflected (the watcher has published
        the whole manifest directory and the pipeline caught up)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if not self.alive():
                raise RuntimeError(f"clearance exited; see {self.log_path}")
            target = await self.stream_last_seq()
            status = await self.ask("clearance.v1.status", {}, timeout=1.0)
            if target and isinstance(status, dict) and status.get("revision", -1) >= target:
                await asyncio.sleep(0.3)
                if await self.stream_last_seq() == target:
                    return target
            if loop.time() > deadline:
                raise TimeoutError(f"clearance stuck at {status} (stream at {target}); "
                                   f"see {self.log_path}")
            await asyncio.sleep(0.05)


# The request target --------------------------------------------------------------------

#: Requests with known answers on the example fleet: sent beside every hostile burst.
#: The first two go through the coalesced check path (one from the cache, one that misses
#: it: a fresh ``fields`` value is part of the cache key and does not change the answer).
GOOD_REQUESTS: list[tuple[str, dict[str, Any]]] = [
    (CHECK, {"principal": {"username": "alice"}, "action": "view_metrics",
             "resource": {"type": "cluster", "name": "prod-us-east"}}),
    (CHECK, {"principal": {"username": "bob"}, "action": "view",
             "resource": {"type": "pods", "cluster": "staging-us-east", "fields": {}}}),
    ("clearance.v1.check.batch", {"principal": {"username": "dave"}, "checks": [
        {"action": "view", "resource": {"type": "cluster", "name": c}}
        for c in ("prod-us-east", "staging-us-east", "dev-sandbox")]}),
    ("clearance.v1.filter", {"principal": {"username": "bob"}, "cluster": "staging-us-east",
                             "type": "pvc", "items": [
        {"name": "data-0", "namespace": "app-shop", "fields": {"storageClass": "gp3",
                                                                 "sizeGi": 100}},
        {"name": "scratch", "namespace": "app-shop", "fields": {"storageClass": "io2"}}]}),
    ("clearance.v1.review.subject", {"apiVersion": "authorization.k8s.io/v1",
                                     "kind": "SubjectAccessReview", "spec": {
        "user": "bob", "resourceAttributes": {"verb": "list", "resource": "pods",
                                              "namespace": "shop"}}}),
]


class Goods:
    """The known-good requests and the answers they got before any fuzzing."""

    def __init__(self) -> None:
        self.expected: list[Any] = []
        self.nonce = 0

    def bodies(self) -> list[tuple[str, bytes]]:
        self.nonce += 1
        out = []
        for subject, doc in GOOD_REQUESTS:
            body = doc
            if subject == CHECK and "fields" in doc["resource"]:
                body = {**doc, "resource": {**doc["resource"], "fields": {"nonce": self.nonce}}}
            out.append((subject, msgspec.json.encode(body)))
        return out

    async def record(self, system: LiveSystem) -> None:
        replies = await asyncio.gather(*(system.request(s, b) for s, b in self.bodies()))
        self.expected = [answer(r) for r in replies]
        alice = self.expected[0]
        if not isinstance(alice, dict) or alice.get("decision") != "allow":
            raise RuntimeError(f"the example fleet did not load: alice got {alice}")
        for (subject, _), got in zip(GOOD_REQUESTS, self.expected, strict=True):
            if not isinstance(got, dict) or "error" in got:
                raise RuntimeError(f"known-good request on {subject} failed alone: {got}")


async def request_burst(system: LiveSystem, subject: str, bodies: Sequence[bytes],
                        goods: Goods) -> list[Finding]:
    """Send ``bodies`` to ``subject`` and the known-good requests, all at once; judge every
    reply and compare each good answer with the one it got alone."""
    good = goods.bodies()
    sends = [system.request(subject, body) for body in bodies]
    sends += [system.request(s, b) for s, b in good]
    replies = await asyncio.gather(*sends)
    findings: list[Finding] = []
    for body, reply in zip(bodies, replies, strict=False):
        findings.extend(judge(subject, body, reply))
    burst = b"\n".join(bodies)
    for (good_subject, _), expected, reply in zip(good, goods.expected, replies[len(bodies):],
                                                  strict=True):
        got = answer(reply)
        if got != expected:
            findings.append(Finding(
                "neighbour failures", f"{good_subject} beside {subject}", burst,
                f"known-good answer changed: {json.dumps(got)[:300]}"))
    return findings


# The event target ----------------------------------------------------------------------

SENTINEL_USER = "fuzz-sentinel-user"
PROBE_USER = {"username": "fuzz-user", "groups": ["fuzz-group"]}
PROBE_SA = {"username": "system:serviceaccount:fuzz:fuzz"}


def sentinel_policy(effect: str, version: int) -> dict[str, Any]:
    return {"apiVersion": "clusterpulse.io/v1alpha1", "kind": "MonitorAccessPolicy",
            "metadata": {"name": "sentinel", "namespace": "fuzz-sentinel",
                         "uid": "fuzz-sentinel", "resourceVersion": str(version)},
            "spec": {"identity": {"priority": 0, "subjects": {"users": [SENTINEL_USER]}},
                     "access": {"effect": effect}, "scope": {"clusters": {"default": "all"}}}}


def _probes() -> list[tuple[str, dict[str, Any]]]:
    """Questions about the principals hostile policies name, so stored hostile state gets
    evaluated, not only compiled."""
    out: list[tuple[str, dict[str, Any]]] = []
    for principal in (PROBE_USER, PROBE_SA):
        # The last name is long and nearly matches everything: a pattern that backtracks
        # (``(a+)+$``, a wildcard like ``*a*a*a…b``) takes minutes on it, not microseconds.
        for cluster in ("fuzz-cluster-a", "prod-us-east", "local-cluster", "a" * 30 + "!"):
            out.append((CHECK, {"principal": principal, "action": "view_metrics",
                                "resource": {"type": "cluster", "name": cluster},
                                "explain": True}))
        out.append(("clearance.v1.check.batch", {"principal": principal, "checks": [
            {"action": "view", "resource": {"type": t, "cluster": "fuzz-cluster-b",
                                            "name": "web-0", "namespace": "fuzz"}}
            for t in ("pods", "pvc", "namespaces", "operators")]}))
        out.append(("clearance.v1.filter", {
            "principal": principal, "cluster": "fuzz-cluster-a", "type": "pvc",
            "items": [{"name": "data-0", "namespace": "fuzz",
                       "fields": {"storageClass": "gp3", "phase": "Pending", "sizeGi": 5}},
                      {"name": "data-1", "namespace": "fuzz-other", "labels": {"x": "y"}}],
            "aggregations": {"count": 2}}))
        out.append(("clearance.v1.metrics", {
            "principal": principal, "cluster": "fuzz-cluster-a",
            "namespaces": [{"name": "fuzz", "pods": 3}], "nodes": [{"name": "n1"}]}))
        for subject in ("clearance.v1.permissions", "clearance.v1.policies",
                        "clearance.v1.custom-types", "clearance.v1.search.plan"):
            out.append((subject, {"principal": principal}))
    out.append(("clearance.v1.review.subject", {"spec": {
        "user": "fuzz-user", "groups": ["fuzz-group"],
        "resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "fuzz"}}}))
    out.append(("clearance.v1.review.rules", {"user": "fuzz-user", "groups": ["fuzz-group"],
                                              "spec": {"namespace": "fuzz"}}))
    out.append(("clearance.v1.review.resource", {"verb": "get", "resource": "pods",
                                                 "namespace": "fuzz"}))
    for name in ("fuzz-a", "fuzz-b"):
        out.append(("clearance.v1.policy-status", {"kind": "MonitorAccessPolicy",
                                                   "namespace": "fuzz", "name": name}))
    return out


PROBES = [(subject, msgspec.json.encode(doc)) for subject, doc in _probes()]


class Sentinel:
    """A policy the fuzzer owns: flipped Allow <-> Deny after every burst; the flip must be
    answered within ``bound`` seconds (``min_revision`` of its publish)."""

    def __init__(self, bound: float = 5.0) -> None:
        self.bound = bound
        self.version = 0

    async def flip(self, system: LiveSystem, burst: bytes) -> list[Finding]:
        self.version += 1
        effect = "Allow" if self.version % 2 else "Deny"
        seq = await system.publish("clearance.events.monitoraccesspolicy.fuzz-sentinel",
                                   msgspec.json.encode({"type": "MODIFIED", "object":
                                                        sentinel_policy(effect, self.version)}))
        reply = await system.ask(CHECK, {
            "principal": {"username": SENTINEL_USER}, "action": "view",
            "resource": {"type": "cluster", "name": "prod-us-east"},
            "min_revision": seq, "timeout_ms": int(self.bound * 1000)},
            timeout=self.bound + 2.0)
        want = "allow" if effect == "Allow" else "deny"
        if not isinstance(reply, dict) or reply.get("decision") != want:
            return [Finding("pipeline stalls", "clearance.events", burst,
                            f"sentinel flip to {effect} at revision {seq} not answered "
                            f"within {self.bound}s: {json.dumps(reply)[:300]}")]
        status = await system.ask("clearance.v1.status", {})
        if not isinstance(status, dict) or not isinstance(status.get("revision"), int) \
                or status["revision"] < seq:
            return [Finding("pipeline stalls", "clearance.v1.status", burst,
                            f"status revision behind the answered revision {seq}: "
                            f"{json.dumps(status)[:300]}")]
        return []


async def event_burst(system: LiveSystem, events: Sequence[HostileEvent], sentinel: Sentinel,
                      *, probes: bool = True) -> list[Finding]:
    """Publish ``events`` in order; then the sentinel must flip, the probes must be
    answered within the contract, and every service must still be running."""
    for event in events:
        await system.publish(event.subject, event.body)
    burst = b"\n".join(f"{e.subject} ".encode() + e.body[:4000] for e in events)
    findings = await sentinel.flip(system, burst)
    if probes and not findings:  # (a stalled pipeline would only add timeouts)
        replies = await asyncio.gather(*(system.request(s, b) for s, b in PROBES))
        for (subject, body), reply in zip(PROBES, replies, strict=True):
            for finding in judge(subject, body, reply):
                findings.append(Finding(finding.label, f"{subject} after events", burst,
                                        f"{finding.detail} (probe {body[:200]!r})"))
    if not system.alive():
        findings.append(Finding("services died", "clearance run all", burst,
                                f"exit code {system.proc.returncode if system.proc else '?'}; "
                                f"see {system.log_path}"))
    return findings
