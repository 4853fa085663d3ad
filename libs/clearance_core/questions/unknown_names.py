"""Names a question uses that Clearance does not know: said in the reply, never decided on
(docs/api/README.md: Warnings).

A check about a cluster that is not in the inventory, a type no one declares or a
principal no policy names is answered exactly as before — a warning changes no decision,
so a deny stays a deny — but such an answer is almost always a typo, and a silent "no"
hides it. Each rule here is a set lookup on what the answer was computed from (the
snapshot of the question), so an answer and its warnings are of one state:

* **cluster** — no ManagedCluster of that name: ``cluster "prod-us-eas" is not in the
  inventory (did you mean "prod-us-east"?)``;
* **type** — neither a built-in type (singular or plural) nor a custom type some
  MetricSource declares: its items are hidden;
* **subject** — no MonitorAccessPolicy names the principal's username, email, service
  account or any of its effective groups, and no AccessPolicy rule of the targets the
  question reads does: the principal is answered as anyone unnamed is (``others`` in
  ``who-can-see``). MonitorAccessPolicies count wherever they select (the candidate
  policies are found by name); AccessPolicy rules where they apply.

Suggestions ("did you mean") are bounded: the known names compared are at most
:data:`COMPARED`, those nearest to the name in alphabetical order (a request naming a
random cluster must not cost a comparison with every cluster of a large fleet).
"""

from __future__ import annotations

import bisect
import difflib
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple

from clearance_api.wire import Resource
from clearance_core.inherit.decide import matching_names
from clearance_core.inherit.merge import EffectiveRule
from clearance_core.kube.principal import Identity
from clearance_core.kube.resources import BUILTIN_PLURALS, target_namespace
from clearance_core.monitor.filters import BUILTIN_TYPES
from clearance_core.monitor.policy import CompiledPolicy
from clearance_core.questions import placement
from clearance_core.questions.answers import State

#: Every spelling of a built-in type a request may use (singular and plural).
BUILTIN_NAMES = frozenset(BUILTIN_PLURALS) | BUILTIN_TYPES
#: Known names compared with an unknown one, at most (each comparison is difflib's
#: ratio: about 7 µs; a few hundred microseconds in all).
COMPARED = 48
#: How close a suggestion must be (difflib's ratio), as ``strict`` suggests fields.
CUTOFF = 0.6


def closest(name: str, known: Sequence[str]) -> str | None:
    """The known name ``name`` was probably meant as (``known`` sorted): the same but for
    case, else the closest by difflib's ratio among the :data:`COMPARED` names nearest to
    it in sort order; None when none is close."""
    if not known:
        return None
    at = bisect.bisect_left(known, name)
    half = COMPARED // 2
    window = known[max(0, at - half):at + half]
    folded = name.casefold()
    for candidate in window:
        if candidate.casefold() == folded:
            return candidate
    close = difflib.get_close_matches(name, window, n=1, cutoff=CUTOFF)
    return close[0] if close else None


def _hint(suggestion: str | None) -> str:
    return f' (did you mean "{suggestion}"?)' if suggestion else ""


def cluster_warning(cluster: str, known: Collection[str],
                    inventory: Sequence[str] | None) -> str | None:
    """The warning for a question about ``cluster`` (None: it is in the inventory).
    ``known``: the clusters of the question found in the inventory; ``inventory``: every
    cluster's name, sorted, for a suggestion (None: none is made)."""
    if cluster in known:
        return None
    suggestion = closest(cluster, inventory) if inventory else None
    if suggestion is None:
        return f'cluster "{cluster}" is not in the inventory (no ManagedCluster has ' \
               "that name)"
    return f'cluster "{cluster}" is not in the inventory{_hint(suggestion)}'


def type_warning(type_name: str, declared: Collection[str]) -> str | None:
    """The warning for a question about items of ``type_name`` (None: a built-in type,
    or a custom type some MetricSource declares)."""
    if type_name in BUILTIN_NAMES or type_name in declared:
        return None
    suggestion = closest(type_name, sorted(BUILTIN_NAMES.union(declared)))
    return f'type "{type_name}" is neither a built-in type nor declared by a ' \
           f"MetricSource: its items are hidden{_hint(suggestion)}"


