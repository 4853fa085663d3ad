"""``python3 dev.py soak [--minutes 30]``: a steady mixed load with policy churn, watched.

Starts nats-server and valkey-server from the wheels and Clearance's compiler, cache-
invalidator and decision service (one process each, as deployed), publishes the bench
fleet, then for ``--minutes`` keeps a steady mix going — single checks, batches, filters,
SubjectAccessReviews — while one policy changes every second (a flip between Allow and
Deny, a priority change, a delete and re-create). Every minute it prints p50/p99 latency,
errors, the RSS of each process, Valkey's memory and key count. At the end it compares
the last minute with the second (the first is warm-up) and fails if anything grew
without bound: RSS or Valkey memory by more than 50 %, or any error reply.

Decision cache entries live ``CLEARANCE_DECISION_CACHE_TTL`` (60 s here, so the cache
reaches its steady state within the run instead of growing for five minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import nats
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rbac_fleet
from run import (
    CLEARANCE,
    POLICIES,
    PRINCIPALS,
    fleet,
    invalidated_past,
    publish_objects,
    spawn,
    start_servers,
    teardown,
)

from clearance_runtime.messaging import bus

SERVICES = ("compiler", "cache-invalidator", "decision")
GROWTH_LIMIT = 1.5


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def requests(rng: random.Random) -> tuple[str, bytes]:
    """One request of the mix: 70 % checks, 10 % batches, 10 % filters, 10 % reviews."""
    user = f"user-{rng.randrange(PRINCIPALS)}"
    roll = rng.random()
    if roll < 0.7:
        return "clearance.v1.check", msgspec.json.encode({
            "principal": {"username": user}, "action": "view",
            "resource": {"type": "pods", "name": f"pod-{rng.randrange(10_000)}",
                         "namespace": f"ns-{rng.randrange(50)}",
                         "cluster": f"c{rng.randrange(200)}"}})
    if roll < 0.8:
        return "clearance.v1.check.batch", msgspec.json.encode({
            "principal": {"username": user},
            "checks": [{"action": "view", "resource": {"type": "cluster",
                                                       "name": f"c{rng.randrange(200)}"}}
                       for _ in range(50)]})
    if roll < 0.9:
        return "clearance.v1.filter", msgspec.json.encode({
            "principal": {"username": user}, "cluster": f"c{rng.randrange(200)}",
            "type": "pods", "items": [{"name": f"p{i}", "namespace": f"ns-{i % 40}"}
                                      for i in range(500)]})
    return "clearance.v1.review.subject", msgspec.json.encode(rbac_fleet.review(
        rng.randrange(2000)))


async def churn(js: Any, objects: dict[str, dict[str, Any]], stop: asyncio.Event) -> int:
    """One policy change per second: flip, re-prioritise, delete and re-create."""
    rng, changes = random.Random(7), 0
    while not stop.is_set():
        name = f"p{rng.randrange(POLICIES)}"
        obj = objects[name]
        kind = rng.random()
        if kind < 0.1:
            await js.publish(f"clearance.events.monitoraccesspolicy.{name}",
                             msgspec.json.encode({"type": "DELETED", "object": obj}))
        else:
            spec = obj["spec"]
            if kind < 0.6:
                spec["access"]["effect"] = ("Deny" if spec["access"]["effect"] == "Allow"
                                            else "Allow")
            else:
                spec["identity"]["priority"] = rng.randrange(20)
            await js.publish(f"clearance.events.monitoraccesspolicy.{name}",
                             msgspec.json.encode({"type": "MODIFIED", "object": obj}))
        changes += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)
    return changes


class Minute:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors = 0
        self.first_error = ""


async def drive(nc: Any, rate: float, stop: asyncio.Event, minute: list[Minute]) -> None:
    rng = random.Random(1)
    interval = 1.0 / rate
    pending: set[asyncio.Task[None]] = set()

    async def one(subject: str, body: bytes, bucket: Minute) -> None:
        started = time.perf_counter()
        try:
            reply = await nc.request(subject, body, timeout=10)
            if reply.data[:9] == b'{"error":':
                bucket.errors += 1
                bucket.first_error = bucket.first_error or reply.data[:200].decode()
        except Exception as exc:  # a timeout counts as an error, the soak goes on
            bucket.errors += 1
            bucket.first_error = bucket.first_error or repr(exc)
        bucket.latencies.append((time.perf_counter() - started) * 1000)

    next_at = time.perf_counter()
    while not stop.is_set():
        subject, body = requests(rng)
        task = asyncio.create_task(one(subject, body, minute[-1]))
        pending.add(task)
        task.add_done_callback(pending.discard)
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
    await asyncio.gather(*pending, return_exceptions=True)


def pct(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100)[q - 1]


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=150.0, help="requests per second")
    args = parser.parse_args()
    nats_srv, valkey_srv, nats_url, redis_url, env = start_servers(
        "clearance-soak-", CLEARANCE_DECISION_CACHE_TTL="60")
    procs = {name: spawn([CLEARANCE, "run", name], env) for name in SERVICES}
    rows: list[dict[str, Any]] = []
    try:
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        await bus.ensure_stream(js)
        objects = [*fleet(), rbac_fleet.hub(), *rbac_fleet.objects()]
        policies = {o["metadata"]["name"]: o for o in objects
                    if o["kind"] == "MonitorAccessPolicy"}
        await publish_objects(js, objects)
        r = aioredis.from_url(redis_url)
        await invalidated_past(r, len(objects), 0.1)
        print(f"{'min':>4} {'requests':>9} {'errors':>6} {'p50 ms':>7} {'p99 ms':>7} "
              + " ".join(f"{n[:10] + ' MB':>13}" for n in SERVICES)
              + f" {'valkey MB':>9} {'keys':>7}", flush=True)
        stop = asyncio.Event()
        minutes = [Minute()]
        driver = asyncio.create_task(drive(nc, args.rate, stop, minutes))
        churner = asyncio.create_task(churn(js, policies, stop))
        for m in range(1, int(args.minutes) + 1):
            await asyncio.sleep(60)
            bucket = minutes[-1]
            minutes.append(Minute())
            info = await r.info("memory")
            row = {"minute": m, "requests": len(bucket.latencies), "errors": bucket.errors,
                   "first_error": bucket.first_error,
                   "p50": pct(bucket.latencies, 50), "p99": pct(bucket.latencies, 99),
                   "rss": {n: rss_mb(p.pid) for n, p in procs.items()},
                   "valkey_mb": int(info["used_memory"]) / 2**20,
                   "keys": int(await r.dbsize())}
            rows.append(row)
            print(f"{m:>4} {row['requests']:>9} {row['errors']:>6} {row['p50']:>7.2f} "
                  f"{row['p99']:>7.2f} "
                  + " ".join(f"{row['rss'][n]:>13.1f}" for n in SERVICES)
                  + f" {row['valkey_mb']:>9.1f} {row['keys']:>7}", flush=True)
            if row["first_error"]:
                print(f"     first error: {row['first_error']}", flush=True)
        stop.set()
        await driver
        changes = await churner
        await r.aclose()
        await nc.close()
    finally:
        teardown(list(procs.values()), [valkey_srv, nats_srv])
    return verdict(rows, changes)


def verdict(rows: list[dict[str, Any]], changes: int) -> int:
    problems = [f"minute {r['minute']}: {r['errors']} errors" for r in rows if r["errors"]]
    if len(rows) >= 3:
        base, last = rows[1], rows[-1]
        for name, mb in last["rss"].items():
            if mb > base["rss"][name] * GROWTH_LIMIT:
                problems.append(f"{name} RSS grew {base['rss'][name]:.0f} -> {mb:.0f} MB")
        if last["valkey_mb"] > base["valkey_mb"] * GROWTH_LIMIT:
            problems.append(f"Valkey memory grew {base['valkey_mb']:.0f} -> "
                            f"{last['valkey_mb']:.0f} MB")
    print(f"\n{sum(r['requests'] for r in rows)} requests, {changes} policy changes, "
          f"{len(rows)} minutes: " + ("bounded, no errors" if not problems else
                                      "PROBLEMS: " + "; ".join(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
