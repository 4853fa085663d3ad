"""Decision-process CPU per uncached and per cached check (the miss path's cost).

Throughput ratios move with whatever else runs on a shared machine; the CPU seconds the
decision process spends per answered check (from /proc) move much less, so they compare
two versions of the code run one after the other. The bench fleet of ``run.py``; every
uncached question new (an extra asserted group), 64 in flight.

    python bench/miss_cpu.py [--groups N]

To compare with another checkout, put its ``libs`` and ``services/*`` first on
PYTHONPATH: the services are started with this environment.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import msgspec
import nats
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run
from loadgen import cpu_seconds, load, pct

from clearance_runtime.messaging import bus


def question(i: int, groups: int) -> bytes:
    body: dict[str, Any] = run.check(i)
    body["principal"] = {"username": f"user-{i % run.PRINCIPALS}",
                         "groups": [f"x{i}", *(f"team-{(i + k) % run.GROUPS}"
                                               for k in range(groups - 1))]}
    return msgspec.json.encode(body)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, default=1,
                        help="groups the principal is in (its candidate policies grow)")
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    srv = run.start_servers("clearance-miss-")
    procs = [run.spawn([run.CLEARANCE, "run", name], srv.env)
             for name in ("compiler", "cache-invalidator", "decision")]
    decision = procs[-1]
    try:
        nc = await nats.connect(srv.nats_url)
        js = nc.jetstream()
        await bus.ensure_stream(js)
        objects = run.fleet()
        await run.publish_objects(js, objects)
        r = aioredis.from_url(srv.redis_url)
        await run.invalidated_past(r, len(objects), 0.05)
        await r.aclose()
        await asyncio.sleep(1.0)
        for label, bodies in (
                ("uncached", [question(i, args.groups) for i in range(100_000)]),
                ("cached", [msgspec.json.encode(run.check(i)) for i in range(2000)])):
            if label == "cached":  # warm: every distinct question asked once
                await load(nc, "clearance.v1.check", bodies, seconds=2, inflight=64)
            used = cpu_seconds(decision.pid)
            rate, lat = await load(nc, "clearance.v1.check", bodies, seconds=args.seconds,
                                   inflight=64)
            spent = cpu_seconds(decision.pid) - used
            print(f"{label}: {rate:.0f} req/s, p50 {pct(lat, 50):.1f} ms at 64 in flight; "
                  f"decision CPU {spent / (rate * args.seconds) * 1e6:.0f} us per check "
                  f"(groups={args.groups}, "
                  f"PYTHONPATH={os.environ.get('PYTHONPATH', '-')[:60]})", flush=True)
        await nc.close()
    finally:
        run.teardown(procs, [srv.valkey, srv.nats])


if __name__ == "__main__":
    asyncio.run(main())
