"""Random fleets with both policy kinds, and what every subject answers over them.

A :class:`Fleet` is drawn by :func:`fleets`: clusters (one in a cluster set, maybe),
OpenShift Groups, MonitorAccessPolicies and AccessPolicies at every level — the Fleet, a
cluster set, a cluster, a namespace — with rules for users and groups, Allow and Deny,
with or without ``view_metrics`` and with resource filters from a small vocabulary that
names the same few namespaces, labels and fields the items carry. :func:`disagreements`
asks every subject about every item of a small universe and compares each answer with
what ``check`` says of the item where it lives (see ``test_agreement.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import msgspec
from hypothesis import strategies as st

from clearance_api.wire import NamespaceMetrics, NodeMetrics, Resource
from clearance_core.inherit.hierarchy import FLEET, Target
from clearance_core.inherit.index import InheritanceIndex
from clearance_core.inherit.merge import EffectivePolicy
from clearance_core.kube.principal import Identity, effective_groups
from clearance_core.monitor.filters import Item, RuleView, compile_filter
from clearance_core.monitor.policy import CompiledPolicy, compile_policy
from clearance_core.questions import answers
from clearance_runtime.reading.snapshot import Snapshot
from tests.support.accesspolicies import ANYONE, CLUSTERSET_LABEL, access_policy, compiled, rule
from tests.support.policies import policy

CLUSTERS = ("c1", "c2")
#: Asked about too: a cluster the inventory does not know (only the Fleet's rules).
UNKNOWN = "zz"
NAMESPACES = ("a", "vault", "shop")
#: A namespace no policy names (it reads its cluster's target).
ELSEWHERE = "default"
USERS = ("u1", "u2", "u3")
GROUPS = ("g1", "g2")
CUSTOM = ("pvc", "certs")
DECLARED = frozenset({"pvc"})
NOW = 1_700_000_000.0

FILTERS: tuple[dict[str, Any], ...] = (
    {"type": "pods", "visibility": "none"},
    {"type": "pods", "visibility": "filtered", "filters": {"labels": {"tier": "web"}}},
    {"type": "pods", "visibility": "filtered",
     "filters": {"namespaces": {"denied": ["vault"]}}},
    {"type": "namespaces", "visibility": "filtered",
     "filters": {"names": {"allowed": ["a", "shop"]}}},
    {"type": "namespaces", "visibility": "filtered",
     "filters": {"names": {"denied": ["vault"]}}},
    {"type": "namespaces", "visibility": "filtered", "filters": {"names": {"allowed": ["v*"]}}},
    {"type": "namespaces", "visibility": "none"},
    {"type": "operators", "visibility": "filtered",
     "filters": {"namespaces": {"allowed": ["shop"]}}},
    {"type": "operators", "visibility": "filtered", "filters": {"names": {"denied": ["op2"]}}},
    {"type": "pvc", "visibility": "all"},
    {"type": "pvc", "visibility": "filtered",
     "filters": {"fields": {"tier": {"denied": ["secret"]}}}},
    {"type": "pvc", "visibility": "filtered",
     "filters": {"namespaces": {"allowed": ["shop", "a"]}}},
    {"type": "certs", "visibility": "all"},
    {"type": "nodes", "visibility": "filtered", "filters": {"labels": {"pool": "apps"}}},
)
TARGETS: tuple[Any, ...] = (
    "Fleet", ("ClusterSet", "s1"), *(("Cluster", c) for c in CLUSTERS),
    *(("Namespace", c, n) for c in CLUSTERS for n in NAMESPACES))
RULE_NAMES = ("r1", "r2", "r3")


# The universe every subject is asked about ----------------------------------------------

#: Namespaces an item may live in (None: named without one).
HOMES: tuple[str | None, ...] = (*NAMESPACES, ELSEWHERE, None)


def _items() -> dict[str, list[Item]]:
    pods = [Item(name=name, namespace=home, labels=labels)
            for name, labels in (("p1", {}), ("p2", {"tier": "web"})) for home in HOMES]
    spaces = [Item(name=name, labels=labels) for name in (*NAMESPACES, ELSEWHERE)
              for labels in ({},)]
    operators = [Item(name=name, namespace=home) for name in ("op1", "op2")
                 for home in HOMES]
    operators += [Item(name="op1", namespaces=list(where)) for where in (
        ["vault"], ["vault", "shop"], ["a"], ["*"], [ELSEWHERE])]
    operators += [Item(name="op2", namespaces=["*"])]
    pvcs = [Item(name=f"v-{tier}", namespace=home, fields={"tier": tier, "cost": 10})
            for tier in ("web", "secret") for home in HOMES]
    certs = [Item(name="crt", namespace=home) for home in HOMES]
    nodes = [Item(name="n1", labels={"pool": "apps"}), Item(name="n2")]
    return {"pods": pods, "namespaces": spaces, "operators": operators, "pvc": pvcs,
            "certs": certs, "nodes": nodes}


ITEMS = _items()
#: Namespaces where an operator available in ``*`` might be shown: every name a filter
#: of the vocabulary can let through, and names no filter names.
ANYWHERE = (*NAMESPACES, ELSEWHERE, "clearance-elsewhere-0", "v", "vx", "vclearance-0")


# Fleets ----------------------------------------------------------------------------------

@dataclass
class Fleet:
    """What a fleet holds, as objects (for the record of a failing example) and as the
    decision service would read it."""

    clusters: dict[str, dict[str, str]]
    cluster_sets: tuple[str, ...]
    groups: dict[str, list[str]]
    monitor: list[dict[str, Any]]
    inherited: list[dict[str, Any]]
    index: InheritanceIndex = field(repr=False)
    policies: list[CompiledPolicy] = field(repr=False)

    def targets(self, cluster: str) -> dict[str, EffectivePolicy]:
        """Every Namespace target of the cluster, as the store holds them."""
        return {target.name: effective for target, effective in self.index.effective.items()
                if target.kind == "Namespace" and target.cluster == cluster}

    def identity(self, username: str, asserted: Sequence[str]) -> Identity:
        member = [group for group, users in self.groups.items() if username in users]
        return Identity(username=username, email=None,
                        groups=effective_groups(username, asserted, member))

    def state(self, identity: Identity) -> Snapshot:
        """The principal's snapshot as the decision service reads it: every effective
        policy, and the Namespace targets that concern it (its ``spread``)."""
        effective = self.index.effective
        snapshot = Snapshot(
            compiled_revision="0", revision=0, member_of=[], policies=self.policies,
            labels=self.clusters, known_clusters=frozenset(self.clusters),
            fleet=effective[FLEET],
            cluster_effective={c: effective[Target(kind="Cluster", name=c)]
                               for c in self.clusters},
            namespace_effective={c: self.targets(c) for c in self.clusters},
            declared=DECLARED)
        snapshot.spread_over(identity, self.clusters, self.targets)
        return snapshot


subjects = st.fixed_dictionaries({
    "users": st.lists(st.sampled_from(USERS), max_size=2, unique=True),
    "groups": st.lists(st.sampled_from(GROUPS), max_size=1, unique=True)})
resources = st.lists(st.sampled_from(FILTERS), max_size=3).map(list)


@st.composite
def access_rules(draw: st.DrawFn) -> dict[str, Any]:
    who = draw(subjects)
    deny = draw(st.integers(0, 3)) == 0
    return rule(users=who["users"], groups=who["groups"], effect="Deny" if deny else None,
                view=draw(st.sampled_from([None, True])),
                metrics=draw(st.sampled_from([None, True, False])),
                resources=draw(resources))


@st.composite
def access_policies(draw: st.DrawFn, name: str) -> dict[str, Any]:
    rules = draw(st.dictionaries(st.sampled_from(RULE_NAMES), access_rules(),
                                 min_size=1, max_size=2))
    shape = draw(st.sampled_from(["rules", "defaults", "overrides"]))
    block: dict[str, Any] = {"rules": rules}
    if shape != "rules":
        block["strategy"] = draw(st.sampled_from(["atomic", "merge"]))
    return access_policy(name, target=draw(st.sampled_from(TARGETS)),
                         **({"rules": rules} if shape == "rules" else {shape: block}))


@st.composite
def monitor_policies(draw: st.DrawFn, name: str) -> dict[str, Any]:
    who = draw(subjects)
    deny = draw(st.integers(0, 4)) == 0
    clusters = draw(st.sampled_from([["*"], ["c1"], ["c2"], ["c*"]]))
    permissions = {"view": True, "viewMetrics": draw(st.booleans())}
    return policy(name, users=who["users"], groups=who["groups"],
                  priority=draw(st.sampled_from([1, 50, 100])),
                  effect="Deny" if deny else "Allow",
                  rules=[{"selector": {"matchNames": clusters}, "permissions": permissions,
                          "resources": draw(resources)}])


@st.composite
def fleets(draw: st.DrawFn) -> Fleet:
    in_set = draw(st.booleans())
    clusters = {"c1": {CLUSTERSET_LABEL: "s1"} if in_set else {}, "c2": {}}
    sets = ("s1",) if draw(st.booleans()) else ()
    groups = {group: draw(st.lists(st.sampled_from(USERS), max_size=2, unique=True))
              for group in GROUPS}
    monitor = [draw(monitor_policies(f"m{i}")) for i in range(draw(st.integers(0, 2)))]
    inherited = [draw(access_policies(f"a{i}")) for i in range(draw(st.integers(1, 5)))]
    index = InheritanceIndex.build(compiled(*inherited), clusters, sets, authority=ANYONE)
    return Fleet(clusters=clusters, cluster_sets=sets, groups=groups, monitor=monitor,
                 inherited=inherited, index=index,
                 policies=[compile_policy(obj) for obj in monitor])


principals = st.tuples(st.sampled_from(USERS),
                       st.lists(st.sampled_from(GROUPS), max_size=1, unique=True))


# Asking every subject --------------------------------------------------------------------

def resource_of(kind: str, item: Item, cluster: str, namespace: str | None) -> Resource:
    return Resource(type=kind, name=item.name, cluster=cluster, namespace=namespace,
                    labels=item.labels, fields=item.fields)


class Answer(NamedTuple):
    """A check's answer, as much as the comparison reads."""

    decision: str
    filters: dict[str, Any] | None = None


