"""Cache stores travel packed (one msgpack argument per script call): every blob size
and every byte survives, and each group of entries keeps its own fence."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from clearance_runtime.storage import keys
from clearance_runtime.storage.cache import DecisionCache, Entry
from tests.conftest import Servers


@pytest.mark.parametrize("size", [0, 31, 32, 255, 256, 65535, 65536, 200_000])
async def test_a_stored_blob_comes_back_byte_for_byte(clean_servers: Servers,
                                                      size: int) -> None:
    r = aioredis.Redis.from_url(clean_servers.redis_url)
    try:
        await r.mset({keys.REV: 7, keys.BUILT: "5:a"})
        cache = DecisionCache(r, ttl_seconds=60)
        blob = bytes(i % 256 for i in range(size))
        entry = Entry(key=keys.cache_entry("d"), blob=blob, ttl_ms=60_000,
                      indexes=(keys.cache_by_user("zoë *"), keys.cache_by_cluster("c:1")))
        assert await cache.store("7@5:a", [entry]) == 1
        assert await r.get(entry.key) == blob
        assert await r.smembers(keys.cache_by_user("zoë *")) == {entry.key.encode()}
        # Another state's entries are fenced out, in the same call or alone.
        assert await cache.store("6@5:a", [entry]) == 0
    finally:
        await r.aclose()


async def test_the_entry_list_follows_the_servers_clock(clean_servers: Servers,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # A decision host whose clock runs an hour behind (or ahead) still lists its entries
    # until they expire by the server's clock, as their PX does: the invalidator skips
    # its work when the list is empty, and the "all" invalidation deletes what it lists.
    r = aioredis.Redis.from_url(clean_servers.redis_url)
    try:
        await r.mset({keys.REV: 7, keys.BUILT: "5:a"})
        cache = DecisionCache(r, ttl_seconds=60)
        monkeypatch.setattr("time.time", lambda: 0.0)  # this process's clock: 1970
        entry = Entry(key=keys.cache_entry("skewed"), blob=b"x", ttl_ms=60_000,
                      indexes=(keys.cache_by_user("u"),))
        assert await cache.store("7@5:a", [entry]) == 1
        server_ms = (await r.time())[0] * 1000
        score = await r.zscore(keys.CACHE_ALL, entry.key)
        assert score is not None and abs(score - (server_ms + 60_000)) < 5_000
        assert await cache.entries() == 1
    finally:
        await r.aclose()
