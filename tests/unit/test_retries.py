"""The one retry policy: what it retries, how it waits, and that a stop interrupts it."""

from __future__ import annotations

import asyncio
import time

import nats.errors
import pytest
import redis.exceptions
import structlog.testing

from clearance_api.errors import LostSync
from clearance_runtime.process import retries

QUICK = retries.Backoff(first=0.01, most=0.04)


class Flaky:
    """Fails with each of ``errors`` in turn, then answers ``done``."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> structlog.testing.CapturingLogger:
    logger = structlog.testing.CapturingLogger()
    monkeypatch.setattr(retries, "log", logger)
    return logger


async def test_outages_are_retried_until_the_call_succeeds(
        captured: structlog.testing.CapturingLogger) -> None:
    outages = (nats.errors.TimeoutError(), redis.exceptions.ConnectionError("gone"),
               OSError("refused"), LostSync("flushed"), redis.exceptions.ResponseError("LOADING"))
    call = Flaky(*outages)
    counted = retries.RETRIES.labels(what="test outage")._value.get()

    assert await retries.forever("test outage", call, backoff=QUICK, subject="s") == "done"

    assert call.calls == len(outages) + 1
    lines = [c.kwargs for c in captured.calls if c.args == ("retrying",)]
    assert [line["attempt"] for line in lines] == [1, 2, 3, 4, 5]
    assert all(line["what"] == "test outage" and line["subject"] == "s" for line in lines)
    assert lines[1]["error"] == "ConnectionError: gone"
    # Exponential with jitter, never past the most.
    assert QUICK.first <= lines[0]["retry_in"] <= 2 * QUICK.first
    assert all(line["retry_in"] <= QUICK.most for line in lines)
    assert retries.RETRIES.labels(what="test outage")._value.get() == counted + len(outages)


@pytest.mark.parametrize("error", [ValueError("a defect"),
                                   redis.exceptions.ResponseError("WRONGTYPE"),
                                   redis.exceptions.DataError("cannot encode")])
async def test_anything_but_an_outage_is_raised_at_once(error: Exception) -> None:
    call = Flaky(error, error)
    with pytest.raises(type(error)):
        await retries.forever("test defect", call, backoff=QUICK)
    assert call.calls == 1


async def test_any_error_retries_defects_too() -> None:
    call = Flaky(ValueError("a defect"), KeyError("k"))
    assert await retries.forever("test any", call, on=retries.any_error, backoff=QUICK) == "done"
    assert call.calls == 3


async def test_a_stop_interrupts_the_back_off_at_once() -> None:
    long_wait = retries.Backoff(first=30.0, most=30.0)
    task = asyncio.create_task(
        retries.forever("test stop", Flaky(OSError("down")), backoff=long_wait))
    await asyncio.sleep(0.1)  # failed once; now waiting 30 s before trying again
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 0.5


async def test_a_cancellation_is_never_retried() -> None:
    call = Flaky(asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        await retries.forever("test cancel", call, on=retries.any_error, backoff=QUICK)
    assert call.calls == 1
