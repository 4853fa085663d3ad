"""The system under test for the freshness machine: the compiler, the cache-invalidator
and the decision service running in this process (``tests.integration.harness.System``)
on the session's real NATS and Valkey, fed straight through JetStream.

Events go to the stream directly (as any producer may), not through the watcher: the
acknowledged sequence of each is its revision, known the moment it is published, and
nothing polls a directory. The machine is synchronous (Hypothesis), so the driver owns an
event loop and runs one coroutine per step; the services run whenever that loop does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

import msgspec
import nats
import nats.js.errors
import redis.asyncio as aioredis

from clearance_api.wire import EVENTS_STREAM
from tests.conftest import Servers
from tests.freshness.world import Key, subject_of
from tests.integration.harness import System
from tests.support.streams import delete_streams

T = TypeVar("T")
#: How long a request may wait for its min_revision. Generous: on a loaded machine the
#: compiler and the invalidator may lag by seconds, and lagging is not what is tested —
#: an answer older than its min_revision, or stale after it, is.
WAIT_MS = 30_000


class Driver:
    def __init__(self, servers: Servers) -> None:
        self.servers = servers
        self.loop = asyncio.new_event_loop()
        self.system = System(servers.nats_url, servers.redis_url, None)
        #: The objects the stream holds now, across examples (each example starts by
        #: deleting the previous one's).
        self.live: dict[Key, dict[str, Any]] = {}
        self.last = 0  # the sequence of the last event published
        #: The events of the current example ("<revision> <type> <kind> <ns>/<name>").
        self.events: list[str] = []
        #: Every broken promise, with the events that led to it: the test reports the
        #: first (a timing-dependent failure may not recur when Hypothesis replays it).
        self.failures: list[str] = []

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    async def start(self) -> None:
        """An empty stream and store, then the three services that answer from them."""
        await delete_streams(self.servers.nats_url, EVENTS_STREAM,
                             state_dir=self.servers.root / "nats")
        r = aioredis.from_url(self.servers.redis_url)
        await r.flushall()
        await r.aclose()
        await self.system.start("compiler", "cache-invalidator", "decision")
        assert self.system.nc is not None
        js = self.system.nc.jetstream()
        for _ in range(200):  # the compiler creates the stream
            try:
                await js.stream_info(EVENTS_STREAM)
                break
            except nats.js.errors.NotFoundError:
                await asyncio.sleep(0.05)
        await self.system.settle()

    async def publish(self, key: Key, obj: dict[str, Any], *, deleted: bool = False) -> int:
        """Append one event; returns its revision."""
        assert self.system.nc is not None
        kind = "DELETED" if deleted else ("MODIFIED" if key in self.live else "ADDED")
        body = msgspec.json.encode({"type": kind, "object": obj})
        ack = await self.system.nc.jetstream().publish(subject_of(key), body,
                                                       stream=EVENTS_STREAM, timeout=30.0)
        if deleted:
            self.live.pop(key, None)
        else:
            self.live[key] = obj
        self.last = max(self.last, int(ack.seq))
        self.events.append(f"{ack.seq} {kind} {key[0]} {key[1]}/{key[2]}")
        return int(ack.seq)

    def fail(self, message: str) -> None:
        self.failures.append(f"{message}\nevents of this example:\n  "
                             + "\n  ".join(self.events))
        raise AssertionError(message)

    def replied(self, what: str, reply: dict[str, Any], revision: int) -> None:
        """A reply, not an error, from state at ``revision`` or later."""
        if "error" in reply:
            self.fail(f"{what}: error reply {reply}")
        if reply.get("revision", -1) < revision:
            self.fail(f"{what}: revision {reply.get('revision')} < min_revision {revision}")

    def expect(self, what: str, got: Any, want: Callable[[float], Any],
               moments: Iterable[float]) -> None:
        """``got`` must be the fresh answer at one of ``moments``: those at which the
        answers can differ while the request was out (see :meth:`World.moments`)."""
        expected = None
        for moment in moments:  # usually the first matches: evaluate no further
            expected = want(moment)
            if got == expected:
                return
        self.fail(f"{what}: the answer is not what the current state says\n"
                  f"  got:      {got}\n  expected: {expected}")

    async def clear(self) -> None:
        """Delete every object the stream holds (the next example starts empty)."""
        for key, obj in sorted(self.live.items()):
            await self.publish(key, obj, deleted=True)

    async def ask(self, subject: str, body: dict[str, Any], *, min_revision: int | None = None,
                  ) -> dict[str, Any]:
        if min_revision is not None:
            body = {**body, "min_revision": min_revision, "timeout_ms": WAIT_MS}
        return await self.system.request(subject, body, timeout=WAIT_MS / 1000 + 15)

    def close(self) -> None:
        self.run(self._stop())
        self.loop.close()

    async def _stop(self) -> None:
        """Stop the services, however they take it. Python 3.11's ``wait_for`` (inside
        the NATS and Redis clients) can swallow a cancellation that lands as its result
        arrives, and the service loop that called it runs on: cancel again until it
        ends (every task of this loop: the one running on may sit deep inside)."""
        services = list(self.system.tasks.values())
        self.system.tasks.clear()
        await self.system.close()  # the test's own connection
        for task in services:
            task.cancel()
        _, pending = await asyncio.wait(services, timeout=3.0)
        deadline = self.loop.time() + 10.0
        while pending and self.loop.time() < deadline:
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
            _, pending = await asyncio.wait(pending, timeout=0.5)