class Listing(NamedTuple):
    """A filter's answer: its decision, the visible items, and how many of them the
    aggregations count (None: no aggregations)."""

    decision: str
    shown: list[Item]
    counted: int | None


class Subjects(Protocol):
    """Every subject, asked for one principal (in memory, or of the real service)."""

    def check(self, action: str, resource: Resource) -> Answer: ...
    def filtered(self, cluster: str, kind: str, items: list[Item]) -> Listing: ...
    def metrics(self, cluster: str, spaces: list[NamespaceMetrics],
                nodes: list[NodeMetrics]) -> tuple[str, int, int]: ...
    def custom_types(self, cluster: str | None) -> set[str]: ...
    def permissions(self) -> dict[str, tuple[str, list[str]]]: ...


class Local:
    """The subjects as :mod:`clearance_core.questions.answers` answers them over a fleet (what the
    decision service runs on its snapshot), ``check`` memoised."""

    def __init__(self, fleet: Fleet, identity: Identity) -> None:
        self.fleet, self.identity = fleet, identity
        self.state = fleet.state(identity)
        self._memo: dict[bytes, Answer] = {}

    def check(self, action: str, resource: Resource) -> Answer:
        key = msgspec.msgpack.encode((action, resource))
        found = self._memo.get(key)
        if found is None:
            decision = answers.check(self.state, self.identity, action, resource,
                                     cluster=resource.cluster or resource.name, now=NOW,
                                     explain=False)
            found = self._memo[key] = Answer(decision.decision, decision.filters)
        return found

    def filtered(self, cluster: str, kind: str, items: list[Item]) -> Listing:
        listed = answers.filtered(self.state, self.identity, cluster, kind, items, now=NOW)
        counted = len(listed.counted) if listed.metrics_allowed else None
        return Listing(listed.decision, listed.shown, counted)

    def metrics(self, cluster: str, spaces: list[NamespaceMetrics],
                nodes: list[NodeMetrics]) -> tuple[str, int, int]:
        decision, values, _ = answers.metrics(self.state, self.identity, cluster, spaces,
                                              nodes, now=NOW)
        return decision, int(values.get("namespaces", 0)), int(values.get("nodes", 0))

    def custom_types(self, cluster: str | None) -> set[str]:
        clusters = CLUSTERS if cluster is None else [cluster]
        return answers.custom_types(self.state, self.identity, clusters, now=NOW)

    def permissions(self) -> dict[str, tuple[str, list[str]]]:
        found = answers.permissions(self.state, self.identity, CLUSTERS, now=NOW)
        return {c: (p.decision, list(p.permissions)) for c, p in found.items()}


