"""``clearance.v1.who-can-see`` against the real services: the example fleet, plus a
Namespace-level Deny and a Namespace-level grant (the issue's case), RBAC bindings in a
cluster's hub namespace, and a fleet with thousands of subjects.

The property that matters: every subject listed gets exactly what ``check`` answers for
that principal (the same decision, the same deciding policy), and a principal the answer
does not list — by name or by any of its groups — gets ``others``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from clearance_core.questions.audience import UNNAMED
from clearance_decision import audience
from clearance_runtime.reading.reads import Reads, StateView
from tests.conftest import Servers
from tests.integration.harness import System, example_fleet, group
from tests.support.accesspolicies import access_policy, rule
from tests.support.policies import policy

SUBJECT = "clearance.v1.who-can-see"
#: A username nothing in these fleets names: a group subject is checked as it, in the group.
STRANGER = "stranger-nobody-names"
SA_CI = "system:serviceaccount:shop:ci"

#: The issue's case on prod-us-east: group `met` sees everything by a MonitorAccessPolicy,
#: a Namespace AccessPolicy on `vault` denies it there; victor sees pods in `vault` only.
VAULT = access_policy(
    "vault", namespace="clearance-system", target=("Namespace", "prod-us-east", "vault"),
    rules={"no-met": rule(groups=["met"], effect="Deny"),
           "victor": rule(users=["victor"], view=True, resources=[
               {"type": "pods", "visibility": "all"}])})
MET_ALL = policy("met-all", namespace="clusterpulse", groups=["met"], priority=60,
                 rules=[{"selector": {"matchNames": ["*"]},
                         "permissions": {"view": True, "viewMetrics": True}}])
#: A policy naming the username group subjects and others would be asked as: they are
#: then asked as another.
SQUATTER = policy("squatter", namespace="clusterpulse", users=[UNNAMED],
                  default="all")
#: RBAC in the hub namespace named after prod-us-east, and in another one.
RITA = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "rita-views", "namespace": "prod-us-east"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "cluster-viewer"},
        "subjects": [{"kind": "User", "name": "rita"},
                     {"kind": "Group", "name": "viewers"}]}


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    async with example_fleet(clean_servers.nats_url, clean_servers.redis_url, tmp_path, {
            "who.yaml": [VAULT, MET_ALL, group("met", "meg"), RITA, SQUATTER]}) as sys_:
        yield sys_


def principal_of(row: dict[str, Any]) -> dict[str, Any]:
    if row["kind"] == "group":
        return {"username": STRANGER, "groups": [row["name"]]}
    return {"username": row["name"]}


def resource_of(question: dict[str, Any]) -> dict[str, Any]:
    """The resource ``check`` is asked about for a who-can-see question."""
    cluster = question["cluster"]
    if "type" not in question:
        if "namespace" in question:
            return {"type": "namespaces", "name": question["namespace"], "cluster": cluster}
        return {"type": "cluster", "name": cluster}
    return {"type": question["type"], "cluster": cluster,
            **({"namespace": question["namespace"]} if "namespace" in question else {})}


async def assert_agrees_with_check(system: System, question: dict[str, Any],
                                   reply: dict[str, Any]) -> None:
    """Every row, and ``others``, is what ``check`` says of that principal."""
    asked = [(row, principal_of(row)) for row in reply["subjects"]]
    asked.append(({"kind": "others", "name": "-", **reply["others"]},
                  {"username": "someone-else-entirely"}))
    resource = resource_of(question)
    checks = await asyncio.gather(*(system.request("clearance.v1.check", {
        "principal": principal, "action": question.get("action", "view"),
        "resource": resource}) for _, principal in asked))
    wrong = [(row, (check.get("decision"), check.get("policy")))
             for (row, _), check in zip(asked, checks, strict=True)
             if (row["decision"], row["policy"]) != (check.get("decision"), check.get("policy"))]
    assert not wrong, f"{question}: who-can-see and check disagree on {wrong}"


async def loaded(system: System, question: dict[str, Any], subjects: int) -> None:
    """Wait until the answer lists that many subjects (a large manifest takes the watcher
    a while to read: the stream may still be empty when the system looks settled)."""
    deadline = time.monotonic() + 60
    while True:
        reply = await system.request(SUBJECT, question, timeout=30)
        if len(reply.get("subjects") or []) == subjects:
            return
        assert time.monotonic() < deadline, reply.get("error") or len(reply["subjects"])
        await asyncio.sleep(0.2)


def rows(reply: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    return {f"{r['kind']}:{r['name']}": (r["decision"], r["policy"]) for r in reply["subjects"]}


QUESTIONS: list[dict[str, Any]] = [
    {"cluster": "prod-us-east"},
    {"cluster": "prod-us-east", "action": "view_metrics"},
    {"cluster": "prod-us-east", "type": "pods"},
    {"cluster": "prod-us-east", "type": "pods", "namespace": "shop"},
    {"cluster": "prod-us-east", "type": "pods", "namespace": "vault"},
    {"cluster": "prod-us-east", "namespace": "vault"},
    {"cluster": "prod-us-east", "namespace": "payments"},
    {"cluster": "prod-us-east", "type": "nodes"},
    {"cluster": "prod-us-east", "type": "cluster", "namespace": "shop"},
    {"cluster": "prod-eu-west", "type": "namespaces"},
    {"cluster": "staging-us-east", "type": "pods"},
    {"cluster": "staging-us-east", "type": "pvc", "action": "view_metrics"},
    {"cluster": "dev-sandbox", "type": "certificate"},
    {"cluster": "local-cluster"},
]


async def test_every_subject_agrees_with_check(system: System) -> None:
    for question in QUESTIONS:
        reply = await system.request(SUBJECT, question)
        assert "error" not in reply, (question, reply)
        await assert_agrees_with_check(system, question, reply)


async def test_allowed_and_denied_are_listed_with_the_deciding_policy(system: System) -> None:
    reply = await system.request(SUBJECT, {"cluster": "prod-us-east", "request_id": "w1"})
    assert reply["request_id"] == "w1"
    assert reply["revision"] >= 1
    found = rows(reply)
    assert found["user:alice"] == ("allow", "clusterpulse/platform-full")
    assert found["group:platform-team"] == ("allow", "clusterpulse/platform-full")
    # Denied ones are listed too, each with what decided it.
    assert found["user:dave"] == ("deny", "clusterpulse/contractors-no-production")
    assert found["group:contractors"] == ("deny", "clusterpulse/contractors-no-production")
    assert found["user:mallory"] == ("deny", "clearance-system/fleet-baseline")
    assert found["user:bob"] == ("deny", None)
    # An AccessPolicy rule's group, and the user a Group lists into it.
    assert found["group:sre"] == ("allow", "platform/production-guardrails")
    assert found["user:olivia"] == ("allow", "platform/production-guardrails")
    # A user named by email, and a service account by its username.
    assert found["user:carol@example.com"] == ("allow", "clusterpulse/platform-full")
    assert found["serviceaccount:system:serviceaccount:monitoring:prometheus-bridge"] \
        == ("allow", "clusterpulse/monitoring-robot")
    # RBAC subjects of the cluster's hub namespace: named, decided like anyone.
    assert found["user:rita"] == ("deny", None)
    assert found["group:viewers"] == ("deny", None)
    assert reply["others"] == {"decision": "deny", "policy": None}
    # The username the others are asked as is named here: they are asked as another.
    assert found[f"user:{UNNAMED}"] == ("allow", "clusterpulse/squatter")
    kinds = [r["kind"] for r in reply["subjects"]]
    assert kinds == sorted(kinds, key=["user", "group", "serviceaccount"].index)


async def test_namespace_targets_are_part_of_the_question(system: System) -> None:
    pods = rows(await system.request(SUBJECT, {"cluster": "prod-us-east", "type": "pods"}))
    # Named only by Namespace targets of the cluster: listed for a whole type.
    assert "user:victor" in pods and "group:met" in pods
    vault = rows(await system.request(SUBJECT, {"cluster": "prod-us-east", "type": "pods",
                                                "namespace": "vault"}))
    assert vault["group:met"] == ("deny", "clearance-system/vault")
    assert vault["user:meg"] == ("deny", "clearance-system/vault")
    assert vault["user:victor"] == ("allow", "clearance-system/vault")
    shop = rows(await system.request(SUBJECT, {"cluster": "prod-us-east", "type": "pods",
                                               "namespace": "shop"}))
    assert shop["user:bob"] == ("partial", "shop/shop-intent")
    assert shop["group:developers"] == ("partial", "shop/shop-intent")
    assert shop["user:dave"] == ("deny", "clusterpulse/contractors-no-production")
    assert shop["group:met"] == ("allow", "clusterpulse/met-all")
    # The cluster itself reads no Namespace target: victor is named nowhere for it.
    cluster = rows(await system.request(SUBJECT, {"cluster": "prod-us-east"}))
    assert "user:victor" not in cluster


async def test_a_principal_not_listed_gets_others(system: System) -> None:
    """Completeness: whoever the answer does not name, alone or by a group, is others."""
    for question in ({"cluster": "prod-us-east"}, {"cluster": "staging-us-east",
                                                   "type": "pods"}):
        reply = await system.request(SUBJECT, question)
        listed = rows(reply)
        others = (reply["others"]["decision"], reply["others"]["policy"])
        strangers = [{"username": "ghost"}, {"username": "x", "groups": ["unlisted"]},
                     {"username": "system:serviceaccount:elsewhere:bot"},
                     {"username": "ghost", "email": "ghost@example.com"}]
        for principal in strangers:
            assert f"user:{principal['username']}" not in listed
            check = await system.request("clearance.v1.check", {
                "principal": principal, "action": "view", "resource": resource_of(question)})
            assert (check["decision"], check["policy"]) == others, principal


async def test_unknown_cluster_and_bad_questions(system: System) -> None:
    unknown = await system.request(SUBJECT, {"cluster": "nowhere"})
    assert unknown["error"]["code"] == "not_found"
    assert "nowhere" in unknown["error"]["message"]
    for body, words in (({"cluster": ""}, "cluster"), ({"cluster": "c", "type": ""}, "type"),
                        ({"cluster": "c", "namespace": ""}, "namespace"),
                        ({"cluster": "c", "type": "namespaces", "name": "a"}, None),
                        ({"cluster": "c", "action": "edit"}, "action"), ({}, "cluster")):
        reply = await system.request(SUBJECT, body)
        if words is None:  # an unknown member is ignored: a cluster question
            assert reply["error"]["code"] == "not_found"
            continue
        assert reply["error"]["code"] == "bad_request", body
        assert words in reply["error"]["message"]


async def test_thousands_of_subjects_in_bounded_time(
        clean_servers: Servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """3,000 users, 1,000 groups and 500 service accounts named, half by a policy that
    allows: one answer, in slices between which the event loop runs other work; past the
    limit, a bad_request naming it."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    users = [f"user-{i:04d}" for i in range(3000)]
    groups = [f"group-{i:04d}" for i in range(1000)]
    accounts = [{"name": f"sa-{i:03d}", "namespace": "bots"} for i in range(500)]
    sys_.write("fleet.yaml", {"apiVersion": "cluster.open-cluster-management.io/v1",
                              "kind": "ManagedCluster", "metadata": {"name": "big"}},
               policy("half-in", namespace="clusterpulse", users=users[::2],
                      groups=groups[::2], default="all"),
               policy("half-out", namespace="clusterpulse", users=users[1::2],
                      groups=groups[1::2], service_accounts=accounts, effect="Deny",
                      default="all"))
    await sys_.start()
    try:
        await loaded(sys_, {"cluster": "big"}, 4500)
        # Decisions and turns of the event loop, in the order they happen.
        happened: list[str] = []
        decide = audience.Audience._decide

        def decided(self: audience.Audience, *args: Any, **kwargs: Any) -> Any:
            happened.append("decided")
            return decide(self, *args, **kwargs)

        async def turns() -> None:
            while True:
                happened.append("turn")
                await asyncio.sleep(0)

        monkeypatch.setattr(audience.Audience, "_decide", decided)
        ticker = asyncio.ensure_future(turns())
        started = time.monotonic()
        try:
            reply = await sys_.request(SUBJECT, {"cluster": "big"}, timeout=30)
        finally:
            ticker.cancel()
        elapsed = time.monotonic() - started
        assert len(reply["subjects"]) == 4500
        found = rows(reply)
        assert found["user:user-0002"] == ("allow", "clusterpulse/half-in")
        assert found["group:group-0003"] == ("deny", "clusterpulse/half-out")
        assert found["serviceaccount:system:serviceaccount:bots:sa-007"] \
            == ("deny", "clusterpulse/half-out")
        assert elapsed < 20, f"{elapsed:.1f} s for 4,500 subjects"
        # Others ran between the slices: never more than a slice decided in one go.
        first, last = happened.index("decided"), len(happened) - happened[::-1].index("decided")
        runs = "".join("d" if h == "decided" else "t" for h in happened[first:last]).split("t")
        assert max(len(run) for run in runs) == audience.SLICE
        assert sum(len(run) for run in runs) == 4501  # and others, once
        monkeypatch.setattr(audience, "MAX_AUDIENCE", 4000)
        refused = await sys_.request(SUBJECT, {"cluster": "big"})
        assert refused["error"]["code"] == "bad_request"
        assert "4500 subjects" in refused["error"]["message"]
        assert "limit of 4000" in refused["error"]["message"]
    finally:
        await sys_.close()


async def test_an_answer_is_of_one_state(system: System, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    """A state that moves between two slices starts the answer again; the last attempt
    answers without yielding, so a stream that never rests cannot starve it."""
    views: list[StateView] = []
    taken = Reads.state_view

    async def state_view(self: Reads) -> StateView:
        view = await taken(self)
        views.append(view)
        return view

    monkeypatch.setattr(Reads, "state_view", state_view)
    monkeypatch.setattr(audience, "SLICE", 4)
    monkeypatch.setattr(StateView, "moved", property(lambda view: True))
    reply = await system.request(SUBJECT, {"cluster": "prod-us-east"})
    assert len(views) == audience.ATTEMPTS
    await assert_agrees_with_check(system, {"cluster": "prod-us-east"}, reply)
    monkeypatch.setattr(StateView, "moved", property(lambda view: False))
    views.clear()
    again = await system.request(SUBJECT, {"cluster": "prod-us-east"})
    assert len(views) == 1
    assert again["subjects"] == reply["subjects"]
