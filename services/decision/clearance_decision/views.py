"""Principal-wide views: ``clearance.v1.permissions`` (every cluster) and
``clearance.v1.policies`` (the policies naming a principal).

Both are computed from one snapshot of the principal's candidate policies and the whole
cluster inventory, with the same evaluator as single checks, so they can never disagree
with ``clearance.v1.check``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from clearance_core.evaluate import candidates, evaluate_cluster, matched_by, skip_reason
from clearance_core.govern import Governing, govern
from clearance_core.placed import Placed
from clearance_core.principal import Identity
from clearance_core.resources import check_principal
from clearance_core.wire import (
    Action,
    ClusterPermissions,
    PermissionsReply,
    PoliciesReply,
    PolicySummary,
    Principal,
    PrincipalRequest,
)
from clearance_runtime.reads import Reads, Snapshot

ACTIONS: tuple[Action, ...] = ("view", "view_metrics")


async def principal_snapshot(
    reads: Reads, principal: Principal, *, clusters: Sequence[str] | None,
    namespaces: Sequence[str] | None = (), spread: bool = False,
) -> tuple[Snapshot, Identity]:
    """A usable principal's snapshot and identity; ``clusters=None``: the whole inventory;
    ``namespaces``: the Namespace targets to read too (``None``: all); ``spread``: and
    the Namespace targets that answer the principal otherwise than their cluster's."""
    check_principal(principal)
    return await reads.snapshot(principal, clusters=clusters, namespaces=namespaces,
                                spread=spread)


def governing(snapshot: Snapshot, identity: Identity, cluster: str, action: str,
              namespace: str | None = None, *, now: float | None = None) -> Governing:
    """What governs ``action`` in the cluster (or one namespace of it): its
    MonitorAccessPolicy outcome and the effective AccessPolicy rules there together."""
    outcome = evaluate_cluster(snapshot.policies, identity, action=action, cluster=cluster,
                               labels=snapshot.labels.get(cluster, {}),
                               now=time.time() if now is None else now,
                               match=snapshot.match)
    return govern(outcome, snapshot.inherited(cluster, namespace)[1], identity, action,
                  snapshot.declared)


def placed(snapshot: Snapshot, identity: Identity, cluster: str, action: str, *,
           now: float | None = None) -> Placed:
    """What governs ``action`` on the items of ``cluster``, target by target: the
    cluster's target and each Namespace target of the snapshot's ``spread``
    (:class:`clearance_core.placed.Placed`). The cluster's MonitorAccessPolicy outcome is
    one for all of them."""
    outcome = evaluate_cluster(snapshot.policies, identity, action=action, cluster=cluster,
                               labels=snapshot.labels.get(cluster, {}),
                               now=time.time() if now is None else now,
                               match=snapshot.match, explain=False)
    here = govern(outcome, snapshot.cluster_rules(cluster)[1], identity, action,
                  snapshot.declared)
    there = {namespace: govern(outcome, effective.rules, identity, action,
                               snapshot.declared)
             for namespace, effective in snapshot.namespace_targets(cluster).items()}
    return Placed(here, there)


def permissions(snapshot: Snapshot, identity: Identity) -> dict[str, ClusterPermissions]:
    """cluster -> decision for ``view`` and every action granted there (a cluster check
    for each action: MonitorAccessPolicies and the Cluster target's AccessPolicies)."""
    now = time.time()
    out: dict[str, ClusterPermissions] = {}
    for cluster in sorted(snapshot.labels):
        granted = [action for action in ACTIONS
                   if governing(snapshot, identity, cluster, action, now=now)]
        out[cluster] = ClusterPermissions(
            decision="allow" if "view" in granted else "deny",
            permissions=granted,
        )
    return out


def policies(snapshot: Snapshot, identity: Identity) -> list[PolicySummary]:
    """Every policy whose subjects match, in evaluation order, with how it matched."""
    now = time.time()
    out = []
    for policy in candidates(snapshot.policies, identity):
        out.append(PolicySummary(
            name=policy.name,
            namespace=policy.namespace,
            priority=policy.priority,
            effect=policy.effect,
            enabled=policy.enabled,
            valid=policy.valid,
            in_force=skip_reason(policy, now) is None,
            matched_by=matched_by(policy, identity) or "",
        ))
    return out


class Views:
    def __init__(self, reads: Reads) -> None:
        self._reads = reads

    async def permissions(self, request: PrincipalRequest) -> PermissionsReply:
        snapshot, identity = await principal_snapshot(self._reads, request.who(),
                                                      clusters=None)
        return PermissionsReply(clusters=permissions(snapshot, identity),
                                revision=snapshot.revision)

    async def policies(self, request: PrincipalRequest) -> PoliciesReply:
        snapshot, identity = await principal_snapshot(self._reads, request.who(),
                                                      clusters=[])
        return PoliciesReply(policies=policies(snapshot, identity), revision=snapshot.revision)
