"""The objects of the freshness test: small pools of names, the Kubernetes objects built
from them, and :class:`World`, the test's own record of which objects exist.

The pools are small on purpose, so that random events keep touching the same principals,
clusters and rules and every answer has a chance to go stale. Names carry the characters
cache keys and index sets must take literally: ``*``, ``?``, ``[ ]``, ``:``, ``,``, ``\\``,
spaces and non-ASCII.

Objects are plain dicts, exactly what a producer appends to the stream; the oracle
(:mod:`tests.freshness.oracle`) reads them back from the :class:`World`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hypothesis import strategies as st

from tests.support.accesspolicies import CLUSTERSET_LABEL, access_policy, block, rule

# Pools --------------------------------------------------------------------------------

SA = "system:serviceaccount:mon:bot"
#: Users named by policies, Groups and bindings (``alice@example.com`` is alice's email).
USERS = ("alice", "a*", "ab", "a?[x]", "ü ser", "x:y,z\\", SA, "alice@example.com")
GROUPS = ("sre", "dev", "g:1,2", "[ops] *", "system:serviceaccounts:mon")


@dataclass(frozen=True)
class Who:
    """A principal of the pool: username, asserted groups, email."""

    username: str
    groups: tuple[str, ...] = ()
    email: str | None = None

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"username": self.username, "groups": list(self.groups)}
        if self.email is not None:
            out["email"] = self.email
        return out


PRINCIPALS = (
    Who("alice", email="alice@example.com"),
    Who("a*"),
    Who("ab", groups=("dev",)),
    Who("a?[x]", groups=("g:1,2",)),
    Who("ü ser"),
    Who("x:y,z\\", groups=("[ops] *",)),
    Who(SA),
)
CLUSTERS = ("c1", "c2", "c3")
SETS = ("s1", "s2")
NAMESPACES = ("shop", "ops")
#: The custom type MetricSources declare.
WIDGETS = "widgets"

#: Every question the invariant asks each principal: (action, resource).
RESOURCES: tuple[dict[str, Any], ...] = (
    {"type": "cluster", "name": "c1"},
    {"type": "cluster", "name": "c2"},
    {"type": "cluster", "name": "c3"},
    {"type": "pods", "cluster": "c1"},
    {"type": "pods", "cluster": "c1", "namespace": "shop"},
    # Named without a namespace: judged over c1's Namespace targets too.
    {"type": "pod", "cluster": "c1", "name": "web-0"},
    {"type": "namespaces", "cluster": "c2"},
    {"type": "pod", "cluster": "c1", "namespace": "shop", "name": "web-0"},
    {"type": "pods", "cluster": "c2", "namespace": "ops", "name": "db-0"},
    {"type": WIDGETS, "cluster": "c1", "namespace": "shop", "name": "w1",
     "fields": {"color": "red"}},
    {"type": WIDGETS, "cluster": "c2"},
    {"type": "namespaces", "cluster": "c1", "name": "shop"},
)
ACTIONS = ("view", "view_metrics")
CHECKS = tuple((action, resource) for resource in RESOURCES for action in ACTIONS)

#: Items of the ``filter`` requests, per type.
ITEMS: dict[str, list[dict[str, Any]]] = {
    "pods": [{"name": "web-0", "namespace": "shop"}, {"name": "db-0", "namespace": "ops"},
             {"name": "tmp", "namespace": "scratch", "labels": {"tier": "web"}}],
    WIDGETS: [{"name": "w1", "namespace": "shop", "fields": {"color": "red"}},
              {"name": "w2", "namespace": "ops", "fields": {"color": "blue"}},
              {"name": "w3", "namespace": "shop"}],
}


def stamp(t: float) -> str:
    """An RFC 3339 date-time with milliseconds (what validity windows are written in)."""
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


# Objects ------------------------------------------------------------------------------

Key = tuple[str, str, str]  # (stream kind, namespace, name)


def key_of(kind: str, obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return kind, meta.get("namespace") or "", meta["name"]


def subject_of(key: Key) -> str:
    """The stream subject of an object: its kind and a token any name can become."""
    token = hashlib.blake2b("/".join(key[1:]).encode(), digest_size=8).hexdigest()
    return f"clearance.events.{key[0]}.{token}"


def managed_cluster(name: str, env: str | None, cluster_set: str | None) -> dict[str, Any]:
    labels = {k: v for k, v in (("env", env), (CLUSTERSET_LABEL, cluster_set)) if v}
    return {"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": name, "labels": labels}}


def cluster_set(name: str) -> dict[str, Any]:
    return {"apiVersion": "cluster.open-cluster-management.io/v1beta2",
            "kind": "ManagedClusterSet", "metadata": {"name": name}}


def group(name: str, users: list[str]) -> dict[str, Any]:
    return {"apiVersion": "user.openshift.io/v1", "kind": "Group", "metadata": {"name": name},
            "users": users}


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def metric_source(name: str, fields: list[str], created: str) -> dict[str, Any]:
    return {"apiVersion": "clusterpulse.io/v1alpha1", "kind": "MetricSource",
            "metadata": {"name": name, "namespace": "metrics", "creationTimestamp": created},
            "spec": {"rbac": {"resourceTypeName": WIDGETS, "filterableFields": fields},
                     "aggregations": [{"name": "count", "function": "count"}]}}


def monitor_policy(name: str, spec: dict[str, Any], now: float) -> dict[str, Any]:
    """A MonitorAccessPolicy from a drawn spec; its validity offsets (seconds from
    ``now``) become absolute times."""
    validity = {field_: stamp(now + offset) for field_, offset in
                (("notBefore", spec["not_before"]), ("notAfter", spec["not_after"]))
                if offset is not None}
    return {"apiVersion": "clusterpulse.io/v1alpha1", "kind": "MonitorAccessPolicy",
            "metadata": {"name": name, "namespace": "policies"},
            "spec": {"identity": {"priority": spec["priority"], "subjects": spec["subjects"]},
                     "access": {"effect": spec["effect"], "enabled": spec["enabled"]},
                     "scope": {"clusters": {"default": spec["default"],
                                            "rules": spec["rules"]}},
                     "lifecycle": {"validity": validity}}}


# Strategies ---------------------------------------------------------------------------

def _subset(pool: tuple[str, ...], most: int = 2) -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(pool), max_size=most, unique=True)


FILTERS = st.sampled_from([
    {"type": "pods", "visibility": "filtered", "filters": {"namespaces": {"allowed": ["shop"]}}},
    {"type": "pods", "visibility": "none"},
    {"type": "namespaces", "visibility": "filtered", "filters": {"names": {"denied": ["ops"]}}},
    {"type": WIDGETS, "visibility": "filtered",
     "filters": {"fields": {"color": {"allowed": ["red"]}}}},
    {"type": WIDGETS, "visibility": "all"},
])
SELECTORS = st.sampled_from([
    {"matchLabels": {"env": "prod"}}, {"matchNames": ["c1"]}, {"matchPattern": "c[12]"},
    {"matchLabels": {"env": "dev"}}, {"matchNames": ["c*"]}, {"matchNames": ["c2", "c3"]},
])
PERMISSIONS = st.sampled_from([None, {"view": True}, {"view": True, "viewMetrics": True},
                               {"viewMetrics": True}])


@st.composite
def monitor_rules(draw: st.DrawFn) -> dict[str, Any]:
    written: dict[str, Any] = {"selector": draw(SELECTORS)}
    permissions = draw(PERMISSIONS)
    if permissions is not None:
        written["permissions"] = permissions
    resources = draw(st.lists(FILTERS, max_size=2, unique_by=lambda f: f["type"]))
    if resources:
        written["resources"] = resources
    return written


#: Offsets of validity bounds from the time the policy is published, in seconds: mostly
#: none; some already passed, some a fraction of a second ahead (the test waits for them).
NOT_BEFORE = st.sampled_from([None, None, None, -60.0, 0.4, 0.9])
NOT_AFTER = st.sampled_from([None, None, None, -5.0, 0.6, 1.2, 3600.0])

MONITOR_SPECS = st.fixed_dictionaries({
    "priority": st.integers(0, 3),
    "effect": st.sampled_from(["Allow", "Allow", "Deny"]),
    "enabled": st.sampled_from([True, True, True, False]),
    "default": st.sampled_from(["none", "all"]),
    "subjects": st.fixed_dictionaries({
        "users": _subset(USERS, 3), "groups": _subset(GROUPS, 1),
        "serviceAccounts": st.sampled_from([[], [], [{"name": "bot", "namespace": "mon"}]])},
    ).filter(lambda s: any(s.values())),
    "rules": st.lists(monitor_rules(), min_size=1, max_size=2),
    "not_before": NOT_BEFORE,
    "not_after": NOT_AFTER,
})


@st.composite
def access_rules(draw: st.DrawFn) -> dict[str, Any]:
    resources = draw(st.lists(FILTERS, max_size=1))
    permissions = draw(PERMISSIONS) or {}
    users, groups = draw(st.tuples(_subset(USERS, 3), _subset(GROUPS, 1)).filter(any))
    return rule(users=users, groups=groups,
                effect=draw(st.sampled_from([None, "Allow", "Allow", "Deny"])),
                view=permissions.get("view"), metrics=permissions.get("viewMetrics"),
                resources=resources or None)


RULE_NAMES = ("r1", "r2", "r3")
#: The namespace the world's AccessPolicies are written in: an admin namespace (the
#: default CLEARANCE_ADMIN_NAMESPACES), so every target is theirs to govern.
ADMIN = "clearance-system"
TARGETS = st.sampled_from(["Fleet", "Fleet", ("ClusterSet", "s1"), ("Cluster", "c1"),
                           ("Cluster", "c2"), ("Namespace", "c1", "shop"),
                           ("Namespace", "c2", "ops")])
ACCESS_RULES = st.dictionaries(st.sampled_from(RULE_NAMES), access_rules(), max_size=2)
BLOCKS = st.one_of(st.none(), st.builds(
    block, ACCESS_RULES, strategy=st.sampled_from([None, "atomic", "merge"]),
    when=st.sampled_from([None, None, "size(self.rules) > 0", "!('r1' in self.rules)"])))


@st.composite
def access_policies(draw: st.DrawFn, name: str) -> dict[str, Any]:
    target = draw(TARGETS)
    created = draw(st.sampled_from([None, "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"]))
    unset = draw(st.sampled_from([None, None, ["r1"]]))
    if draw(st.booleans()):
        return access_policy(name, namespace=ADMIN, target=target, created=created,
                             rules=draw(ACCESS_RULES), unset=unset)
    return access_policy(name, namespace=ADMIN, target=target, created=created,
                         defaults=draw(BLOCKS), overrides=draw(BLOCKS), unset=unset)


# RBAC (the hub's Roles and bindings, for reviews).
RBAC = "rbac.authorization.k8s.io/v1"
ROLE_RULES = st.sampled_from([
    [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}],
    [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods", "pods/log"]}],
    [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
    [],
])


def role(kind: str, name: str, ns: str, rules: list[dict[str, Any]],
         labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if kind == "Role":
        meta["namespace"] = ns
    if labels:
        meta["labels"] = labels
    obj: dict[str, Any] = {"apiVersion": RBAC, "kind": kind, "metadata": meta, "rules": rules}
    if kind == "ClusterRole" and name == "agg":
        obj["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": {"agg": "yes"}}]}
    return obj


def subject(who: str) -> dict[str, Any]:
    if who in GROUPS:
        return {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": who}
    if who == SA:
        return {"kind": "ServiceAccount", "name": "bot", "namespace": "mon"}
    return {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": who}


def binding(kind: str, name: str, ns: str, role_ref: tuple[str, str],
            subjects: list[str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if kind == "RoleBinding":
        meta["namespace"] = ns
    return {"apiVersion": RBAC, "kind": kind, "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_ref[0],
                        "name": role_ref[1]},
            "subjects": [subject(s) for s in subjects]}


ROLE_REFS = st.sampled_from([("Role", "reader"), ("ClusterRole", "viewer"),
                             ("ClusterRole", "agg"), ("ClusterRole", "missing")])
BINDING_SUBJECTS = st.lists(st.sampled_from((*USERS[:-1], *GROUPS)), max_size=2, unique=True)


# The world ----------------------------------------------------------------------------

@dataclass
class World:
    """The objects that exist, as the test published them (the oracle's only input)."""

    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)

    def copy(self) -> World:
        return World(dict(self.objects))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [obj for (k, _, _), obj in sorted(self.objects.items()) if k == kind]

    def bounds(self) -> list[float]:
        """Every notBefore/notAfter of the MonitorAccessPolicies (POSIX seconds)."""
        found = []
        for obj in self.of("monitoraccesspolicy"):
            for value in obj["spec"]["lifecycle"]["validity"].values():
                found.append(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp())
        return found

    def moments(self, t0: float, t1: float) -> list[float]:
        """The moments of [t0, t1] whose fresh answers cover every answer of that span:
        answers only change at a validity boundary, so t0 and each boundary after it
        (and a moment past it, whichever side the boundary itself belongs to). However
        long a loaded machine keeps a request out, its answer is one of these."""
        found = [t0, t1]
        for bound in sorted(b for b in self.bounds() if t0 < b < t1):
            found += [bound, bound + 0.0005]  # bounds are written in milliseconds
        return found
