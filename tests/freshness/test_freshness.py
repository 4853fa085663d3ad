"""Model-based freshness test: no answer outlives the state it was computed from.

A Hypothesis state machine publishes random events of every kind that can change an
answer — MonitorAccessPolicies (with validity windows a fraction of a second ahead),
MetricSources, Groups, ManagedClusters and their sets, AccessPolicies, Roles and
bindings, hub Namespaces — straight to JetStream, and keeps the objects in its own
:class:`~tests.freshness.world.World`. After every step each principal of a small pool
asks every check of a fixed list (one ``check.batch``, with explanations) with
``min_revision`` the revision of the last event; rules also send single checks (the
decision service's coalesced path), filters and SubjectAccessReviews. Every answer must
equal what :class:`~tests.freshness.oracle.Fresh` computes from the world from scratch —
so a cached answer that an event should have removed, or that a validity boundary should
have ended, fails the test with the steps that led to it.

The cache is never cleared: answers cached at one step are what the next step's events
must invalidate. ``storm`` publishes a run of flips of one principal's policy while
several clients keep asking about it: an answer with ``min_revision`` m must reflect the
state at m or a later one (each flip's answer names a different rule, so an older state
is recognisable). ``window`` puts a policy for one principal in force from 0.3 s to 0.7 s
ahead and asks before it opens, while it is open and after it closed, with no event in
between; ``wait_for_boundary`` sleeps past the next notBefore/notAfter of the random
policies, and the invariant then asks again what it asked (and cached) before.

Runs derandomized in the suite (``CLEARANCE_FRESHNESS_EXAMPLES`` examples of
``CLEARANCE_FRESHNESS_STEPS`` steps; defaults keep it under a minute); a longer or
differently seeded run: see docs/development.md.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import seed as seed_with
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    get_state_machine_test,
    initialize,
    invariant,
    rule,
)

from clearance_core.rbac.rules import ResourceAttributes
from tests.conftest import Servers
from tests.freshness import world as w
from tests.freshness.driver import Driver
from tests.freshness.oracle import Fresh, answer
from tests.freshness.world import PRINCIPALS, Key, Who, World

EXAMPLES = int(os.environ.get("CLEARANCE_FRESHNESS_EXAMPLES", "16"))
STEPS = int(os.environ.get("CLEARANCE_FRESHNESS_STEPS", "30"))
SEED = os.environ.get("CLEARANCE_FRESHNESS_SEED")
#: Seconds the wait rule sleeps at most to cross a validity boundary.
LONGEST_WAIT = 1.5

SETTINGS = settings(
    max_examples=EXAMPLES, stateful_step_count=STEPS, derandomize=SEED is None,
    database=None, deadline=None, print_blob=False,
    # Every step runs against live services: shrinking a failure would take minutes, and
    # the failing run prints its steps in full.
    phases=(Phase.explicit, Phase.generate) + (
        (Phase.shrink,) if os.environ.get("CLEARANCE_FRESHNESS_SHRINK") == "1" else ()),
    suppress_health_check=list(HealthCheck))


class Freshness(RuleBasedStateMachine):
    driver: ClassVar[Driver]

    def __init__(self) -> None:
        super().__init__()
        self.driver.events.clear()
        self.world = World()
        self._fresh: Fresh | None = None
        self._turn = 0

    @property
    def fresh(self) -> Fresh:
        if self._fresh is None:
            self._fresh = Fresh(self.world)
        return self._fresh

    def teardown(self) -> None:
        self.driver.run(self.driver.clear())

    # Events ---------------------------------------------------------------------------

    @initialize(labels=st.lists(st.tuples(st.sampled_from([None, "prod", "dev"]),
                                          st.sampled_from([None, *w.SETS])),
                                min_size=2, max_size=2),
                members=st.lists(st.lists(st.sampled_from(w.USERS), max_size=3, unique=True),
                                 min_size=2, max_size=2),
                policies=st.lists(w.MONITOR_SPECS, min_size=2, max_size=2),
                fields=st.sampled_from([[], ["color"]]))
    def fleet(self, labels: list[tuple[str | None, str | None]], members: list[list[str]],
              policies: list[dict[str, Any]], fields: list[str]) -> None:
        """Most steps should have something to decide: two clusters, a set, two Groups,
        a MetricSource and two policies."""
        for name, (env, cluster_set) in zip(w.CLUSTERS, labels, strict=False):
            self.put("managedcluster", w.managed_cluster(name, env, cluster_set))
        self.put("managedclusterset", w.cluster_set(w.SETS[0]))
        for name, users in zip(w.GROUPS, members, strict=False):
            self.put("group", w.group(name, users))
        self.put("metricsource", w.metric_source("m1", fields, "2026-01-01T00:00:00Z"))
        for i, spec in enumerate(policies):
            self.put("monitoraccesspolicy", w.monitor_policy(f"p{i}", spec, time.time()))

    def put(self, kind: str, obj: dict[str, Any]) -> None:
        key = w.key_of(kind, obj)
        self.driver.run(self.driver.publish(key, obj))
        self.world.objects[key] = obj
        self._fresh = None

    def remove(self, key: Key) -> None:
        self.driver.run(self.driver.publish(key, self.world.objects.pop(key), deleted=True))
        self._fresh = None

    @rule(name=st.sampled_from(["p0", "p1", "p2", "p3", "p4"]), spec=w.MONITOR_SPECS)
    def put_monitor_policy(self, name: str, spec: dict[str, Any]) -> None:
        self.put("monitoraccesspolicy", w.monitor_policy(name, spec, time.time()))

    @rule(name=st.sampled_from(["m1", "m2"]), fields=st.sampled_from([[], ["color"]]),
          created=st.sampled_from(["2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"]))
    def put_metric_source(self, name: str, fields: list[str], created: str) -> None:
        self.put("metricsource", w.metric_source(name, fields, created))

    @rule(name=st.sampled_from((*w.GROUPS[:-1], "storm")),
          users=st.lists(st.sampled_from(w.USERS), max_size=3, unique=True))
    def put_group(self, name: str, users: list[str]) -> None:
        self.put("group", w.group(name, users))

    @rule(name=st.sampled_from(w.CLUSTERS), env=st.sampled_from([None, "prod", "dev"]),
          cluster_set=st.sampled_from([None, *w.SETS]))
    def put_cluster(self, name: str, env: str | None, cluster_set: str | None) -> None:
        self.put("managedcluster", w.managed_cluster(name, env, cluster_set))

    @rule(name=st.sampled_from(w.SETS))
    def put_cluster_set(self, name: str) -> None:
        self.put("managedclusterset", w.cluster_set(name))

    @rule(name=st.sampled_from(["a1", "a2", "a3"]), data=st.data())
    def put_access_policy(self, name: str, data: st.DataObject) -> None:
        self.put("accesspolicy", data.draw(w.access_policies(name)))

    @rule(kind=st.sampled_from(["Role", "ClusterRole"]),
          name=st.sampled_from(["reader", "viewer", "agg"]), ns=st.sampled_from(w.NAMESPACES),
          rules=w.ROLE_RULES, labelled=st.booleans())
    def put_role(self, kind: str, name: str, ns: str, rules: list[dict[str, Any]],
                 labelled: bool) -> None:
        labels = {"agg": "yes"} if labelled else None
        self.put(kind.lower(), w.role(kind, name, ns, rules, labels))

    @rule(kind=st.sampled_from(["RoleBinding", "ClusterRoleBinding"]),
          name=st.sampled_from(["b1", "b2"]), ns=st.sampled_from(w.NAMESPACES),
          role_ref=w.ROLE_REFS, subjects=w.BINDING_SUBJECTS)
    def put_binding(self, kind: str, name: str, ns: str, role_ref: tuple[str, str],
                    subjects: list[str]) -> None:
        self.put(kind.lower(), w.binding(kind, name, ns, role_ref, subjects))

    @rule(name=st.sampled_from(w.NAMESPACES))
    def put_namespace(self, name: str) -> None:
        self.put("namespace", w.namespace(name))

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        if self.world.objects:
            self.remove(data.draw(st.sampled_from(sorted(self.world.objects))))

    # Questions ------------------------------------------------------------------------

    @invariant()
    def every_check_is_fresh(self) -> None:
        """Every principal, every check of the list, explained (so the trace counts too)."""
        self.driver.run(self._ask_everyone())

    async def _ask_everyone(self) -> None:
        fresh, last = self.fresh, self.driver.last
        body = {"checks": [{"action": a, "resource": r} for a, r in w.CHECKS], "explain": True}
        t0 = time.time()
        replies = await asyncio.gather(*(
            self.driver.ask("clearance.v1.check.batch", {"principal": who.wire(), **body},
                            min_revision=last) for who in PRINCIPALS))
        t1 = time.time()
        for who, reply in zip(PRINCIPALS, replies, strict=True):
            self.driver.replied(f"check.batch {who}", reply, last)
            for (action, resource), got in zip(w.CHECKS, reply["results"], strict=True):
                self.driver.expect(f"check.batch {who} {action} {resource}", answer(got),
                         lambda t, a=action, r=resource, p=who: fresh.check(
                             p, a, r, now=t, explain=True), self.world.moments(t0, t1))
        # The same questions as single checks without min_revision, two principals in
        # turn: the batches above came back at revision `last` or later, so these must
        # reflect it too. They take the decision service's fast path, where a body asked
        # again may get a reply it kept (clearance_decision.recent) — only while no
        # invalidation has run since it read it.
        self._turn = (self._turn + 2) % len(PRINCIPALS)
        asked = [(who, a, r) for who in (PRINCIPALS[self._turn],
                                          PRINCIPALS[(self._turn + 1) % len(PRINCIPALS)])
                 for a, r in w.CHECKS]
        t0 = time.time()
        singles = await asyncio.gather(*(
            self.driver.ask("clearance.v1.check", {"principal": who.wire(), "action": a,
                                                   "resource": r}) for who, a, r in asked))
        t1 = time.time()
        for (who, action, resource), got in zip(asked, singles, strict=True):
            self.driver.replied(f"check {who} {action} {resource} (no min_revision)", got,
                                last)
            self.driver.expect(f"check {who} {action} {resource} (no min_revision)",
                               answer(got), lambda t, a=action, r=resource, p=who:
                               fresh.check(p, a, r, now=t, explain=False),
                               self.world.moments(t0, t1))

    @rule(who=st.sampled_from(PRINCIPALS),
          picks=st.lists(st.sampled_from(range(len(w.CHECKS))), min_size=1, max_size=6),
          explain=st.booleans())
    def ask_checks(self, who: Who, picks: list[int], explain: bool) -> None:
        """Single checks, concurrently: they share the decision service's batches."""
        fresh, last = self.fresh, self.driver.last
        questions = [w.CHECKS[i] for i in picks]
        t0 = time.time()

        async def ask_all() -> list[dict[str, Any]]:
            return await asyncio.gather(*(
                self.driver.ask("clearance.v1.check", {"principal": who.wire(), "action": a,
                                                       "resource": r, "explain": explain},
                                min_revision=last) for a, r in questions))

        replies = self.driver.run(ask_all())
        t1 = time.time()
        for (action, resource), reply in zip(questions, replies, strict=True):
            self.driver.replied(f"check {who} {action} {resource}", reply, last)
            self.driver.expect(f"check {who} {action} {resource}", answer(reply),
                     lambda t, a=action, r=resource: fresh.check(
                         who, a, r, now=t, explain=explain), self.world.moments(t0, t1))

    @rule(who=st.sampled_from(PRINCIPALS), cluster=st.sampled_from(w.CLUSTERS),
          type_name=st.sampled_from(sorted(w.ITEMS)))
    def ask_filter(self, who: Who, cluster: str, type_name: str) -> None:
        fresh, last, items = self.fresh, self.driver.last, w.ITEMS[type_name]
        t0 = time.time()
        reply = self.driver.run(self.driver.ask("clearance.v1.filter", {
            "principal": who.wire(), "cluster": cluster, "type": type_name, "items": items},
            min_revision=last))
        t1 = time.time()
        self.driver.replied(f"filter {who} {cluster} {type_name}", reply, last)
        self.driver.expect(f"filter {who} {cluster} {type_name}",
                           [i["name"] for i in reply["items"]],
                 lambda t: fresh.visible(who, cluster, type_name, items, now=t),
                           self.world.moments(t0, t1))

    @rule(user=st.sampled_from(w.USERS[:-1]), groups=st.lists(st.sampled_from(w.GROUPS),
                                                             max_size=1),
          verb=st.sampled_from(["get", "list", "delete"]),
          resource=st.sampled_from([("pods", ""), ("pods", "log"), ("secrets", "")]),
          namespace=st.sampled_from([*w.NAMESPACES, ""]))
    def ask_review(self, user: str, groups: list[str], verb: str, resource: tuple[str, str],
                   namespace: str) -> None:
        last = self.driver.last
        attrs = ResourceAttributes(verb=verb, resource=resource[0], subresource=resource[1],
                                   namespace=namespace)
        spec: dict[str, Any] = {"user": user, "groups": groups, "resourceAttributes": {
            "verb": verb, "resource": resource[0], "subresource": resource[1],
            "namespace": namespace}}
        reply = self.driver.run(self.driver.ask("clearance.v1.review.subject", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": spec}, min_revision=last))
        self.driver.replied(f"review.subject {spec}", reply, last)
        self.driver.expect(f"review.subject {spec}", reply["status"],
                           lambda _t: self.fresh.review(user, groups, attrs), [0.0])

    # Time and concurrency -------------------------------------------------------------

    @rule()
    def wait_for_boundary(self) -> None:
        """Sleep past the next notBefore/notAfter (if one is near), publishing nothing:
        the invariant then asks again what it cached before the boundary."""
        now = time.time()
        ahead = [b for b in self.world.bounds() if now < b <= now + LONGEST_WAIT]
        if ahead:
            self.driver.run(asyncio.sleep(min(ahead) - now + 0.02))

    @rule(who=st.sampled_from(PRINCIPALS), effect=st.sampled_from(["Allow", "Deny"]))
    def window(self, who: Who, effect: str) -> None:
        """A policy for ``who`` in force from 0.3 s to 0.7 s from now: asked (and cached)
        before it opens, while it is open, and after it closed — no event in between."""
        now = time.time()
        self.put("monitoraccesspolicy", w.monitor_policy("window", {
            "priority": 0, "effect": effect, "enabled": True, "default": "all",
            "subjects": {"users": [who.username], "groups": [], "serviceAccounts": []},
            "rules": [], "not_before": 0.3, "not_after": 0.7}, now))
        for moment in (now + 0.32, now + 0.72):
            self.every_check_is_fresh()
            self.driver.run(asyncio.sleep(max(moment - time.time(), 0)))

    @rule(who=st.sampled_from(PRINCIPALS), kind=st.sampled_from(["monitor", "access", "group"]),
          flips=st.integers(3, 8))
    def storm(self, who: Who, kind: str, flips: int) -> None:
        """Flip one principal's access ``flips`` times while clients keep asking."""
        if kind == "group":  # a policy for the group whose membership flips
            self.put("monitoraccesspolicy", w.monitor_policy("storm", {
                "priority": 0, "effect": "Allow", "enabled": True, "default": "all",
                "subjects": {"users": [], "groups": ["storm"], "serviceAccounts": []},
                "rules": [], "not_before": None, "not_after": None}, time.time()))
        self.world = self.driver.run(Storm(self.driver, self.world, who, kind).run(flips))
        self._fresh = None


class Storm:
    """Flips published back to back, and clients that ask throughout. ``states`` holds
    (revision, world after it); a flip being published is already listed (its revision
    still unknown): the compiler may fold it before the producer hears its ack."""

    CLIENTS = 3

    def __init__(self, driver: Driver, world: World, who: Who, kind: str) -> None:
        self.driver, self.who, self.kind = driver, who, kind
        self.states: list[tuple[int | None, World]] = [(driver.last, world)]
        self.fresh: dict[int, Fresh] = {}
        self.done = False

    def flip(self, k: int) -> tuple[str, dict[str, Any]]:
        """The k-th version of the principal's access; each names a different rule."""
        effect = "Allow" if k % 2 == 0 else "Deny"
        user = self.who.username
        if self.kind == "monitor":
            decoys = [{"selector": {"matchNames": [f"none-{j}"]}} for j in range(k)]
            return "monitoraccesspolicy", w.monitor_policy("flip", {
                "priority": 0, "effect": effect, "enabled": True, "default": "none",
                "subjects": {"users": [user], "groups": [], "serviceAccounts": []},
                "rules": [*decoys, {"selector": {"matchNames": ["c*"]}}],
                "not_before": None, "not_after": None}, time.time())
        if self.kind == "access":
            return "accesspolicy", w.access_policy(
                "flip", namespace=w.ADMIN, rules={f"v{k}": w.rule(users=[user], effect=effect)})
        return "group", w.group("storm", [user] if k % 2 == 0 else [])

    async def run(self, flips: int) -> World:
        clients = [asyncio.create_task(self.client()) for _ in range(self.CLIENTS)]
        try:
            for k in range(flips):
                kind, obj = self.flip(k)
                key = w.key_of(kind, obj)
                world = self.states[-1][1].copy()
                world.objects[key] = obj
                self.states.append((None, world))
                seq = await self.driver.publish(key, obj)
                self.states[-1] = (seq, world)
                await asyncio.sleep(0.002)
        finally:
            self.done = True
            await asyncio.gather(*clients)
        return self.states[-1][1]

    def oracle(self, index: int) -> Fresh:
        if index not in self.fresh:
            self.fresh[index] = Fresh(self.states[index][1])
        return self.fresh[index]

    async def client(self) -> None:
        resource = {"type": "cluster", "name": "c1"}
        body = {"principal": self.who.wire(), "action": "view", "resource": resource,
                "explain": True}
        while True:
            last = self.done
            floor = max(i for i, (seq, _) in enumerate(self.states) if seq is not None)
            revision = self.states[floor][0]
            t0 = time.time()
            reply = await self.driver.ask("clearance.v1.check", body, min_revision=revision)
            t1 = time.time()
            what = f"storm ({self.kind}) {self.who} at min_revision {revision}"
            self.driver.replied(what, reply, revision or 0)
            got = answer(reply)
            allowed = [self.oracle(i).check(self.who, "view", resource, now=t, explain=True)
                       for i in range(floor, len(self.states))
                       for t in self.states[i][1].moments(t0, t1)]
            if got not in allowed:
                self.driver.fail(f"{what}: the answer reflects an older state\n"
                                 f"  got:     {got}\n  allowed: {allowed}")
            if last:
                return


@pytest.fixture
def driver(real_servers: Servers) -> Iterator[Driver]:
    found = Driver(real_servers)
    found.run(found.start())
    yield found
    found.close()


@pytest.mark.timeout(max(120, EXAMPLES * STEPS * 2))
def test_every_answer_reflects_the_last_event(driver: Driver) -> None:
    Freshness.driver = driver
    test = get_state_machine_test(Freshness, settings=SETTINGS)
    if SEED is not None:
        test = seed_with(int(SEED))(test)
    try:
        test()
    except Exception as exc:
        if driver.failures:  # the first one, as it happened (see Driver.failures)
            raise AssertionError(driver.failures[0]) from exc
        raise
