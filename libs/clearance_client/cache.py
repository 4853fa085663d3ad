"""The client's local decision cache: ``clearance.v1.check`` answers kept in process.

An answer is kept until the first of: ``ttl`` seconds, eviction (least recently used,
``max_entries``), a ``clearance.decisions.changed`` event naming its principal (or
``all``), and anything that may have hidden such an event from us (a reconnect, a dropped
message), which drops everything. The client (``client.py``) feeds it; nothing here does
I/O, so its rules are tested as properties.

Who an event names: its ``users`` are matched against the principal's username and email
(an OpenShift Group may list either), its ``groups`` against the groups the principal
asserts plus those Clearance derives from a service-account username. Clearance also adds
the OpenShift Groups listing the user, which the client cannot see: unless the caller says
its principals already assert every group (``complete_groups=True``, as an OAuth proxy
that passes the token's groups does), an event naming any group drops every answer.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from clearance_api.wire import CheckRequest, CheckResult, DecisionsChanged, Principal

_SA_PREFIX = "system:serviceaccount:"
#: Events remembered to decide whether an answer computed meanwhile may still be stored.
_RECENT = 256
_encode = msgspec.json.Encoder().encode


def principal_names(principal: Principal) -> tuple[frozenset[str], frozenset[str]]:
    """(usernames and emails, groups) under which Clearance can name this principal."""
    names = {principal.username}
    if principal.email:
        names.add(principal.email)
    groups = set(principal.groups)
    if principal.username.startswith(_SA_PREFIX):  # system:serviceaccount:<ns>:<name>
        namespace = principal.username[len(_SA_PREFIX):].split(":", 1)[0]
        groups.update(("system:serviceaccounts", f"system:serviceaccounts:{namespace}"))
    return frozenset(names), frozenset(groups)


@dataclass(frozen=True, slots=True)
class _Entry:
    result: CheckResult
    expires: float
    names: frozenset[str]
    groups: frozenset[str]


@dataclass(frozen=True, slots=True)
class _Change:
    generation: int
    users: frozenset[str]
    groups: frozenset[str]
    everyone: bool


class DecisionCache:
    """Bounded, TTL-limited check answers, dropped exactly as the events say.

    ``begin()`` before asking the service, ``put(..., since=token)`` with its answer:
    an answer is stored only if no event that concerns its principal arrived meanwhile
    (it may have been computed before that change).
    """

    def __init__(self, *, max_entries: int = 10_000, ttl: float = 30.0,
                 complete_groups: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries < 1 or ttl <= 0:
            raise ValueError("max_entries must be >= 1 and ttl > 0")
        self.max_entries, self.ttl, self.complete_groups = max_entries, ttl, complete_groups
        self._clock = clock
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._by_name: dict[str, set[bytes]] = {}
        self._by_group: dict[str, set[bytes]] = {}
        self._generation = 0
        self._recent: deque[_Change] = deque(maxlen=_RECENT)
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def key(request: CheckRequest) -> bytes:
        """What makes two checks the same question (not its id, revision or timeout)."""
        return _encode((request.principal, request.action, request.resource, request.explain))

    def begin(self) -> int:
        return self._generation

    def get(self, key: bytes, *, min_revision: int = 0) -> CheckResult | None:
        entry = self._entries.get(key)
        if entry is not None and entry.expires <= self._clock():
            self._remove(key)
            entry = None
        revision = entry.result.revision if entry is not None else msgspec.UNSET
        if entry is None or (revision if isinstance(revision, int) else 0) < min_revision:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return msgspec.structs.replace(entry.result, cached=True)

    def put(self, key: bytes, principal: Principal, result: CheckResult, *, since: int) -> bool:
        """Store an answer asked for at ``since``; False if an event made it doubtful."""
        names, groups = principal_names(principal)
        if not self._undisturbed(since, names, groups):
            return False
        self._remove(key)
        self._entries[key] = _Entry(result, self._clock() + self.ttl, names, groups)
        for name in names:
            self._by_name.setdefault(name, set()).add(key)
        for group in groups:
            self._by_group.setdefault(group, set()).add(key)
        while len(self._entries) > self.max_entries:
            self._remove(next(iter(self._entries)))
        return True

    def changed(self, event: DecisionsChanged) -> int:
        """Apply one ``clearance.decisions.changed``; returns how many answers it dropped."""
        users = frozenset(event.principals.users)
        groups = frozenset(event.principals.groups)
        everyone = event.all or (bool(groups) and not self.complete_groups)
        if everyone:
            return self.clear()
        self._note(users, groups, everyone=False)
        doomed = set().union(*(self._by_name.get(u, ()) for u in users),
                             *(self._by_group.get(g, ()) for g in groups))
        for key in doomed:
            self._remove(key)
        return len(doomed)

    def clear(self) -> int:
        """Drop everything (``all``, a reconnect, a lost event): returns how many."""
        self._note(frozenset(), frozenset(), everyone=True)
        dropped = len(self._entries)
        self._entries.clear()
        self._by_name.clear()
        self._by_group.clear()
        return dropped

    def _note(self, users: frozenset[str], groups: frozenset[str], *, everyone: bool) -> None:
        self._generation += 1
        self._recent.append(_Change(self._generation, users, groups, everyone))

    def _undisturbed(self, since: int, names: frozenset[str], groups: frozenset[str]) -> bool:
        if since == self._generation:
            return True
        if not self._recent or self._recent[0].generation > since + 1:
            return False  # more changes than remembered: cannot tell
        return not any(
            change.everyone or change.users & names or change.groups & groups
            for change in self._recent if change.generation > since)

    def _remove(self, key: bytes) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        for name in entry.names:
            _discard(self._by_name, name, key)
        for group in entry.groups:
            _discard(self._by_group, group, key)


def _discard(index: dict[str, set[bytes]], token: str, key: bytes) -> None:
    keys = index.get(token)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[token]
