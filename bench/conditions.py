"""The compiler's time per event with 1,000 Fleet AccessPolicies that all have a `when`.

The attack this measures: Fleet policies whose condition is always true
(``size(self.rules) >= 0``), each adding a rule of its own (``strategy: merge``), so that
every condition sees a different accumulated policy. Four fleets of 1,000 policies (and
20 clusters) are folded, each on a fresh system, in the same run:

* ``merge``: with ``when``, ``strategy: merge``: a new ``self`` for every condition, so the
  per-target budget runs out part-way and the later conditions are runtime errors;
* ``merge-baseline``: the same policies without ``when``;
* ``atomic``: with ``when``, ``strategy: atomic`` (the default): the accumulated policy
  changes once, and every condition reads the same converted ``self``;
* ``atomic-baseline``: the same without ``when`` (each new policy, the lowest, takes the
  rules and every other policy's status moves: slower than ``merge-baseline`` for that).

For each: the backlog's time per event (the 1,000 policies on the stream, then the
invalidator and the compiler started: from the compiler's first commit until the system
revision reaches the last event), and the time one more Fleet policy takes from publish
until the system revision reaches it once the backlog is folded (the median of five:
the worst event, every target recomputed over 1,000 policies). Ratios are against the
baseline of the same strategy in the same run. Run by ``bench/run.py``
(``--no-conditions`` skips it, about 4 min) or alone: ``python bench/conditions.py
[--policies N] [--variants merge,merge-baseline]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import nats
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run

from clearance_runtime.messaging import bus
from clearance_runtime.storage import keys

POLICIES = 1000
CLUSTERS = 20
LATE = 5
WHEN = "size(self.rules) >= 0"
VARIANTS = {"merge": (WHEN, "merge"), "merge-baseline": (None, "merge"),
            "atomic": (WHEN, "atomic"), "atomic-baseline": (None, "atomic")}


def fleet_policy(i: int, when: str | None, strategy: str) -> dict[str, Any]:
    defaults: dict[str, Any] = {"strategy": strategy,
                                "rules": {f"r{i}": {"subjects": {"users": [f"u{i}"]}}}}
    if when is not None:
        defaults["when"] = when
    return {"apiVersion": "clearance.io/v1alpha1", "kind": "AccessPolicy",
            "metadata": {"name": f"p{i:05d}", "namespace": "clearance-system",
                         "creationTimestamp": f"2025-01-01T{i // 3600:02d}:"
                                              f"{i // 60 % 60:02d}:{i % 60:02d}Z"},
            "spec": {"targetRef": {"kind": "Fleet", "name": "fleet"}, "defaults": defaults}}


def cluster(n: int) -> dict[str, Any]:
    return {"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": f"c{n}"}}


async def publish(js: Any, obj: dict[str, Any]) -> int:
    subject = f"clearance.events.{obj['kind'].lower()}.{obj['metadata']['name']}"
    ack = await js.publish(subject, msgspec.json.encode({"type": "ADDED", "object": obj}))
    return int(ack.seq)


async def until(r: aioredis.Redis, seq: int) -> None:
    while int(await r.get(keys.INVALIDATED_REV) or 0) < seq:  # noqa: ASYNC110 - timed
        await asyncio.sleep(0.002)


async def measure_one(name: str, policies: int) -> dict[str, Any]:
    when, strategy = VARIANTS[name]
    srv = run.start_servers(f"clearance-conditions-{name}-")
    procs = []
    try:
        nc = await nats.connect(srv.nats_url)
        js = nc.jetstream()
        await bus.ensure_stream(js)
        for n in range(CLUSTERS):
            await publish(js, cluster(n))
        seq = 0
        for i in range(policies):
            seq = await publish(js, fleet_policy(i, when, strategy))
        r = aioredis.from_url(srv.redis_url)
        procs = await run.spawn_folding(srv.env, r)
        while (first := int(await r.get(keys.REV) or 0)) == 0:  # noqa: ASYNC110 - timed
            await asyncio.sleep(0.001)
        started = time.perf_counter()
        await until(r, seq)
        backlog = time.perf_counter() - started
        late = []
        for k in range(LATE):
            started = time.perf_counter()
            await until(r, await publish(js, fleet_policy(policies + k, when, strategy)))
            late.append(time.perf_counter() - started)
        await r.aclose()
        await nc.close()
        return {"events": seq - first, "backlog_s": backlog,
                "backlog_ms_per_event": 1000 * backlog / max(1, seq - first),
                "late_ms": 1000 * statistics.median(late), "late_max_ms": 1000 * max(late)}
    finally:
        run.teardown(procs, [srv.valkey, srv.nats])


async def measure(policies: int = POLICIES,
                  variants: tuple[str, ...] = tuple(VARIANTS)) -> dict[str, Any]:
    results: dict[str, Any] = {"policies": policies, "clusters": CLUSTERS}
    for name in variants:
        results[name] = await measure_one(name, policies)
    for name in variants:
        base = results.get(f"{name}-baseline")
        if base is not None:
            found = results[name]
            found["backlog_ratio"] = found["backlog_ms_per_event"] / \
                base["backlog_ms_per_event"]
            found["late_ratio"] = found["late_ms"] / base["late_ms"]
    return results


def report(results: dict[str, Any]) -> str:
    lines = [f"{results['policies']:,} Fleet AccessPolicies with and without `when` "
             f"({results['clusters']} clusters), compiler time per event:"]
    for name in VARIANTS:
        found = results.get(name)
        if found is None:
            continue
        ratios = "" if "backlog_ratio" not in found else (
            f" = {found['backlog_ratio']:.2f}x / {found['late_ratio']:.2f}x without `when`")
        lines.append(f"  {name:15} backlog {found['backlog_ms_per_event']:.1f} ms/event, "
                     f"one more policy {found['late_ms']:.0f} ms (max "
                     f"{found['late_max_ms']:.0f}){ratios}")
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--policies", type=int, default=POLICIES)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    results = await measure(args.policies, tuple(args.variants.split(",")))
    print(msgspec.json.format(msgspec.json.encode(results)).decode())
    print(report(results))


if __name__ == "__main__":
    asyncio.run(main())