def allows(ask: Subjects, action: str, kind: str, item: Item, cluster: str) -> bool:
    """What ``check`` says of the item where it lives: in its namespace (a namespace
    item in itself; a node in none); an operator with its availability, in any
    namespace it is available in."""
    if kind == "operators" and item.namespaces:
        where = [n for found in item.namespaces
                 for n in (ANYWHERE if found == "*" else (found,))]
        return any([allows(ask, action, kind, Item(
            name=item.name, namespace=n, labels=item.labels, fields=item.fields), cluster)
            for n in where])
    namespace = None if kind in ("nodes", "namespaces") else item.namespace
    return ask.check(action, resource_of(kind, item, cluster, namespace)).decision == "allow"


def shows(filters: dict[str, Any] | None, kind: str, item: Item) -> bool:
    """What a client applying a whole-type answer's ``filters`` shows (docs/api/decisions.md's
    reading: each entry is a resource filter, the ``namespaces`` entry the namespace
    rule)."""
    view = RuleView.of(compile_filter(raw) for raw in (filters or {}).values())
    return view.item_visible(kind, item)[0]


def filtered_somewhere(monitor: list[dict[str, Any]], inherited: list[dict[str, Any]],
                       kind: str) -> bool:
    """Whether any rule of the fleet filters ``kind`` (or, for the namespaced built-ins,
    namespaces): then one set of filters cannot always say exactly what several rules
    show, and a whole-type answer's filters are checked for showing no more."""
    watched = {kind, "namespaces"} if kind in ("pods", "operators") else {kind}
    written = [entry for obj in monitor for r in obj["spec"]["scope"]["clusters"]["rules"]
               for entry in r.get("resources", [])]
    for obj in inherited:
        spec = obj["spec"]
        for rules in (spec.get("rules"), (spec.get("defaults") or {}).get("rules"),
                      (spec.get("overrides") or {}).get("rules")):
            for found in (rules or {}).values():
                written += found.get("resources", [])
    return any(entry["type"] in watched and entry.get("visibility") == "filtered"
               for entry in written)


