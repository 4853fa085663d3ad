"""The console's live picture of the system, fed by what it hears on NATS and by its
polls; ``snapshot()`` is what the page receives every second.

Numbers come only from public subjects: event flow from the subjects messages arrive on,
invalidations from ``clearance.decisions.changed``, services and the cache from
``clearance.v1.status``, decision latency from the console's own probe checks (timed
round trips, as any client sees them). The probe's own checks are taken out of the cache
hit rate, so an idle system does not look busy.
"""

from __future__ import annotations

from typing import Any

from clearance_console.policies import Registry, names_in
from clearance_console.rates import Counter, Samples

#: Fields of a service's status the console shows in columns of their own; any other
#: field a newer decision service adds is shown as it comes (``extra``).
KNOWN_SERVICE_FIELDS = ("revision", "healthy", "lag", "heartbeat_age", "heartbeat_age_s",
                        "heartbeat_age_ms")
#: Principals remembered for "who can see", at most (oldest forgotten first).
DIRECTORY_LIMIT = 5_000
#: Seconds without an answered status after which the services' health is unknown (the
#: console polls it every second; a dead bus or decision service answers nothing).
STALE_SECONDS = 5.0


class Directory:
    """Users and groups the console has heard named: in ``decisions.changed`` events, in
    watched objects (Group members, policy and binding subjects) and in the effective
    policies it read. A bounded, insertion-ordered set per kind."""

    def __init__(self) -> None:
        self.users: dict[str, None] = {}
        self.groups: dict[str, None] = {}

    def add(self, users: list[str] | tuple[str, ...] = (),
            groups: list[str] | tuple[str, ...] = ()) -> None:
        for into, names in ((self.users, users), (self.groups, groups)):
            for name in names:
                if isinstance(name, str) and name and name not in into:
                    into[name] = None
                    if len(into) > DIRECTORY_LIMIT:
                        del into[next(iter(into))]

    def harvest(self, obj: Any) -> None:
        """Every principal a watched object names: ``subjects`` blocks (users, groups,
        serviceAccounts as usernames), RBAC binding subjects, a Group's name and users."""
        if isinstance(obj, dict):
            if obj.get("kind") == "Group" and isinstance(obj.get("metadata"), dict):
                self.add(groups=[str(obj["metadata"].get("name", ""))])
                self.add(users=[u for u in obj.get("users") or [] if isinstance(u, str)])
            for key, value in obj.items():
                if key == "subjects":
                    self._subjects(value)
                else:
                    self.harvest(value)
        elif isinstance(obj, list):
            for item in obj:
                self.harvest(item)

    def _subjects(self, value: Any) -> None:
        if isinstance(value, dict):
            self.add(users=[u for u in value.get("users") or [] if isinstance(u, str)],
                     groups=[g for g in value.get("groups") or [] if isinstance(g, str)])
            for account in value.get("serviceAccounts") or []:
                if isinstance(account, dict) and account.get("name"):
                    self.add(users=[f"system:serviceaccount:{account.get('namespace', '')}:"
                                    f"{account['name']}"])
        elif isinstance(value, list):  # RBAC: [{"kind": "User" | "Group" | ..., "name"}]
            for subject in value:
                if not isinstance(subject, dict) or not isinstance(subject.get("name"), str):
                    continue
                if subject.get("kind") == "User":
                    self.add(users=[subject["name"]])
                elif subject.get("kind") == "Group":
                    self.add(groups=[subject["name"]])
                elif subject.get("kind") == "ServiceAccount":
                    self.add(users=[f"system:serviceaccount:{subject.get('namespace', '')}:"
                                    f"{subject['name']}"])


