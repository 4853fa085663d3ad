"""Sentinel failovers under a running Clearance, every reply checked: no wrong answer,
no revision going back, every change in force after; the stall measured.

(a) the primary is killed (kill -9) right after a Deny; the replica, which has it, is
promoted; the old primary comes back EMPTY and is demoted.
(b) the store goes back (what promoting a replica that missed the last writes does): it
is behind what was answered, and nothing may be answered from it until the compiler has
replayed the stream onto it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from clearance_runtime.process import servers
from tests.conftest import Servers
from tests.integration.harness import System, cluster, stop_task
from tests.support.policies import policy
from tests.support.valkeyha import ValkeyHA
from tests.support.waiting import until

#: Every change in force within this long of a Sentinel failover (the promotion), and
#: of a store gone back. Sentinel's own part comes before: with the deployed timing
#: (tests/support/valkeyha.py) it calls the primary down after 5 s without an answer,
#: then elects one of its own to promote the replica.
STALL_BOUND = 10.0
#: Seconds Sentinel may take from the kill to the promotion before the test gives up:
#: a failover attempt that does not complete is tried again only after twice its
#: failover-timeout (60 s deployed).
PROMOTION_WITHIN = 150.0


@pytest.fixture
def valkey_ha(tmp_path: Path) -> Iterator[ValkeyHA]:
    group = ValkeyHA(tmp_path / "ha")
    group.start()
    yield group
    group.stop()


@pytest.fixture
async def system(clean_servers: Servers, valkey_ha: ValkeyHA,
                 tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, valkey_ha.url, manifests)
    sys_.write("base.yaml", cluster("c1"),
               policy("allow", users=["alice"], default="all", priority=10))
    await sys_.start()
    await sys_.settle(timeout=30)
    yield sys_
    await sys_.close()


class Watch:
    """Asks the same check again and again, keeping every reply."""

    def __init__(self, system: System) -> None:
        self.system = system
        self.replies: list[tuple[float, dict[str, Any]]] = []
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            try:
                reply = await self.system.check("alice", "c1", timeout_ms=200)
            except Exception as exc:  # a request timed out while NATS-side work waits
                reply = {"error": {"code": "timeout", "message": repr(exc)}}
            self.replies.append((time.monotonic(), reply))
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        # Cancelled until it ends: on Python 3.11 a request's wait_for can swallow a
        # cancellation that arrives with its reply, and this loop then asked on for ever
        # (the test hung until pytest's timeout in two of six runs).
        await stop_task(self._task)

    def check(self, deny_at: int, since: float) -> float:
        """Every reply: no revision going back; from ``deny_at`` on, only deny; errors
        only ``unavailable`` (or a timeout); the stall: the longest run of
        non-answers after ``since``."""
        return self._check(deny_at, since)[0]

    def resumed(self, deny_at: int, since: float) -> float:
        """Seconds from ``since`` to the first answer after it (checked as above)."""
        return self._check(deny_at, since)[1]

    def _check(self, deny_at: int, since: float) -> tuple[float, float]:
        highest, stall, gap_from, first = 0, 0.0, None, None
        for at, reply in self.replies:
            if "decision" not in reply:
                assert reply["error"]["code"] in ("unavailable", "stale", "timeout"), reply
                if at >= since and gap_from is None:
                    gap_from = at
                continue
            if gap_from is not None:
                stall, gap_from = max(stall, at - gap_from), None
            if at >= since and first is None:
                first = at - since
            revision = reply["revision"]
            assert revision >= highest, f"revision went back: {revision} after {highest}"
            highest = revision
            if revision >= deny_at:
                assert reply["decision"] == "deny", reply
        assert highest >= deny_at, "the Deny was never answered after the failover"
        assert first is not None, "no answer after the failover"
        return stall, first


async def _until_denied(system: System, seq: int, timeout: float = 30.0) -> float:
    started = time.monotonic()
    while True:
        reply = await system.check("alice", "c1", min_revision=seq, timeout_ms=500)
        if reply.get("decision") == "deny":
            return time.monotonic() - started
        assert reply.get("decision") != "allow" or reply["revision"] < seq, reply
        assert time.monotonic() - started < timeout, reply
        await asyncio.sleep(0.02)


DENY = policy("deny", users=["alice"], default="all", effect="Deny", priority=1)


# Room for a failover Sentinel has to try again (PROMOTION_WITHIN) beyond the default 120 s.
@pytest.mark.timeout(PROMOTION_WITHIN + 60)
async def test_failover_with_the_old_primary_back_empty(
        system: System, valkey_ha: ValkeyHA) -> None:
    watch = Watch(system)
    try:
        seq = await system.apply("deny.yaml", DENY)
        await _until_denied(system, seq)
        await asyncio.to_thread(
            valkey_ha.wait, lambda: int(valkey_ha.client(1).get("clr:inval:rev") or 0) >= seq,
            what="the replica to have the Deny")
        killed = time.monotonic()
        valkey_ha.kill(0)
        await asyncio.to_thread(valkey_ha.wait, lambda: valkey_ha.primary_index() == 1,
                                timeout=PROMOTION_WITHIN, what="the promotion")
        promoted = time.monotonic()
        # Back empty, still calling itself a primary, until Sentinel demotes it.
        await asyncio.to_thread(valkey_ha.restart_empty, 0)
        await _until_denied(system, seq)
        # Clearance never wrote to it (no build marker of its own there): it follows
        # the primary Sentinel names, not the address it used to write to.
        with valkey_ha.client(0) as old:
            if valkey_ha.role(0) == "master":
                assert old.get("clr:built") is None
        # A change made after the failover is in force within the bound.
        later = await system.apply("later.yaml", policy("other", users=["bob"]))
        in_force = await _until_denied(system, later)
        await until(lambda: any(at > killed and "decision" in reply
                                for at, reply in watch.replies), what="a watched answer")
        await until(lambda: any(at > promoted and "decision" in reply
                                for at, reply in watch.replies), what="an answer after")
        stall = watch.check(seq, killed)
        after = watch.resumed(seq, promoted)
        stall_after = watch.check(seq, promoted)  # any gap that began after the promotion
    finally:
        await watch.stop()
    print(f"\nfailover (old primary back empty, down-after "
          f"{valkey_ha.timing.down_after_ms} ms): longest stall {stall:.2f} s, of which "
          f"Sentinel's promotion {promoted - killed:.2f} s and answers again "
          f"{after:.2f} s after it; next change in force {in_force:.2f} s after it was "
          f"published")
    assert after < STALL_BOUND and stall_after < STALL_BOUND
    assert in_force < STALL_BOUND


async def test_a_store_gone_back_answers_nothing_older(
        clean_servers: Servers, tmp_path: Path) -> None:
    """What a lagging replica's promotion looks like to Clearance, made deterministic:
    the store restarts from a copy taken before the Deny (its checkpoint, system
    revision and cache all older than what was answered)."""
    valkey, url = servers.valkey_server(tmp_path / "own-valkey", persist=False)
    valkey.start()
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    system = System(clean_servers.nats_url, url, manifests)
    system.write("base.yaml", cluster("c1"),
                 policy("allow", users=["alice"], default="all", priority=10))
    admin = redis.Redis.from_url(url)
    watch: Watch | None = None
    try:
        await system.start()
        await system.settle(timeout=30)
        assert (await system.check("alice", "c1"))["decision"] == "allow"  # cached too
        admin.save()  # the replica's copy: everything before the Deny
        watch = Watch(system)
        seq = await system.apply("deny.yaml", DENY)
        await _until_denied(system, seq)
        went_back = time.monotonic()
        valkey.kill()
        valkey.start()  # loads the older copy: the store went back
        assert int(admin.get("clr:rev") or 0) < seq
        back_in_force = await _until_denied(system, seq)
        await until(lambda: any(at > went_back and "decision" in reply
                                for at, reply in watch.replies), what="a watched answer")
        await watch.stop()
        stall = watch.check(seq, went_back)
    finally:
        if watch is not None:
            await watch.stop()
        admin.close()
        await system.close()
        valkey.stop()
    print(f"\nstore gone back (a lagging replica promoted): the Deny back in force "
          f"{back_in_force:.2f} s after, longest stall {stall:.2f} s")
    assert stall < STALL_BOUND
