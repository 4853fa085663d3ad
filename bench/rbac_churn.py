"""RBAC under change, measured from outside the decision service (so the same code
measures any version of it): how long one RoleBinding change takes to show in review
answers, and SubjectAccessReview throughput while one binding changes every 100 ms.

Each change rewrites one of the fleet's RoleBindings (``rbac_fleet``: 5,000 bindings,
1,000 roles) to bind a user no binding named before to ``cr0`` (get/list/watch pods), so
a review of that user tells exactly when the decision service's index holds the change.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import msgspec

RBAC = "rbac.authorization.k8s.io/v1"
FIRST_RB = 500  # rbac_fleet: bindings 500.. are RoleBindings rb<b> in ns<b % 2000>


def changed_binding(step: int, user: str) -> tuple[str, dict[str, Any], str]:
    """(subject, the modified RoleBinding, its namespace): rb<b> now also binds ``user``."""
    b = FIRST_RB + (step * 37) % 4500
    namespace = f"ns{b % 2000}"
    obj = {"apiVersion": RBAC, "kind": "RoleBinding",
           "metadata": {"name": f"rb{b}", "namespace": namespace},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                       "name": "cr0"},
           "subjects": [{"kind": "User", "name": user},
                        {"kind": "User", "name": f"user-{b % 700}"},
                        {"kind": "Group", "name": f"group-{b % 90}"}]}
    return f"clearance.events.rolebinding.rb{b}", obj, namespace


def review(user: str, namespace: str) -> bytes:
    return msgspec.json.encode({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "resourceAttributes": {"verb": "list", "resource": "pods",
                                                      "namespace": namespace}}})


async def publish_change(js: Any, step: int, user: str) -> str:
    subject, obj, namespace = changed_binding(step, user)
    await js.publish(subject, msgspec.json.encode({"type": "MODIFIED", "object": obj}))
    return namespace


async def change_latency(nc: Any, js: Any, runs: int = 20) -> dict[str, float]:
    """Publish one RoleBinding change, then ask (one review in flight, back to back) until
    the answer reflects it: the time from publishing to the first such answer."""
    times: list[float] = []
    for run in range(runs):
        user = f"latency-{run}"
        started = time.perf_counter()
        body = review(user, await publish_change(js, run, user))
        while True:
            reply = msgspec.json.decode((await nc.request(
                "clearance.v1.review.subject", body, timeout=30)).data)
            if reply.get("status", {}).get("allowed"):
                break
        times.append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(0.2)  # let the pipeline go quiet between runs
    return {"median_ms": statistics.median(times), "max_ms": max(times),
            "min_ms": min(times)}


async def churn(js: Any, stop: asyncio.Event, every: float = 0.1) -> int:
    """One RoleBinding change every ``every`` seconds until ``stop``; how many were made."""
    step = 1000
    next_at = time.perf_counter()
    while not stop.is_set():
        await publish_change(js, step, f"churn-{step}")
        step += 1
        next_at += every
        await asyncio.sleep(max(next_at - time.perf_counter(), 0))
    return step - 1000
