"""What the benchmark asks of each system it measures."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

from loadgen import cpu_seconds as _one

#: Checks in a batch.
BATCH = 100


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