class Live:
    def __init__(self) -> None:
        self.flows: dict[str, Counter] = {}
        self.invalidations = Counter()
        self.hits = Counter()
        self.misses = Counter()
        self.probe_latency = Samples()
        self.status_latency = Samples()
        self.request_latency: dict[str, Samples] = {}
        self.policies = Registry()
        self.directory = Directory()
        self.status: dict[str, Any] | None = None
        self.status_error: str | None = None
        self.status_at: float | None = None
        self.last_changed: dict[str, Any] | None = None
        self.events_denied: str | None = None  # why clearance.events.> is not readable
        self._cache_seen: tuple[int, int] | None = None
        self._probe_hits = 0
        self._probe_misses = 0

    def flow(self, name: str, now: float) -> None:
        self.flows.setdefault(name, Counter()).add(now)

    def changed(self, body: dict[str, Any], now: float) -> None:
        self.invalidations.add(now)
        self.flow("decisions.changed", now)
        self.last_changed = body
        principals = body.get("principals")
        if isinstance(principals, dict):
            self.directory.add(users=principals.get("users") or [],
                               groups=principals.get("groups") or [])

    def probed(self, now: float, seconds: float, *, cached: bool) -> None:
        self.probe_latency.add(now, seconds * 1000)
        if cached:
            self._probe_hits += 1
        else:
            self._probe_misses += 1

    def timed(self, subject: str, now: float, seconds: float) -> None:
        self.request_latency.setdefault(subject, Samples()).add(now, seconds * 1000)

    def polled(self, status: dict[str, Any], now: float, seconds: float) -> None:
        """A ``clearance.v1.status`` reply: hits and misses since the previous one become
        rates, less the console's own probe checks."""
        self.status, self.status_error, self.status_at = status, None, now
        self.status_latency.add(now, seconds * 1000)
        cache = status.get("cache") or {}
        hits, misses = int(cache.get("hits") or 0), int(cache.get("misses") or 0)
        if self._cache_seen is not None:
            seen_hits, seen_misses = self._cache_seen
            if hits >= seen_hits and misses >= seen_misses:  # else counters were reset
                self.hits.add(now, max(0, hits - seen_hits - self._probe_hits))
                self.misses.add(now, max(0, misses - seen_misses - self._probe_misses))
        self._cache_seen = (hits, misses)
        self._probe_hits = self._probe_misses = 0
        for key in names_in(status.get("policies_by_state")):
            self.policies.learn(*key)

    def services(self, *, known: bool = True) -> list[dict[str, Any]]:
        """One row per service: revision, health, lag (the reply's own when it has one,
        else how far its revision is behind the watcher's), heartbeat age if reported.
        ``known=False`` (the bus is down, or the status stale): health is unknown (None),
        never the last ``healthy`` heard."""
        if not self.status:
            return []
        services = self.status.get("services") or {}
        watcher = (services.get("watcher") or {}).get("revision")
        rows = []
        for name, raw in sorted(services.items()):
            info: dict[str, Any] = raw if isinstance(raw, dict) else {}
            lag, lag_source = info.get("lag"), "reported"
            if (lag is None and name != "watcher" and isinstance(watcher, int)
                    and isinstance(info.get("revision"), int)):
                lag, lag_source = max(0, watcher - info["revision"]), "behind watcher"
            age = next((info[k] * (0.001 if k.endswith("_ms") else 1)
                        for k in ("heartbeat_age", "heartbeat_age_s", "heartbeat_age_ms")
                        if isinstance(info.get(k), int | float)), None)
            rows.append({"name": name, "revision": info.get("revision"),
                         "healthy": info.get("healthy") if known else None,
                         "lag": lag, "lag_source": lag_source,
                         "heartbeat_age": age,
                         "extra": {k: v for k, v in info.items()
                                   if k not in KNOWN_SERVICE_FIELDS}})
        return rows

    def snapshot(self, now: float, *, connected: bool = True) -> dict[str, Any]:
        """Everything the page shows. ``connected``: whether the console's NATS connection
        is up. Without it, or without a status answered within ``STALE_SECONDS``, what
        the last status said of the services is no longer known: their rows say so."""
        status = self.status or {}
        age = None if self.status_at is None else now - self.status_at
        stale = age is None or age > STALE_SECONDS
        bus = {"connected": connected, "stale": stale}
        cache = status.get("cache") or {}
        hit_rate, miss_rate = self.hits.rate(now), self.misses.rate(now)
        lookups = self.hits.total + self.misses.total
        return {
            "now": now,
            "revision": status.get("revision"),
            "status_error": self.status_error,
            "status_age": age,
            "bus": bus,
            "services": self.services(known=connected and not stale),
            "flows": {name: {"rate": counter.rate(now), "total": counter.total,
                             "history": counter.history(now)}
                      for name, counter in sorted(self.flows.items())},
            "events_denied": self.events_denied,
            "invalidations": {"rate": self.invalidations.rate(now),
                              "total": self.invalidations.total,
                              "history": self.invalidations.history(now),
                              "last": self.last_changed},
            "cache": {
                "entries": cache.get("entries"), "hits": cache.get("hits"),
                "misses": cache.get("misses"),
                "hit_rate_window": (hit_rate / (hit_rate + miss_rate)
                                    if hit_rate + miss_rate else None),
                "hit_rate_since_start": self.hits.total / lookups if lookups else None,
                "lookups_per_second": hit_rate + miss_rate,
                "history": self.hits.history(now),
                "miss_history": self.misses.history(now),
            },
            "latency": {
                "check_probe_ms": self.probe_latency.summary(now),
                "probe_history": [v for v in self.probe_latency.values(now)][-60:],
                "status_ms": self.status_latency.summary(now),
                "requests_ms": {subject: samples.summary(now)
                                for subject, samples in sorted(self.request_latency.items())},
            },
            "policies": self.policies.snapshot(),
            "policies_reported": status.get("policies_by_state"),
            "policies_total": status.get("policies"),
            "directory": {"users": len(self.directory.users),
                          "groups": len(self.directory.groups)},
        }
