"""The reference answers: what a fresh evaluation of the :class:`~tests.freshness.world.World`
says, with no cache, no stored state and no incremental fold in the way.

:class:`Fresh` compiles every object of the world from scratch with the pure core (each
MonitorAccessPolicy against the MetricSources in force, the inheritance index built whole,
the RBAC index built whole) and answers checks, filters and reviews from that. What the
system answers goes through the watcher-less stream, the compiler's incremental folds, the
state store, the invalidator and the decision cache; if any of them leaves an answer
behind, the two differ.

A filter's expected items are the items an item check allows (``view``): the contract
says checks on items and ``filter`` requests are exact, so the filter's oracle is the
check's, item by item.

A check that names no namespace is answered over every Namespace target of its cluster
whose matching rules differ from the cluster's, found here by comparing each target's
rules with the cluster's (no index), and combined as the decision service combines them
(:func:`clearance_core.questions.answers.check`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgspec

from clearance_api.errors import InvalidObject
from clearance_api.wire import CheckResult, Resource, SubjectAccessReviewStatus
from clearance_core.folding.fold import fold_policy
from clearance_core.inherit import hierarchy
from clearance_core.inherit.accesspolicy import compile_access_policy
from clearance_core.inherit.decide import matching
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.index import InheritanceIndex
from clearance_core.inherit.merge import EffectivePolicy, EffectiveRule
from clearance_core.kube.principal import Identity
from clearance_core.kube.resources import cluster_of
from clearance_core.monitor.evaluate import match_cluster, names
from clearance_core.monitor.metricsource import compile_source, winner
from clearance_core.questions import answers, unknown_names
from clearance_core.rbac.index import RbacIndex
from clearance_core.rbac.rules import ResourceAttributes, parse_binding, parse_role
from tests.freshness.world import Who, World

T = TypeVar("T")
#: Reply members that carry no answer.
VOLATILE = ("cached", "revision", "request_id")


def answer(reply: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in reply.items() if k not in VOLATILE}


def _valid(compile_: Callable[[dict[str, Any]], T], objects: list[dict[str, Any]]) -> list[T]:
    """The compiled objects; an invalid one takes no part (its status says why)."""
    found = []
    for obj in objects:
        with contextlib.suppress(InvalidObject):
            found.append(compile_(obj))
    return found


class Fresh:
    """Everything the world decides, compiled from scratch."""

    def __init__(self, world: World) -> None:
        self.groups = {obj["metadata"]["name"]: set(obj["users"]) for obj in world.of("group")}
        self.clusters = {obj["metadata"]["name"]: dict(obj["metadata"]["labels"])
                         for obj in world.of("managedcluster")}
        sets = {obj["metadata"]["name"] for obj in world.of("managedclusterset")}
        sources = [compile_source(obj) for obj in world.of("metricsource")]
        in_force = {s.type_name: winner(x for x in sources if x.type_name == s.type_name)
                    for s in sources}
        type_sources = {k: v for k, v in in_force.items() if v is not None}
        #: Custom types some MetricSource declares: AccessPolicy rules hide the others.
        self.declared = frozenset(type_sources)
        self.policies = [p for p in (fold_policy("ADDED", obj, None, type_sources)[0]
                                     for obj in world.of("monitoraccesspolicy"))
                         if p is not None]
        access = _valid(compile_access_policy, world.of("accesspolicy"))
        self.inherit = InheritanceIndex.build(access, self.clusters, sets)
        self.rbac = RbacIndex(
            _valid(parse_role, world.of("role") + world.of("clusterrole")),
            _valid(parse_binding, world.of("rolebinding") + world.of("clusterrolebinding")))

    # Identity -------------------------------------------------------------------------

    def groups_of(self, username: str, given: tuple[str, ...] | list[str],
                  email: str | None = None) -> frozenset[str]:
        """README: Principals: the given groups, the Groups listing the username or email, and
        the service-account groups."""
        found = set(given)
        found |= {g for g, users in self.groups.items()
                  if username in users or (email and email in users)}
        prefix = "system:serviceaccount:"
        if username.startswith(prefix):
            parts = username[len(prefix):].split(":")
            if len(parts) == 2 and all(parts):
                found |= {"system:serviceaccounts", f"system:serviceaccounts:{parts[0]}"}
        return frozenset(found)

    def identity(self, who: Who) -> Identity:
        return Identity(username=who.username, email=who.email,
                        groups=self.groups_of(who.username, who.groups, who.email))

    # Checks ---------------------------------------------------------------------------

    def inherited(self, cluster: str, namespace: str | None
                  ) -> tuple[Target | None, Mapping[str, EffectiveRule]]:
        """README: Inherited: the effective policy of Namespace C/N (one a policy names), else of
        Cluster C (one that exists), else the Fleet's."""
        effective = self.inherit.effective
        found = None
        if namespace is not None:
            found = effective.get(hierarchy.namespace(cluster, namespace))
        if found is None:
            found = effective.get(hierarchy.cluster(cluster)) or effective[hierarchy.FLEET]
        return found.target, found.rules

    def cluster_rules(self, cluster: str
                      ) -> tuple[Target | None, Mapping[str, EffectiveRule]]:
        return self.inherited(cluster, None)

    def check(self, who: Who, action: str, resource: Mapping[str, Any], *, now: float,
              explain: bool) -> dict[str, Any]:
        """The reply a check would get, without ``cached`` and ``revision``."""
        wire = msgspec.convert(resource, Resource)
        cluster = cluster_of(wire)
        identity = self.identity(who)
        state = _For(self, identity)
        decision = answers.check(state, identity, action, wire,
                                 cluster=cluster, now=now, explain=explain)
        result = CheckResult(
            decision=decision.decision, allowed=decision.decision in ("allow", "partial"),
            reason=decision.reason, policy=decision.policy,
            permissions=list(decision.permissions), filters=decision.filters,
            trace=decision.outcome.trace if explain else msgspec.UNSET)
        # A cached warning outliving the name it warns of is as stale as a cached grant.
        warned = unknown_names.check_warnings(
            state, identity, wire, cluster, known=self.clusters.keys(),
            inventory=sorted(self.clusters)).all()
        if warned:
            result.warnings = warned
        return answer(json.loads(msgspec.json.encode(result)))

    def visible(self, who: Who, cluster: str, type_name: str,
                items: list[dict[str, Any]], *, now: float) -> list[str]:
        """The names of the items a ``filter`` shows: those an item check allows."""
        shown = []
        for item in items:
            resource = {"type": type_name, "cluster": cluster, **item}
            if self.check(who, "view", resource, now=now, explain=False)["allowed"]:
                shown.append(item["name"])
        return shown

    # Reviews --------------------------------------------------------------------------

    def review(self, user: str, groups: list[str], attrs: ResourceAttributes
               ) -> dict[str, Any]:
        """The ``status`` of a SubjectAccessReview."""
        effective = sorted(self.groups_of(user, groups))
        allowed, reason, error = self.rbac.allowed(attrs, user, effective)
        if not allowed:  # a deny names what no rule names (README: RBAC reviews)
            reason = "; ".join([*([reason] if reason else []), *self.rbac.unnamed(attrs)])
        status = SubjectAccessReviewStatus(allowed=allowed, reason=reason)
        if error:
            status.evaluation_error = error
        return dict(json.loads(msgspec.json.encode(status)))


class _For:
    """The world as one principal's state (:class:`clearance_core.questions.answers.State`)."""

    match = staticmethod(match_cluster)

    def __init__(self, fresh: Fresh, identity: Identity) -> None:
        self._fresh, self._identity = fresh, identity
        # The candidates, as the decision service finds them: the policies naming the
        # principal (the same answers; a principal with none is warned of as unnamed).
        self.policies = [p for p in fresh.policies if names(p, identity)]
        self.labels = fresh.clusters
        self.declared = fresh.declared
        self.inherited, self.cluster_rules = fresh.inherited, fresh.cluster_rules

    def namespace_targets(self, cluster: str) -> dict[str, EffectivePolicy]:
        """Every Namespace target of the cluster whose rules matching the principal
        differ from the cluster's, by namespace."""
        mine = matching(self.cluster_rules(cluster)[1], self._identity)
        found = {target.name: effective
                 for target, effective in self._fresh.inherit.effective.items()
                 if target.kind == "Namespace" and target.cluster == cluster
                 and matching(effective.rules, self._identity) != mine}
        return dict(sorted(found.items()))
