"""Supervision: a service that fails is restarted with back-off and counted; one whose
NATS connection was closed for good is restarted, not left retrying."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest
import stamina

from clearance_cli import services
from clearance_cli.services import ConnectionClosed, _closed_watch
from clearance_runtime.process import metrics, retries


class FakeConnection:
    is_closed = False


async def test_a_closed_connection_ends_the_run_so_the_supervisor_restarts_it() -> None:
    nc: Any = FakeConnection()
    work = asyncio.create_task(asyncio.sleep(30))
    watch = asyncio.create_task(_closed_watch(nc, work))
    await asyncio.sleep(0.05)
    assert not watch.done()
    nc.is_closed = True
    with pytest.raises(ConnectionClosed):
        await asyncio.wait_for(watch, 3)
    work.cancel()


class Runs:
    """A service's runs: each of ``outcomes`` in turn (an error raised after ``seconds``),
    then a run that ends by itself."""

    def __init__(self, *outcomes: tuple[float, Exception]) -> None:
        self.outcomes = list(outcomes)
        self.started: list[float] = []

    async def __call__(self, name: str, settings: Any) -> None:
        self.started.append(time.monotonic())
        if self.outcomes:
            seconds, error = self.outcomes.pop(0)
            await asyncio.sleep(seconds)
            raise error


async def test_a_failing_service_is_restarted_with_back_off_and_counted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Runs((0, RuntimeError("defect")), (0, KeyError("another")))
    monkeypatch.setattr(services, "_run_once", runs)
    monkeypatch.setattr(retries, "FAILURE", retries.Backoff(first=0.1, most=10.0))
    restarts = metrics.SERVICE_RESTARTS.labels(service="compiler")
    before = restarts._value.get()

    planned: list[float] = []  # the back-off's own waits: a loaded machine adds to them
    hooks = stamina.instrumentation.get_on_retry_hooks()
    stamina.instrumentation.set_on_retry_hooks(
        [*hooks, lambda details: planned.append(details.wait_for)])
    try:
        await asyncio.wait_for(services.run_service("compiler", None), 5)  # type: ignore[arg-type]
    finally:
        stamina.instrumentation.set_on_retry_hooks(hooks)

    assert len(runs.started) == 3
    assert restarts._value.get() == before + 2
    # Doubling from 0.1 s, each with up to 0.1 s of jitter, and actually waited.
    assert len(planned) == 2
    assert 0.1 <= planned[0] <= 0.2 and 0.2 <= planned[1] <= 0.3, planned
    waited = [b - a for a, b in itertools.pairwise(runs.started)]
    assert all(w >= p - 0.01 for w, p in zip(waited, planned, strict=True)), (waited, planned)


async def test_a_service_that_failed_after_a_healthy_spell_restarts_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Runs((0.2, RuntimeError("after a while")))
    monkeypatch.setattr(services, "_run_once", runs)
    monkeypatch.setattr(services, "HEALTHY_SPELL", 0.1)
    monkeypatch.setattr(retries, "FAILURE", retries.Backoff(first=30.0, most=30.0))

    await asyncio.wait_for(services.run_service("decision", None), 5)  # type: ignore[arg-type]

    assert len(runs.started) == 2
    assert runs.started[1] - runs.started[0] < 0.5
