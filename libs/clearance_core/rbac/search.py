"""ACM search RBAC (README: RBAC reviews): which search rows a principal may see.

``search_filter`` answers ``clearance.v1.search.filter`` item by item; ``search_plan``
answers ``clearance.v1.search.plan``: the same decision as a query plan, with a SQL
``WHERE`` clause for ACM's search schema ``search.resources(uid, cluster, data jsonb)``.
The semantics are those of stolostron's search-v2-api (``RBAC.md``):

* the hub is the inventory cluster labelled ``local-cluster: "true"``, else the one named
  ``local-cluster``; every other inventory cluster is managed, and rows of clusters
  outside the inventory are never visible;
* a hub row is visible iff RBAC allows ``list`` on it, its name passed as the request name
  so that a rule with ``resourceNames`` shows exactly those names;
* a managed cluster's rows are visible iff the principal may ``create``
  ``managedclusterviews`` (``view.open-cluster-management.io``) in the namespace named
  after the cluster, Secrets excepted.

A row maps to an item as ``cluster = row.cluster``, ``group = data.apigroup or ""``,
``resource = data.kind_plural``, ``kind = data.kind``, ``namespace = data.namespace``,
``name = data.name`` (an absent field as ``""``). Running the plan's SQL returns exactly the
rows the filter keeps, given two preconditions the ACM indexer meets:

1. a row carries ``_hubClusterResource`` exactly when it is in the hub cluster;
2. no ``kind_plural`` contains ``/`` (rows are whole resources, so rules for subresources,
   ``pods/log`` or ``*/scale``, are left out of the plan).

Per-namespace grants come only from RoleBindings, each in its own namespace, so the plan
enumerates the namespaces of the RoleBindings naming the principal — not the known
Namespace objects (search-v2-api's way): a RoleBinding in a namespace whose Namespace
event has not arrived (or never will) grants there for the filter, and so for the plan.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from clearance_api.wire import HubEntry, SqlParam, SqlWhere, Star
from clearance_core.rbac.index import RbacIndex
from clearance_core.rbac.rules import PolicyRule, ResourceAttributes

HUB_LABEL = "local-cluster"
VIEW_GROUP = "view.open-cluster-management.io"
VIEW_RESOURCE = "managedclusterviews"

class SearchItem(msgspec.Struct, frozen=True, kw_only=True):
    """One search result as ``search.filter`` receives it."""

    cluster: str
    group: str = ""
    resource: str
    kind: str = ""
    namespace: str = ""
    name: str = ""


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    hub: list[HubEntry]
    managed_clusters: list[str]
    sql: SqlWhere


def hub_cluster(inventory: Mapping[str, Mapping[str, str]]) -> str | None:
    """The cluster labelled ``local-cluster: "true"`` (first by name), else ``local-cluster``."""
    labelled = sorted(n for n, labels in inventory.items() if labels.get(HUB_LABEL) == "true")
    if labelled:
        return labelled[0]
    return HUB_LABEL if HUB_LABEL in inventory else None


def is_secret(group: str, resource: str, kind: str) -> bool:
    return kind == "Secret" or (group == "" and resource == "secrets")


def _as_item(item: SearchItem | Mapping[str, Any]) -> SearchItem:
    if isinstance(item, SearchItem):
        return item
    return msgspec.convert({k: v for k, v in item.items() if v is not None}, SearchItem)


def may_view_cluster(
    index: RbacIndex, username: str, groups: Iterable[str], cluster: str
) -> bool:
    """``oc auth can-i create managedclusterviews -n <cluster>`` (ACM's cluster view right)."""
    attrs = ResourceAttributes(
        verb="create", resource=VIEW_RESOURCE, group=VIEW_GROUP, namespace=cluster
    )
    return index.allowed(attrs, username, groups)[0]


def search_filter(
    index: RbacIndex,
    username: str,
    groups: Iterable[str],
    inventory: Mapping[str, Mapping[str, str]],
    items: Iterable[SearchItem | Mapping[str, Any]],
) -> list[bool]:
    """Whether each item is visible to the principal, in input order."""
    group_set = frozenset(groups)
    hub = hub_cluster(inventory)
    views: dict[str, bool] = {}
    out: list[bool] = []
    for raw in items:
        item = _as_item(raw)
        if item.cluster not in inventory:
            out.append(False)
        elif item.cluster == hub:
            attrs = ResourceAttributes(
                verb="list", resource=item.resource, group=item.group,
                namespace=item.namespace, name=item.name,
            )
            out.append(index.allowed(attrs, username, group_set)[0])
        else:
            if item.cluster not in views:
                views[item.cluster] = may_view_cluster(index, username, group_set, item.cluster)
            out.append(
                views[item.cluster] and not is_secret(item.group, item.resource, item.kind)
            )
    return out


_Key = tuple[str, str, tuple[str, ...] | str]  # (group, resource, sorted names or "*")


def _grants(rule: PolicyRule) -> list[_Key]:
    """(group, resource, names) a rule grants ``list`` on, whole resources only."""
    if "list" not in rule.verbs and "*" not in rule.verbs:
        return []
    names: tuple[str, ...] | Star = (
        tuple(sorted(set(rule.resource_names))) if rule.resource_names else "*"
    )
    groups = dict.fromkeys(rule.api_groups)
    resources = [r for r in dict.fromkeys(rule.resources) if "/" not in r]
    return [(g, r, names) for g in groups for r in resources]


def _hub_entries(
    index: RbacIndex, username: str, groups: frozenset[str], namespaces: set[str]
) -> list[HubEntry]:
    everywhere: set[_Key] = set()
    for cluster_wide, rule in index.scoped_rules(username, groups, ""):
        if cluster_wide:
            everywhere.update(_grants(rule))
    per_ns: dict[_Key, set[str]] = defaultdict(set)
    for namespace in sorted(namespaces - {""}):
        for cluster_wide, rule in index.scoped_rules(username, groups, namespace):
            if not cluster_wide:
                for key in _grants(rule):
                    if key not in everywhere:
                        per_ns[key].add(namespace)
    entries = [HubEntry(group=g, resource=r, namespaces="*", names=_names(n))
               for g, r, n in everywhere]
    entries.extend(HubEntry(group=g, resource=r, namespaces=sorted(ns), names=_names(n))
                   for (g, r, n), ns in per_ns.items())
    entries.sort(key=lambda e: (e.group, e.resource, e.names != "*", e.names,
                                e.namespaces != "*", e.namespaces))
    return entries


def _names(names: tuple[str, ...] | str) -> list[str] | Star:
    return "*" if isinstance(names, str) else list(names)


# SQL over search.resources. Absent fields read as "" so that NOT never meets a NULL.
_GROUP = "coalesce(data->>'apigroup', '')"
_RESOURCE = "coalesce(data->>'kind_plural', '')"
_NAMESPACE = "coalesce(data->>'namespace', '')"
_NAME = "coalesce(data->>'name', '')"
_KIND = "coalesce(data->>'kind', '')"
_HUB_FLAG = "data ? '_hubClusterResource'"
_NOT_SECRET = f"NOT ({_KIND} = 'Secret' OR ({_GROUP} = '' AND {_RESOURCE} = 'secrets'))"


def _hub_sql(entries: list[HubEntry], params: list[SqlParam]) -> str:
    """One disjunct per (group, namespaces, names), resources gathered in one ANY."""
    if any(e.group == e.resource == e.namespaces == e.names == "*" for e in entries):
        return "TRUE"  # every hub row
    gathered: dict[tuple[str, Any, Any], list[str]] = defaultdict(list)
    for e in entries:
        ns = e.namespaces if e.namespaces == "*" else tuple(e.namespaces)
        names = e.names if e.names == "*" else tuple(e.names)
        gathered[e.group, ns, names].append(e.resource)
    disjuncts: list[str] = []
    for (group, ns, names), resources in gathered.items():
        conds: list[str] = []
        if group != "*":
            conds.append(f"{_GROUP} = %s")
            params.append(group)
        if "*" not in resources:
            conds.append(f"{_RESOURCE} = ANY(%s)")
            params.append(sorted(set(resources)))
        if ns != "*":
            conds.append(f"{_NAMESPACE} = ANY(%s)")
            params.append(list(ns))
        if names != "*":
            conds.append(f"{_NAME} = ANY(%s)")
            params.append(list(names))
        disjuncts.append("(" + " AND ".join(conds) + ")")
    return " OR ".join(disjuncts)


def search_plan(
    index: RbacIndex,
    username: str,
    groups: Iterable[str],
    inventory: Mapping[str, Mapping[str, str]],
    namespaces: Iterable[str] = (),
) -> Plan:
    """The filter's rules as a plan.

    The SQL selects exactly the rows ``search_filter`` keeps under the preconditions in
    the module docstring; it selects nothing (``FALSE``) when nothing is visible.
    ``namespaces`` (say, the hub's known Namespaces) are considered too, but add nothing:
    the namespaces of the principal's RoleBindings are the only ones that can.
    """
    group_set = frozenset(groups)
    hub = hub_cluster(inventory)
    entries: list[HubEntry] = []
    if hub is not None:
        scope = index.binding_namespaces(username, group_set) | set(namespaces)
        entries = _hub_entries(index, username, group_set, scope)
    managed = sorted(
        c for c in inventory if c != hub and may_view_cluster(index, username, group_set, c)
    )
    params: list[SqlParam] = []
    branches: list[str] = []
    if entries and hub is not None:  # entries exist only with a hub
        params.append(hub)
        branches.append(f"(cluster = %s AND {_HUB_FLAG} AND ({_hub_sql(entries, params)}))")
    if managed:
        params.append(managed)
        branches.append(f"(cluster = ANY(%s) AND NOT {_HUB_FLAG} AND {_NOT_SECRET})")
    where = " OR ".join(branches) if branches else "FALSE"
    return Plan(hub=entries, managed_clusters=managed, sql=SqlWhere(where=where, params=params))
