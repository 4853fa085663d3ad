"""Service heartbeats and the system revision
(docs/api/events.md; docs/api/decisions.md: ``clearance.v1.status``).

Each service writes ``clr:svc:<name>`` (its revision and a heartbeat) about once a
second; a service is healthy while its heartbeat is younger than ``STALE_AFTER``. The
system revision is the invalidator's: every event up to it is compiled, indexed, and its
stale cache entries are gone.

A service that runs as several active replicas (the decision service) beats per replica,
``clr:svc:<name>@<id>``, so one replica's beat never hides another's silence in the
store; the status reports the freshest (the service answers while any replica does).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from typing import NamedTuple

import msgspec
import redis.asyncio as aioredis

from clearance_api.errors import Stale, Unavailable
from clearance_runtime.process import metrics, probes
from clearance_runtime.storage import keys

SERVICES = ("watcher", "compiler", "cache-invalidator", "decision")
#: Services whose every process is active at once, each beating under its own id.
REPLICATED = frozenset({"decision"})
STALE_AFTER_MS = 5000
#: A replica silent this long is forgotten (its key removed): it was stopped or replaced.
FORGET_AFTER_MS = 10 * 60 * 1000
DEFAULT_TIMEOUT_MS = 2000


def stop_if_asked() -> None:
    """Raise ``CancelledError`` if the current task was asked to stop.

    On Python 3.11 ``asyncio.wait_for`` inside a client (redis-py, nats-py) can lose a
    cancellation that arrives with its reply; the task's ``cancelling()`` count still
    says it was asked. A loop in a TaskGroup then ran on while its group waited for it
    (the group cancels each child once): a stop that never ended. Every service loop
    calls this once a turn (``beat`` does)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def replica_id() -> str:
    """This process's id among a service's replicas (host, pid and a random part, as a
    lease holder's)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


async def beat(redis: aioredis.Redis, service: str, revision: int, *, lag: int = 0,
               consumer: str | None = None, replica: str | None = None) -> None:
    """Report the service alive at ``revision``, ``lag`` events behind its input (read
    from ``consumer``, when it has one) — as ``replica`` of it, when given; also what
    this process's ``/healthz``, ``/readyz`` and ``/metrics`` answer from (after the
    write succeeded, so a beat proves Redis reachable)."""
    at = int(time.time() * 1000)
    if replica is None:
        await redis.hset(keys.service(service),
                         mapping={"revision": revision, "heartbeat": at, "lag": lag})
    else:
        async with redis.pipeline(transaction=False) as pipe:
            pipe.hset(keys.service_replica(service, replica),
                      mapping={"revision": revision, "heartbeat": at, "lag": lag})
            pipe.sadd(keys.service_replicas(service), replica)
            await pipe.execute()
    probes.beat(service, revision, lag)
    # Every service loop beats, so this is where a stop that was swallowed is honoured.
    stop_if_asked()
    metrics.REVISION.labels(service=service).set(revision)
    if consumer is not None:
        metrics.CONSUMER_LAG.labels(service=service, consumer=consumer).set(lag)


class ServiceHealth(NamedTuple):
    """One service as its last heartbeat in the store shows it."""

    revision: int
    healthy: bool
    lag: int
    heartbeat_age_s: float


async def services(redis: aioredis.Redis) -> dict[str, ServiceHealth]:
    """name -> its health, for every service that ever reported (a replicated one's
    freshest replica, or its shared key as written before replicas beat apart)."""
    now = int(time.time() * 1000)
    replicated = sorted(REPLICATED)
    async with redis.pipeline(transaction=False) as pipe:
        for name in SERVICES:
            pipe.hgetall(keys.service(name))
        for name in replicated:
            pipe.smembers(keys.service_replicas(name))
        found_rows = await pipe.execute()
    rows: dict[str, list[dict[bytes, bytes]]] = {
        name: [row] if row else [] for name, row in zip(SERVICES, found_rows, strict=False)}
    members = {name: sorted(m.decode() if isinstance(m, bytes) else str(m) for m in ids)
               for name, ids in zip(replicated, found_rows[len(SERVICES):], strict=True)}
    if any(members.values()):
        async with redis.pipeline(transaction=False) as pipe:
            for name in replicated:
                for replica in members[name]:
                    pipe.hgetall(keys.service_replica(name, replica))
            replica_rows = iter(await pipe.execute())
        gone: list[tuple[str, str]] = []
        for name in replicated:
            for replica in members[name]:
                row = next(replica_rows)
                if not row or now - int(row.get(b"heartbeat", 0)) > FORGET_AFTER_MS:
                    gone.append((name, replica))
                else:
                    rows[name].append(row)
        if gone:
            await _forget(redis, gone)
    found: dict[str, ServiceHealth] = {}
    for name in SERVICES:
        if not rows[name]:
            continue
        row = max(rows[name], key=lambda r: int(r.get(b"heartbeat", 0)))
        age_ms = max(now - int(row.get(b"heartbeat", 0)), 0)
        found[name] = ServiceHealth(revision=int(row.get(b"revision", 0)),
                                    healthy=age_ms < STALE_AFTER_MS,
                                    lag=int(row.get(b"lag", 0)),
                                    heartbeat_age_s=round(age_ms / 1000, 3))
    return found


async def _forget(redis: aioredis.Redis, gone: list[tuple[str, str]]) -> None:
    async with redis.pipeline(transaction=False) as pipe:
        for name, replica in gone:
            pipe.srem(keys.service_replicas(name), replica)
            pipe.delete(keys.service_replica(name, replica))
        await pipe.execute()


async def publish_census(redis: aioredis.Redis, census: dict[str, dict[str, int]]) -> None:
    """The active compiler's policies by state (``clearance_core.folding.census``), for
    ``clearance.v1.status``."""
    await redis.set(keys.CENSUS, msgspec.json.encode(census))


def read_census(blob: bytes | str | None) -> dict[str, dict[str, int]] | None:
    """A published census (None: no compiler has published one, or an unreadable one)."""
    if blob is None:
        return None
    try:
        return _census(blob)
    except msgspec.DecodeError:
        return None


_census = msgspec.json.Decoder(dict[str, dict[str, int]]).decode


async def revision(redis: aioredis.Redis) -> int:
    return int(await redis.get(keys.INVALIDATED_REV) or 0)


def build_target(built: bytes | str | int) -> int:
    """The stream sequence a build must reach: ``clr:built`` is "<target>:<build id>"
    (a bare number from before builds carried an id)."""
    text = built.decode() if isinstance(built, bytes) else str(built)
    return int(text.partition(":")[0])


class Probe(NamedTuple):
    """Where the store stands, read in one round trip: the compiler's checkpoint
    (``clr:rev``), the build marker (``clr:built``) and the system revision."""

    rev: str
    built: bytes | None
    revision: int

    @classmethod
    def of(cls, rev: bytes | str | None, built: bytes | str | None,
           revision: bytes | str | None) -> Probe:
        def text(value: bytes | str) -> str:
            return value.decode() if isinstance(value, bytes) else value
        marker = built.encode() if isinstance(built, str) else built
        return cls(text(rev or b"0"), marker, int(revision or 0))


def rebuilding(revision: int, built: bytes | str | int | None) -> Unavailable | None:
    """The error to answer while the compiled state is not whole: the store lost it
    (``clr:built`` gone: flushed, restarted empty, never built) or its rebuild has not
    yet reached the stream's end as it was when the rebuild began (``clr:built`` holds
    that sequence). Until then an answer could come from part of the state and carry a
    revision lower than one already announced; after it, both are whole again."""
    if built is None or built is False:
        return Unavailable("the compiled state is lost; it is being rebuilt from the stream")
    target = build_target(built)
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
