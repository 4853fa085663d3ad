"""Inherited AccessPolicies in the pure core: what one event costs the compiler's fold.

The compiler folds an AccessPolicy event with :func:`clearance_core.folding.folds.accesspolicies.
follow`: the inheritance index recomputes the touched targets (``InheritanceIndex.apply``,
timed alone as "index"), then the fold lists the changed targets' writes and audiences and
recomputes the conditions of the policies whose part moved ("fold": the whole of it). All
in process, with a ``Writes`` that only counts (the end-to-end figures add the store's Lua
commit and the bus):

* a Fleet-level change, every materialised target recomputed: targets per second, when
  the Fleet policy changes its rules' subjects and when it also adds a rule;
* one namespace intent changing: time per event at several fleet sizes — it must not grow
  with the fleet (one target is recomputed, whatever the fleet's size).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import inherit_fleet

from clearance_core.folding.fold import Affected
from clearance_core.folding.folds.accesspolicies import conditions_of, follow
from clearance_core.folding.model import Model
from clearance_core.inherit.accesspolicy import compile_access_policy
from clearance_core.inherit.index import InheritanceIndex, PolicyApplied

SIZES = ((50, 10), (200, 50), (500, 100))


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
    compiled = [compile_access_policy(p) for p in inherit_fleet.policies(clusters, namespaces)]
    objects = inherit_fleet.inventory(clusters)
    inventory = {obj["metadata"]["name"]: obj["metadata"]["labels"]
                 for obj in objects if obj["kind"] == "ManagedCluster"}
    bindings = {(obj["metadata"]["namespace"], obj["metadata"]["name"]): obj["spec"]["clusterSet"]
                for obj in objects if obj["kind"] == "ManagedClusterSetBinding"}
    found = Model()
    found.inherit = InheritanceIndex.build(
        compiled, inventory, {f"set{s}" for s in range(inherit_fleet.SETS)},
        bindings=bindings)
    for key in found.inherit.policies:
        conditions = conditions_of(found, key)
        assert conditions is not None
        found.access_status[key] = conditions
    return found


def _best(runs: list[Callable[[], Any]]) -> float:
    """The fastest of the runs (the machine is shared: the minimum is the cost), with the
    garbage collector paused: a full collection walks the whole model (its cost grows
    with the fleet but is the process's, not the event's; the end-to-end figures, in
    the real compiler, include it)."""
    times = []
    gc.collect()
    gc.disable()
    try:
        for run in runs:
            started = time.perf_counter()
            run()
            times.append(time.perf_counter() - started)
    finally:
        gc.enable()
    return min(times)


def fleet_change(found: Model, *, added: bool, runs: int = 2) -> dict[str, float]:
    """Fleet policy 0 changes (subjects; with ``added``, also a new rule): every target
    is recomputed. Each run gets a new version, so each really changes every target."""
    events = [PolicyApplied(compile_access_policy(inherit_fleet.fleet_policy(
        0, version=100 * added + run + 1, added=added))) for run in range(2 * runs)]
    writes = CountingWrites()
    # The index alone on copies (the model is left as it was), then the whole fold.
    copies = [found.inherit.copy() for _ in range(runs)]
    index_s = _best([lambda c=c, e=e: c.apply(e) for c, e in zip(copies, events, strict=False)])
    del copies
    fold_s = _best([lambda k=k, e=e: follow(found, writes, e, k)  # type: ignore[arg-type]
                    for k, e in enumerate(events[runs:])])
    targets = writes.effective // runs
    return {"targets": targets, "statuses_written": writes.statuses // runs,
            "index_s": index_s, "index_targets_per_s": targets / index_s,
            "fold_s": fold_s, "fold_targets_per_s": targets / fold_s}


def namespace_change(found: Model, clusters: int, namespaces: int,
                     events: int = 200) -> dict[str, float]:
    """One namespace intent after another changes: its rule's subjects ("subjects"), or
    it starts or stops replacing the Fleet's ``sre-view`` default ("override": the parts
    of the 20 Fleet policies there change, so their conditions are recomputed and, as
    they name the policies that won over them, rewritten). Time per event."""
    intents = inherit_fleet.split(clusters, namespaces)[3]
    picks = [(k * 7919) % intents for k in range(events)]
    found_at = dict(found.inherit.policies)
    subjects = [PolicyApplied(compile_access_policy(inherit_fleet.namespace_policy(
        i, clusters, namespaces, version=1 + k))) for k, i in enumerate(picks)]
    overrides = []
    for i in picks:
        written = inherit_fleet.namespace_policy(i, clusters, namespaces)
        toggled = "sre-view" not in written["spec"]["rules"]
        overrides.append(PolicyApplied(compile_access_policy(
            inherit_fleet.namespace_policy(i, clusters, namespaces, sre=toggled))))
    index = found.inherit.copy()
    writes = CountingWrites()

    def per_event(apply: Callable[[PolicyApplied, int], Any], changes: list[PolicyApplied]
                  ) -> float:
        """The best mean over batches of 20 events (the machine is shared)."""
        batches = [changes[k:k + 20] for k in range(0, len(changes), 20)]
        return _best([lambda b=b: [apply(e, k) for k, e in enumerate(b)]
                      for b in batches]) / 20

    index_s = per_event(lambda e, _: index.apply(e), subjects)
    fold_s = per_event(lambda e, k: follow(found, writes, e, k), subjects)  # type: ignore[arg-type]
    written = writes.statuses
    override_s = per_event(lambda e, k: follow(found, writes, e, k),  # type: ignore[arg-type]
                           overrides)
    written = writes.statuses - written
    # Put the fleet back as it was (the Fleet changes measured next start from it).
    for policy in found_at.values():
        if found.inherit.policies.get(policy.key) != policy:
            follow(found, writes, PolicyApplied(policy), 0)  # type: ignore[arg-type]
    return {"index_us": index_s * 1e6, "fold_us": fold_s * 1e6,
            "override_fold_us": override_s * 1e6,
            "override_statuses_per_event": written / events}


def measure(sizes: tuple[tuple[int, int], ...] = SIZES) -> dict[str, Any]:
    """The Fleet changes at 200 x 50 (2,000 policies), and a namespace change at each
    size (policies as :func:`inherit_fleet.split` spreads them)."""
    results: dict[str, Any] = {"namespace_change": []}
    begun = time.perf_counter()
    for clusters, namespaces in sizes:
        started = time.perf_counter()
        found = model(clusters, namespaces)
        row = {"clusters": clusters, "namespaces": namespaces,
               "policies": len(found.inherit.policies),
               "targets": len(found.inherit.effective),
               "build_s": time.perf_counter() - started,
               **namespace_change(found, clusters, namespaces)}
        results["namespace_change"].append(row)
        if (clusters, namespaces) == (200, 50):
            results["fleet_change"] = {"policies": len(found.inherit.policies),
                                       **fleet_change(found, added=False)}
            results["fleet_change_rule_added"] = fleet_change(found, added=True)
    results["took_s"] = time.perf_counter() - begun
    return results


if __name__ == "__main__":
    import json
    print(json.dumps(measure(), indent=2))
