"""A check that names no namespace, judged over every Namespace target it may concern.

A whole type, or a namespaced item asked without its namespace
(:func:`clearance_core.questions.placement.spreads`), is about items that may live anywhere in the
cluster: in a namespace whose target answers the principal otherwise than the cluster's
target (:class:`clearance_core.questions.placement.NamespaceIndex`), or anywhere else, where the
cluster's target decides. The caller decides the question once at the cluster's target
(``here``) and once inside each such namespace (``there``: the same resource placed in
that namespace); this module combines the answers so that the result is never wider than
what ``check`` says of an item where it lives:

* **whole type**, ``here`` allows or filters: the answer stands where every namespace
  agrees. A namespace that denies the type, or filters it otherwise, is excluded from the
  reply's ``filters`` (:func:`excluding`), and the answer is ``partial``. A namespace that
  shows the type wholly while ``here`` filters it keeps ``here``'s filters (a client shows
  less there, never more).
* **whole type**, ``here`` denies: ``deny`` if every namespace denies too; otherwise
  ``partial``, with filters that show the type only in those namespaces
  (:func:`only_in`): the ones that show it wholly if any, else the ones that filter it as
  the first (by name) does, with those filters.
* **an item without its namespace**: ``allow`` only if ``here`` and every namespace allow
  it (placed there); otherwise ``deny``, with a reason that asks for its namespace.

The decision kind of a whole type is :func:`clearance_core.inherit.govern.combined` of all the
answers, as lists compute it (:mod:`clearance_core.questions.placed`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from clearance_api.wire import DecisionKind, TraceStep
from clearance_core.inherit.decide import NO_PRIORITY
from clearance_core.kube.resources import singular
from clearance_core.monitor.decide import Decision
from clearance_core.monitor.filters import compile_filter
from clearance_core.monitor.wildcard import is_wildcard

#: Namespaces a reason lists by name at most (a trace step names each).
_NAMED = 5


def _dimension(kind: str) -> str:
    """The filter dimension that places an item of ``kind`` in a namespace: a namespace
    item's own name, any other item's namespace."""
    return "names" if kind == "namespaces" else "namespaces"


def excluding(filters: Mapping[str, Any] | None, kind: str,
              namespaces: Iterable[str]) -> dict[str, Any]:
    """``filters`` (a whole-type answer's, by plural type) that also hide every item of
    ``kind`` in ``namespaces``: their names join the ``denied`` list of ``kind``'s own
    entry (``filters.namespaces``; for ``namespaces``, ``filters.names``). An item
    without a namespace may live in one of them, so it is hidden too: the dimension
    allows ``*`` (any namespace) unless it already lists what it allows."""
    out = dict(filters or {})
    names = sorted(set(namespaces))
    entry = out.get(kind)
    dimension = _dimension(kind)
    visibility = None if entry is None else entry.get("visibility")
    if visibility == "none":
        return out
    if entry is None or visibility in (None, "all"):
        entry, inner, current = {**(entry or {}), "visibility": "filtered"}, {}, {}
    else:
        inner = dict(entry.get("filters") or {})
        current = dict(inner.get(dimension) or {})
    denied = list(current.get("denied") or [])
    current["denied"] = denied + [name for name in names if name not in denied]
    if dimension == "namespaces" and not current.get("allowed"):
        current["allowed"] = ["*"]
    inner[dimension] = current
    out[kind] = {**entry, "type": kind, "filters": inner}
    return out


def only_in(filters: Mapping[str, Any] | None, kind: str,
            namespaces: Iterable[str]) -> dict[str, Any]:
    """``filters`` that show items of ``kind`` only in ``namespaces`` (and only those
    ``kind``'s own entry already lets through). A name holding a wildcard character is
    left out: as a pattern it would show more namespaces than its own."""
    out = dict(filters or {})
    names = sorted({name for name in namespaces if not is_wildcard(name)})
    entry = out.get(kind)
    dimension = _dimension(kind)
    visibility = None if entry is None else entry.get("visibility")
    if visibility == "none":
        return out
    if entry is None or visibility in (None, "all"):
        inner: dict[str, Any] = {}
        current: dict[str, Any] = {}
    else:
        compiled = compile_filter(entry)
        passes = (compiled.names if kind == "namespaces" else compiled.namespaces).passes
        names = [name for name in names if passes(name)]
        inner = dict(entry.get("filters") or {})
        current = dict(inner.get(dimension) or {})
    if not names:  # an empty allowed list would allow everything
        out[kind] = {"type": kind, "visibility": "none"}
        return out
    current["allowed"] = names
    inner[dimension] = current
    out[kind] = {**(entry or {}), "type": kind, "visibility": "filtered", "filters": inner}
    return out


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMED])
    more = len(names) - _NAMED
    return f"{shown} and {more} more" if more > 0 else shown


def _steps(cluster: str, there: Mapping[str, Decision], namespaces: list[str], effect: str,
           *, explain: bool) -> list[TraceStep]:
    """A trace step for each of ``namespaces`` (their answers in ``there``) that changed
    the answer, saying how (``effect``); none unless ``explain``."""
    if not explain:
        return []
    return [TraceStep(policy=there[namespace].policy or "", priority=NO_PRIORITY,
                      effect="Deny" if there[namespace].decision == "deny" else "Allow",
                      outcome="matched",
                      reason=f"Namespace {cluster}/{namespace}: {there[namespace].decision}: "
                             f"{there[namespace].reason}; {effect}")
            for namespace in namespaces]


def _made(here: Decision, decision: DecisionKind, reason: str, *, source: Decision,
          filters: dict[str, Any] | None, steps: list[TraceStep]) -> Decision:
    outcome = msgspec.structs.replace(
        here.outcome, decision=decision, reason=reason, policy=source.policy,
        permissions=source.permissions, trace=[*here.outcome.trace, *steps])
    return Decision(decision=decision, reason=reason, policy=source.policy,
                    permissions=source.permissions, filters=filters, outcome=outcome)


def whole_type(kind: str, cluster: str, here: Decision, there: Mapping[str, Decision],
               *, explain: bool = True) -> Decision:
    """A whole type (plural ``kind``) in ``cluster``: ``here`` the answer at the
    cluster's target, ``there`` the answer inside each Namespace target that concerns
    the principal (sorted by namespace); ``explain``: with a trace step for each
    namespace that changed the answer."""
    if here.decision != "deny":
        excluded = [namespace for namespace, found in there.items()
                    if found.decision == "deny" or (found.decision == "partial" and (
                        here.decision == "allow" or found.filters != here.filters))]
        if not excluded:
            return here
        first = there[excluded[0]]
        reason = (f"{here.reason}, except in namespace {_listed(excluded)} "
                  f"({first.reason})")
        steps = _steps(cluster, there, excluded, "its namespace is excluded from the filters",
                       explain=explain)
        return _made(here, "partial", reason, source=here,
                     filters=excluding(here.filters, kind, excluded), steps=steps)
    shown = {namespace: found for namespace, found in there.items()
             if found.decision != "deny"}
    if not shown:
        return here
    wholly = [namespace for namespace, found in shown.items() if found.decision == "allow"]
    if wholly:
        kept, base = wholly, None
    else:
        base = next(iter(shown.values())).filters
        kept = [namespace for namespace, found in shown.items() if found.filters == base]
    first = shown[kept[0]]
    reason = (f"{kind} visible only in namespace {_listed(kept)} ({first.reason}); "
              f"elsewhere in {cluster}: {here.reason}")
    steps = _steps(cluster, shown, kept, "the filters show the type in its namespace",
                   explain=explain)
    return _made(here, "partial", reason, source=first,
                 filters=only_in(base, kind, kept), steps=steps)


def bare_item(kind: str, name: str, cluster: str, here: Decision,
              there: Mapping[str, Decision], *, explain: bool = True) -> Decision:
    """An item of ``kind`` named without its namespace: allowed only if allowed at the
    cluster's target and inside every Namespace target that concerns the principal."""
    what = f"{singular(kind)} {name!r}"
    if here.decision != "allow":
        shown = [namespace for namespace, found in there.items()
                 if found.decision == "allow"]
        if not shown:
            return here
        reason = (f"{here.reason}; {what} is named without its namespace and would be "
                  f"visible in namespace {_listed(shown)}: ask with its namespace")
        steps = _steps(cluster, there, shown, "name it to ask there", explain=explain)
        return _made(here, here.decision, reason, source=here, filters=None, steps=steps)
    hidden = [namespace for namespace, found in there.items()
              if found.decision != "allow"]
    if not hidden:
        return here
    first = there[hidden[0]]
    reason = (f"{what} is named without its namespace, and namespace {_listed(hidden)} "
              f"would hide it ({first.reason}): ask with its namespace")
    steps = _steps(cluster, there, hidden, "an item there is hidden: name its namespace",
                   explain=explain)
    return _made(here, "deny", reason, source=first, filters=None, steps=steps)
