"""What the benchmark asks of each system it measures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loadgen import cpu_seconds as _one

#: Checks in a batch.
BATCH = 100


class Peer:
    """A system under test: how to ask it, and which processes are its server."""

    name: str

    def pids(self) -> list[int]:
        raise NotImplementedError

    async def answers(self, pairs: Sequence[tuple[int, int]]) -> list[bool]:
        raise NotImplementedError

    def single(self, pairs: Sequence[tuple[int, int]]) -> list[Any]:
        raise NotImplementedError

    def batch(self, groups: Sequence[tuple[int, list[int]]]) -> list[Any]:
        raise NotImplementedError

    async def ask(self, request: Any) -> None:
        raise NotImplementedError

    async def ask_batch(self, request: Any) -> None:
        raise NotImplementedError


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds the processes ``pids`` have used."""
    return sum(_one(pid) for pid in pids)
