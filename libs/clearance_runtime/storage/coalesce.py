"""Requests issued in one event-loop iteration, sent to Redis as one call.

The decision service answers the checks that arrived together concurrently, so their
cache misses reach the snapshot read and the cache write in the same iteration. Each of
those was one script call per request; with 64 requests in flight the Redis client's
per-command cost (packing, a write syscall, a reply future) was the larger part of a
miss (see docs/performance.md). A :class:`Coalescer` queues the items submitted
before the loop gets back to its callbacks and hands them, in chunks, to one function
that answers all of them with one round trip.

Each item's caller gets its own result; a failure of the round trip is every item's
failure (a store outage fails every request of the call: ``unavailable``, never an
answer made without the store).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Coalescer(Generic[T, R]):
    """``await submit(item)``: the result ``run`` gave it, ``run`` being called with
    every item submitted in the same iteration, at most ``chunk`` at a time (a bound on
    how long one script may hold the single-threaded store)."""

    def __init__(self, run: Callable[[Sequence[T]], Awaitable[Sequence[R]]], *,
                 chunk: int) -> None:
        self._run = run
        self._chunk = chunk
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.append((item, future))
        return await future

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        loop = asyncio.get_running_loop()
        for start in range(0, len(batch), self._chunk):
            task = loop.create_task(self._send(batch[start : start + self._chunk]))
            self._tasks.add(task)  # held until done: the loop keeps only weak references
            task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self._run([item for item, _ in batch])
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        except BaseException:  # cancelled (the service stops): so are its callers
            for _, future in batch:
                future.cancel()
            raise
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
