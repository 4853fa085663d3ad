"""Inherited AccessPolicies end to end, on the bench's running system (bench/run.py).

After the main figures, the same servers and services take the inherited fleet of
:mod:`inherit_fleet` at 200 clusters x 50 namespaces (2,000 AccessPolicies; the clusters
are the main fleet's, relabelled into cluster sets), then:

* a Fleet policy changes (its rules' subjects; then also a new rule): the time from the
  publish on JetStream to the compiler's commit in Valkey (``clr:rev`` reaching the
  event's sequence: every changed target's effective policy is written in that one Lua
  commit) and to the system revision (``clr:inval:rev``: cached decisions dropped);
* one namespace intent changes: the same two times (median of several);
* checks for principals only inherited rules match — a namespace intent's, a cluster's
  defaults, the Fleet's defaults — cached and uncached, as ratios to the echo measured
  again just before them (the shared machine's load drifts over a run).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import inherit_fleet
import msgspec
import redis.asyncio as aioredis
from loadgen import load, measure, pct, warm

from clearance_runtime.storage import keys

CLUSTERS, NAMESPACES = 200, 50


async def _reach(r: aioredis.Redis, key: str, seq: int) -> float:
    """Wait until the counter at ``key`` reaches ``seq``; returns when it did."""
    while int(await r.get(key) or 0) < seq:  # noqa: ASYNC110 (polling a store, not a task)
        await asyncio.sleep(0.001)
    return time.perf_counter()


async def _publish(js: Any, obj: dict[str, Any], n: int) -> int:
    ack = await js.publish(f"clearance.events.{obj['kind'].lower()}.i{n}",
                           msgspec.json.encode({"type": "MODIFIED", "object": obj}))
    return int(ack.seq)


async def _timed_event(js: Any, r: aioredis.Redis, obj: dict[str, Any], n: int
                       ) -> tuple[float, float]:
    """(seconds to the compiler's commit, seconds to the system revision)."""
    started = time.perf_counter()
    seq = await _publish(js, obj, n)
    committed = await _reach(r, keys.REV, seq)
    revised = await _reach(r, keys.INVALIDATED_REV, seq)
    return committed - started, revised - started


async def _targets(r: aioredis.Redis) -> int:
    """Materialised targets as the compiler stored them."""
    count = int(await r.hlen(keys.EFFECTIVE))
    for name in await r.hkeys(keys.CLUSTERS):
        count += int(await r.hlen(keys.effective_in(name.decode())))
    return count


def checks(k: int, *, fresh: bool = False) -> dict[str, Any]:
    """The k-th check: in turn a namespace intent's team, a cluster's admins and a Fleet
    default's group (``fresh``: an extra group makes every principal new, uncached)."""
    intents = inherit_fleet.split(CLUSTERS, NAMESPACES)[3]
    i = (k // 3) % intents
    c, n = i % CLUSTERS, (i // CLUSTERS) % NAMESPACES
    level = k % 3
    if level == 0:
        groups, resource = [f"dev-c{c}-ns{n}"], {"type": "pods", "name": f"web-{k}",
                                                 "cluster": f"c{c}", "namespace": f"ns{n}"}
    elif level == 1:  # a namespace no intent names: the Cluster target decides
        groups, resource = [f"admin-c{c}"], {"type": "pods", "name": f"web-{k}",
                                             "cluster": f"c{c}", "namespace": "ns49"}
    else:
        groups, resource = [f"platform-{k % 20}"], {"type": "cluster", "name": f"c{c}"}
    if fresh:
        groups = [*groups, f"x{k}"]
    return {"principal": {"username": f"inherit-{k % 997}", "groups": groups},
            "action": "view", "resource": resource}


async def run(nc: Any, js: Any, redis_url: str, *, seconds: float, inflight: int
              ) -> dict[str, Any]:
    r = aioredis.from_url(redis_url)
    results: dict[str, Any] = {}
    try:
        objects = [*inherit_fleet.inventory(CLUSTERS),
                   *inherit_fleet.policies(CLUSTERS, NAMESPACES)]
        started = time.perf_counter()
        seq = 0
        for n, obj in enumerate(objects):
            seq = await _publish(js, obj, n)
        await _reach(r, keys.INVALIDATED_REV, seq)
        results["load_s"] = time.perf_counter() - started
        results["load_events_per_s"] = len(objects) / results["load_s"]
        results["targets"] = await _targets(r)
        results["policies"] = len(objects) - len(inherit_fleet.inventory(CLUSTERS))
        n = len(objects)
        for name, added in (("fleet_change", False), ("fleet_change_rule_added", True)):
            times = []
            for version in range(1, 3):
                obj = inherit_fleet.fleet_policy(0, version=100 * added + version,
                                                 added=added)
                times.append(await _timed_event(js, r, obj, n))
                n += 1
            commit = min(t[0] for t in times)
            results[name] = {"commit_s": commit, "revision_s": min(t[1] for t in times),
                             "targets_per_s": results["targets"] / commit}
        times = []
        for k in range(20):
            i = (k * 7919) % inherit_fleet.split(CLUSTERS, NAMESPACES)[3]
            obj = inherit_fleet.namespace_policy(i, CLUSTERS, NAMESPACES, version=1 + k)
            times.append(await _timed_event(js, r, obj, n))
            n += 1
        results["namespace_change"] = {
            "commit_ms": statistics.median(t[0] for t in times) * 1000,
            "revision_ms": statistics.median(t[1] for t in times) * 1000}
        results["changes_s"] = time.perf_counter() - started - results["load_s"]
        # Every principal is allowed by inherited rules only (checked once, here).
        for k in range(3):
            reply = msgspec.json.decode((await nc.request(
                "clearance.v1.check", msgspec.json.encode(checks(k)), timeout=10)).data)
            assert reply.get("allowed") is True, (checks(k), reply)
        singles = [msgspec.json.encode(checks(k)) for k in range(1500)]
        await warm(nc, "clearance.v1.check", singles, inflight)  # misses are slow here
        # The echo again, just before: the shared machine's load drifts over a run.
        echo = await measure(nc, "bench.echo", singles, seconds, inflight)
        cached = await measure(nc, "clearance.v1.check", singles, seconds, inflight)
        fresh = [msgspec.json.encode(checks(k, fresh=True)) for k in range(200_000)]
        rate, lat = await load(nc, "clearance.v1.check", fresh, seconds=seconds,
                               inflight=inflight)
        results["echo"] = echo
        results["check_cached"] = cached
        results["check_cached_ratio"] = cached["rps"] / echo["rps"]
        results["check_uncached"] = {"rps": rate, "p50_ms": pct(lat, 50),
                                     "p99_ms": pct(lat, 99)}
        results["check_uncached_ratio"] = rate / echo["rps"]
    finally:
        await r.aclose()
    return results


def report(live: dict[str, Any], core: dict[str, Any]) -> str:
    """The summary lines of the inherited figures."""
    lines = []
    for name, what in (("fleet_change", "subjects"), ("fleet_change_rule_added",
                                                      "subjects + a new rule")):
        row, pure = live[name], core[name]
        lines.append(
            f"Fleet policy change ({what}), {live['targets']} targets / {live['policies']} "
            f"AccessPolicies: end to end {row['targets_per_s']:.0f} targets/s (commit "
            f"{row['commit_s'] * 1000:.0f} ms, revision {row['revision_s'] * 1000:.0f} ms) | "
            f"core: index {pure['index_targets_per_s']:.0f} targets/s, whole fold "
            f"{pure['fold_targets_per_s']:.0f} targets/s")
    ns = live["namespace_change"]
    lines.append(f"namespace intent change end to end: commit {ns['commit_ms']:.1f} ms, "
                 f"revision {ns['revision_ms']:.1f} ms (median)")
    for row in core["namespace_change"]:
        lines.append(
            f"  core, {row['clusters']} x {row['namespaces']} ({row['policies']} policies, "
            f"{row['targets']} targets): index {row['index_us']:.0f} us, whole fold "
            f"{row['fold_us']:.0f} us per event; an intent that starts or stops replacing "
            f"a Fleet default {row['override_fold_us']:.0f} us "
            f"({row['override_statuses_per_event']:.0f} statuses rewritten)")
    cached, uncached = live["check_cached"], live["check_uncached"]
    lines.append(
        f"checks decided by inherited rules (echo now {live['echo']['rps']:.0f} req/s): "
        f"cached {cached['rps']:.0f} req/s = "
        f"{live['check_cached_ratio']:.2f}x echo (p50 {cached['p50_ms']:.2f} ms, p99 "
        f"{cached['p99_ms']:.2f} ms) | uncached {uncached['rps']:.0f} req/s = "
        f"{live['check_uncached_ratio']:.2f}x (p50 {uncached['p50_ms']:.2f} ms)")
    return "\n".join(lines)
