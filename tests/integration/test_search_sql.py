"""search.plan's SQL on a real PostgreSQL (README: RBAC reviews): it selects what
search.filter keeps.

A throwaway server (the ``pgserver`` wheel: PostgreSQL binaries, run as an unprivileged
user when we are root) in a temporary directory, the ACM search schema
``search.resources(uid, cluster, data jsonb)``, rows written as the ACM indexer writes
them (no ``apigroup`` for the core group, no ``namespace`` for cluster-scoped rows,
``_hubClusterResource`` on hub rows), random RBAC from tests/unit/test_search.py — with hub
rows also in namespaces that have RoleBindings but no Namespace object.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from clearance_core.rbac.search import SearchItem, hub_cluster, search_filter, search_plan
from tests.unit.test_search import random_world

pgserver = pytest.importorskip("pgserver", reason="needs the pgserver wheel (dev extra)")
psycopg = pytest.importorskip("psycopg", reason="needs psycopg (dev extra)")
Jsonb = pytest.importorskip("psycopg.types.json").Jsonb

pytestmark = pytest.mark.integration

WORLDS = 250


@pytest.fixture(scope="module")
def conn() -> Iterator[Any]:
    root = tempfile.mkdtemp(prefix="clearance-pg-")  # pgserver fixes its permissions
    try:
        server = pgserver.get_server(root, cleanup_mode="stop")
    except Exception as exc:  # pragma: no cover - depends on the machine
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"pgserver could not start PostgreSQL: {exc}")
    try:
        with psycopg.connect(server.get_uri(), autocommit=True) as connection:
            connection.execute("CREATE SCHEMA search")
            connection.execute(
                "CREATE TABLE search.resources (uid text PRIMARY KEY, cluster text, "
                "data jsonb NOT NULL)"
            )
            yield connection
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


def as_row(uid: str, it: SearchItem, hub: str | None) -> tuple[str, str, Any]:
    data: dict[str, Any] = {"kind_plural": it.resource, "name": it.name}
    if it.group:
        data["apigroup"] = it.group
    if it.kind:
        data["kind"] = it.kind
    if it.namespace:
        data["namespace"] = it.namespace
    if it.cluster == hub:  # precondition 2: the flag exactly on hub rows
        data["_hubClusterResource"] = True
    return uid, it.cluster, Jsonb(data)


def from_row(cluster: str, data: dict[str, Any]) -> SearchItem:
    """A row as search.filter sees it (the mapping in clearance_core.rbac.search)."""
    return SearchItem(cluster=cluster, group=data.get("apigroup", ""),
                      resource=data.get("kind_plural", ""), kind=data.get("kind", ""),
                      namespace=data.get("namespace", ""), name=data.get("name", ""))


def test_plan_sql_selects_exactly_the_filtered_rows(conn: Any) -> None:
    checked = selected = 0
    for seed in range(WORLDS):
        world = random_world(random.Random(seed), rows=120)
        hub = hub_cluster(world.inventory)
        conn.execute("TRUNCATE search.resources")
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO search.resources (uid, cluster, data) VALUES (%s, %s, %s)",
                [as_row(f"u{i}", it, hub) for i, it in enumerate(world.rows)],
            )
        rows = conn.execute("SELECT uid, cluster, data FROM search.resources").fetchall()
        items = [from_row(cluster, data) for _, cluster, data in rows]
        for user, groups in world.principals:
            visible = search_filter(world.index, user, groups, world.inventory, items)
            expected = sorted(uid for (uid, _, _), v in zip(rows, visible, strict=True) if v)
            plan = search_plan(world.index, user, groups, world.inventory)
            # The params as they travel: through JSON, as the plan reply carries them.
            params = msgspec.json.decode(msgspec.json.encode(plan.sql.params))
            got = conn.execute(
                f"SELECT uid FROM search.resources WHERE {plan.sql.where} ORDER BY uid",
                params,
            ).fetchall()
            assert sorted(uid for (uid,) in got) == expected, (seed, user, groups, plan)
            checked += 1
            selected += len(expected)
    assert checked == WORLDS * 3 and selected > 0


def test_nothing_allowed_selects_nothing(conn: Any) -> None:
    world = random_world(random.Random(1), rows=30)
    conn.execute("TRUNCATE search.resources")
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO search.resources (uid, cluster, data) VALUES (%s, %s, %s)",
                        [as_row(f"u{i}", it, hub_cluster(world.inventory))
                         for i, it in enumerate(world.rows)])
    plan = search_plan(type(world.index)(), "nobody", [], world.inventory, world.namespaces)
    assert plan.sql.where == "FALSE"
    assert conn.execute(f"SELECT uid FROM search.resources WHERE {plan.sql.where}").fetchall() == []
