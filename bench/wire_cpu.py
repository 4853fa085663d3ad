"""Where a cached check's time goes, beside the echo: CPU per request of every process.

The throughput ratios of ``run.py`` move with whatever else the shared machine runs; the
CPU each process spends per request (from /proc) moves much less. This starts the bench
fleet (``run.py``) and the NATS echo, warms the cache, then for the echo and for cached
checks in turn reports requests/s and the CPU per request of the load generator, NATS,
Valkey and the server (the echo or the decision service): with 64 in flight, and one at
a time (where the p50 is measured, and where each request pays its wake-ups alone).

    python bench/wire_cpu.py [--seconds 3] [--rounds 2] [--inherited]

``--inherited``: the checks of bench/inherit_live.py (principals only inherited
AccessPolicy rules match) on its fleet, cached and uncached. To compare with another
checkout, put its ``libs`` and ``services/*`` first on PYTHONPATH (see miss_cpu.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

import msgspec
import nats
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent))
import inherit_fleet
import inherit_live
import run
from loadgen import cpu_seconds, load, pct, warm

from clearance_runtime.messaging import bus


async def _round(nc: nats.NATS, pids: dict[str, int], subject: str, bodies: list[bytes], *,
                 seconds: float, inflight: int) -> str:
    used = {name: cpu_seconds(pid) for name, pid in pids.items()}
    rate, lat = await load(nc, subject, bodies, seconds=seconds, inflight=inflight)
    done = rate * seconds
    cpu = {name: (cpu_seconds(pid) - used[name]) / done * 1e6 for name, pid in pids.items()}
    parts = " ".join(f"{name} {value:.1f}" for name, value in cpu.items())
    return (f"{rate:8.0f} req/s p50 {pct(lat, 50) * 1000:6.0f} us | CPU us/request: {parts} "
            f"(sum {sum(cpu.values()):.1f})")


async def _answering(nc: nats.NATS, subject: str, body: bytes) -> None:
    """Wait until something answers on ``subject`` (a service still starting has not
    subscribed yet)."""
    while True:
        try:
            await nc.request(subject, body, timeout=10)
            return
        except nats.errors.NoRespondersError:
            await asyncio.sleep(0.05)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--inherited", action="store_true")
    args = parser.parse_args()
    srv = run.start_servers("clearance-wire-")
    procs = [run.spawn([run.CLEARANCE, "run", name], srv.env)
             for name in ("compiler", "cache-invalidator", "decision")]
    procs.append(run.spawn([sys.executable, str(run.ROOT / "bench" / "echo.py"),
                            srv.nats_url, "bench.echo"], srv.env))
    assert srv.nats.proc is not None and srv.valkey.proc is not None
    shared = {"loadgen": os.getpid(), "nats": srv.nats.proc.pid,
              "valkey": srv.valkey.proc.pid}
    try:
        nc = await nats.connect(srv.nats_url)
        js = nc.jetstream()
        await bus.ensure_stream(js)
        r = aioredis.from_url(srv.redis_url)
        if args.inherited:
            seq = 0
            objects = [*inherit_fleet.inventory(inherit_live.CLUSTERS),
                       *inherit_fleet.policies(inherit_live.CLUSTERS, inherit_live.NAMESPACES)]
            for n, obj in enumerate(objects):
                seq = await inherit_live._publish(js, obj, n)
            await run.invalidated_past(r, seq, 0.05)
            bodies = [msgspec.json.encode(inherit_live.checks(k)) for k in range(1500)]
            fresh = [msgspec.json.encode(inherit_live.checks(k, fresh=True))
                     for k in range(400_000)]
        else:
            objects = run.fleet()
            await run.publish_objects(js, objects)
            await run.invalidated_past(r, len(objects), 0.05)
            bodies = [msgspec.json.encode(run.check(i)) for i in range(2000)]
            fresh = []
        await r.aclose()
        for subject in ("clearance.v1.check", "bench.echo"):  # both subscribed
            await _answering(nc, subject, bodies[0])
        await warm(nc, "clearance.v1.check", bodies, 64)
        await load(nc, "clearance.v1.check", bodies, seconds=1, inflight=64)
        echo = {**shared, "echo": procs[3].pid}
        decision = {**shared, "decision": procs[2].pid}
        offset = 0
        for n in range(args.rounds):
            for inflight in (64, 1):
                print(f"round {n + 1}, {inflight} in flight", flush=True)
                print("  echo           " + await _round(
                    nc, echo, "bench.echo", bodies, seconds=args.seconds,
                    inflight=inflight), flush=True)
                print("  cached check   " + await _round(
                    nc, decision, "clearance.v1.check", bodies, seconds=args.seconds,
                    inflight=inflight), flush=True)
            if fresh:
                line = await _round(nc, decision, "clearance.v1.check", fresh[offset:],
                                    seconds=args.seconds, inflight=64)
                offset += 100_000 // args.rounds
                print("  uncached (64)  " + line, flush=True)
        await nc.close()
    finally:
        run.teardown(procs, [srv.valkey, srv.nats])


if __name__ == "__main__":
    asyncio.run(main())
