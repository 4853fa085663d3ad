"""An AccessPolicy's RFC 0009 conditions, computed from effective policies (README: Inherited).

* ``Accepted``: True ``Accepted``; False ``Invalid`` (with the reason),
  ``TargetNotFound``, or ``Unauthorized`` (its namespace may not write policies for its
  target: the message names the namespaces that may; see :mod:`clearance_core.inherit.authority`),
  in that order. A policy that is not accepted takes no part, and has no ``Enforced``
  condition (as Kuadrant does).
* ``Enforced``, over every target the policy takes part in (its target and every
  materialised target below it) and every rule it sets; a rule is *overridden* on a target
  when that target's effective policy holds no rule of that name from this policy:
  - Unknown ``Unknown`` when one of its ``when`` conditions failed at run time anywhere;
  - True ``Enforced`` when none is overridden anywhere (the message lists its defaults and
    overrides);
  - True ``PartiallyEnforced`` when some are (the message lists them with their causes);
  - False ``Overridden`` when all are (the message names the policies that won, or says
    the policy is in force nowhere when a cause names no other policy: a ``when`` that is
    false, its own atomic overrides).
  Each rule not held names its real cause (:func:`~clearance_core.inherit.words.cause`):
  overridden by another policy, unset by lower ones, not applied (an atomic default block
  that met lower rules, naming them; a ``when`` that is false, naming the block), or
  replaced by its own atomic overrides. A rule not held only because a ``when`` is false
  counts as not in force: by RFC 0009's definition a rule is overridden on a target whose
  effective policy does not hold it from this policy.
  An ``unset`` that does nothing is said in the message: ignored (forbidden system-wide),
  naming a rule an override holds, or keeping no higher default out on any target.

Messages are bounded (:data:`~clearance_core.inherit.words.LIST_LIMIT` names and causes
per list, three errors, then how many more) so a policy over thousands of targets still
has a readable status, and computing one reads the first items its tally keeps in order.
"""

from __future__ import annotations

from collections import defaultdict

import msgspec

from clearance_api.wire import ExcludedPolicy, StatusCondition
from clearance_core.inherit.accesspolicy import CompiledAccessPolicy
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.index import InheritanceIndex
from clearance_core.inherit.merge import EffectivePolicy
from clearance_core.inherit.tally import Tally
from clearance_core.inherit.words import LIST_LIMIT, listed, names

UNSET_FORBIDDEN = "spec.unset is ignored: unset is disabled on this system " \
                  "(CLEARANCE_ALLOW_UNSET=false)"


def accepted(*, error: str | None = None, target_found: bool = True,
             target: str = "", unauthorized: str | None = None) -> StatusCondition:
    if error is not None:
        return StatusCondition(type="Accepted", status="False", reason="Invalid",
                               message=f"Policy is invalid: {error}")
    if not target_found:
        return StatusCondition(type="Accepted", status="False", reason="TargetNotFound",
                               message=f"Policy target {target} was not found")
    if unauthorized is not None:
        return StatusCondition(type="Accepted", status="False", reason="Unauthorized",
                               message=unauthorized)
    return StatusCondition(type="Accepted", status="True", reason="Accepted",
                           message="Policy has been accepted")


def invalid_conditions(error: str) -> list[StatusCondition]:
    """The conditions of a policy that does not compile."""
    return [accepted(error=error)]


def _unset_notes(policy: CompiledAccessPolicy, tally: Tally) -> list[str]:
    """What the policy's ``unset`` does not do: ignored altogether, or per name — of an
    override (where it is one), or of no default any higher policy would have added."""
    if not policy.unset:
        return []
    if tally.unset_ignored:
        return [UNSET_FORBIDDEN]
    overridden: dict[str, set[str]] = defaultdict(set)
    for name, source in tally.unset_overrides:
        overridden[name].add(source)
    notes, idle = [], []
    acted = tally.unset_used_names()
    for name in sorted(set(policy.unset)):
        used = name in acted
        if name in overridden:
            of = names(overridden[name])
            notes.append(f"unset of {name} has no effect where it is an override of {of}"
                         if used else f"unset of {name} has no effect: it is an override of {of}")
        elif not used:
            idle.append(name)
    shown = listed(notes[:LIST_LIMIT], len(notes), ". ")
    if idle:
        which = "that rule" if len(idle) == 1 else "those rules"
        shown = ". ".join(filter(None, [shown, (
            f"unset of {names(idle)} has no effect: without it, no higher policy's "
            f"defaults would add {which} on any target")]))
    return [shown] if shown else []


