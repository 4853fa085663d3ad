"""Clearance and the NATS echo, as peers of the benchmark (``bench/run.py``'s harness)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import facts
import msgspec
import nats
import redis.asyncio as aioredis
import run as bench_run  # bench/run.py: servers, processes, teardown
from peer import BATCH, Peer, Served, each

from clearance_runtime.messaging import bus
from clearance_runtime.storage import keys

_decode = msgspec.json.Decoder().decode


def _check(u: int, i: int) -> dict[str, Any]:
    return {"principal": {"username": facts.user(u)}, "action": "view",
            "resource": {"type": "cluster", "name": facts.cluster(i)}}


class ClearancePeer(Peer):
    name = "Clearance"

    def __init__(self, nc: Any, pids: list[int]) -> None:
        self.nc = nc
        self._pids = pids

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls, state: Path) -> AsyncIterator[ClearancePeer]:
        del state  # bench/run.py makes its own directory
        srv = bench_run.start_servers("clearance-peers-")
        procs = [bench_run.spawn([bench_run.CLEARANCE, "run", name], srv.env)
                 for name in ("compiler", "cache-invalidator", "decision")]
        procs.append(bench_run.spawn(
            [sys.executable, str(Path(bench_run.__file__).parent / "echo.py"), srv.nats_url,
             "bench.echo"], srv.env))
        try:
            nc = await nats.connect(srv.nats_url)
            js = nc.jetstream()
            await bus.ensure_stream(js)
            objects = facts.clearance_objects()
            await bench_run.publish_objects(js, objects)
            r = aioredis.from_url(srv.redis_url)
            await bench_run.invalidated_past(r, len(objects), 0.05)
            while not await r.exists(keys.service_replicas("decision")):  # noqa: ASYNC110 - beats
                await asyncio.sleep(0.05)
            await r.aclose()
            peer = cls(nc, [srv.nats.proc.pid, srv.valkey.proc.pid, procs[2].pid])
            peer.echo_pids = [srv.nats.proc.pid, procs[3].pid]
            peer.redis_url = srv.redis_url
            yield peer
            await nc.close()
        finally:
            bench_run.teardown(procs, [srv.valkey, srv.nats])

    echo_pids: list[int]
    redis_url: str

    def pids(self) -> list[int]:
        return self._pids

    async def _request(self, subject: str, body: bytes) -> bytes:
        reply = await self.nc.request(subject, body, timeout=10)
        data: bytes = reply.data
        if data[:9] == b'{"error":':
            raise RuntimeError(data.decode())
        return data

    async def answers(self, pairs: Sequence[tuple[int, int]]) -> list[bool]:
        replies = await each(functools.partial(self._request, "clearance.v1.check"),
                             self.single(pairs))
        return [bool(_decode(r)["allowed"]) for r in replies]

    def single(self, pairs: Sequence[tuple[int, int]]) -> list[bytes]:
        return [msgspec.json.encode(_check(u, i)) for u, i in pairs]

    def batch(self, groups: Sequence[tuple[int, list[int]]]) -> list[bytes]:
        return [msgspec.json.encode({
            "principal": {"username": facts.user(u)},
            "checks": [{"action": "view", "resource": {"type": "cluster",
                                                      "name": facts.cluster(i)}}
                       for i in clusters]}) for u, clusters in groups]

    async def ask(self, request: bytes) -> None:
        await self._request("clearance.v1.check", request)

    async def ask_batch(self, request: bytes) -> None:
        reply = await self._request("clearance.v1.check.batch", request)
        assert reply.count(b'"decision"') == BATCH, reply[:200]


class Echo(Served):
    """The baseline: the same client's request to a responder that only echoes."""

    name = "NATS echo"

    def __init__(self, clearance: ClearancePeer) -> None:
        self.nc = clearance.nc
        self._pids = clearance.echo_pids

    def pids(self) -> list[int]:
        return self._pids

    def bodies(self) -> list[bytes]:
        return [msgspec.json.encode(_check(u, i)) for u, i in
                [((k * 37) % 1000, (k * 7) % facts.CLUSTERS) for k in range(2000)]]

    async def ask(self, request: bytes) -> None:
        await self.nc.request("bench.echo", request, timeout=10)
