"""Principal-wide views: ``clearance.v1.permissions`` (every cluster) and
``clearance.v1.policies`` (the policies naming a principal).

Both are computed from one snapshot of the principal's candidate policies and the whole
cluster inventory, with the same evaluator as single checks, so they can never disagree
with ``clearance.v1.check``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import msgspec

from clearance_api.wire import (
    ClusterPermissions,
    PermissionsReply,
    PoliciesReply,
    PolicySummary,
    Principal,
    PrincipalRequest,
)
from clearance_core.kube.principal import Identity
from clearance_core.kube.resources import check_principal
from clearance_core.monitor.evaluate import candidates, matched_by, skip_reason
from clearance_core.questions import answers, unknown_names
from clearance_runtime.reading.reads import Reads, Snapshot


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


def permissions(snapshot: Snapshot, identity: Identity) -> dict[str, ClusterPermissions]:
    """cluster -> decision for ``view`` and every action granted there (a cluster check
    for each action: MonitorAccessPolicies and the Cluster target's AccessPolicies)."""
    return answers.permissions(snapshot, identity, sorted(snapshot.labels), now=time.time())


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
        warnings = unknown_names.list_warnings(snapshot, identity, sorted(snapshot.labels))
        return PermissionsReply(clusters=permissions(snapshot, identity),
                                warnings=warnings or msgspec.UNSET,
                                revision=snapshot.revision)

    async def policies(self, request: PrincipalRequest) -> PoliciesReply:
        snapshot, identity = await principal_snapshot(self._reads, request.who(),
                                                      clusters=[])
        return PoliciesReply(policies=policies(snapshot, identity), revision=snapshot.revision)