Report = Callable[[str], None]


def _whole_type(ask: Subjects, exact: bool, kind: str, cluster: str,
                report: Report) -> None:
    placed = [item for item in ITEMS[kind] if not item.namespaces]
    whole = ask.check("view", Resource(type=kind, cluster=cluster))
    allowed = [allows(ask, "view", kind, item, cluster) for item in placed]
    if whole.decision == "allow" and not all(allowed):
        report(f"whole {kind} allow, but an item is denied")
    if whole.decision == "deny" and any(allowed):
        report(f"whole {kind} deny, but an item is allowed")
    if whole.decision == "partial":
        for item, ok in zip(placed, allowed, strict=True):
            shown = shows(whole.filters, kind, item)
            if shown and not ok:
                report(f"whole {kind} partial: filters {whole.filters} show denied {item}")
            if exact and ok and not shown:
                report(f"whole {kind} partial: filters {whole.filters} hide allowed {item}")
    for namespace in (*NAMESPACES, ELSEWHERE):
        if kind == "nodes":
            break
        inside = ask.check("view", Resource(type=kind, cluster=cluster, namespace=namespace))
        there = [(item, ok) for item, ok in zip(placed, allowed, strict=True)
                 if (item.name if kind == "namespaces" else item.namespace) == namespace]
        if inside.decision == "allow" and not all(ok for _, ok in there):
            report(f"{kind} in {namespace} allow, but an item there is denied")
        if inside.decision == "deny" and any(ok for _, ok in there):
            report(f"{kind} in {namespace} deny, but an item there is allowed")
        if inside.decision == "partial":
            for item, ok in there:
                if shows(inside.filters, kind, item) and not ok:
                    report(f"{kind} in {namespace}: filters show denied {item}")


