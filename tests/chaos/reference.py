"""The reference: the stream folded in-process with the pure core, one revision at a time.

It shares the system's compile and evaluate functions (that is what "correct" means) but
none of its I/O, caching, indexes, change records or invalidation — the parts faults can
break. For every probe (user, cluster) it keeps the decision as a step function of the
revision, so any reply can be checked against the state at the revision it claims.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from clearance_api.errors import InvalidObject
from clearance_api.wire import Event, Principal, Resource
from clearance_core.folding.fold import cluster_labels, fold_policy, group_users
from clearance_core.folding.kinds import ObjectRef, ref_of
from clearance_core.kube.principal import identity_of
from clearance_core.monitor.decide import decide
from clearance_core.monitor.policy import CompiledPolicy

Probe = tuple[str, str]  # (username, cluster)
_event = msgspec.json.Decoder(Event).decode
FOLDED_KINDS = ("monitoraccesspolicy", "group", "managedcluster")


class Reference:
    def __init__(self, probes: Sequence[Probe]) -> None:
        self.probes = tuple(probes)
        self.policies: dict[str, CompiledPolicy] = {}
        self.groups: dict[str, list[str]] = {}
        self.clusters: dict[str, dict[str, str]] = {}
        #: The last object of every ref the stream carried (None: deleted).
        self.objects: dict[ObjectRef, dict[str, Any] | None] = {}
        self.last = 0
        self._revs: dict[Probe, list[int]] = {p: [0] for p in self.probes}
        self._vals: dict[Probe, list[bool]] = {p: [False] for p in self.probes}

    def fold_all(self, messages: Iterable[tuple[int, bytes]]) -> None:
        for seq, data in messages:
            self.fold(seq, data)

    def fold(self, seq: int, data: bytes) -> None:
        assert seq > self.last, f"stream sequence {seq} after {self.last}"
        self.last = seq
        try:
            event = _event(data)
            ref = ref_of(event.object)
        except (msgspec.DecodeError, msgspec.ValidationError, InvalidObject):
            return  # malformed: the system skips it too
        if ref.kind not in FOLDED_KINDS:
            return
        present = event.type != "DELETED"
        before = self.objects.get(ref)
        self.objects[ref] = event.object if present else None
        try:
            self._apply(ref, event.object, present=present)
        except InvalidObject:
            self._apply(ref, event.object, present=False)  # invalid: withdrawn whole
        self._record(seq, self._touched(ref, before, event.object))

    def _touched(self, ref: ObjectRef, before: dict[str, Any] | None,
                 after: dict[str, Any]) -> set[str] | None:
        """Users whose answers this event may change, read from the raw objects (not the
        system's own change records); None: everyone."""
        if ref.kind == "managedcluster":
            return None
        users: set[str] = set()
        for obj in (before, after):
            if obj is None:
                continue
            if ref.kind == "group":
                users.update(u for u in obj.get("users") or () if isinstance(u, str))
                continue
            subjects = ((obj.get("spec") or {}).get("identity") or {}).get("subjects") or {}
            users.update(u for u in subjects.get("users") or () if isinstance(u, str))
            if subjects.get("serviceAccounts"):
                return None
            for group in subjects.get("groups") or ():
                users.update(self.groups.get(group, ()) if isinstance(group, str) else ())
        return users

    def _apply(self, ref: ObjectRef, obj: dict[str, Any], *, present: bool) -> None:
        if ref.kind == "monitoraccesspolicy":
            key = f"{ref.namespace}/{ref.name}"
            policy, _ = fold_policy("MODIFIED" if present else "DELETED", obj, None, {})
            if policy is None:
                self.policies.pop(key, None)
            else:
                self.policies[key] = policy
        elif ref.kind == "group":
            if present:
                self.groups[ref.name] = group_users(obj)
            else:
                self.groups.pop(ref.name, None)
        elif present:
            self.clusters[ref.name] = cluster_labels(obj)
        else:
            self.clusters.pop(ref.name, None)

    def decide_now(self, user: str, cluster: str) -> bool:
        member_of = [g for g, users in self.groups.items() if user in users]
        identity = identity_of(Principal(username=user), member_of)
        decision = decide(self.policies.values(), identity, action="view",
                          resource=Resource(type="cluster", name=cluster), cluster=cluster,
                          labels=self.clusters.get(cluster, {}), now=time.time())
        return decision.decision in ("allow", "partial")

    def _record(self, seq: int, users: set[str] | None) -> None:
        for probe in self.probes:
            if users is not None and probe[0] not in users:
                continue
            allowed = self.decide_now(*probe)
            if allowed != self._vals[probe][-1]:
                self._revs[probe].append(seq)
                self._vals[probe].append(allowed)

    def allowed_at(self, probe: Probe, revision: int) -> bool:
        return self._vals[probe][bisect.bisect_right(self._revs[probe], revision) - 1]

    def window(self, probe: Probe, low: int, high: int) -> set[bool]:
        """Every answer the state gave for ``probe`` at some revision in [low, high]."""
        revs, vals = self._revs[probe], self._vals[probe]
        start = bisect.bisect_right(revs, low) - 1
        stop = bisect.bisect_right(revs, max(low, high))
        return set(vals[start:stop])
