"""Kubernetes access reviews over NATS, from Roles and bindings on the stream
(docs/api/reviews.md)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from clearance_runtime.process import metrics
from tests.conftest import Servers
from tests.integration.harness import System, group
from tests.support.rbac import binding, cluster_role

RBAC = "rbac.authorization.k8s.io/v1"


POD_READER = cluster_role("pod-reader", [{"apiGroups": [""], "resources": ["pods", "pods/log"],
                                          "verbs": ["get", "list", "watch"]}])
OBJECTS = [
    POD_READER,
    cluster_role("healthz", [{"nonResourceURLs": ["/healthz", "/metrics/*"], "verbs": ["get"]}]),
    binding("RoleBinding", "readers", ("ClusterRole", "pod-reader"),
            [{"kind": "Group", "name": "sre"},
             {"kind": "ServiceAccount", "name": "bot"}], namespace="shop"),
    binding("ClusterRoleBinding", "health", ("ClusterRole", "healthz"),
            [{"kind": "User", "name": "monitor"}]),
    binding("ClusterRoleBinding", "dangling", ("ClusterRole", "does-not-exist"),
            [{"kind": "User", "name": "alice"}]),
    group("sre", "alice"),
    binding("RoleBinding", "health-local", ("ClusterRole", "healthz"),
            [{"kind": "User", "name": "rita"}], namespace="shop"),
]


@pytest.fixture
async def system(clean_servers: Servers, tmp_path: Path) -> AsyncIterator[System]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, manifests)
    sys_.write("rbac.yaml", *OBJECTS)
    await sys_.start()
    await sys_.settle()
    yield sys_
    await sys_.close()


def sar(user: str, **attrs: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"user": user}
    if "path" in attrs:
        spec["nonResourceAttributes"] = attrs
    else:
        spec["resourceAttributes"] = attrs
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": spec}


async def allowed(system: System, user: str, **attrs: str) -> dict[str, Any]:
    reply = await system.request("clearance.v1.review.subject", sar(user, **attrs))
    return dict(reply["status"])


async def test_subject_access_review_comes_back_with_status(system: System) -> None:
    review = sar("alice", verb="get", resource="pods", namespace="shop")
    reply = await system.request("clearance.v1.review.subject", review)
    assert reply["spec"] == review["spec"] and reply["kind"] == "SubjectAccessReview"
    assert reply["status"]["allowed"] is True  # via the OpenShift Group sre
    assert "RoleBinding" in reply["status"]["reason"]
    assert "does-not-exist" in reply["status"]["evaluationError"]
    # What a Kubernetes client sends comes back, and nothing it did not send.
    assert set(reply) == {"apiVersion", "kind", "spec", "status", "revision"}


async def test_kubernetes_semantics(system: System) -> None:
    assert (await allowed(system, "alice", verb="get", resource="pods",
                          subresource="log", namespace="shop"))["allowed"]
    assert not (await allowed(system, "alice", verb="get", resource="pods",
                              namespace="other"))["allowed"]
    assert not (await allowed(system, "alice", verb="delete", resource="pods",
                              namespace="shop"))["allowed"]
    assert not (await allowed(system, "alice", verb="list", resource="nodes"))["allowed"]
    sa = "system:serviceaccount:shop:bot"  # namespace defaulted from the RoleBinding
    assert (await allowed(system, sa, verb="list", resource="pods", namespace="shop"))["allowed"]
    assert (await allowed(system, "monitor", path="/metrics/cpu", verb="get"))["allowed"]
    assert not (await allowed(system, "monitor", path="/metricsx", verb="get"))["allowed"]


async def test_rules_review_lists_rules_as_stored(system: System) -> None:
    reply = await system.request("clearance.v1.review.rules",
                                 {"spec": {"namespace": "shop"}, "user": "alice"})
    status = reply["status"]
    assert status["resourceRules"] == [{"verbs": ["get", "list", "watch"], "apiGroups": [""],
                                        "resources": ["pods", "pods/log"]}]
    assert status["incomplete"] is False


async def test_rules_review_lists_url_rules_bound_in_the_namespace(system: System) -> None:
    """As Kubernetes does: the rules of every role bound there, URL rules included,
    though a RoleBinding grants no URL."""
    reply = await system.request("clearance.v1.review.rules",
                                 {"spec": {"namespace": "shop"}, "user": "rita"})
    assert reply["status"]["nonResourceRules"] == [
        {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/metrics/*"]}]
    assert (await allowed(system, "rita", path="/healthz", verb="get"))["allowed"] is False


async def test_who_can(system: System) -> None:
    reply = await system.request("clearance.v1.review.resource",
                                 {"verb": "list", "resource": "pods", "namespace": "shop"})
    assert reply["users"] == ["system:serviceaccount:shop:bot"]
    assert reply["groups"] == ["sre"]


async def test_binding_change_is_reflected_and_announced(system: System) -> None:
    assert system.nc is not None
    sub = await system.nc.subscribe("clearance.decisions.changed")
    objects = [*OBJECTS]
    objects[2] = binding("RoleBinding", "readers", ("ClusterRole", "pod-reader"),
                         [{"kind": "User", "name": "zoe"}], namespace="shop")
    system.write("rbac.yaml", *objects)
    msg = await sub.next_msg(timeout=5)
    await sub.unsubscribe()
    changed = msgspec.json.decode(msg.data)
    assert set(changed["principals"]["users"]) == {"zoe", "system:serviceaccount:shop:bot"}
    assert changed["principals"]["groups"] == ["sre"]
    body = {**sar("alice", verb="get", resource="pods", namespace="shop"),
            "min_revision": changed["revision"]}
    reply = await system.request("clearance.v1.review.subject", body)
    assert reply["status"]["allowed"] is False


async def test_binding_changes_reach_reviews_from_the_log_without_a_rebuild(
        system: System) -> None:
    get_pods = {"verb": "get", "resource": "pods", "namespace": "shop"}
    assert (await allowed(system, "alice", **get_pods))["allowed"]  # the index is built
    rebuilds = metrics.RBAC_INDEX_UPDATES.labels(how="rebuild")._value.get()
    for step in range(3):
        system.write("rbac.yaml", *OBJECTS, binding(
            "RoleBinding", "extra", ("ClusterRole", "pod-reader"),
            [{"kind": "User", "name": f"user-{step}"}], namespace="shop"))
        revision = await system.settle()
        for user, expected in ((f"user-{step}", True), (f"user-{step - 1}", False)):
            body = {**sar(user, **get_pods), "min_revision": revision}
            reply = await system.request("clearance.v1.review.subject", body)
            assert reply["status"]["allowed"] is expected
    assert metrics.RBAC_INDEX_UPDATES.labels(how="rebuild")._value.get() == rebuilds


async def test_role_change_reaches_subjects_through_aggregation(system: System) -> None:
    objects = [*OBJECTS,
               {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": "monitoring"},
                "aggregationRule": {"clusterRoleSelectors": [
                    {"matchLabels": {"aggregate-to-monitoring": "true"}}]}},
               binding("ClusterRoleBinding", "mon", ("ClusterRole", "monitoring"),
                       [{"kind": "User", "name": "mona"}])]
    await system.apply("rbac.yaml", *objects)
    await system.settle()
    assert not (await allowed(system, "mona", verb="get", resource="pods",
                              namespace="x"))["allowed"]
    objects[0] = cluster_role("pod-reader", POD_READER["rules"],
                              **{"aggregate-to-monitoring": "true"})
    await system.apply("rbac.yaml", *objects)
    revision = await system.settle()
    body = {**sar("mona", verb="get", resource="pods", namespace="x"), "min_revision": revision}
    assert (await system.request("clearance.v1.review.subject", body))["status"]["allowed"]


@pytest.mark.parametrize("body", [
    {"spec": {"user": "alice"}},
    {"spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}},
    {"spec": {"user": "alice", "resourceAttributes": {"verb": "get"}}},
    {"kind": "SubjectAccessReview"},
    # Both kinds of attributes: the API server refuses it, exactly one is required.
    {"spec": {"user": "monitor", "resourceAttributes": {"verb": "get", "resource": "pods"},
              "nonResourceAttributes": {"path": "/healthz", "verb": "get"}}},
])
async def test_bad_reviews_are_bad_requests(system: System, body: dict[str, Any]) -> None:
    reply = await system.request("clearance.v1.review.subject", body)
    assert reply["error"]["code"] == "bad_request"


async def test_reviews_sent_together_are_each_answered_alone(system: System) -> None:
    """Reviews arriving in one event-loop iteration are answered from one state together;
    each still gets its own answer — a malformed or bad neighbour, or one that waits for a
    revision, changes nobody else's (docs/api/README.md: Conventions)."""
    revision = await system.settle()
    bodies: list[Any] = [
        sar("alice", verb="get", resource="pods", namespace="shop"),
        b"{not json",
        {"spec": {"user": "alice"}},
        {**sar("monitor", path="/healthz", verb="get"), "request_id": "r-1"},
        {**sar("bob", verb="get", resource="pods", namespace="shop"),
         "min_revision": revision},
        sar("alice", verb="lst", resource="pods", namespace="shop"),
    ] * 8
    replies = await asyncio.gather(*(
        system.request("clearance.v1.review.subject", body) for body in bodies))
    for n in range(0, len(bodies), 6):
        good, malformed, bad, url, waited, misspelled = replies[n:n + 6]
        assert good["status"]["allowed"] is True and good["revision"] >= revision
        assert malformed["error"]["code"] == "bad_request"
        assert bad["error"]["code"] == "bad_request"
        assert url["status"]["allowed"] is True and url["request_id"] == "r-1"
        assert waited["status"] == {"allowed": False, "reason": ""}
        assert "request_id" not in good and "request_id" not in waited
        assert misspelled["status"]["allowed"] is False
        assert 'verb "lst"' in misspelled["status"]["reason"]


