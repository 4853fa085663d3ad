"""Reads and stores issued together share one round trip; each caller gets its own
answer, and a failed round trip fails every caller (never an answer without the store)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
import redis.exceptions

from clearance_runtime.storage.coalesce import Coalescer


async def test_concurrent_items_share_one_call_in_chunks_and_keep_their_answers() -> None:
    calls: list[list[int]] = []

    async def run(items: Sequence[int]) -> list[int]:
        calls.append(list(items))
        return [i * 10 for i in items]

    coalescer: Coalescer[int, int] = Coalescer(run, chunk=3)
    answers = await asyncio.gather(*(coalescer.submit(i) for i in range(7)))
    assert answers == [i * 10 for i in range(7)]
    assert calls == [[0, 1, 2], [3, 4, 5], [6]]
    assert await coalescer.submit(9) == 90  # a later item: a call of its own
    assert calls[-1] == [9]


async def test_a_failed_call_fails_every_item_of_it() -> None:
    async def run(items: Sequence[int]) -> list[int]:
        raise redis.exceptions.ConnectionError("store down")

    coalescer: Coalescer[int, int] = Coalescer(run, chunk=64)
    answers = await asyncio.gather(*(coalescer.submit(i) for i in range(5)),
                                   return_exceptions=True)
    assert all(isinstance(a, redis.exceptions.ConnectionError) for a in answers)


async def test_a_caller_that_gave_up_does_not_disturb_the_others() -> None:
    release = asyncio.Event()

    async def run(items: Sequence[int]) -> list[int]:
        await release.wait()
        return list(items)

    coalescer: Coalescer[int, int] = Coalescer(run, chunk=64)
    impatient = asyncio.ensure_future(coalescer.submit(1))
    patient = asyncio.ensure_future(coalescer.submit(2))
    await asyncio.sleep(0)
    impatient.cancel()
    release.set()
    assert await patient == 2
    with pytest.raises(asyncio.CancelledError):
        await impatient
