"""The fleet the suite drives: policies that flip users between allow and deny.

24 users in 4 teams (OpenShift Groups), 3 clusters. Each team has an Allow policy at
priority 50; each user has a policy of their own at priority 10 (evaluated first) that
is absent, a Deny on every cluster, a Deny on prod, disabled, or an Allow on dev. A lost
or stale Deny therefore shows up as a wrong allow, a lost Allow as a wrong deny.

:class:`Fleet` is the producer's truth; it emits one change at a time (seeded, so a run
is repeatable). :class:`Producer` appends changes to JetStream directly (with the
contract's ``Nats-Msg-Id``, retried until acknowledged); :func:`write_manifest` hands
them to the watcher through its manifest directory instead.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import msgspec
import nats.errors
import yaml
from nats.js import JetStreamContext

USERS = tuple(f"user-{i}" for i in range(24))
TEAMS = tuple(f"team-{j}" for j in range(4))
CLUSTERS = {"prod-1": {"env": "prod"}, "prod-2": {"env": "prod"}, "dev-1": {"env": "dev"}}
NAMESPACE = "chaos"
PROBES = tuple((user, cluster) for user in USERS for cluster in CLUSTERS)

USER_VARIANTS = ("absent", "deny-all", "deny-prod", "disabled", "allow-dev")
TEAM_VARIANTS = ("allow-prod", "allow-all", "deny-dev")

Change = tuple[str, dict[str, Any]]  # (ADDED | MODIFIED | DELETED, object)
_encode = msgspec.json.Encoder().encode


def _selects(env: str) -> list[dict[str, Any]]:
    return [{"selector": {"matchLabels": {"env": env}}, "permissions": {"view": True}}]


def _policy_spec(variant: str, *, users: list[str], groups: list[str], priority: int
                 ) -> dict[str, Any]:
    effect, enabled, default, rules = {
        "deny-all": ("Deny", True, "all", []),
        "deny-prod": ("Deny", True, "none", _selects("prod")),
        "disabled": ("Deny", False, "all", []),
        "allow-dev": ("Allow", True, "none", _selects("dev")),
        "allow-prod": ("Allow", True, "none", _selects("prod")),
        "allow-all": ("Allow", True, "all", []),
        "deny-dev": ("Deny", True, "none", _selects("dev")),
    }[variant]
    return {
        "identity": {"priority": priority, "subjects": {"users": users, "groups": groups}},
        "access": {"effect": effect, "enabled": enabled},
        "scope": {"clusters": {"default": default, "rules": rules}},
    }


def kind_of(obj: dict[str, Any]) -> str:
    return str(obj["kind"]).lower()


def msg_id(event_type: str, obj: dict[str, Any]) -> str:
    """``<kind>/<namespace>/<name>@<resourceVersion>`` (docs/api/events.md)."""
    meta = obj["metadata"]
    suffix = ":DELETED" if event_type == "DELETED" else ""
    return (f"{kind_of(obj)}/{meta.get('namespace', '')}/{meta['name']}"
            f"@{meta['resourceVersion']}{suffix}")


def subject_of(obj: dict[str, Any]) -> str:
    return f"clearance.events.{kind_of(obj)}.{obj['metadata']['uid']}"


class Fleet:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self._rv = 0
        self.live: dict[tuple[str, str], dict[str, Any]] = {}
        self.members = {team: {u for i, u in enumerate(USERS) if i % len(TEAMS) == j}
                        for j, team in enumerate(TEAMS)}
        self.user_variant = {u: self.rng.choice(USER_VARIANTS) for u in USERS}
        self.team_variant = dict.fromkeys(TEAMS, "allow-prod")

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _meta(self, kind: str, name: str, *, namespaced: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "uid": f"{kind.lower()}-{name}",
                                "resourceVersion": self._next_rv()}
        if namespaced:
            meta["namespace"] = NAMESPACE
        return meta

    def _put(self, obj: dict[str, Any] | None, kind: str, name: str) -> Change:
        key = (kind, name)
        if obj is None:
            last = self.live.pop(key)
            # A deletion is a new resourceVersion of the last object (as the API serves it).
            return ("DELETED", {**last, "metadata": {**last["metadata"],
                                                     "resourceVersion": self._next_rv()}})
        event_type = "MODIFIED" if key in self.live else "ADDED"
        self.live[key] = obj
        return (event_type, obj)

    def cluster(self, name: str) -> Change:
        return self._put({"apiVersion": "cluster.open-cluster-management.io/v1",
                          "kind": "ManagedCluster",
                          "metadata": {**self._meta("ManagedCluster", name, namespaced=False),
                                       "labels": CLUSTERS[name]}}, "ManagedCluster", name)

    def group(self, team: str) -> Change:
        return self._put({"apiVersion": "user.openshift.io/v1", "kind": "Group",
                          "metadata": self._meta("Group", team, namespaced=False),
                          "users": sorted(self.members[team])}, "Group", team)

    def _policy(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "clusterpulse.io/v1alpha1", "kind": "MonitorAccessPolicy",
                "metadata": self._meta("MonitorAccessPolicy", name, namespaced=True),
                "spec": spec}

    def user_policy(self, user: str) -> Change | None:
        name, variant = f"u-{user}", self.user_variant[user]
        if variant == "absent":
            if ("MonitorAccessPolicy", name) not in self.live:
                return None
            return self._put(None, "MonitorAccessPolicy", name)
        spec = _policy_spec(variant, users=[user], groups=[], priority=10)
        return self._put(self._policy(name, spec), "MonitorAccessPolicy", name)

    def team_policy(self, team: str) -> Change:
        spec = _policy_spec(self.team_variant[team], users=[], groups=[team], priority=50)
        return self._put(self._policy(f"t-{team}", spec), "MonitorAccessPolicy", f"t-{team}")

    def initial(self) -> list[Change]:
        changes = [self.cluster(name) for name in CLUSTERS]
        changes += [self.group(team) for team in TEAMS]
        changes += [self.team_policy(team) for team in TEAMS]
        changes += [c for u in USERS if (c := self.user_policy(u)) is not None]
        return changes

    def next(self) -> Change:
        """One random change: a user's policy (70%), a Group's members (20%) or a team's
        policy (10%)."""
        while True:
            roll = self.rng.random()
            if roll < 0.7:
                user = self.rng.choice(USERS)
                self.user_variant[user] = self.rng.choice(
                    [v for v in USER_VARIANTS if v != self.user_variant[user]])
                change = self.user_policy(user)
                if change is not None:
                    return change
            elif roll < 0.9:
                team = self.rng.choice(TEAMS)
                self.members[team] ^= {self.rng.choice(USERS)}
                return self.group(team)
            else:
                team = self.rng.choice(TEAMS)
                self.team_variant[team] = self.rng.choice(
                    [v for v in TEAM_VARIANTS if v != self.team_variant[team]])
                return self.team_policy(team)


class Producer:
    """Appends events to the stream, waiting for each ack; a failed publish is retried
    with the same message id, so JetStream stores it once."""

    def __init__(self, js: JetStreamContext) -> None:
        self._js = js
        self.published = 0

    @property
    def js(self) -> JetStreamContext:
        return self._js

    async def publish(self, event_type: str, obj: dict[str, Any], *,
                      dedupe: bool = True, deadline: float = 60.0) -> int:
        payload = _encode({"type": event_type, "object": obj})
        headers = {"Nats-Msg-Id": msg_id(event_type, obj)} if dedupe else None
        loop = asyncio.get_running_loop()
        give_up = loop.time() + deadline
        while True:
            try:
                ack = await self._js.publish(subject_of(obj), payload, timeout=1.0,
                                             headers=headers)
                self.published += 1
                return int(ack.seq)
            except (TimeoutError, nats.errors.Error):
                if loop.time() > give_up:
                    raise
                await asyncio.sleep(0.1)


def manifest_path(directory: Path, obj: dict[str, Any]) -> Path:
    return directory / f"{kind_of(obj)}-{obj['metadata']['name']}.yaml"


def write_manifest(directory: Path, change: Change) -> None:
    """One file per object, replaced atomically (the watcher never reads half a file)."""
    event_type, obj = change
    path = manifest_path(directory, obj)
    if event_type == "DELETED":
        path.unlink(missing_ok=True)
        return
    scratch = path.with_suffix(".tmp")
    scratch.write_text(yaml.safe_dump(obj, sort_keys=False))
    scratch.replace(path)
