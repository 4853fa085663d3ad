"""Names of any character invalidate exactly their own cached decisions.

Cache entries are indexed under the username, the email, every effective group and the
cluster (``clearance_runtime.storage.cache``); the index keys end with the name as given, never
parsed back and never used as a pattern. So a change for user ``a*`` drops ``a*``'s
entries and not ``ab``'s, a change for group ``g:1`` not ``g``'s or ``g,1``'s — whatever
the name holds: ``* ? [ ]`` (glob), ``:`` and ``,`` (separators), ``\\``, spaces,
non-ASCII. Each case caches every principal's answer, changes one name's state, and
checks that exactly that principal misses the cache (with the new answer) and every other
one still hits it. A cluster's label change concerns the subjects of the ``matchLabels``
policies whose match of it moves, and only their entries about that cluster (docs/api/caching.md,
\"Caching and freshness\"), so its case names one watcher per cluster.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import Servers
from tests.integration.harness import System, cluster, group, publish
from tests.support.policies import policy

#: Names that differ by one character a key scheme might treat specially.
USERS = ["a*", "ab", "a", "a?", "a[b]", "[ab]", "a:b", "a,b", "a\\b", "a b", "ä", "a*b"]
GROUPS = ["g:1", "g", "g,1", "g*", "g?", "[g]", "g\\", "g 1", "gö", "g:1,2"]
CLUSTERS = ["c*", "c1", "c", "c?", "c[1]", "c:1", "c,1", "c 1", "cö"]


@pytest.fixture
async def system(clean_servers: Servers) -> AsyncIterator[System]:
    """The services that answer, fed straight through the stream (no watcher)."""
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, None)
    await sys_.start("compiler", "cache-invalidator", "decision")
    for name in CLUSTERS:
        await publish(sys_, "managedcluster", cluster(name))
    await sys_.settle()
    yield sys_
    await sys_.close()


async def publish_all(system: System, kind: str, objects: list[dict[str, Any]]) -> int:
    return max([await publish(system, kind, obj) for obj in objects])


def allow(name: str, *, users: list[str] | None = None, groups: list[str] | None = None,
          effect: str = "Allow") -> dict[str, Any]:
    return policy(name, users=users, groups=groups, effect=effect, default="all")


async def ask(system: System, principal: dict[str, Any], cluster_: str = "c",
              **extra: Any) -> dict[str, Any]:
    return await system.request("clearance.v1.check", {
        "principal": principal, "action": "view",
        "resource": {"type": "cluster", "name": cluster_}, **extra})


async def cache_all(system: System, principals: list[dict[str, Any]], clusters: list[str],
                    revision: int) -> None:
    """Ask every question twice: the second answer must come from the cache."""
    for principal in principals:
        for name in clusters:
            await ask(system, principal, name, min_revision=revision)
            again = await ask(system, principal, name, min_revision=revision)
            assert again["cached"] is True, (principal, name)


async def only_these_missed(system: System, principals: list[dict[str, Any]],
                            clusters: list[str], changed: set[tuple[int, str]],
                            revision: int) -> dict[tuple[int, str], dict[str, Any]]:
    """Every (principal index, cluster) in ``changed`` misses the cache; all others hit
    it. Returns the answers."""
    answers = {}
    for i, principal in enumerate(principals):
        for name in clusters:
            got = await ask(system, principal, name, min_revision=revision)
            assert got["cached"] is ((i, name) not in changed), (principal, name, got)
            answers[i, name] = got
    return answers


async def test_a_users_change_drops_that_users_entries_only(system: System) -> None:
    principals = [{"username": user} for user in USERS]
    revision = await publish_all(system, "monitoraccesspolicy",
                                 [allow(f"u{i}", users=[u]) for i, u in enumerate(USERS)])
    await cache_all(system, principals, ["c"], revision)
    for i, user in enumerate(USERS):  # each user in turn: no other entry goes
        revision = await publish(system, "monitoraccesspolicy",
                                 allow(f"u{i}", users=[user], effect="Deny"))
        answers = await only_these_missed(system, principals, ["c"], {(i, "c")}, revision)
        assert answers[i, "c"]["decision"] == "deny", user


async def test_a_groups_change_drops_its_members_entries_only(system: System) -> None:
    principals = [{"username": f"member-{i}", "groups": [g]} for i, g in enumerate(GROUPS)]
    revision = await publish_all(system, "monitoraccesspolicy",
                                 [allow(f"g{i}", groups=[g]) for i, g in enumerate(GROUPS)])
    await cache_all(system, principals, ["c"], revision)
    for i, name in enumerate(GROUPS):
        revision = await publish(system, "monitoraccesspolicy",
                                 allow(f"g{i}", groups=[name], effect="Deny"))
        answers = await only_these_missed(system, principals, ["c"], {(i, "c")}, revision)
        assert answers[i, "c"]["decision"] == "deny", name


async def test_an_openshift_groups_new_member_drops_that_users_entries_only(
        system: System) -> None:
    """Membership is keyed by the username as written: adding ``a*`` to a Group is a
    change for ``a*`` alone."""
    principals = [{"username": user} for user in USERS]
    await publish(system, "monitoraccesspolicy", allow("team", groups=["team"]))
    revision = await publish(system, "group", group("team"))
    await cache_all(system, principals, ["c"], revision)
    for i, user in enumerate(USERS):
        revision = await publish(system, "group", group("team", *USERS[:i + 1]))
        answers = await only_these_missed(system, principals, ["c"], {(i, "c")}, revision)
        assert answers[i, "c"]["decision"] == "allow", user


async def test_a_clusters_label_change_drops_exactly_the_subjects_whose_match_moves(
        system: System) -> None:
    """A ManagedCluster's labels reach cached checks only through ``matchLabels``: giving
    cluster i the label its watcher's policy selects drops that watcher's entry about
    cluster i and nothing else — not its entries about the other clusters (whose names
    differ from i's by one special character), nor those of a policy selecting by names
    or by a label that did not move. After the change the watcher sees cluster i only."""
    watchers = [{"username": f"watcher-{i}"} for i in range(len(CLUSTERS))]
    bystanders = [{"username": "by-name"}, {"username": "by-env"}]
    principals = [*watchers, *bystanders]
    revision = await publish_all(system, "monitoraccesspolicy", [
        *(policy(f"l{i}", users=[w["username"]], rules=[
            {"selector": {"matchLabels": {"team": f"t{i}"}}}])
          for i, w in enumerate(watchers)),
        policy("by-name", users=["by-name"], rules=[{"selector": {"matchNames": CLUSTERS}}]),
        policy("by-env", users=["by-env"], rules=[
            {"selector": {"matchLabels": {"env": "prod"}}}])])
    await cache_all(system, principals, CLUSTERS, revision)
    for i, name in enumerate(CLUSTERS):
        revision = await publish(system, "managedcluster", cluster(name, team=f"t{i}"))
        answers = await only_these_missed(system, principals, CLUSTERS,
                                          {(i, name)}, revision)
        assert [c for c in CLUSTERS if answers[i, c]["allowed"]] == [name]
        assert all(answers[len(watchers), c]["allowed"] for c in CLUSTERS)


async def test_cache_clear_for_one_principal_leaves_the_others(system: System) -> None:
    principals = [{"username": user, "groups": [g]} for user, g in zip(USERS, GROUPS,
                                                                          strict=False)]
    revision = await publish(system, "monitoraccesspolicy", allow("all", users=USERS))
    await cache_all(system, principals, ["c"], revision)
    cleared = await system.request("clearance.v1.cache.clear", {"principal": principals[0]})
    assert cleared["cleared"] == 1
    await only_these_missed(system, principals, ["c"], {(0, "c")}, cleared["revision"])