def _lists(ask: Subjects, kind: str, cluster: str, report: Report) -> None:
    items = ITEMS[kind]
    listed = ask.filtered(cluster, kind, items)
    whole = ask.check("view", Resource(type=kind, cluster=cluster))
    if listed.decision != whole.decision:
        report(f"filter {kind} decides {listed.decision}, check {whole.decision}")
    for item in items:
        ok = allows(ask, "view", kind, item, cluster)
        if ok != (item in listed.shown):
            report(f"filter {kind} {'hides' if ok else 'shows'} {item}; check "
                   f"{'allows' if ok else 'denies'} it")
    wanted = sum(allows(ask, "view_metrics", kind, item, cluster) for item in listed.shown)
    if listed.counted is not None and listed.counted != wanted:
        report(f"aggregations of {kind} count {listed.counted} items, check allows "
               f"view_metrics on {wanted} of those shown")


def _metrics(ask: Subjects, cluster: str, report: Report) -> None:
    spaces = [NamespaceMetrics(name=item.name, labels=item.labels, pods=1)
              for item in ITEMS["namespaces"]]
    nodes = [NodeMetrics(name=item.name, labels=item.labels, ready=True)
             for item in ITEMS["nodes"]]
    decision, got_ns, got_nodes = ask.metrics(cluster, spaces, nodes)
    wanted_ns = sum(allows(ask, "view_metrics", "namespaces", item, cluster)
                    for item in ITEMS["namespaces"])
    wanted_nodes = sum(allows(ask, "view_metrics", "nodes", item, cluster)
                       for item in ITEMS["nodes"])
    if decision != "deny" and (got_ns, got_nodes) != (wanted_ns, wanted_nodes):
        report(f"metrics count {(got_ns, got_nodes)}, check allows "
               f"{(wanted_ns, wanted_nodes)}")
    if decision == "deny" and (wanted_ns or wanted_nodes):
        report("metrics deny, but check allows view_metrics on some of them")


def compare(ask: Subjects, exact: Callable[[str], bool], who: str) -> list[str]:
    """Every way a subject's answer differs from ``check`` on the item where it lives,
    for one principal (empty: they all agree). ``exact(kind)``: whether a whole-type
    answer's filters must show exactly the allowed items (else: no more)."""
    found: list[str] = []
    for cluster in (*CLUSTERS, UNKNOWN):
        def report(text: str, cluster: str = cluster) -> None:
            found.append(f"{who} on {cluster}: {text}")

        for kind in ITEMS:
            _whole_type(ask, exact(kind), kind, cluster, report)
            _lists(ask, kind, cluster, report)
        _metrics(ask, cluster, report)
        types = ask.custom_types(cluster)
        for kind in CUSTOM:
            visible = ask.check("view", Resource(type=kind, cluster=cluster)).decision
            if (kind in types) != (visible != "deny"):
                report(f"custom-types {'lists' if kind in types else 'omits'} {kind}, "
                       f"check answers {visible}")
    union = set().union(*(ask.custom_types(c) for c in CLUSTERS))
    if ask.custom_types(None) != union:
        found.append(f"{who}: custom-types of the fleet is not the union of its clusters'")
    permissions = ask.permissions()
    for cluster in CLUSTERS:
        granted = [action for action in answers.ACTIONS if ask.check(
            action, Resource(type="cluster", name=cluster)).decision == "allow"]
        got = permissions[cluster]
        if got != ("allow" if "view" in granted else "deny", granted):
            found.append(f"{who} on {cluster}: permissions {got}, check {granted}")
    return found


def disagreements(fleet: Fleet, username: str, asserted: Sequence[str]) -> list[str]:
    """:func:`compare` over the fleet in memory, for one principal."""
    identity = fleet.identity(username, asserted)
    return compare(Local(fleet, identity),
                   lambda kind: not filtered_somewhere(fleet.monitor, fleet.inherited, kind),
                   f"{username} {sorted(identity.groups)}")
