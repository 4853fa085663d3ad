"""What one check reads of the compiled state, for one principal (:class:`Snapshot`).

The decision service's mirror (:mod:`.mirror`, through :mod:`.reads`) makes one per
check or principal view: the compiler's revision, the Groups listing the user, the
candidate policies (those naming the user, email, service account or a group), the
labels of the clusters asked about, and the effective AccessPolicies on their paths.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import msgspec

from clearance_core.inherit import hierarchy
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.merge import EffectivePolicy, EffectiveRule
from clearance_core.kube.principal import Identity
from clearance_core.monitor.evaluate import Matcher, match_cluster
from clearance_core.monitor.policy import CompiledPolicy
from clearance_core.questions.placement import NamespaceIndex

_NO_RULES: dict[str, EffectiveRule] = {}


class Snapshot(msgspec.Struct, kw_only=True):
    compiled_revision: str
    revision: int
    member_of: list[str]
    policies: list[CompiledPolicy]
    labels: dict[str, dict[str, str]]
    known_clusters: frozenset[str]
    #: Effective AccessPolicies read: the Fleet's, per cluster, per cluster and namespace.
    fleet: EffectivePolicy | None = None
    cluster_effective: dict[str, EffectivePolicy] = {}
    namespace_effective: dict[str, dict[str, EffectivePolicy]] = {}
    #: Custom types some MetricSource declares.
    declared: frozenset[str] = frozenset()
    #: Every cluster of the inventory, sorted, when a cluster asked about is not in it
    #: (a warning suggests the closest: ``clearance_core.questions.unknown_names``); else None.
    inventory: Sequence[str] | None = None
    #: Which rule of a policy matches a cluster, memoised by a mirror (exact for this
    #: snapshot's policies and labels).
    match: Matcher = match_cluster

    #: Per cluster, the Namespace targets that answer this snapshot's principal
    #: otherwise than the cluster's target (read when asked with ``spread``).
    differing: dict[str, dict[str, EffectivePolicy]] = {}

    def inherited(self, cluster: str, namespace: str | None
                  ) -> tuple[Target | None, Mapping[str, EffectiveRule]]:
        """The effective rules a decision in ``cluster`` (``namespace``) reads, and whose
        they are: Namespace C/N, else Cluster C, else the Fleet (docs/guide/inherited.md)."""
        if namespace is not None:
            found = self.namespace_effective.get(cluster, {}).get(namespace) or \
                self.differing.get(cluster, {}).get(namespace)
            if found is not None:
                return found.target, found.rules
        return self.cluster_rules(cluster)

    def cluster_rules(self, cluster: str
                      ) -> tuple[Target | None, Mapping[str, EffectiveRule]]:
        """The effective rules of the cluster's target, and whose they are."""
        found = self.cluster_effective.get(cluster)
        if found is not None:
            return found.target, found.rules
        if self.fleet is None:
            return None, _NO_RULES  # no AccessPolicy on the path
        if cluster not in self.known_clusters:
            return self.fleet.target, self.fleet.rules  # no Cluster target: the Fleet's
        # A known cluster with no policy of its own on its path: its effective policy is
        # the Fleet's (not stored twice), but the decision is about the Cluster target.
        # Which targets are stored must not show in an answer: a policy for someone else
        # at this cluster stores it without touching this principal's cached answers.
        return hierarchy.cluster(cluster), self.fleet.rules

    def namespace_targets(self, cluster: str) -> dict[str, EffectivePolicy]:
        """The cluster's Namespace targets that answer this principal otherwise than the
        cluster's target, by namespace (sorted); read only with ``spread``."""
        return self.differing.get(cluster, {})

    def spread_over(self, identity: Identity, clusters: Iterable[str],
                    namespace_targets: Callable[[str], Mapping[str, EffectivePolicy]]
                    ) -> None:
        """Fill :attr:`differing` for ``clusters`` from every Namespace target of each
        (``namespace_targets``), indexed here for this one read (the mirror keeps its
        indexes instead)."""
        found: dict[str, dict[str, EffectivePolicy]] = {}
        for cluster in clusters:
            targets = namespace_targets(cluster)
            if targets:
                index = NamespaceIndex(self.cluster_rules(cluster)[1], targets)
                concerning = index.concerning(identity)
                if concerning:
                    found[cluster] = concerning
        self.differing = found
