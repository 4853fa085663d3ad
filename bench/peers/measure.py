"""``python3 dev.py bench --peers``: Clearance beside Cerbos and SpiceDB, same facts, one run.

Every system runs on this machine at once and is given the same facts
(:mod:`facts`): Clearance (nats-server, valkey-server, its compiler, invalidator and
decision service as processes, as ``bench/run.py``), Cerbos's server (its npm build, the
policies on disk) and an embedded SpiceDB (``spicedb_host.py``). Before anything is
timed, each answers the same 2,400 questions and must agree with the reference rule and
with the others; a single disagreement aborts the run.

Then, with one Python asyncio client (this process) for every system, four shapes:
single checks and batches of 100, cached (a pool of questions asked again and again) and
uncached (every question new). For each: decisions/s, the ratio to the NATS echo
measured in the same run (``bench/echo.py``: the leanest responder on the same servers),
the ratio to Cerbos, and the server CPU per decision (user + system seconds of the
server processes during the timed window, from /proc: nats-server + valkey-server +
decision for Clearance, nats-server + the echo for the echo, the cerbos process, the
SpiceDB host).

    python bench/peers/measure.py [--seconds 5] [--inflight 64] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: its harness
import facts
import install
from peer import BATCH, Peer, Served, cpu_seconds

#: Users of each shape's questions, apart so that no shape warms another's.
EQUAL_USERS = range(1000)
CACHED_USERS = 1000
UNCACHED_USERS = range(1000, 5000)
BATCH_CACHED_USERS = range(5000, 5200)
BATCH_UNCACHED_USERS = range(5200, facts.USERS)
SAMPLE = 2400


def equal_sample() -> list[tuple[int, int]]:
    rng = random.Random(29)
    return [(rng.choice(EQUAL_USERS), rng.randrange(facts.CLUSTERS)) for _ in range(SAMPLE)]


def cached_pairs() -> list[tuple[int, int]]:
    return [((k * 37) % CACHED_USERS, (k * 7) % facts.CLUSTERS) for k in range(2000)]


def uncached_pairs(n: int) -> list[tuple[int, int]]:
    """``n`` distinct pairs (user, cluster), users varying fastest."""
    span = len(UNCACHED_USERS)
    assert n <= span * facts.CLUSTERS
    return [(UNCACHED_USERS[j % span], (j // span + j % span) % facts.CLUSTERS)
            for j in range(n)]


def batches(users: Sequence[int], n: int) -> list[tuple[int, list[int]]]:
    """``n`` distinct batches: a user and 100 clusters (either half of the fleet)."""
    assert n <= 2 * len(users)
    return [(users[b // 2], list(range((b % 2) * BATCH, (b % 2) * BATCH + BATCH)))
            for b in range(n)]


async def drive(call: Callable[[Any], Awaitable[None]], requests: Sequence[Any], *,
                seconds: float, inflight: int, start: int = 0) -> tuple[float, int]:
    """(requests/s with ``inflight`` outstanding, the index after the last one used).
    Requests are used in order from ``start``; past the end they wrap (reported)."""
    done = 0
    stop = time.perf_counter() + seconds
    top = start

    async def worker(offset: int) -> None:
        nonlocal done, top
        i = start + offset
        while time.perf_counter() < stop:
            await call(requests[i % len(requests)])
            done += 1
            top = max(top, i + 1)
            i += inflight

    began = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(inflight)))
    return done / (time.perf_counter() - began), top


async def shape(peer: Served, label: str, call: Callable[[Any], Awaitable[None]],
                requests: Sequence[Any], *, per_request: int, seconds: float,
                inflight: int, warm: bool) -> dict[str, Any]:
    """One shape's figures. ``warm``: the pool is asked once first (cached shapes);
    otherwise a short untimed run first, on requests the timed run does not reuse."""
    if warm:  # every question of the pool asked once, then a short untimed run
        gate = asyncio.Semaphore(inflight)

        async def once(request: Any) -> None:
            async with gate:
                await call(request)

        await asyncio.gather(*(once(r) for r in requests))
        await drive(call, requests, seconds=0.5, inflight=inflight)
        start = 0
    else:
        _, start = await drive(call, requests, seconds=0.5, inflight=inflight)
    used = cpu_seconds(peer.pids())
    rate, top = await drive(call, requests, seconds=seconds, inflight=inflight, start=start)
    spent = cpu_seconds(peer.pids()) - used
    decisions = rate * per_request
    row = {"system": peer.name, "shape": label, "decisions_per_s": decisions,
           "cpu_us_per_decision": spent / (decisions * seconds) * 1e6}
    if not warm and top > len(requests):
        row["wrapped"] = True  # some questions were asked twice: not all uncached
    return row


# --- the run ----------------------------------------------------------------------------

async def run(args: argparse.Namespace) -> dict[str, Any]:
    # Installed first: the peers' clients (grpcio among them) are the `peers` extra, which
    # a fresh checkout does not have until this run installs it.
    cerbos_binary, libspicedb = install.everything()
    from peers_clearance import ClearancePeer, Echo  # noqa: PLC0415
    from peers_grpc import CerbosPeer, SpiceDBPeer  # noqa: PLC0415

    state = Path(tempfile.mkdtemp(prefix="clearance-peers-"))
    peers: list[Peer] = []
    stack = contextlib.AsyncExitStack()
    async with stack:
        clearance = await stack.enter_async_context(ClearancePeer.running(state))
        cerbos = await stack.enter_async_context(CerbosPeer.running(state, cerbos_binary))
        spicedb = await stack.enter_async_context(SpiceDBPeer.running(libspicedb))
        peers = [clearance, cerbos, spicedb]
        echo = Echo(clearance)
        sample = equal_sample()
        expected = [facts.allowed(u, i) for u, i in sample]
        for peer in peers:
            got = await peer.answers(sample)
            wrong = [(facts.user(u), facts.cluster(i), want) for (u, i), want, have
                     in zip(sample, expected, got, strict=True) if want != have]
            if wrong:
                raise SystemExit(f"{peer.name} disagrees on {len(wrong)} of {SAMPLE} "
                                 f"questions, e.g. {wrong[:3]} (user, cluster, expected): "
                                 "nothing was timed")
        results: dict[str, Any] = {
            "agreed": SAMPLE, "allowed_in_sample": sum(expected), "seconds": args.seconds,
            "inflight": args.inflight, "batch_inflight": args.batch_inflight}
        results["echo"] = await shape(echo, "echo", echo.ask, echo.bodies(), per_request=1,
                                      seconds=args.seconds, inflight=args.inflight,
                                      warm=False)
        rows = []
        singles_new = uncached_pairs(200_000)
        batches_new = batches(BATCH_UNCACHED_USERS, 2 * len(BATCH_UNCACHED_USERS))
        for peer in peers:
            common = {"seconds": args.seconds}
            rows.append(await shape(peer, "single, cached", peer.ask,
                                    peer.single(cached_pairs()), per_request=1,
                                    inflight=args.inflight, warm=True, **common))
            rows.append(await shape(peer, "single, uncached", peer.ask,
                                    peer.single(singles_new), per_request=1,
                                    inflight=args.inflight, warm=False, **common))
            rows.append(await shape(peer, "batch of 100, cached", peer.ask_batch,
                                    peer.batch(batches(BATCH_CACHED_USERS, 200)),
                                    per_request=BATCH, inflight=args.batch_inflight,
                                    warm=True, **common))
            rows.append(await shape(peer, "batch of 100, uncached", peer.ask_batch,
                                    peer.batch(batches_new), per_request=BATCH,
                                    inflight=args.batch_inflight, warm=False, **common))
        results["echo_after"] = await shape(echo, "echo", echo.ask, echo.bodies(),
                                            per_request=1, seconds=args.seconds,
                                            inflight=args.inflight, warm=False)
        results["rows"] = rows
    return results


def table(results: dict[str, Any]) -> str:
    echo = (results["echo"]["decisions_per_s"] + results["echo_after"]["decisions_per_s"]) / 2
    cerbos = {r["shape"]: r["decisions_per_s"] for r in results["rows"]
              if r["system"] == "Cerbos"}
    lines = [
        f"All three agreed with the reference on {results['agreed']} questions "
        f"({results['allowed_in_sample']} allowed). NATS echo: "
        f"{results['echo']['decisions_per_s']:,.0f} and "
        f"{results['echo_after']['decisions_per_s']:,.0f} req/s (before and after; "
        f"{results['echo']['cpu_us_per_decision']:.0f} µs server CPU per request); "
        f"{results['inflight']} in flight for single checks, "
        f"{results['batch_inflight']} batches in flight.",
        "",
        "| shape | system | decisions/s | vs echo | vs Cerbos | server CPU µs/decision |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in sorted(results["rows"], key=lambda r: (r["shape"].startswith("batch"),
                                                       r["shape"].endswith("uncached"))):
        mark = " (wrapped)" if row.get("wrapped") else ""
        lines.append(
            f"| {row['shape']} | {row['system']} | {row['decisions_per_s']:,.0f}{mark} | "
            f"{row['decisions_per_s'] / echo:.2f} | "
            f"{row['decisions_per_s'] / cerbos[row['shape']]:.2f} | "
            f"{row['cpu_us_per_decision']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--batch-inflight", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    try:
        results = asyncio.run(run(args))
    except install.Unavailable as exc:
        raise SystemExit(f"peers: {exc}") from None
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
