"""Load over NATS request-reply: throughput with requests in flight, latency one at a time."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def load(nc: Any, subject: str, bodies: list[bytes], *, seconds: float, inflight: int
               ) -> tuple[float, list[float]]:
    """(requests/s with ``inflight`` outstanding, latencies in ms)."""
    latencies: list[float] = []
    done = 0
    stop = time.perf_counter() + seconds

    async def worker(offset: int) -> None:
        nonlocal done
        i = offset
        while time.perf_counter() < stop:
            started = time.perf_counter()
            reply = await nc.request(subject, bodies[i % len(bodies)], timeout=10)
            latencies.append((time.perf_counter() - started) * 1000)
            if reply.data[:9] == b'{"error":':
                raise RuntimeError(reply.data.decode())
            done += 1
            i += inflight

    started = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(inflight)))
    return done / (time.perf_counter() - started), latencies


async def cpu_per_request(nc: Any, subject: str, bodies: list[bytes], pid: int, *,
                          seconds: float, inflight: int) -> float:
    """Microseconds of process ``pid``'s CPU per request answered, under ``inflight``
    outstanding for ``seconds``: unlike a rate, barely moved by what else the machine runs."""
    used = cpu_seconds(pid)
    started = time.perf_counter()
    rate, _ = await load(nc, subject, bodies, seconds=seconds, inflight=inflight)
    answered = rate * (time.perf_counter() - started)
    return 1e6 * (cpu_seconds(pid) - used) / answered


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


async def measure(nc: Any, subject: str, bodies: list[bytes], seconds: float, inflight: int
                  ) -> dict[str, float]:
    """Throughput with ``inflight`` outstanding (and the latencies under that load:
    ``loaded_p50_ms``, ``loaded_p99_ms``), then latency one at a time."""
    await load(nc, subject, bodies, seconds=0.5, inflight=inflight)  # warm up
    rate, loaded = await load(nc, subject, bodies, seconds=seconds, inflight=inflight)
    _, lat = await load(nc, subject, bodies, seconds=min(seconds, 3), inflight=1)
    return {"rps": rate, "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
            "loaded_p50_ms": pct(loaded, 50), "loaded_p99_ms": pct(loaded, 99)}


async def fastest(nc: Any, subject: str, body: bytes, runs: int = 3) -> float:
    """Best end-to-end time of one large request (seconds)."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        reply = await nc.request(subject, body, timeout=30)
        times.append(time.perf_counter() - started)
        assert b'"error"' not in reply.data[:20], reply.data[:200]
    return min(times)


async def warm(nc: Any, subject: str, bodies: list[bytes], inflight: int) -> None:
    """Ask every body once (``inflight`` at a time): a cache then holds every answer."""
    async def worker(offset: int) -> None:
        for body in bodies[offset::inflight]:
            await nc.request(subject, body, timeout=10)

    await asyncio.gather(*(worker(k) for k in range(inflight)))
