"""Invalidation cost against the number of cached decisions (issue: cost that does not
grow with the fleet): one user's entries removed while 10,000 or 1,000,000 other entries
are cached. Run alone: ``python bench/invalidation_scale.py``."""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from clearance_runtime.process import servers
from clearance_runtime.storage import keys
from clearance_runtime.storage.cache import DecisionCache, Entry
from clearance_runtime.storage.invalidation import Invalidation


async def fill(cache: DecisionCache, start: int, count: int) -> None:
    chunk = 2000
    for base in range(start, start + count, chunk):
        entries = [Entry(key=keys.cache_entry(f"e{i}"), blob=b"x" * 120, ttl_ms=3_600_000,
                         indexes=(keys.cache_by_user(f"u{i % 10_000}"),
                                  keys.cache_by_group(f"g{i % 500}"),
                                  keys.cache_by_cluster(f"c{i % 200}")))
                   for i in range(base, min(base + chunk, start + count))]
        await cache.store("1@1:b", entries)


async def main() -> None:
    srv, url = servers.valkey_server(Path(tempfile.mkdtemp()), persist=False)
    srv.start()
    r = aioredis.Redis.from_url(url)
    try:
        await r.mset({keys.REV: 1, keys.BUILT: "1:b"})
        cache = DecisionCache(r, ttl_seconds=3600)
        invalidation = Invalidation(r)
        cached = 0
        for total in (10_000, 1_000_000):
            await fill(cache, cached, total - cached)
            cached = total
            times = []
            for n in range(20):  # a user with 100 entries of its own, removed each time
                victims = [Entry(key=keys.cache_entry(f"v{n}-{j}"), blob=b"x" * 120,
                                 ttl_ms=3_600_000,
                                 indexes=(keys.cache_by_user(f"victim{n}"),))
                           for j in range(100)]
                await cache.store("1@1:b", victims)
                started = time.perf_counter()
                [removed] = await invalidation.apply(
                    [("i", [keys.cache_by_user(f"victim{n}")], ["0", "0"])])
                times.append((time.perf_counter() - started) * 1000)
                assert removed == 100
            used = int((await r.info("memory"))["used_memory"]) / 2**20
            print(f"{total:>9,} cached: removing one user's 100 entries takes "
                  f"{statistics.median(times):.2f} ms (median of 20); Valkey {used:.0f} MiB",
                  flush=True)
    finally:
        await r.aclose()
        srv.stop()


if __name__ == "__main__":
    asyncio.run(main())
