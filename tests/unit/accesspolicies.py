"""Builders for AccessPolicy objects (clearance.io/v1alpha1) used across the unit tests."""

from __future__ import annotations

from typing import Any

from clearance_core.inherit.accesspolicy import CompiledAccessPolicy, compile_access_policy
from clearance_core.inherit.authority import Authority
from clearance_core.inherit.index import InheritanceIndex

CLUSTERSET_LABEL = "cluster.open-cluster-management.io/clusterset"


class _EveryNamespace(frozenset[str]):
    """Admin namespaces that hold every namespace: for the tests of merging, conditions
    and decisions, which authority does not concern (its own tests use real ones)."""

    def __contains__(self, item: object) -> bool:
        return True


#: Every namespace may write every target (the merge tests' authority).
ANYONE = Authority(_EveryNamespace())


def target_ref(target: str | tuple[str, ...]) -> dict[str, Any]:
    """``"Fleet"``, ``("ClusterSet", s)``, ``("Cluster", c)``, ``("Namespace", c, n)``."""
    if target == "Fleet":
        return {"kind": "Fleet", "name": "fleet"}
    assert isinstance(target, tuple)
    if target[0] == "Namespace":
        return {"kind": "Namespace", "cluster": target[1], "name": target[2]}
    return {"kind": target[0], "name": target[1]}


def rule(*, users: list[str] | None = None, groups: list[str] | None = None,
         effect: str | None = None, view: bool | None = None, metrics: bool | None = None,
         resources: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    written: dict[str, Any] = {"subjects": {"users": users or [], "groups": groups or []}}
    if effect is not None:
        written["effect"] = effect
    permissions = {k: v for k, v in (("view", view), ("viewMetrics", metrics)) if v is not None}
    if permissions:
        written["permissions"] = permissions
    if resources is not None:
        written["resources"] = resources
    return written


def block(rules: dict[str, Any], strategy: str | None = None,
          when: str | None = None) -> dict[str, Any]:
    written: dict[str, Any] = {"rules": rules}
    if strategy is not None:
        written["strategy"] = strategy
    if when is not None:
        written["when"] = when
    return written


def access_policy(name: str = "p", *, namespace: str = "ns",
                  target: str | tuple[str, ...] = "Fleet", created: str | None = None,
                  rules: dict[str, Any] | None = None, defaults: dict[str, Any] | None = None,
                  overrides: dict[str, Any] | None = None,
                  unset: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"targetRef": target_ref(target)}
    if rules is not None:
        spec["rules"] = rules
    if defaults is not None:
        spec["defaults"] = defaults
    if overrides is not None:
        spec["overrides"] = overrides
    if unset is not None:
        spec["unset"] = unset
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if created is not None:
        metadata["creationTimestamp"] = created
    return {"apiVersion": "clearance.io/v1alpha1", "kind": "AccessPolicy",
            "metadata": metadata, "spec": spec}


def compiled(*objs: dict[str, Any]) -> list[CompiledAccessPolicy]:
    return [compile_access_policy(obj) for obj in objs]


def fleet_index(*objs: dict[str, Any], clusters: dict[str, str | None] | None = None,
                sets: tuple[str, ...] = (), allow_unset: bool = True,
                authority: Authority = ANYONE,
                bindings: dict[tuple[str, str], str] | None = None) -> InheritanceIndex:
    """An index built from scratch; ``clusters`` maps each cluster to its set label.
    Every namespace may write every target unless ``authority`` says otherwise."""
    inventory = {name: ({CLUSTERSET_LABEL: label} if label else {})
                 for name, label in (clusters or {"c1": None}).items()}
    return InheritanceIndex.build(compiled(*objs), inventory, sets, allow_unset=allow_unset,
                                  authority=authority, bindings=bindings)


def sources(index: InheritanceIndex, target: Any) -> dict[str, str]:
    """rule name -> "ns/name:block" of the target's effective policy."""
    eff = index.effective_of(target)
    assert eff is not None, f"{target} does not exist"
    return {name: f"{r.source}:{r.block}" for name, r in eff.rules.items()}
