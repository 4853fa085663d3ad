"""Inherited AccessPolicies in the pure core: what one event costs the compiler's fold.

The compiler folds an AccessPolicy event with :func:`clearance_core.folds.accesspolicies.
follow`: the inheritance index recomputes the touched targets (``InheritanceIndex.apply``),
then the fold lists the changed targets' writes and audiences and recomputes the
conditions of every policy on their paths. Both are timed here, in process, with a
``Writes`` that only counts (the store's Lua commit is what the end-to-end figure adds):

* after a Fleet-level change (every materialised target recomputed): targets per second;
* after one namespace intent changes: time per event, at several fleet sizes — it must not
  grow with the fleet.
"""

from __future__ import annotations

import time
from typing import Any

import inherit_fleet

from clearance_core.accesspolicy import compile_access_policy
from clearance_core.fold import Affected
from clearance_core.folds.accesspolicies import conditions_of, follow
from clearance_core.hierarchy import CLUSTERSET_LABEL
from clearance_core.inherit_index import InheritanceIndex, PolicyApplied
from clearance_core.model import Model


class CountingWrites:
    """The part of ``Writes`` the AccessPolicy fold uses, counting instead of storing."""

    def __init__(self) -> None:
        self.announce = Affected()
        self.invalidate = Affected()
        self.effective = 0
        self.statuses = 0

    def put_effective(self, target: Any, effective: Any) -> None:
        self.effective += 1

    def put_access_status(self, key: str, conditions: Any) -> None:
        self.statuses += 1


def model(clusters: int, namespaces: int) -> Model:
    """A compiler's model after the fleet was folded (statuses as stored)."""
    compiled = [compile_access_policy(p)
                for p in inherit_fleet.policies(clusters, namespaces)]
    inventory = {
        obj["metadata"]["name"]: obj["metadata"]["labels"]
        for obj in inherit_fleet.inventory(clusters) if obj["kind"] == "ManagedCluster"}
    found = Model()
    found.inherit = InheritanceIndex.build(
        compiled, inventory, {f"set{s}" for s in range(inherit_fleet.SETS)})
    for key in found.inherit.policies:
        conditions = conditions_of(found, key)
        assert conditions is not None
        found.access_status[key] = conditions
    assert all(CLUSTERSET_LABEL in labels or name.endswith("0")
               for name, labels in inventory.items())
    return found


def _timed(fn: Any) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def fleet_change(found: Model, runs: int = 3) -> dict[str, float]:
    """A Fleet policy's default changes subjects: every target is recomputed."""
    index_times, fold_times, targets, statuses = [], [], 0, 0
    for run in range(runs):
        # Alternate versions so every run really changes every target.
        event = PolicyApplied(compile_access_policy(
            inherit_fleet.fleet_policy(0, version=2 * run + 1)))
        copy = found.inherit.copy()
        index_times.append(_timed(lambda: copy.apply(event)))  # noqa: B023
        writes = CountingWrites()
        fold_times.append(_timed(
            lambda: follow(found, writes, event, run)))  # type: ignore[arg-type]  # noqa: B023
        targets, statuses = writes.effective, writes.statuses
    index_s, fold_s = min(index_times), min(fold_times)
    return {"targets": targets, "statuses_written": statuses,
            "index_s": index_s, "index_targets_per_s": targets / index_s,
            "fold_s": fold_s, "fold_targets_per_s": targets / fold_s}


def namespace_change(found: Model, clusters: int, namespaces: int,
                     events: int = 200) -> dict[str, float]:
    """One namespace intent after another changes subjects: time per event."""
    intents = inherit_fleet.split(clusters, namespaces)[3]
    picks = [(k * 7919) % intents for k in range(events)]
    versions = [PolicyApplied(compile_access_policy(inherit_fleet.namespace_policy(
        i, clusters, namespaces, version=1 + k))) for k, i in enumerate(picks)]
    index = found.inherit.copy()
    index_s = _timed(lambda: [index.apply(e) for e in versions]) / events
    writes = CountingWrites()
    fold_s = _timed(lambda: [follow(found, writes, e, k)  # type: ignore[arg-type]
                             for k, e in enumerate(versions)]) / events
    return {"index_us": index_s * 1e6, "fold_us": fold_s * 1e6}


SIZES = ((50, 10), (200, 50), (500, 100))


def measure(sizes: tuple[tuple[int, int], ...] = SIZES) -> dict[str, Any]:
    """The core figures: the Fleet change at 200 x 50 (2,000 policies), and a namespace
    change at each size (policies as :func:`inherit_fleet.split` spreads them)."""
    results: dict[str, Any] = {"namespace_change": []}
    for clusters, namespaces in sizes:
        started = time.perf_counter()
        found = model(clusters, namespaces)
        built = time.perf_counter() - started
        row = {"clusters": clusters, "namespaces": namespaces,
               "policies": len(found.inherit.policies),
               "targets": len(found.inherit.effective), "build_s": built,
               **namespace_change(found, clusters, namespaces)}
        results["namespace_change"].append(row)
        if (clusters, namespaces) == (200, 50):
            results["fleet_change"] = {"policies": len(found.inherit.policies),
                                       **fleet_change(found)}
    return results


if __name__ == "__main__":
    import json
    print(json.dumps(measure(), indent=2))