def _added(policy: CompiledAccessPolicy, held: list[str]) -> str:
    """What the policy contributes where it is held: its defaults and its overrides."""
    defaults = [n for n in held if policy.block_of(n) != "overrides"]
    overrides = [n for n in held if policy.block_of(n) == "overrides"]
    parts = []
    if defaults:
        parts.append(f"the following defaults have been added by {policy.key}: "
                     f"{names(defaults)}")
    if overrides:
        parts.append(f"the following overrides have been applied by {policy.key}: "
                     f"{names(overrides)}")
    return "; ".join(parts)


def enforced(policy: CompiledAccessPolicy, tally: Tally) -> StatusCondition:
    """The Enforced condition from the policy's parts in the targets in scope: their
    sums, of which the lists are read only as far as a message shows them."""
    notes = _unset_notes(policy, tally)
    errors = tally.error_lines.order
    if errors:
        shown = listed(errors[:3], len(errors), "; ")
        message = f"Policy has encountered some issues: a when condition failed ({shown})"
        return StatusCondition(type="Enforced", status="Unknown", reason="Unknown",
                               message=". ".join([message, *notes]))
    rule_names = policy.rule_names()
    held_names = set(tally.held)
    added = _added(policy, [n for n in rule_names if n in held_names])
    # The causes and the winners are kept in order by the tally: only the first are read.
    order = tally.causes.order
    causes = listed([f"{names(tally.cause_rules[text])} ({text})"
                     for text in order[:LIST_LIMIT]], len(order), "; ")
    # Every (target, rule) pair is either held or met a fate: no fate, all are held.
    if not tally.fates:
        text = "Policy has been successfully enforced"
        if added:
            text += ". T" + added[1:]
        elif not rule_names:
            text += " (it sets no rules)"
        return StatusCondition(type="Enforced", status="True", reason="Enforced",
                               message=". ".join([text, *notes]))
    if not held_names:
        winners = tally.winners
        if winners and not tally.unclaimed:
            who = listed(winners.order[:LIST_LIMIT], len(winners))
            text = f"Policy has been overridden by {who}: {causes}"
        else:  # some rule is out for a reason of its own: none won over it
            text = f"Policy is not in force on any target: {causes}"
        return StatusCondition(type="Enforced", status="False", reason="Overridden",
                               message=". ".join([text, *notes]))
    text = f"Policy has been partially enforced. Rules not in force everywhere: {causes}" + \
        (f"; {added}" if added else "")
    return StatusCondition(type="Enforced", status="True", reason="PartiallyEnforced",
                           message=". ".join([text, *notes]))


def policy_conditions(policy: CompiledAccessPolicy, scope: Tally | list[EffectivePolicy], *,
                      target_found: bool,
                      unauthorized: str | None = None) -> list[StatusCondition]:
    """Accepted and (when accepted) Enforced for a valid policy, from its tally or from
    the effective policies of its scope (summed here: what the tally keeps current);
    ``unauthorized``: why its namespace may not write it."""
    if not target_found:
        return [accepted(target_found=False, target=str(policy.target))]
    if unauthorized is not None:
        return [accepted(unauthorized=unauthorized)]
    tally = scope if isinstance(scope, Tally) else Tally.of(policy, scope)
    return [accepted(), enforced(policy, tally)]


def status_of(index: InheritanceIndex, key: str) -> list[StatusCondition] | None:
    """The conditions of a valid policy the index holds (None: it holds no such policy;
    an invalid one has :func:`invalid_conditions`, which only the compiler can know)."""
    policy = index.policies.get(key)
    if policy is None:
        return None
    return policy_conditions(policy, index.tally(key),
                             target_found=index.inventory.exists(policy.target),
                             unauthorized=index.unauthorized(key))


class ExcludedAt(msgspec.Struct, frozen=True, kw_only=True):
    """A policy that takes no part, listed where it was aimed (``clearance.v1.effective``
    lists it on every target below)."""

    target: Target
    entry: ExcludedPolicy


def excluded(key: str, conditions: list[StatusCondition] | None,
             target: Target | None) -> ExcludedAt | None:
    """Where and why a policy takes no part, from its conditions (None: it takes part,
    is gone, or names no target that can be read)."""
    if not conditions or target is None:
        return None
    first = conditions[0]
    if first.type != "Accepted" or first.status == "True":
        return None
    return ExcludedAt(target=target, entry=ExcludedPolicy(policy=key, reason=first.reason,
                                                          message=first.message))