async def test_can_i_and_who_can_cli(system: System) -> None:
    env = {**os.environ, "CLEARANCE_NATS_URL": system.settings.nats_url}
    clearance = str(Path(sys.executable).parent / "clearance")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([clearance, *args], env=env, capture_output=True, text=True,
                              timeout=30, check=False)

    yes, no, who = await asyncio.gather(
        asyncio.to_thread(run, "can-i", "get", "pods/log", "-n", "shop", "--as", "alice"),
        asyncio.to_thread(run, "can-i", "delete", "pods", "-n", "shop", "--as", "alice"),
        asyncio.to_thread(run, "who-can", "list", "pods", "-n", "shop"),
    )
    assert (yes.returncode, yes.stdout.strip()) == (0, "yes")
    assert (no.returncode, no.stdout.strip()) == (1, "no")
    assert "sre" in who.stdout and "system:serviceaccount:shop:bot" in who.stdout


async def test_search_filter_and_plan_follow_acm_semantics(system: System) -> None:
    from tests.integration.harness import cluster  # noqa: PLC0415

    views = cluster_role("views", [{"apiGroups": ["view.open-cluster-management.io"],
                                    "resources": ["managedclusterviews"], "verbs": ["create"]}])
    await system.apply("rbac.yaml", *OBJECTS, views,
                       binding("RoleBinding", "edge-views", ("ClusterRole", "views"),
                               [{"kind": "User", "name": "alice"}], namespace="edge-1"),
                       cluster("local-cluster", **{"local-cluster": "true"}), cluster("edge-1"),
                       cluster("edge-2"),
                       # No Namespace object for shop: its RoleBinding grants there all the same.
                       {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    revision = await system.settle()
    items = [
        {"cluster": "local-cluster", "resource": "pods", "kind": "Pod", "namespace": "shop",
         "name": "web"},
        {"cluster": "local-cluster", "resource": "pods", "kind": "Pod", "namespace": "other",
         "name": "db"},
        {"cluster": "edge-1", "resource": "deployments", "group": "apps", "namespace": "x",
         "name": "api"},
        {"cluster": "edge-1", "resource": "secrets", "kind": "Secret", "namespace": "x",
         "name": "token"},
        {"cluster": "edge-2", "resource": "pods", "namespace": "x", "name": "p"},
        {"cluster": "unknown", "resource": "pods", "namespace": "shop", "name": "web"},
    ]
    reply = await system.request("clearance.v1.search.filter", {
        "principal": {"username": "alice"}, "items": items, "min_revision": revision})
    assert [(i["cluster"], i["name"]) for i in reply["items"]] == [
        ("local-cluster", "web"), ("edge-1", "api")]
    assert (reply["total"], reply["visible"]) == (6, 2)
    plan = await system.request("clearance.v1.search.plan", {"principal": {"username": "alice"}})
    assert plan["managed_clusters"] == ["edge-1"]
    assert {"group": "", "resource": "pods", "namespaces": ["shop"], "names": "*"} in plan["hub"]
    assert "_hubClusterResource" in plan["sql"]["where"]


async def test_a_namespace_appearing_is_announced_to_the_subjects_bound_inside_it(
        system: System) -> None:
    assert system.nc is not None
    sub = await system.nc.subscribe("clearance.decisions.changed")
    system.write("ns.yaml", {"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": "shop"}})
    msg = await sub.next_msg(timeout=5)
    await sub.unsubscribe()
    changed = msgspec.json.decode(msg.data)
    assert changed["principals"] == {"users": ["rita", "system:serviceaccount:shop:bot"],
                                     "groups": ["sre"]}


async def test_a_group_listing_the_email_counts_in_searches_as_in_checks(
        system: System) -> None:
    """One definition of effective groups: a Group that lists a principal's email (not its
    username) grants in search.filter and search.plan exactly as in a check."""
    from tests.integration.harness import cluster  # noqa: PLC0415
    from tests.support.policies import policy  # noqa: PLC0415

    await system.apply("rbac.yaml", *OBJECTS, group("mailers", "ann@example.com"),
                       binding("RoleBinding", "mail-readers", ("ClusterRole", "pod-reader"),
                               [{"kind": "Group", "name": "mailers"}], namespace="mail"),
                       cluster("local-cluster", **{"local-cluster": "true"}),
                       policy("mailers", groups=["mailers"], default="all"))
    revision = await system.settle()
    ann = {"username": "ann", "email": "ann@example.com"}
    pod = {"cluster": "local-cluster", "resource": "pods", "namespace": "mail", "name": "web"}
    for principal, visible in ((ann, 1), ({"username": "ann"}, 0)):
        check = await system.check(principal["username"], "local-cluster",
                                   email=principal.get("email"), min_revision=revision)
        assert check["allowed"] is bool(visible)
        found = await system.request("clearance.v1.search.filter",
                                     {"principal": principal, "items": [pod]})
        assert found["visible"] == visible
        plan = await system.request("clearance.v1.search.plan", {"principal": principal})
        entry = {"group": "", "resource": "pods", "namespaces": ["mail"], "names": "*"}
        assert (entry in plan["hub"]) is bool(visible)
