"""A set of manifests folded into compiled state offline, as the compiler would fold them.

``clearance validate`` and ``clearance test`` need what the running system would make of a
directory of manifests without running it: which objects are invalid and why, the
warnings their statuses carry (a custom type no MetricSource declares, an AccessPolicy
whose target does not exist or whose namespace may not write it), and the decision on any
check. :class:`Offline` gets them from the very code the compiler and the decision service
run — each kind's fold from the registry on an in-memory
:class:`~clearance_core.folding.model.Model` (the store's writes are dropped: nothing
reads them), the statuses the folds compute, and
:func:`clearance_core.questions.answers.check` on the folded model — so it cannot disagree
with them.

Each object is folded as the stream carries it: the watcher publishes it as JSON, so a
YAML timestamp arrives as its RFC 3339 text and a number key as a string
(:func:`as_published`); one that cannot be encoded, or whose names are beyond Kubernetes'
limits, is rejected, as the watcher rejects it.
Objects are folded inventory first, then MetricSources and RBAC, then policies (the
result does not depend on the order: a MetricSource re-folds the policies naming its type,
and the inheritance index is order-independent; this order only makes the fewest
re-folds). An object whose fold fails unexpectedly is withdrawn, as the compiler does: it
is left out and everything is folded again without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from clearance_api.wire import (
    PolicyStatus,
    Principal,
    Resource,
    SimulateReply,
    StatusCondition,
)
from clearance_api.wire.effective import Operation
from clearance_core.folding import status
from clearance_core.folding.fold import Affected
from clearance_core.folding.folds import FoldEvent
from clearance_core.folding.folds.accesspolicies import conditions_of
from clearance_core.folding.kinds import ObjectRef, over_limits, ref_of
from clearance_core.folding.model import Model
from clearance_core.folding.registry import REGISTRY
from clearance_core.inherit import hierarchy
from clearance_core.inherit.authority import Authority
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.index import InheritanceIndex
from clearance_core.inherit.merge import EffectivePolicy, EffectiveRule
from clearance_core.kube.principal import Identity, identity_of
from clearance_core.kube.resources import check_principal, place_of
from clearance_core.monitor.decide import Decision
from clearance_core.monitor.evaluate import Matcher, match_cluster
from clearance_core.monitor.policy import CompiledPolicy
from clearance_core.questions import answers, impact
from clearance_core.questions.placement import NamespaceIndex
from clearance_core.questions.simulate import dry_run

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(dict[str, Any]).decode


def as_published(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object as the watcher publishes it and the compiler reads it (JSON); ValueError
    for one that cannot be encoded (the watcher rejects it)."""
    try:
        return _decode(_encode(obj))
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise ValueError(f"cannot be encoded: {exc}") from None


#: The order kinds are folded in (any kind not listed comes last).
ORDER = ("namespace", "managedclusterset", "managedcluster", "managedclustersetbinding",
         "group", "metricsource", "role", "clusterrole", "rolebinding",
         "clusterrolebinding", "monitoraccesspolicy", "accesspolicy")


class _Dropped:
    """The store's side of a fold (:class:`~clearance_core.folding.model.Writes`): offline,
    nothing reads what would be persisted, nor whose cached answers it would drop."""

    def __init__(self) -> None:
        self.announce = Affected()
        self.invalidate = Affected()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("put_"):
            return _ignore
        raise AttributeError(name)


def _ignore(*args: object, **kwargs: object) -> None:
    return None


@dataclass(frozen=True)
class Outcome:
    """What folding one object came to: compiled, invalid (with why) or failed."""

    ref: ObjectRef
    outcome: str
    error: str | None = None