def names_principal(identity: Identity, policies: Sequence[CompiledPolicy],
                    rules: Iterable[Mapping[str, EffectiveRule]]) -> bool:
    """Whether anything that decides names the principal: a candidate MonitorAccessPolicy
    (found by its names and effective groups), or one of the AccessPolicy ``rules``."""
    if policies:
        return True
    return any(matching_names(rule_set, identity) for rule_set in rules)


def subject_warning(identity: Identity, policies: Sequence[CompiledPolicy],
                    rules: Iterable[Mapping[str, EffectiveRule]]) -> str | None:
    """The warning for a principal nothing names (None: something does)."""
    if names_principal(identity, policies, rules):
        return None
    return f'no policy names principal "{identity.username}" or any of its groups: it ' \
           'is answered as anyone unnamed is ("others" in who-can-see)'


def question_rules(state: State, resource: Resource, cluster: str
                   ) -> Iterator[Mapping[str, EffectiveRule]]:
    """The AccessPolicy rules a check of ``resource`` reads, as they are asked for (a
    principal some MonitorAccessPolicy names needs none of them): its target's and, for a
    question that names no namespace, those of the Namespace targets that answer the
    principal otherwise (only then: which of them a batch's snapshot holds must not
    change another question's warnings)."""
    yield state.inherited(cluster, target_namespace(resource))[1]
    if placement.spreads(resource.type, resource.name, resource.namespace):
        for effective in state.namespace_targets(cluster).values():
            yield effective.rules


class Warnings(NamedTuple):
    """The warnings of one answer, by what makes them go: ``names`` (the cluster's, the
    type's) when the inventory or the declared types change, ``subject`` when a policy
    comes to name the principal."""

    names: tuple[str, ...] = ()
    subject: str | None = None

    def all(self) -> list[str]:
        return [*self.names, *((self.subject,) if self.subject is not None else ())]


def check_warnings(state: State, identity: Identity, resource: Resource, cluster: str, *,
                   known: Collection[str], inventory: Sequence[str] | None,
                   decided_by: str | None = None) -> Warnings:
    """The warnings of one check (``cluster`` from ``place_of``), in the order cluster,
    type, subject; ``known`` and ``inventory`` as :func:`cluster_warning` takes them.
    ``decided_by``: the policy that decided the answer, if one did — it named the
    principal (a MonitorAccessPolicy's subjects or an AccessPolicy rule's matched), so
    there is no subject warning to look for."""
    names = (cluster_warning(cluster, known, inventory),
             type_warning(resource.type, state.declared))
    subject = None if decided_by is not None else subject_warning(
        identity, state.policies, question_rules(state, resource, cluster))
    return Warnings(tuple(name for name in names if name is not None), subject)


def clusters_rules(state: State, clusters: Iterable[str]
                   ) -> Iterator[Mapping[str, EffectiveRule]]:
    """The AccessPolicy rules of each cluster's target and of its Namespace targets that
    answer the principal otherwise — what ``filter``, ``metrics``, ``custom-types`` and
    ``permissions`` read — each rule set once, as they are asked for (a principal some
    MonitorAccessPolicy names needs none of them)."""
    seen: set[int] = set()
    for cluster in clusters:
        for rules in (state.cluster_rules(cluster)[1],
                      *(e.rules for e in state.namespace_targets(cluster).values())):
            if id(rules) not in seen:
                seen.add(id(rules))
                yield rules


def list_warnings(state: State, identity: Identity, clusters: Sequence[str], *,
                  type_name: str | None = None, known: Collection[str] = (),
                  inventory: Sequence[str] | None = None,
                  asked: str | None = None) -> list[str]:
    """The warnings of a principal-wide or list answer over ``clusters``: the cluster
    ``asked`` (if one was), the type (if any), the subject."""
    found = [cluster_warning(asked, known, inventory) if asked is not None else None,
             type_warning(type_name, state.declared) if type_name is not None else None,
             subject_warning(identity, state.policies, clusters_rules(state, clusters))]
    return [warning for warning in found if warning is not None]
