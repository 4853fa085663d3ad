"""A fleet of inherited AccessPolicies for the benchmarks (docs/guide/inherited.md).

``clusters`` ManagedClusters ``c0…``, spread over ManagedClusterSets (one in ten clusters
carries no set label), each with ``namespaces`` namespaces ``ns0…``, and AccessPolicies
spread the way a fleet grows (:func:`split`): a few on the Fleet (platform defaults and
security overrides), some per ClusterSet and per Cluster, and most of them namespace
intents written by teams. Rule names overlap on purpose — teams reuse ``sre-view`` (which
the Fleet's merge default also sets) and cluster owners replace the set's defaults — so
effective policies carry fates and the statuses have winners to name.

Every policy is written where it may be (policy authority): Fleet policies in the admin
namespace ``clearance-system``, ClusterSet policies in ``platform`` (bound to every set by
a ManagedClusterSetBinding), a cluster's in the hub namespace named as the cluster, and a
namespace intent in the hub namespace named as the namespace.

Principals the check benchmark asks about are matched only by inherited rules (never by a
MonitorAccessPolicy of the main bench fleet): ``dev-<cluster>-<namespace>`` by a namespace
intent, ``admin-<cluster>`` by a cluster's defaults, ``sre-<n>`` by the Fleet's.
"""

from __future__ import annotations

from typing import Any

API = "clearance.io/v1alpha1"
OCM = "cluster.open-cluster-management.io"
SET_LABEL = f"{OCM}/clusterset"
SETS = 10
ENVS = ("prod", "staging", "dev")
ADMIN = "clearance-system"  # the default CLEARANCE_ADMIN_NAMESPACES
PLATFORM = "platform"  # bound to every cluster set


def _rule(*, users: list[str] | None = None, groups: list[str] | None = None,
          effect: str = "Allow", metrics: bool = False) -> dict[str, Any]:
    return {"effect": effect, "subjects": {"users": users or [], "groups": groups or []},
            "permissions": {"view": True, "viewMetrics": metrics}}


def _policy(name: str, namespace: str, target: dict[str, Any], spec: dict[str, Any],
            stamp: int) -> dict[str, Any]:
    created = f"2026-01-{1 + stamp // 86400 % 28:02d}T{stamp // 3600 % 24:02d}:" \
              f"{stamp // 60 % 60:02d}:{stamp % 60:02d}Z"
    return {"apiVersion": API, "kind": "AccessPolicy",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
            "spec": {"targetRef": target, **spec}}


def inventory(clusters: int) -> list[dict[str, Any]]:
    """The ManagedClusterSets, their bindings to ``platform`` and the ManagedClusters
    (labels as the main bench fleet's, plus the set label), in an order the compiler can
    fold one by one."""
    objects: list[dict[str, Any]] = [
        {"apiVersion": f"{OCM}/v1beta2", "kind": "ManagedClusterSet",
         "metadata": {"name": f"set{s}"}} for s in range(SETS)]
    objects += [{"apiVersion": f"{OCM}/v1beta2", "kind": "ManagedClusterSetBinding",
                 "metadata": {"name": f"set{s}", "namespace": PLATFORM},
                 "spec": {"clusterSet": f"set{s}"}} for s in range(SETS)]
    for i in range(clusters):
        labels = {"env": ENVS[i % 3], "region": f"r{i % 7}"}
        if i % 10:
            labels[SET_LABEL] = f"set{i % SETS}"
        objects.append({"apiVersion": f"{OCM}/v1", "kind": "ManagedCluster",
                        "metadata": {"name": f"c{i}", "labels": labels}})
    return objects


def fleet_policy(i: int, *, version: int = 0, added: bool = False) -> dict[str, Any]:
    """The i-th Fleet policy. ``version`` changes its default's subjects, so every
    target's effective policy changes (the Fleet-level change the bench measures);
    ``added`` also adds a rule of a new name, so every target's provenance changes too
    (and every policy's part in it is recomputed)."""
    rules = {"sre-view": _rule(groups=[f"sre-{i}", f"sre-v{version}"], metrics=True),
             f"platform-{i}": _rule(groups=[f"platform-{i}"])}
    if added:
        rules[f"audit-{version}"] = _rule(groups=[f"auditors-{version}"])
    spec: dict[str, Any] = {"defaults": {"strategy": "merge", "rules": rules}}
    if i % 4 == 0:
        spec["overrides"] = {"strategy": "merge", "rules": {
            f"security-{i}": _rule(users=[f"suspended-{i}"], effect="Deny")}}
    return _policy(f"fleet-{i}", ADMIN, {"kind": "Fleet", "name": "fleet"}, spec, i)


def set_policy(i: int) -> dict[str, Any]:
    s = i % SETS
    block = "overrides" if i % 3 == 0 else "defaults"
    return _policy(f"set{s}-{i}", PLATFORM, {"kind": "ClusterSet", "name": f"set{s}"},
                   {block: {"strategy": "merge", "rules": {
                       f"set-ops-{i % 6}": _rule(groups=[f"set{s}-ops-{i}"], metrics=True)}}},
                   1000 + i)


def cluster_policy(i: int, clusters: int) -> dict[str, Any]:
    c = i % clusters
    return _policy(f"cluster-{i}", f"c{c}", {"kind": "Cluster", "name": f"c{c}"},
                   {"defaults": {"strategy": "merge", "rules": {
                       "cluster-admins": _rule(groups=[f"admin-c{c}"], metrics=True),
                       f"set-ops-{i % 6}": _rule(groups=[f"c{c}-ops"])}}},
                   2000 + i)


def namespace_policy(i: int, clusters: int, namespaces: int, *, version: int = 0,
                     sre: bool | None = None) -> dict[str, Any]:
    """The i-th namespace intent; ``version`` changes its rule's subjects; ``sre`` says
    whether it replaces the Fleet's ``sre-view`` default (one in five does)."""
    c, n = i % clusters, (i // clusters) % namespaces
    rules = {"team": _rule(groups=[f"dev-c{c}-ns{n}", f"v{version}"], metrics=i % 2 == 0)}
    if i % 5 == 0 if sre is None else sre:
        rules["sre-view"] = _rule(users=[f"oncall-c{c}-ns{n}"])
    if i % 17 == 0:
        rules["blocked"] = _rule(users=[f"intruder-{i}"], effect="Deny")
    return _policy(f"intent-{i}", f"ns{n}",
                   {"kind": "Namespace", "cluster": f"c{c}", "name": f"ns{n}"},
                   {"rules": rules}, 10_000 + i)


def split(clusters: int, namespaces: int) -> tuple[int, int, int, int]:
    """(Fleet, ClusterSet, Cluster, Namespace) policy counts for a fleet: 20 on the Fleet,
    8 per ClusterSet, 1.5 per cluster, and intents on 16 % of the namespaces (at 200 x 50:
    2,000 policies, 80 % of them namespace intents). A target's path then holds about as
    many policies at every fleet size, so the cost of one target stays comparable."""
    return 20, 8 * SETS, clusters * 3 // 2, clusters * namespaces * 16 // 100


def policies(clusters: int, namespaces: int) -> list[dict[str, Any]]:
    fleet, sets, owned, intents = split(clusters, namespaces)
    found = [fleet_policy(i) for i in range(fleet)]
    found += [set_policy(i) for i in range(sets)]
    found += [cluster_policy(i, clusters) for i in range(owned)]
    found += [namespace_policy(i, clusters, namespaces) for i in range(intents)]
    return found