class Offline:
    """Manifests folded into a model (:meth:`fold`), then asked about."""

    def __init__(self, *, authority: Authority | None = None, allow_unset: bool = True,
                 now: float = 0.0) -> None:
        self._authority = authority or Authority()
        self._allow_unset = allow_unset
        self.now = now
        self.model = self._empty()
        #: Every object folded, by reference, in the order given.
        self.outcomes: dict[ObjectRef, Outcome] = {}

    def _empty(self) -> Model:
        return Model(inherit=InheritanceIndex(allow_unset=self._allow_unset,
                                              authority=self._authority))

    def fold(self, objects: Sequence[Mapping[str, Any]]) -> None:
        """Fold every object (each a watched kind: :func:`~clearance_core.folding.kinds.ref_of`
        must accept it; a later object with the same reference replaces an earlier one,
        as the watcher's snapshot does)."""
        latest: dict[ObjectRef, dict[str, Any]] = {}
        rejected: dict[ObjectRef, str] = {}
        for obj in objects:
            ref = ref_of(dict(obj))
            try:
                too_long = over_limits(ref)
                if too_long is not None:
                    raise ValueError(too_long)
                latest[ref] = as_published(obj)
                rejected.pop(ref, None)
            except ValueError as exc:
                latest.pop(ref, None)
                rejected[ref] = f"rejected by the watcher: {exc}"
        rank = {kind: index for index, kind in enumerate(ORDER)}
        ordered = sorted(latest.items(), key=lambda pair: rank.get(pair[0].kind, len(ORDER)))
        failed: dict[ObjectRef, str] = {}
        while True:
            crashed = self._fold_all(ordered, failed)
            if crashed is None:
                break
            failed[crashed[0]] = crashed[1]
        for ref, reason in failed.items():
            self.outcomes[ref] = Outcome(ref, "failed", reason)
        for ref, reason in rejected.items():
            self.outcomes[ref] = Outcome(ref, "failed", reason)
        order = {ref_of(dict(obj)): None for obj in objects}
        self.outcomes = {ref: self.outcomes[ref] for ref in order}

    def _fold_all(self, ordered: list[tuple[ObjectRef, dict[str, Any]]],
                  failed: Mapping[ObjectRef, str]) -> tuple[ObjectRef, str] | None:
        """Fold from scratch, leaving out ``failed``; the object whose fold raised, and
        why, if one did."""
        self.model = self._empty()
        self.outcomes = {}
        for seq, (ref, obj) in enumerate(ordered, start=1):
            spec = REGISTRY[ref.kind]
            if ref in failed or spec.fold is None:
                self.outcomes[ref] = Outcome(ref, "ignored")
                continue
            event = FoldEvent(seq, "ADDED", obj, ref, self.now, precise=False)
            try:
                result = spec.fold(self.model, _Dropped(), event)
            except Exception as exc:
                return ref, (f"could not be compiled: {type(exc).__name__}: "
                             f"{str(exc)[:300]}")
            self.outcomes[ref] = Outcome(ref, result.outcome, result.error)
        return None

    # Statuses ----------------------------------------------------------------------------

    def policy_status(self, key: str) -> PolicyStatus | None:
        """A MonitorAccessPolicy's status (``namespace/name``), as the compiler reports it."""
        policy = self.model.policies.get(key)
        if policy is None:
            return None
        return status.policy_status(policy, self.model.type_sources, now=self.now,
                                    revision=0)

    def access_conditions(self, key: str) -> list[StatusCondition] | None:
        """An AccessPolicy's conditions (``namespace/name``), as the compiler reports them."""
        return conditions_of(self.model, key)

    # Decisions ---------------------------------------------------------------------------

    def check(self, principal: Principal, *, action: str, resource: Resource,
              now: float | None = None, explain: bool = True) -> Decision:
        """The decision the decision service would give (``BadRequest`` for a principal
        or resource it would refuse)."""
        check_principal(principal)
        cluster, _ = place_of(resource)
        state, identity = self._monitors(principal)
        return answers.check(state, identity, action, resource,
                             cluster=cluster, now=self.now if now is None else now,
                             explain=explain)

    def simulate(self, obj: Any, operation: Operation = "apply", *, limit: int,
                 budget: int) -> SimulateReply:
        """``clearance.v1.effective.simulate`` on the folded model, with its access diff
        (who gains or loses access where), as the decision service answers it."""
        reply, after = dry_run(self.model.inherit, obj, operation,
                               invalid=self.model.access_invalid)
        reply.access, reply.truncated = impact.access_diff(
            self.model.inherit, after, [diff.target for diff in reply.targets],
            self._monitors, self.model.groups, declared=frozenset(self.model.type_sources),
            now=self.now, limit=limit, budget=budget)
        return reply

    def _monitors(self, principal: Principal) -> tuple[_State, Identity]:
        names = {principal.username, principal.email} - {None, ""}
        member_of = [group for group, users in self.model.groups.items()
                     if not names.isdisjoint(users)]
        identity = identity_of(principal, member_of)
        return _State(self.model, identity), identity


class _State:
    """The folded model as a check reads it (:class:`clearance_core.questions.answers.State`): what
    the decision service's snapshot holds for ``identity``, from the model instead of the
    store."""

    def __init__(self, model: Model, identity: Identity) -> None:
        self._model = model
        self._identity = identity

    @property
    def policies(self) -> Sequence[CompiledPolicy]:
        return list(self._model.policies.values())

    @property
    def labels(self) -> Mapping[str, Mapping[str, str]]:
        return self._model.clusters

    @property
    def declared(self) -> frozenset[str]:
        return frozenset(self._model.type_sources)

    @property
    def match(self) -> Matcher:
        return match_cluster

    def inherited(self, cluster: str, namespace: str | None
                  ) -> tuple[Target | None, Mapping[str, EffectiveRule]]:
        # Every materialised target's effective policy is in the index: the first of
        # the decision's targets found is what the service reads (stored, or derived).
        effective = self._model.inherit.effective
        for target in hierarchy.decision_targets(cluster, namespace):
            found = effective.get(target)
            if found is not None:
                return found.target, found.rules
        return None, {}

    def cluster_rules(self, cluster: str
                      ) -> tuple[Target | None, Mapping[str, EffectiveRule]]:
        return self.inherited(cluster, None)

    def namespace_targets(self, cluster: str) -> Mapping[str, EffectivePolicy]:
        """The cluster's Namespace targets that answer this identity otherwise than the
        cluster's target (what the service's mirror indexes)."""
        targets = {target.name: found for target, found in self._model.inherit.effective.items()
                   if target.kind == "Namespace" and target.cluster == cluster}
        if not targets:
            return {}
        index = NamespaceIndex(self.cluster_rules(cluster)[1], dict(sorted(targets.items())))
        return index.concerning(self._identity)
