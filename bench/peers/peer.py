"""What the benchmark asks of each system it measures."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from loadgen import cpu_seconds as _one

#: Checks in a batch.
BATCH = 100
#: Reference questions outstanding at once, as many as the single-check shapes keep in
#: flight. Asked all at once (2,400), they overran the SpiceDB host: gRPC's server core
#: holds calls its application has not yet taken in a queue, and past 1,000 of them
#: (``grpc.server.max_pending_requests``; every call past 3,000) rejects new ones at
#: random, which the client sees as CANCELLED; the host's Python server takes calls from
#: that queue one by one, so a burst of thousands fills it.
ASKING = 64

_T = TypeVar("_T")
_R = TypeVar("_R")


class Served(abc.ABC):
    """Something timed: how to ask it one request, and which processes serve it (their
    CPU is the server CPU). The NATS echo is one; each peer is one too."""

    name: str

    @abc.abstractmethod
    def pids(self) -> list[int]: ...

    @abc.abstractmethod
    async def ask(self, request: Any) -> None: ...


class Peer(Served):
    """A system under test: beside being asked, it answers the reference questions and
    builds its own requests for single checks and batches."""

    @abc.abstractmethod
    async def answers(self, pairs: Sequence[tuple[int, int]]) -> list[bool]: ...

    @abc.abstractmethod
    def single(self, pairs: Sequence[tuple[int, int]]) -> list[Any]: ...

    @abc.abstractmethod
    def batch(self, groups: Sequence[tuple[int, list[int]]]) -> list[Any]: ...

    @abc.abstractmethod
    async def ask_batch(self, request: Any) -> None: ...


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds the processes ``pids`` have used."""
    return sum(_one(pid) for pid in pids)


async def each(call: Callable[[_R], Awaitable[_T]], requests: Sequence[_R],
               at_once: int = ASKING) -> list[_T]:
    """``call`` on every request, at most ``at_once`` outstanding, results in order.
    Takes the function, not awaitables made up front: a grpc.aio call starts when it is
    made, so a list of them would all be in flight before any gate."""
    gate = asyncio.Semaphore(at_once)

    async def one(request: _R) -> _T:
        async with gate:
            return await call(request)

    return await asyncio.gather(*(one(r) for r in requests))
