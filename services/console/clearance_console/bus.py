"""The console's one NATS connection: what it listens to, what it polls, and the timed
request every other part goes through. Public subjects only (docs/guide/console.md), so
the console works with the ``operator`` role of ``deploy/nats/accounts.conf``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from clearance_api.wire import (
    SUBJECT_CHECK,
    SUBJECT_DECISIONS_CHANGED,
    SUBJECT_EFFECTIVE,
    SUBJECT_PERMISSIONS,
    SUBJECT_POLICY_STATUS,
    SUBJECT_STATUS,
)
from clearance_console.live import Live
from clearance_console.policies import KINDS, from_subject
from clearance_runtime.process import health, logs

log = logs.get(__name__)

#: Seconds between status polls (and probe checks): the page's live numbers move this often.
POLL_SECONDS = 1.0
#: Seconds between re-reads of every known policy's status (validity windows expire
#: without any event) and between looks for policies the console has not heard of.
REFRESH_SECONDS = 10.0
#: The probe's principal: a name no policy is expected to list, so its check is a plain
#: deny answered like anyone's (from the cache after the first).
PROBE_USER = "clearance-console-probe"
#: Policy status reads in flight at once while refreshing.
PARALLEL_READS = 16


def _unavailable(message: str) -> dict[str, Any]:
    return {"error": {"code": "unavailable", "message": message}}


class Bus:
    def __init__(self, nc: Client, live: Live) -> None:
        self.nc = nc
        self.live = live
        self.clusters: list[str] = []  # the inventory, from the probe's permissions

    def snapshot(self) -> dict[str, Any]:
        """The live snapshot, told whether this console's NATS connection is up."""
        return self.live.snapshot(self.now(), connected=self.nc.is_connected)

    def now(self) -> float:
        return time.monotonic()

    async def request(self, subject: str, body: dict[str, Any],
                      wait: float = 5.0) -> dict[str, Any]:
        """Send one request; the reply as JSON (an error reply as it comes), or an
        ``unavailable`` error of the console's own when nothing answers."""
        started = self.now()
        try:
            reply = await self.nc.request(subject, json.dumps(body).encode(), timeout=wait)
        except nats.errors.NoRespondersError:
            return _unavailable(f"no service answers {subject}")
        except (TimeoutError, nats.errors.TimeoutError):
            return _unavailable(f"{subject} did not answer within {wait:g} s")
        except nats.errors.Error as exc:  # disconnected, permissions: said, not raised
            return _unavailable(f"{subject}: {exc}")
        self.live.timed(subject, self.now(), self.now() - started)
        try:
            decoded = json.loads(reply.data)
        except ValueError:
            return _unavailable(f"{subject} answered with something other than JSON")
        return decoded if isinstance(decoded, dict) else _unavailable("reply is not an object")

    async def subscribe(self) -> None:
        await self.nc.subscribe("clearance.events.>", cb=self._on_event)
        await self.nc.subscribe(SUBJECT_DECISIONS_CHANGED, cb=self._on_changed)
        await self.nc.subscribe("clearance.status.>", cb=self._on_status)

    async def on_error(self, exc: Exception) -> None:
        """nats-py reports a refused subscription here, not where it subscribed."""
        text = str(exc)
        if "ermissions" in text and "clearance.events" in text:
            self.live.events_denied = (
                "this NATS user may not subscribe to clearance.events.> (see "
                "docs/guide/console.md); event flow per kind is not shown")
        log.warning("console_nats_error", error=text)

    async def _on_event(self, msg: Msg) -> None:
        parts = msg.subject.split(".")
        self.live.flow(f"events.{parts[2] if len(parts) > 2 else '?'}", self.now())
        with contextlib.suppress(ValueError):
            body = json.loads(msg.data)
            if isinstance(body, dict):
                self.live.directory.harvest(body.get("object"))

    async def _on_changed(self, msg: Msg) -> None:
        with contextlib.suppress(ValueError):
            body = json.loads(msg.data)
            self.live.changed(body if isinstance(body, dict) else {}, self.now())

    async def _on_status(self, msg: Msg) -> None:
        kind = msg.subject.split(".")[2] if msg.subject.count(".") >= 2 else "?"
        self.live.flow(f"status.{kind}", self.now())
        key = from_subject(msg.subject)
        with contextlib.suppress(ValueError):
            body = json.loads(msg.data)
            if key is not None and isinstance(body, dict):
                self.live.policies.update(*key, body)

    async def poll(self) -> None:
        """Every second: the status, and a probe check timed as latency."""
        while True:
            # A cancellation a request's wait_for swallowed (Python 3.11) is honoured here,
            # or the console's task group would wait for this loop for ever at a stop.
            health.stop_if_asked()
            started = self.now()
            status = await self.request(SUBJECT_STATUS, {}, wait=2.0)
            if "error" in status:
                self.live.status_error = str(status["error"].get("message"))
            else:
                self.live.polled(status, self.now(), self.now() - started)
            cluster = self.clusters[0] if self.clusters else "local-cluster"
            started = self.now()
            reply = await self.request(SUBJECT_CHECK, {
                "principal": {"username": PROBE_USER}, "action": "view",
                "resource": {"type": "cluster", "name": cluster}}, wait=2.0)
            if "error" not in reply:
                self.live.probed(self.now(), self.now() - started,
                                 cached=bool(reply.get("cached")))
            await asyncio.sleep(max(0.0, POLL_SECONDS - (self.now() - started)))

    async def refresh(self) -> None:
        """Every few seconds: the inventory, the AccessPolicies on the path of the Fleet
        and of every cluster, and the status of every policy known."""
        while True:
            health.stop_if_asked()  # as in poll()
            await self.discover()
            known = self.live.policies.known()
            for start in range(0, len(known), PARALLEL_READS):
                await asyncio.gather(*(self._read_status(*key)
                                       for key in known[start:start + PARALLEL_READS]))
            await asyncio.sleep(REFRESH_SECONDS)

    async def discover(self) -> None:
        reply = await self.request(SUBJECT_PERMISSIONS, {"principal": {"username": PROBE_USER}})
        if isinstance(reply.get("clusters"), dict):
            self.clusters = sorted(reply["clusters"])
        targets = [{"kind": "Fleet", "name": "fleet"},
                   *({"kind": "Cluster", "name": name} for name in self.clusters)]
        replies = await asyncio.gather(*(self.request(SUBJECT_EFFECTIVE, {"target": target})
                                         for target in targets))
        for effective in replies:
            # Those that take no part too (``excluded``): an unauthorized or invalid
            # policy is one an operator wants to see.
            excluded = [entry.get("policy") for entry in effective.get("excluded") or []
                        if isinstance(entry, dict)]
            for key in [*(effective.get("policies") or []), *excluded]:
                namespace, _, name = str(key).partition("/")
                self.live.policies.learn("AccessPolicy", namespace, name)
            self.harvest_rules(effective)

    def harvest_rules(self, effective: dict[str, Any]) -> None:
        for entry in (effective.get("rules") or {}).values():
            if isinstance(entry, dict):
                self.live.directory.harvest(entry.get("rule"))

    async def _read_status(self, kind: str, namespace: str, name: str) -> None:
        if kind not in KINDS.values():
            return
        reply = await self.request(SUBJECT_POLICY_STATUS,
                                   {"kind": kind, "namespace": namespace, "name": name})
        error = reply.get("error")
        if isinstance(error, dict):
            if error.get("code") == "not_found":
                self.live.policies.forget(kind, namespace, name)
            return
        self.live.policies.update(kind, namespace, name, reply)
