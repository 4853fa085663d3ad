"""Service heartbeats and the system revision (CONTRACT section 1, ``clearance.v1.status``).

Each service writes ``clr:svc:<name>`` (its revision and a heartbeat) about once a
second; a service is healthy while its heartbeat is younger than ``STALE_AFTER``. The
system revision is the invalidator's: every event up to it is compiled, indexed, and its
stale cache entries are gone.
"""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis

from clearance_core.errors import Stale, Unavailable
from clearance_runtime import keys, probes

SERVICES = ("watcher", "compiler", "cache-invalidator", "decision")
STALE_AFTER_MS = 5000
DEFAULT_TIMEOUT_MS = 2000


async def beat(redis: aioredis.Redis, service: str, revision: int, *, lag: int = 0) -> None:
    """Report the service alive at ``revision``, ``lag`` events behind its input; also
    what this process's ``/healthz`` and ``/readyz`` answer from (after the write
    succeeded, so a beat proves Redis reachable)."""
    await redis.hset(
        keys.service(service),
        mapping={"revision": revision, "heartbeat": int(time.time() * 1000), "lag": lag},
    )
    probes.beat(service, revision, lag)


async def services(redis: aioredis.Redis) -> dict[str, tuple[int, bool]]:
    """name -> (revision, healthy) for every service that ever reported."""
    now = int(time.time() * 1000)
    async with redis.pipeline(transaction=False) as pipe:
        for name in SERVICES:
            pipe.hgetall(keys.service(name))
        rows = await pipe.execute()
    found: dict[str, tuple[int, bool]] = {}
    for name, row in zip(SERVICES, rows, strict=True):
        if not row:
            continue
        revision = int(row.get(b"revision", 0))
        healthy = now - int(row.get(b"heartbeat", 0)) < STALE_AFTER_MS
        found[name] = (revision, healthy)
    return found


async def revision(redis: aioredis.Redis) -> int:
    return int(await redis.get(keys.INVALIDATED_REV) or 0)


def rebuilding(revision: int, built: bytes | str | int | None) -> Unavailable | None:
    """The error to answer while the compiled state is not whole: the store lost it
    (``clr:built`` gone: flushed, restarted empty, never built) or its rebuild has not
    yet reached the stream's end as it was when the rebuild began (``clr:built`` holds
    that sequence). Until then an answer could come from part of the state and carry a
    revision lower than one already announced; after it, both are whole again."""
    if built is None or built is False:
        return Unavailable("the compiled state is lost; it is being rebuilt from the stream")
    target = int(built)
    if revision < target:
        return Unavailable(f"the compiled state is being rebuilt from the stream "
                           f"(revision {revision} of {target})")
    return None


async def wait_for(redis: aioredis.Redis, minimum: int, timeout_ms: int | None) -> int:
    """Wait until the system revision reaches ``minimum``; Stale after the timeout."""
    timeout = (DEFAULT_TIMEOUT_MS if timeout_ms is None else max(timeout_ms, 0)) / 1000
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        current = await revision(redis)
        if current >= minimum:
            return current
        left = deadline - time.monotonic()
        if left <= 0:
            raise Stale(f"revision {current} has not reached min_revision {minimum} "
                        f"within {int(timeout * 1000)} ms")
        await asyncio.sleep(min(delay, left))
        delay = min(delay * 2, 0.01)
