"""ACM search RBAC (README: RBAC reviews: search.filter, search.plan): a table and properties.

The table follows search-v2-api's RBAC.md: hub rows need ``list`` (resourceNames
honoured), managed clusters need ``create managedclusterviews`` in the cluster's namespace
and never show Secrets. The properties check the plan against the filter on random RBAC
(``world``, shared with the PostgreSQL test in tests/integration/test_search_sql.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_core.rbac.index import RbacIndex
from clearance_core.rbac.rules import Binding, PolicyRule, Role, RoleRef, Subject
from clearance_core.rbac.search import (
    Plan,
    SearchItem,
    hub_cluster,
    is_secret,
    search_filter,
    search_plan,
)

VIEW = "view.open-cluster-management.io"
INVENTORY = {"local-cluster": {"local-cluster": "true"}, "c1": {"env": "dev"}, "c2": {}}
NAMESPACES = ["default", "ns1", "ns2", "c1", "c2"]


def rule(verbs: str, groups: str, resources: str, names: str = "") -> PolicyRule:
    return PolicyRule(
        verbs=tuple(verbs.split(",")),
        api_groups=tuple(groups.split(",")),
        resources=tuple(resources.split(",")),
        resource_names=tuple(names.split(",")) if names else (),
    )


def crole(name: str, *rules: PolicyRule) -> Role:
    return Role(kind="ClusterRole", name=name, rules=rules)


def role(namespace: str, name: str, *rules: PolicyRule) -> Role:
    return Role(kind="Role", namespace=namespace, name=name, rules=rules)


def crb(name: str, role_name: str, *subjects: str) -> Binding:
    return Binding(kind="ClusterRoleBinding", name=name,
                   role_ref=RoleRef(kind="ClusterRole", name=role_name),
                   subjects=tuple(_subject(s) for s in subjects))


def rb(namespace: str, name: str, ref: str, *subjects: str) -> Binding:
    kind, role_name = ref.split(":")  # "Role:x" or "ClusterRole:x"
    return Binding(kind="RoleBinding", name=name, namespace=namespace,
                   role_ref=RoleRef(kind=kind, name=role_name),  # type: ignore[arg-type]
                   subjects=tuple(_subject(s) for s in subjects))


def _subject(spec: str) -> Subject:
    kind, name = spec.split(":", 1)  # "User:alice" / "Group:devs"
    return Subject(kind=kind, name=name)  # type: ignore[arg-type]


def item(cluster: str, resource: str, name: str, namespace: str = "", group: str = "",
         kind: str = "") -> SearchItem:
    return SearchItem(cluster=cluster, group=group, resource=resource, kind=kind,
                      namespace=namespace, name=name)


# The table ----------------------------------------------------------------------------

TABLE_INDEX = RbacIndex(
    roles=[
        crole("pod-lister", rule("list", "", "pods")),
        crole("getter", rule("get", "*", "*")),
        crole("node-a", rule("list", "", "nodes", "a")),
        crole("all", rule("*", "*", "*")),
        crole("cluster-viewer", rule("create", VIEW, "managedclusterviews")),
        crole("logs", rule("list", "", "pods/log,*/scale")),
        role("ns1", "deploys", rule("list,watch", "apps", "deployments", "web")),
    ],
    bindings=[
        crb("pods", "pod-lister", "User:alice"),
        crb("get", "getter", "User:alice"),
        crb("node-a", "node-a", "User:alice"),
        crb("admins", "all", "Group:admins"),
        rb("ns1", "deploys", "Role:deploys", "User:alice"),
        rb("ns2", "all-in-ns2", "ClusterRole:all", "User:bob"),
        rb("c1", "view-c1", "ClusterRole:cluster-viewer", "Group:devs"),
        crb("logs", "logs", "User:carol"),
        rb("c2", "missing", "ClusterRole:nope", "User:alice"),
    ],
)

HUB = "local-cluster"
TABLE: list[tuple[str, str, list[str], SearchItem, bool]] = [
    ("list via CRB, any namespace", "alice", [], item(HUB, "pods", "p", "ns2"), True),
    ("get is not list", "alice", [], item(HUB, "services", "s", "ns1"), False),
    ("resourceNames: the named node", "alice", [], item(HUB, "nodes", "a"), True),
    ("resourceNames: another node", "alice", [], item(HUB, "nodes", "b"), False),
    ("RB with names, right ns", "alice", [], item(HUB, "deployments", "web", "ns1", "apps"),
     True),
    ("RB with names, other name", "alice", [], item(HUB, "deployments", "db", "ns1", "apps"),
     False),
    ("RB grants only its namespace", "alice", [],
     item(HUB, "deployments", "web", "ns2", "apps"), False),
    ("group must match", "alice", [], item(HUB, "pods", "p", "ns1", "apps"), False),
    ("RB ClusterRole in its ns", "bob", [], item(HUB, "secrets", "s", "ns2"), True),
    ("RB never grants cluster-scoped", "bob", [], item(HUB, "nodes", "n"), False),
    ("group wildcard admin", "x", ["admins"], item(HUB, "nodes", "n", "", "anything"), True),
    ("admin sees hub secrets", "x", ["admins"], item(HUB, "secrets", "s", "ns1"), True),
    ("admin sees managed rows", "x", ["admins"], item("c2", "pods", "p", "ns1"), True),
    ("no managed secrets, by kind", "x", ["admins"],
     item("c2", "widgets", "s", "ns1", "x.io", "Secret"), False),
    ("no managed secrets, by resource", "x", ["admins"], item("c2", "secrets", "s", "ns1"),
     False),
    ("secrets of a non-core group are fine", "x", ["admins"],
     item("c2", "secrets", "s", "ns1", "x.io", "Other"), True),
    ("cluster outside inventory", "x", ["admins"], item("c9", "pods", "p", "ns1"), False),
    ("managed view via RB in c1", "d", ["devs"], item("c1", "pods", "p", "ns1"), True),
    ("managed view is per cluster", "d", ["devs"], item("c2", "pods", "p", "ns1"), False),
    ("managed view is not hub list", "d", ["devs"], item(HUB, "pods", "p", "c1"), False),
    ("subresource rules list nothing", "carol", [], item(HUB, "pods", "p", "ns1"), False),
    ("missing role grants nothing", "alice", [], item("c2", "pods", "p", "ns1"), False),
]


@pytest.mark.parametrize(("user", "groups", "it", "visible"),
                         [t[1:] for t in TABLE], ids=[t[0] for t in TABLE])
def test_filter_table(user: str, groups: list[str], it: SearchItem, visible: bool) -> None:
    assert search_filter(TABLE_INDEX, user, groups, INVENTORY, [it]) == [visible]
    as_dict = msgspec.to_builtins(it)
    assert search_filter(TABLE_INDEX, user, groups, INVENTORY, [as_dict]) == [visible]
    assert plan_keeps(search_plan(TABLE_INDEX, user, groups, INVENTORY, NAMESPACES),
                      INVENTORY, it) == visible


def test_hub_cluster() -> None:
    assert hub_cluster({"a": {}, "local-cluster": {}}) == "local-cluster"
    assert hub_cluster({"hub": {"local-cluster": "true"}, "local-cluster": {}}) == "hub"
    assert hub_cluster({"local-cluster": {"local-cluster": "false"}}) == "local-cluster"
    assert hub_cluster({"a": {"local-cluster": "false"}}) is None
    assert hub_cluster({}) is None


def test_plan_shape() -> None:
    plan = search_plan(TABLE_INDEX, "alice", [], INVENTORY, NAMESPACES)
    as_json = msgspec.to_builtins(plan)
    assert set(as_json["sql"]) == {"where", "params"}
    assert as_json | {"sql": None} == {
        "hub": [
            {"group": "", "resource": "nodes", "namespaces": "*", "names": ["a"]},
            {"group": "", "resource": "pods", "namespaces": "*", "names": "*"},
            {"group": "apps", "resource": "deployments", "namespaces": ["ns1"],
             "names": ["web"]},
        ],
        "managed_clusters": [],
        "sql": None,
    }
    assert plan.sql.where.count("%s") == len(plan.sql.params)
    assert plan.sql.params[0] == "local-cluster"


def test_plan_folds_namespaces_and_star_absorbs() -> None:
    index = RbacIndex(
        roles=[crole("pods", rule("list", "", "pods")),
               crole("cms", rule("*", "", "configmaps", "b,a,a"))],
        bindings=[rb("ns1", "p1", "ClusterRole:pods", "User:u"),
                  rb("ns2", "p2", "ClusterRole:pods", "User:u"),
                  rb("gone", "p3", "ClusterRole:pods", "Group:h"),  # no Namespace object
                  rb("ns1", "c1", "ClusterRole:cms", "User:u"),
                  crb("c", "cms", "Group:g"),
                  rb("ns2", "c2", "ClusterRole:cms", "Group:g")],
    )
    plan = search_plan(index, "u", [], INVENTORY, NAMESPACES)
    assert msgspec.to_builtins(plan.hub) == [
        {"group": "", "resource": "configmaps", "namespaces": ["ns1"], "names": ["a", "b"]},
        {"group": "", "resource": "pods", "namespaces": ["ns1", "ns2"], "names": "*"},
    ]
    plan = search_plan(index, "u", ["g"], INVENTORY, NAMESPACES)
    assert msgspec.to_builtins(plan.hub) == [
        {"group": "", "resource": "configmaps", "namespaces": "*", "names": ["a", "b"]},
        {"group": "", "resource": "pods", "namespaces": ["ns1", "ns2"], "names": "*"},
    ]
    # A RoleBinding grants in its namespace whether or not a Namespace object is known:
    # the filter shows those rows, so the plan must select them.
    plan = search_plan(index, "u", ["h"], INVENTORY, NAMESPACES)
    assert {"group": "", "resource": "pods", "namespaces": ["gone", "ns1", "ns2"],
            "names": "*"} in msgspec.to_builtins(plan.hub)
    assert plan == search_plan(index, "u", ["h"], INVENTORY)  # known Namespaces add nothing
    row = item(HUB, "pods", "p", "gone")
    assert search_filter(index, "u", ["h"], INVENTORY, [row]) == [True]
    assert plan_keeps(plan, INVENTORY, row)


def test_plan_nothing_allowed_selects_nothing() -> None:
    plan = search_plan(TABLE_INDEX, "nobody", [], INVENTORY, NAMESPACES)
    assert plan == Plan(hub=[], managed_clusters=[], sql=plan.sql)
    assert (plan.sql.where, plan.sql.params) == ("FALSE", [])


def test_plan_all_hub_rows_is_true() -> None:
    plan = search_plan(TABLE_INDEX, "x", ["admins"], INVENTORY, NAMESPACES)
    assert plan.managed_clusters == ["c1", "c2"]
    assert "(cluster = %s AND data ? '_hubClusterResource' AND (TRUE))" in plan.sql.where
    assert plan.sql.params == ["local-cluster", ["c1", "c2"]]


def test_no_hub_means_no_hub_entries() -> None:
    inventory = {"c1": {}, "c2": {}}
    plan = search_plan(TABLE_INDEX, "x", ["admins"], inventory, NAMESPACES)
    assert plan.hub == [] and plan.managed_clusters == ["c1", "c2"]
    assert search_filter(TABLE_INDEX, "x", ["admins"], inventory,
                         [item("c1", "pods", "p"), item("local-cluster", "pods", "p")]) == [
        True, False]


def test_plan_json_round_trip() -> None:
    plan = search_plan(TABLE_INDEX, "alice", [], INVENTORY, NAMESPACES)
    assert msgspec.json.decode(msgspec.json.encode(plan), type=Plan) == plan


# The plan read back in Python: what its SQL means, row by row -----------------------


def plan_keeps(plan: Plan, inventory: dict[str, dict[str, str]], it: SearchItem) -> bool:
    hub = hub_cluster(inventory)
    if it.cluster == hub:
        return any(
            e.group in ("*", it.group)
            and e.resource in ("*", it.resource)
            and (e.namespaces == "*" or it.namespace in e.namespaces)
            and (e.names == "*" or it.name in e.names)
            for e in plan.hub
        )
    if it.cluster in plan.managed_clusters:
        return not is_secret(it.group, it.resource, it.kind)
    return False


# A random world: RBAC, inventory, rows. Shared with the PostgreSQL test. --------------

USERS = ["u1", "u2", "system:serviceaccount:ns1:sa"]
GROUPS = ["g1", "g2", "system:authenticated"]
API_GROUPS = ["", "apps", VIEW, "x.io"]
RULE_GROUPS = [*API_GROUPS, "*"]
RESOURCES = ["pods", "secrets", "deployments", "nodes", "managedclusterviews", "widgets"]
RULE_RESOURCES = [*RESOURCES, "*", "pods/log", "*/scale"]
VERBS = ["list", "get", "create", "*", "watch"]
NAMES = ["a", "b", "c"]
KINDS = ["", "Pod", "Secret", "Deployment", "Node"]


@dataclass
class World:
    index: RbacIndex
    inventory: dict[str, dict[str, str]]
    namespaces: list[str]
    rows: list[SearchItem]
    principals: list[tuple[str, list[str]]]


def _some(rng: random.Random, pool: list[str], most: int = 2) -> tuple[str, ...]:
    return tuple(rng.sample(pool, rng.randint(1, min(most, len(pool)))))


def random_rule(rng: random.Random) -> PolicyRule:
    return PolicyRule(
        verbs=_some(rng, VERBS),
        api_groups=_some(rng, RULE_GROUPS),
        resources=_some(rng, RULE_RESOURCES, 3),
        resource_names=_some(rng, NAMES) if rng.random() < 0.3 else (),
    )


def random_world(rng: random.Random, rows: int = 40) -> World:
    hub = rng.choice(["local-cluster", "hub", None])
    managed = ["c1", "c2", "c3"][: rng.randint(0, 3)]
    inventory: dict[str, dict[str, str]] = {c: {} for c in managed}
    if hub == "hub":
        inventory["hub"] = {"local-cluster": "true"}
    elif hub == "local-cluster":
        inventory["local-cluster"] = {}
    namespaces = ["ns1", "ns2", "c1", "c2", "c3"]
    rb_namespaces = [*namespaces, "unknown-ns"]  # a RoleBinding left in a deleted namespace
    roles = [Role(kind="ClusterRole", name=f"cr{i}",
                  rules=tuple(random_rule(rng) for _ in range(rng.randint(0, 3))))
             for i in range(rng.randint(0, 5))]
    roles += [Role(kind="Role", namespace=rng.choice(rb_namespaces), name=f"r{i}",
                   rules=tuple(random_rule(rng) for _ in range(rng.randint(1, 3))))
              for i in range(rng.randint(0, 4))]
    role_names = [r.name for r in roles if r.kind == "ClusterRole"] + ["missing"]

    def subjects() -> tuple[Subject, ...]:
        return tuple(
            Subject(kind="User", name=rng.choice(USERS)) if rng.random() < 0.5
            else Subject(kind="Group", name=rng.choice(GROUPS))
            for _ in range(rng.randint(1, 2)))

    bindings = [Binding(kind="ClusterRoleBinding", name=f"crb{i}",
                        role_ref=RoleRef(kind="ClusterRole", name=rng.choice(role_names)),
                        subjects=subjects())
                for i in range(rng.randint(0, 4))]
    for i in range(rng.randint(0, 8)):
        local = [r for r in roles if r.kind == "Role"]
        if local and rng.random() < 0.4:
            target = rng.choice(local)
            ref, ns = RoleRef(kind="Role", name=target.name), target.namespace
        else:
            ref, ns = RoleRef(kind="ClusterRole", name=rng.choice(role_names)), rng.choice(
                rb_namespaces)
        bindings.append(Binding(kind="RoleBinding", name=f"rb{i}", namespace=ns,
                                role_ref=ref, subjects=subjects()))
    clusters = [*inventory, "stranger"]
    items: list[SearchItem] = []
    for _ in range(rows):
        cluster = rng.choice(clusters)
        # Hub rows too may live where no Namespace object is known, RoleBindings or not.
        namespace = rng.choice(["", *rb_namespaces, "elsewhere"])
        items.append(SearchItem(
            cluster=cluster, group=rng.choice(API_GROUPS), resource=rng.choice(RESOURCES),
            kind=rng.choice(KINDS), namespace=namespace, name=rng.choice([*NAMES, "d"])))
    principals = [(u, [g for g in GROUPS if rng.random() < 0.4]) for u in USERS]
    return World(RbacIndex(roles, bindings), inventory, namespaces, items, principals)


@settings(max_examples=200, deadline=None)
@given(st.randoms(use_true_random=False))
def test_plan_agrees_with_filter(rng: random.Random) -> None:
    world = random_world(rng)
    for user, groups in world.principals:
        visible = search_filter(world.index, user, groups, world.inventory, world.rows)
        plan = search_plan(world.index, user, groups, world.inventory)
        assert [plan_keeps(plan, world.inventory, r) for r in world.rows] == visible
        assert plan.sql.where.count("%s") == len(plan.sql.params)
        assert (plan.sql.where == "FALSE") == (not plan.hub and not plan.managed_clusters)
        assert plan.managed_clusters == sorted(plan.managed_clusters)


@settings(max_examples=60, deadline=None)
@given(st.randoms(use_true_random=False))
def test_plan_entries_are_folded(rng: random.Random) -> None:
    world = random_world(rng, rows=0)
    for user, groups in world.principals:
        plan = search_plan(world.index, user, groups, world.inventory, world.namespaces)
        keys = [(e.group, e.resource, e.names if e.names == "*" else tuple(e.names))
                for e in plan.hub]
        assert len(keys) == len(set(keys))  # one entry per (group, resource, names)
        for e in plan.hub:
            assert "/" not in e.resource
            if e.namespaces != "*":
                assert e.namespaces == sorted(set(e.namespaces))
                assert set(e.namespaces) <= world.index.binding_namespaces(user, groups)
            if e.names != "*":
                assert e.names == sorted(set(e.names))


def test_dict_items_with_nulls() -> None:
    items: list[dict[str, Any]] = [
        {"cluster": "local-cluster", "group": "", "resource": "nodes", "name": "a",
         "namespace": None, "kind": None},
    ]
    assert search_filter(TABLE_INDEX, "alice", [], INVENTORY, items) == [True]
