"""What ``/healthz`` and ``/readyz`` follow: liveness the process's own loops (in memory),
readiness its servers and conditions. Pure bookkeeping, so tested on the module itself;
the real outage is ``tests/integration/test_stop_and_probes.py``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from clearance_runtime.process import probes, retries
from clearance_runtime.process.servers import free_port


@pytest.fixture(autouse=True)
def no_loops() -> Iterator[None]:
    saved = dict(probes.LOOPS)
    probes.LOOPS.clear()
    token = probes.SERVICE.set(None)
    yield
    probes.SERVICE.reset(token)
    probes.LOOPS.clear()
    probes.LOOPS.update(saved)
    probes._ticked[0] = None


async def _refused() -> object:
    raise ConnectionRefusedError("connection refused")


async def _answered() -> object:
    return True


def test_a_loop_that_stopped_turning_fails_liveness_and_one_that_turns_passes() -> None:
    probes.register("compiler", connected=lambda: True, ping=_answered)
    probes.turn("compiler")
    assert probes.liveness() == {}
    probes.LOOPS["compiler"].turned = time.monotonic() - probes.LOOP_STALE_AFTER - 1
    assert "has not turned" in probes.liveness()["compiler"]
    probes.turn("compiler")
    assert probes.liveness() == {}


def test_a_store_that_refuses_fails_readiness_only() -> None:
    probes.register("decision", connected=lambda: True, ping=_refused)
    probes.turn("decision")
    assert probes.liveness() == {}
    problems = asyncio.run(probes.readiness(max_lag=10))
    assert problems["decision"].startswith("Valkey unreachable: ConnectionRefusedError")


def test_readiness_names_nats_the_hold_and_the_lag() -> None:
    connected = [False]
    probes.register("decision", connected=lambda: connected[0], ping=_answered)
    probes.turn("decision")
    assert asyncio.run(probes.readiness(10)) == {"decision": "not connected to NATS"}
    connected[0] = True
    assert asyncio.run(probes.readiness(10)) == {}
    probes.hold("decision", "the state store is behind")
    assert asyncio.run(probes.readiness(10)) == {"decision": "the state store is behind"}
    probes.hold("decision", None)
    probes.beat("decision", 5, 11)
    assert asyncio.run(probes.readiness(10)) == {"decision": "11 events behind (bound 10)"}


def test_a_service_without_a_store_is_never_held_by_one() -> None:
    probes.register("gateway", connected=lambda: True, ping=None)
    probes.turn("gateway")
    assert asyncio.run(probes.readiness(10)) == {}
    assert probes.connections() == {"nats": True, "redis": True}


def test_a_blocked_event_loop_fails_liveness(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probes, "STALE_AFTER", 0.3)

    async def main() -> dict[str, str]:
        server = asyncio.create_task(probes.serve(free_port(), max_lag=10))
        await asyncio.sleep(0.05)  # the ticker's first tick
        assert probes._ticked[0] is not None and probes.liveness() == {}
        time.sleep(0.6)  # noqa: ASYNC251 - the point: the loop is blocked, nothing ticks
        found = probes.liveness()
        server.cancel()
        return found

    assert "event-loop" in asyncio.run(main())


def test_every_retry_of_an_outage_turns_the_service_loop_it_runs_in() -> None:
    probes.register("cache-invalidator", connected=lambda: True, ping=_answered)
    probes.LOOPS["cache-invalidator"].turned = time.monotonic() - 100
    attempts = [0]

    async def flaky() -> int:
        attempts[0] += 1
        if attempts[0] < 3:
            raise ConnectionError("store gone")
        return attempts[0]

    assert asyncio.run(retries.forever("test", flaky)) == 3
    assert probes.liveness() == {}
