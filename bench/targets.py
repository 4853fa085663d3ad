"""Whole-type checks on a cluster with 5,000 Namespace targets, against one with none.

A whole type (``{"type": "pods", "cluster": C}``) is judged over every Namespace target
of C that answers the principal otherwise than C's own target; the decision service finds
them in an index keyed by the subjects of the rules that differ (its mirror keeps one per
cluster), so the cost must not grow with the number of Namespace targets. On one fresh
system (compiler, invalidator, decision service):

* cluster ``full`` holds 5,000 Namespace targets (one AccessPolicy each, written from the
  admin namespace): 4,995 name a team of their own (``team-<i>``), 5 deny group ``met``;
* cluster ``empty`` holds none; a MonitorAccessPolicy shows ``met`` and ``all`` every
  pod of both.

Each question is asked of both clusters in the same run, interleaved (``empty``, then
``full``, three rounds, the best of each kept): cache misses (every principal new: an
extra asserted group) and cache hits, for a principal the 5 targets concern (``met``: the
answer is ``partial`` with them excluded) and one no target concerns (``all``: ``allow``).
Ratios are ``full`` over ``empty`` (the target: at most 2x). The same questions are also
timed in process, against the decision service's mirror loaded from the same store
(``mirror.snapshot`` with the spread plus ``answers.check``: the miss path without NATS),
where the machine's noise is smaller.

Run by ``bench/run.py`` (``--no-targets`` skips it, about 1 min) or alone:
``python bench/targets.py [--targets 5000] [--seconds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import nats
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run
from loadgen import load, pct

from clearance_api.wire import Resource
from clearance_core.kube.principal import Identity
from clearance_core.questions import answers
from clearance_runtime.messaging import bus
from clearance_runtime.reading.mirror import StateMirror
from clearance_runtime.storage import keys

TARGETS = 5000
CONCERNING = 5
ROUNDS = 3
ADMIN = "clearance-system"


def objects(targets: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = [
        {"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
         "metadata": {"name": name}} for name in ("empty", "full")]
    found.append({
        "apiVersion": "clusterpulse.io/v1alpha1", "kind": "MonitorAccessPolicy",
        "metadata": {"name": "viewers", "namespace": "bench"},
        "spec": {"identity": {"priority": 10, "subjects": {"groups": ["met", "all"]}},
                 "access": {"effect": "Allow"},
                 "scope": {"clusters": {"default": "none", "rules": [
                     {"selector": {"matchNames": ["*"]},
                      "permissions": {"view": True, "viewMetrics": True}}]}}}})
    for i in range(targets):
        denies = i < CONCERNING
        rule: dict[str, Any] = {"subjects": {"groups": ["met" if denies else f"team-{i}"]}}
        if denies:
            rule["effect"] = "Deny"
        else:
            rule["resources"] = [{"type": "pods", "visibility": "filtered",
                                  "filters": {"labels": {"team": str(i)}}}]
        found.append({
            "apiVersion": "clearance.io/v1alpha1", "kind": "AccessPolicy",
            "metadata": {"name": f"ns{i}", "namespace": ADMIN},
            "spec": {"targetRef": {"kind": "Namespace", "cluster": "full", "name": f"ns{i}"},
                     "rules": {f"r{i}": rule}}})
    return found


def whole(cluster: str, group: str, k: int | None) -> bytes:
    """A whole-type check of pods; ``k``: an extra asserted group (a new principal)."""
    groups = [group] if k is None else [group, f"x{k}"]
    return msgspec.json.encode({
        "principal": {"username": f"u-{group}", "groups": groups}, "action": "view",
        "resource": {"type": "pods", "cluster": cluster}})


async def _rate(nc: Any, bodies: list[bytes], seconds: float, inflight: int
                ) -> dict[str, float]:
    rate, lat = await load(nc, "clearance.v1.check", bodies, seconds=seconds,
                           inflight=inflight)
    return {"rps": rate, "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99)}


async def over_nats(nc: Any, seconds: float, inflight: int) -> dict[str, Any]:
    """Best of ``ROUNDS`` interleaved rounds per (question, cluster)."""
    results: dict[str, Any] = {}
    for group in ("met", "all"):
        for cached in (False, True):
            name = f"{group}_{'cached' if cached else 'uncached'}"
            best: dict[str, dict[str, float]] = {}
            for round_ in range(ROUNDS):
                for cluster in ("empty", "full"):
                    if cached:
                        bodies = [whole(cluster, group, None)]
                    else:  # every request a new principal: evaluated, never cached
                        offset = (round_ * 2 + (cluster == "full")) * 1_000_000
                        bodies = [whole(cluster, group, offset + k) for k in range(300_000)]
                    found = await _rate(nc, bodies, seconds, inflight)
                    if cluster not in best or found["rps"] > best[cluster]["rps"]:
                        best[cluster] = found
            results[name] = {**best, "ratio": best["empty"]["rps"] / best["full"]["rps"]}
    return results


def _best_us(run_: Any, count: int) -> float:
    """The best mean of five runs of ``count`` calls, microseconds per call."""
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for k in range(count):
            run_(k)
        best = min(best, (time.perf_counter() - started) / count)
    return best * 1e6


async def in_process(redis_url: str) -> dict[str, Any]:
    """The miss path's work without NATS: a snapshot from a mirror of the same store,
    with the spread, and the whole-type decision."""
    r = aioredis.from_url(redis_url)
    mirror = StateMirror(r)
    revision = await mirror.current()
    results: dict[str, Any] = {}
    for group in ("met", "all"):
        per: dict[str, float] = {}
        for cluster in ("empty", "full"):
            resource = Resource(type="pods", cluster=cluster)

            def one(k: int, cluster: str = cluster, resource: Resource = resource,
                    group: str = group) -> None:
                groups = [group, f"x{k}"]
                snapshot = mirror.snapshot(
                    revision=revision, username=f"u-{group}", email=None, groups=groups,
                    clusters=[cluster], namespaces=[], spread=True)
                identity = Identity(username=f"u-{group}", email=None,
                                    groups=frozenset(groups))
                answers.check(snapshot, identity, "view", resource, cluster=cluster,
                              now=time.time(), explain=False)

            one(0)  # the cluster's index is built at its first question
            per[cluster] = _best_us(one, 2000)
        results[group] = {"empty_us": per["empty"], "full_us": per["full"],
                          "ratio": per["full"] / per["empty"]}
    await r.aclose()
    return results


async def measure(seconds: float = 3.0, inflight: int = 32,
                  targets: int = TARGETS) -> dict[str, Any]:
    srv = run.start_servers("clearance-targets-")
    procs = [run.spawn([run.CLEARANCE, "run", name], srv.env)
             for name in ("compiler", "cache-invalidator", "decision")]
    try:
        nc = await nats.connect(srv.nats_url)
        js = nc.jetstream()
        await bus.ensure_stream(js)
        seq = 0
        started = time.perf_counter()
        for n, obj in enumerate(objects(targets)):
            ack = await js.publish(f"clearance.events.{obj['kind'].lower()}.t{n}",
                                   msgspec.json.encode({"type": "ADDED", "object": obj}))
            seq = int(ack.seq)
        r = aioredis.from_url(srv.redis_url)
        while int(await r.get(keys.INVALIDATED_REV) or 0) < seq:  # noqa: ASYNC110 - timed
            await asyncio.sleep(0.05)
        stored = int(await r.hlen(keys.effective_in("full")))
        await r.aclose()
        folded = time.perf_counter() - started
        for group, wanted in (("met", "partial"), ("all", "allow")):
            reply = json.loads((await nc.request("clearance.v1.check",
                                                 whole("full", group, None), timeout=10)).data)
            assert reply["decision"] == wanted, reply
        results: dict[str, Any] = {"targets": stored, "concerning": CONCERNING,
                                   "fold_s": folded}
        results["nats"] = await over_nats(nc, seconds, inflight)
        await nc.close()
        results["in_process"] = await in_process(srv.redis_url)
        return results
    finally:
        run.teardown(procs, [srv.valkey, srv.nats])


def report(results: dict[str, Any]) -> str:
    lines = [f"whole-type checks, a cluster with {results['targets']:,} Namespace targets "
             f"(folded in {results['fold_s']:.1f} s) against one with none (target: "
             f"<= 2x):"]
    for name, found in results["nats"].items():
        lines.append(f"  {name:>13}: {found['full']['rps']:.0f} req/s vs "
                     f"{found['empty']['rps']:.0f} req/s = {found['ratio']:.2f}x "
                     f"(p50 {found['full']['p50_ms']:.2f} vs "
                     f"{found['empty']['p50_ms']:.2f} ms)")
    for group, found in results["in_process"].items():
        lines.append(f"  in process, {group} (snapshot + decision): {found['full_us']:.0f} "
                     f"us vs {found['empty_us']:.0f} us = {found['ratio']:.2f}x")
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", type=int, default=TARGETS)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--inflight", type=int, default=32)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = await measure(args.seconds, args.inflight, args.targets)
    print(json.dumps(results, indent=2))
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
