"""The facts every system of the peer benchmark is given, generated once.

200 clusters in 20 labelled sets (``set: set-<k>``; every fourth cluster is
``env: production``), 10,000 users, 50 Groups (49 teams, each user in one, and
``contractors``, every tenth user), and one rule: a team sees the clusters of its two
sets, except that a contractor sees no production cluster. :func:`allowed` is that rule
in plain Python: the reference every system's answers are held to before any timing.

Each system gets the facts in its own language: Clearance as ManagedClusters, Groups and
MonitorAccessPolicies (a Deny at priority 10 before the teams' Allows), Cerbos as a
resource policy for ``cluster`` with one derived role per team (a condition on the
cluster's ``set`` attribute) and a DENY rule for ``contractors`` on production, SpiceDB
as a schema whose ``view`` is ``viewer - denied`` (an exclusion) and its relationships.
"""

from __future__ import annotations

from typing import Any

CLUSTERS = 200
SETS = 20
TEAMS = 49
USERS = 10_000
CONTRACTOR_EVERY = 10


def cluster(i: int) -> str:
    return f"c{i}"


def user(u: int) -> str:
    return f"user-{u}"


def team_of(u: int) -> str:
    return f"team-{u % TEAMS}"


def is_contractor(u: int) -> bool:
    return u % CONTRACTOR_EVERY == 0


def groups_of(u: int) -> list[str]:
    return [team_of(u), *(["contractors"] if is_contractor(u) else [])]


def labels(i: int) -> dict[str, str]:
    env = ("production", "staging", "dev", "dev")[i % 4]
    return {"env": env, "set": f"set-{i % SETS}"}


def team_sets(g: int) -> tuple[str, str]:
    return f"set-{g % SETS}", f"set-{(g + 7) % SETS}"


def allowed(u: int, i: int) -> bool:
    """The reference answer: may user ``u`` view cluster ``i``?"""
    if is_contractor(u) and labels(i)["env"] == "production":
        return False
    return labels(i)["set"] in team_sets(u % TEAMS)


# --- Clearance ------------------------------------------------------------------------

def clearance_objects() -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [
        {"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
         "metadata": {"name": cluster(i), "labels": labels(i)}} for i in range(CLUSTERS)]
    for g in range(TEAMS):
        objects.append({"apiVersion": "user.openshift.io/v1", "kind": "Group",
                        "metadata": {"name": f"team-{g}"},
                        "users": [user(u) for u in range(g, USERS, TEAMS)]})
    objects.append({"apiVersion": "user.openshift.io/v1", "kind": "Group",
                    "metadata": {"name": "contractors"},
                    "users": [user(u) for u in range(0, USERS, CONTRACTOR_EVERY)]})
    for g in range(TEAMS):
        objects.append(_policy(f"team-{g}", f"team-{g}", 100, "Allow",
                               [{"set": s} for s in team_sets(g)]))
    objects.append(_policy("contractors-no-production", "contractors", 10, "Deny",
                           [{"env": "production"}]))
    return objects


def _policy(name: str, group: str, priority: int, effect: str,
            selectors: list[dict[str, str]]) -> dict[str, Any]:
    return {"apiVersion": "clusterpulse.io/v1alpha1", "kind": "MonitorAccessPolicy",
            "metadata": {"name": name, "namespace": "peers"},
            "spec": {"identity": {"priority": priority, "subjects": {"groups": [group]}},
                     "access": {"effect": effect},
                     "scope": {"clusters": {"default": "none", "rules": [
                         {"selector": {"matchLabels": s}} for s in selectors]}}}}


# --- Cerbos ---------------------------------------------------------------------------

def cerbos_policies() -> dict[str, str]:
    """File name -> YAML text of the Cerbos policy repository."""
    definitions = "".join(
        f"    - name: team-{g}-viewer\n"
        f"      parentRoles: [\"team-{g}\"]\n"
        f"      condition:\n"
        f"        match:\n"
        f"          expr: R.attr.set in [\"{team_sets(g)[0]}\", \"{team_sets(g)[1]}\"]\n"
        for g in range(TEAMS))
    derived = ("apiVersion: api.cerbos.dev/v1\nderivedRoles:\n  name: teams\n"
               f"  definitions:\n{definitions}")
    viewers = ", ".join(f"team-{g}-viewer" for g in range(TEAMS))
    resource = (
        "apiVersion: api.cerbos.dev/v1\n"
        "resourcePolicy:\n"
        "  version: default\n"
        "  resource: cluster\n"
        "  importDerivedRoles: [teams]\n"
        "  rules:\n"
        "    - actions: [view]\n"
        "      effect: EFFECT_ALLOW\n"
        f"      derivedRoles: [{viewers}]\n"
        "    - actions: [view]\n"
        "      effect: EFFECT_DENY\n"
        # On every role: Cerbos judges a principal's roles one by one, so a rule on
        # the role `contractors` alone would not stop the same user's team role.
        "      roles: [\"*\"]\n"
        "      condition:\n"
        "        match:\n"
        "          all:\n"
        "            of:\n"
        "              - expr: \"\\\"contractors\\\" in P.roles\"\n"
        "              - expr: R.attr.env == \"production\"\n")
    return {"derived_roles.yaml": derived, "cluster.yaml": resource}


# --- SpiceDB --------------------------------------------------------------------------

SPICEDB_SCHEMA = """definition user {}

definition group {
    relation member: user
}

definition cluster {
    relation viewer: group#member
    relation denied: group#member
    permission view = viewer - denied
}
"""


def spicedb_relationships() -> list[tuple[str, str, str, str, str, str]]:
    """(resource type, id, relation, subject type, id, subject relation) tuples."""
    rels = [("group", team_of(u), "member", "user", user(u), "") for u in range(USERS)]
    rels += [("group", "contractors", "member", "user", user(u), "")
             for u in range(0, USERS, CONTRACTOR_EVERY)]
    for i in range(CLUSTERS):
        for g in range(TEAMS):
            if labels(i)["set"] in team_sets(g):
                rels.append(("cluster", cluster(i), "viewer", "group", f"team-{g}", "member"))
        if labels(i)["env"] == "production":
            rels.append(("cluster", cluster(i), "denied", "group", "contractors", "member"))
    return rels
