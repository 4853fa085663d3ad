"""What the suite observes during a fault: every check reply, the compiler's checkpoint and
the policy statuses the compiler publishes.

- :class:`Checks` sends single checks at a steady rate (open loop: a slow or stopped
  service does not slow the load down) and records each reply with its times.
- :class:`Checkpoints` samples ``clr:rev`` every 10 ms. The state a reply was computed
  from cannot be newer than the checkpoint read by a request sent just after it arrived,
  so that value is the upper end of the revisions a reply may reflect.
- :class:`StatusSamples` records ``clearance.v1.status`` every 50 ms (when the system
  reached a revision).
- :class:`Statuses` counts ``clearance.status.monitoraccesspolicy.*`` messages per
  revision: the compiler publishes one per policy event it folds, so a revision seen
  twice was folded twice.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import random
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import msgspec
import nats.errors
import redis.asyncio as aioredis
from nats.aio.client import Client
from nats.aio.msg import Msg

from tests.chaos.reference import Probe

REQUEST_TIMEOUT = 2.0


class Background:
    """A loop in a task, stopped by an event rather than by cancellation alone: on Python
    3.11 ``asyncio.wait_for`` (inside nats-py's request) swallows a cancellation that
    arrives with the reply, and a loop that lost its cancellation would run for ever."""

    def __init__(self) -> None:
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        self._stopping.set()
        task = self._task
        if task is None:
            return
        while not task.done():
            await asyncio.wait({task}, timeout=5.0)
            if not task.done():
                task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def cancel(self) -> None:
        self._stopping.set()
        if self._task is not None:
            self._task.cancel()


class Reply(msgspec.Struct, kw_only=True):
    sent: float
    received: float
    probe: Probe
    #: "ok", an error code (unavailable, stale, ...), "timeout" or "no_responders".
    outcome: str
    allowed: bool = False
    revision: int = 0
    final: bool = False


class _Body(msgspec.Struct):
    allowed: bool | None = None
    revision: int | None = None
    error: dict[str, str] | None = None


_body = msgspec.json.Decoder(_Body).decode


def _check(probe: Probe, min_revision: int | None = None) -> bytes:
    body: dict[str, object] = {"principal": {"username": probe[0]}, "action": "view",
                               "resource": {"type": "cluster", "name": probe[1]}}
    if min_revision is not None:
        body.update(min_revision=min_revision, timeout_ms=5000)
    return msgspec.json.encode(body)


async def ask(nc: Client, probe: Probe, *, min_revision: int | None = None,
              final: bool = False, timeout: float = REQUEST_TIMEOUT) -> Reply:
    sent = time.monotonic()
    try:
        msg = await nc.request("clearance.v1.check", _check(probe, min_revision),
                               timeout=timeout)
    except nats.errors.NoRespondersError:
        return Reply(sent=sent, received=time.monotonic(), probe=probe,
                     outcome="no_responders", final=final)
    except (TimeoutError, nats.errors.Error):
        return Reply(sent=sent, received=time.monotonic(), probe=probe, outcome="timeout",
                     final=final)
    received = time.monotonic()
    body = _body(msg.data)
    if body.error is not None or body.allowed is None or body.revision is None:
        code = (body.error or {}).get("code", "malformed")
        return Reply(sent=sent, received=received, probe=probe, outcome=code, final=final)
    return Reply(sent=sent, received=received, probe=probe, outcome="ok",
                 allowed=body.allowed, revision=body.revision, final=final)


class Checks(Background):
    def __init__(self, nc: Client, probes: Sequence[Probe], *, rate: float, seed: int) -> None:
        super().__init__()
        self._nc = nc
        self._probes = list(probes)
        self._rate = rate
        self._rng = random.Random(seed)
        self.replies: list[Reply] = []

    async def _run(self) -> None:
        pending: set[asyncio.Task[None]] = set()
        interval = 1.0 / self._rate
        next_at = time.monotonic()
        while not self._stopping.is_set():
            now = time.monotonic()
            while next_at <= now:
                task = asyncio.create_task(self._one(self._rng.choice(self._probes)))
                pending.add(task)
                task.add_done_callback(pending.discard)
                next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        if pending:  # each is bounded by its request timeout
            await asyncio.wait(pending, timeout=2 * REQUEST_TIMEOUT)

    async def _one(self, probe: Probe) -> None:
        self.replies.append(await ask(self._nc, probe))


class Checkpoints(Background):
    """``clr:rev`` sampled every 10 ms: for each sample, when its read was *sent* and the
    highest checkpoint seen so far. A read sent after a reply arrived returns at least the
    checkpoint of that moment, so it bounds the states the reply can reflect; a sample
    timed when its answer came back would not (a read in flight across the reply can
    return an older value)."""

    def __init__(self, redis_url: str) -> None:
        super().__init__()
        self._redis = aioredis.from_url(redis_url, socket_timeout=0.5,
                                        socket_connect_timeout=0.5)
        self.times: list[float] = []
        self.highest: list[int] = []
        self._floor = 0

    async def stop(self) -> None:
        await super().stop()
        await self._redis.aclose()

    async def _run(self) -> None:
        best = 0
        while not self._stopping.is_set():
            try:
                sent = time.monotonic()
                raw = await self._redis.get("clr:rev")
                best = max(best, int(raw or 0), self._floor)
                self.times.append(sent)
                self.highest.append(best)
            except Exception:  # the store may be down: that is the fault
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.01)

    def reached(self, checkpoint: int, since: float) -> None:
        """The checkpoint had reached ``checkpoint`` by a moment after ``since`` (read by
        a fault just before it wiped the store: the samples would never see the values
        reached between their last read and the wipe)."""
        self._floor = max(self._floor, checkpoint)
        for i in range(bisect.bisect_left(self.times, since), len(self.highest)):
            self.highest[i] = max(self.highest[i], checkpoint)

    def bound_after(self, when: float) -> int:
        """The highest checkpoint seen by the first read sent after ``when``."""
        index = bisect.bisect_left(self.times, when)
        if index >= len(self.highest):
            return max(self.highest[-1] if self.highest else 0, self._floor)
        return self.highest[index]


class StatusSamples(Background):
    """``clearance.v1.status`` every 50 ms: when the system first reached a revision."""

    def __init__(self, nc: Client) -> None:
        super().__init__()
        self._nc = nc
        self.samples: list[tuple[float, int]] = []

    async def _run(self) -> None:
        while not self._stopping.is_set():
            revision = await status_revision(self._nc)
            if revision is not None:
                self.samples.append((time.monotonic(), revision))
            await asyncio.sleep(0.05)

    def reached(self, revision: int, *, after: float) -> float | None:
        return next((t for t, r in self.samples if t >= after and r >= revision), None)


async def status_revision(nc: Client) -> int | None:
    try:
        reply = await nc.request("clearance.v1.status", b"{}", timeout=1.0)
    except (TimeoutError, nats.errors.Error):
        return None
    revision = msgspec.json.decode(reply.data, type=dict[str, Any]).get("revision")
    return revision if isinstance(revision, int) else None


class Statuses:
    def __init__(self) -> None:
        self.counts: Counter[tuple[str, int]] = Counter()

    async def subscribe(self, nc: Client) -> None:
        await nc.subscribe("clearance.status.monitoraccesspolicy.>", cb=self._on)

    async def _on(self, msg: Msg) -> None:
        with contextlib.suppress(msgspec.DecodeError):
            revision = msgspec.json.decode(msg.data, type=dict[str, object]).get("revision")
            if isinstance(revision, int):
                self.counts[(msg.subject, revision)] += 1

    def doubled(self, allowed: int) -> int:
        """Folds beyond ``allowed`` per (policy, revision)."""
        return sum(max(0, n - allowed) for n in self.counts.values())
