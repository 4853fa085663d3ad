"""Fixtures of the fuzz suite: one running Clearance per test module.

The fuzz tests are synchronous Hypothesis tests; each example drives the system through
:class:`Driver` (its own event loop, run for the length of one burst). The system is
``clearance run all`` in a child process on the session's real NATS and Valkey
(``real_servers``), reset to an empty stream and store, with the example fleet loaded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.conftest import Servers
from tests.fuzz.live import Goods, LiveSystem, Sentinel
from tests.fuzz.oracle import Finding

T = TypeVar("T")


class Driver:
    def __init__(self, system: LiveSystem, *, bound: float) -> None:
        self.loop = asyncio.new_event_loop()
        self.system = system
        self.goods = Goods()
        self.sentinel = Sentinel(bound=bound)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def start(self) -> None:
        self.run(self.system.start())
        self.run(self.goods.record(self.system))

    def recover(self) -> None:
        """After a failed example: start over on empty state if the system is wedged or
        dead, so one bug does not fail every later example of the module."""
        if self.run(self.healthy()):
            return
        self.run(self.system.restart())
        self.run(self.goods.record(self.system))
        self.sentinel = Sentinel(bound=self.sentinel.bound)

    async def healthy(self) -> bool:
        if not self.system.alive():
            return False
        probe = await self.system.ask("clearance.v1.check", {
            "principal": {"username": "fuzz-sentinel-user"}, "action": "view",
            "resource": {"type": "cluster", "name": "prod-us-east"},
            "min_revision": await self.system.stream_last_seq(), "timeout_ms": 1000},
            timeout=2.0)
        return isinstance(probe, dict) and "decision" in probe

    def close(self) -> None:
        self.run(self.system.close())
        self.loop.close()


def report(findings: list[Finding]) -> str:
    return "\n".join(str(f) for f in findings[:10])


@pytest.fixture(scope="module")
def live(request: pytest.FixtureRequest, real_servers: Servers,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driver]:
    """The running system of one test module. ``FUZZ_TIMEOUT`` in the module (default 5 s)
    is both how long a reply may take and how long the sentinel may take to flip —
    generous: both take milliseconds on a healthy system."""
    timeout = float(getattr(request.module, "FUZZ_TIMEOUT", 5.0))
    workdir: Path = tmp_path_factory.mktemp("fuzz")
    system = LiveSystem(real_servers.nats_url, real_servers.redis_url, workdir,
                        reply_timeout=timeout)
    driver = Driver(system, bound=timeout)
    driver.start()
    yield driver
    driver.close()
