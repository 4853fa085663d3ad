"""Waiting on a condition, never on a fixed sleep: a test goes on as soon as what it waits
for holds, and fails with a clear message when it does not within the bound."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(condition: Callable[[], object], timeout: float = 20.0, *,
                what: str = "condition") -> None:
    """Return as soon as ``condition()`` is truthy (polled every 20 ms); AssertionError
    after ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s")
        await asyncio.sleep(0.02)
