"""Prometheus metrics of every process, served on ``CLEARANCE_METRICS_PORT`` (probes.py).

Every name here is listed in docs/operations.md ("Metrics and alerts"); the Grafana dashboard and
the alert rules in ``deploy/`` use only these (checked by the tests).
"""

from __future__ import annotations

import platform
from collections.abc import Iterator, Mapping
from importlib import metadata
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, Info
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from clearance_runtime.process import probes

DECISIONS = Counter(
    "clearance_decisions_total", "Decisions answered, by subject and result",
    ["subject", "result"],
)
DECISION_LATENCY = Histogram(
    "clearance_decision_seconds", "Time to answer a request, by subject", ["subject"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5),
)
CACHE = Counter("clearance_decision_cache_total", "Decision cache lookups", ["result"])
EVENTS_COMPILED = Counter(
    "clearance_events_compiled_total", "Stream events folded by the compiler, by kind and outcome",
    ["kind", "outcome"],
)
CONSUMER_LAG = Gauge(
    "clearance_consumer_lag",
    "Messages a service has not yet processed on its input: the compiler's JetStream "
    "durable consumer (pending messages), the invalidator's change log (records behind "
    "the compiler)", ["service", "consumer"],
)
REVISION = Gauge(
    "clearance_revision", "The revision (stream sequence) each service of this process "
    "has applied, as of its last heartbeat", ["service"],
)
POLICIES = Gauge(
    "clearance_policies", "Policies held by the active compiler, by kind and state",
    ["kind", "state"],
)
BUILD = Info("clearance_build", "The running Clearance version and Python")
EVENTS_PUBLISHED = Counter(
    "clearance_events_published_total", "Events the watcher appended, by source and type",
    ["source", "type"],
)
INVALIDATIONS = Counter(
    "clearance_cache_invalidated_total",
    "Cached decisions removed by the invalidator, by the kind of the event that changed",
    ["kind"],
)
EVENT_TO_EFFECT = Histogram(
    "clearance_event_to_effect_seconds",
    "From an event's publication on the stream to its cache entries gone and the system "
    "revision advanced, by kind",
    ["kind"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
OBJECT_FAILURES = Counter(
    "clearance_object_failures_total",
    "Objects made invalid because compiling or storing them failed unexpectedly, by kind",
    ["kind"],
)
SERVICE_RESTARTS = Counter(
    "clearance_service_restarts_total",
    "Service loops restarted in-process after an unexpected error, by service", ["service"],
)
CACHE_STORE_REFUSED = Counter(
    "clearance_cache_store_refused_total",
    "Decision cache writes refused by the store at its memory limit (answers still given)",
)
CACHE_SWEPT = Counter(
    "clearance_cache_index_swept_total",
    "Dangling cache index members (expired or evicted entries) removed",
)
STATUS_WRITES = Counter(
    "clearance_status_writes_total",
    "Policy statuses the watcher wrote back to Kubernetes, by kind and outcome (written, "
    "gone: the object was deleted, failed: refused and not retried)", ["kind", "outcome"],
)
MALFORMED = Counter("clearance_malformed_total", "Malformed inputs skipped, by where", ["where"])
REQUESTS_REFUSED = Counter(
    "clearance_requests_refused_total",
    "Requests not answered, by subject and reason (reply_subject: the reply subject is "
    "missing or not under an accepted inbox prefix)", ["subject", "reason"],
)
WATCHER_REJECTED = Counter(
    "clearance_watcher_rejected_total",
    "Objects (kind) or manifest files (kind=file) the watcher could not publish and "
    "rejected, by reason", ["kind", "reason"],
)
RBAC_INDEX_UPDATES = Counter(
    "clearance_rbac_index_updates_total",
    "Decision service RBAC index updates: objects applied from the change log (delta), "
    "or full rebuilds from the store (rebuild)", ["how"],
)
# Valkey high availability: reads refused because the store went back (a failover).
STORE_BEHIND = Counter(
    "clearance_store_behind_total",
    "Decision reads answered unavailable because the state store was behind a revision "
    "already answered or committed (a failover to a lagging replica)",
)


class Bound:
    """Labelled children resolved once: ``labels()`` costs a lock and a dict lookup per
    call, which shows up on the decision hot path."""

    def __init__(self) -> None:
        self._decisions: dict[tuple[str, str], Any] = {}
        self._latency: dict[str, Any] = {}
        self.cache_hit = CACHE.labels(result="hit")
        self.cache_miss = CACHE.labels(result="miss")

    def decision(self, subject: str, result: str) -> Any:
        child = self._decisions.get((subject, result))
        if child is None:
            child = self._decisions[subject, result] = DECISIONS.labels(subject=subject,
                                                                         result=result)
        return child

    def latency(self, subject: str) -> Any:
        child = self._latency.get(subject)
        if child is None:
            child = self._latency[subject] = DECISION_LATENCY.labels(subject=subject)
        return child


BOUND = Bound()


def observe_many(histogram: Any, amount: float, count: int) -> None:
    """``count`` observations of ``amount`` at once, as ``count`` calls of ``observe``
    would record them: the replies of one batch of checks share their latency, and one
    ``observe`` per reply (~0.8 µs) was a visible part of a cached check's cost. Reads the
    child's buckets (prometheus_client's own layout, pinned); without them, one by one."""
    if count <= 0:
        return
    try:
        bounds, buckets, total = histogram._upper_bounds, histogram._buckets, histogram._sum
    except AttributeError:
        for _ in range(count):
            histogram.observe(amount)
        return
    total.inc(amount * count)
    for bound, bucket in zip(bounds, buckets, strict=True):
        if amount <= bound:
            bucket.inc(count)
            break


def _version() -> str:
    try:
        return metadata.version("clearance")
    except metadata.PackageNotFoundError:  # run from a source tree without installing
        return "unknown"


BUILD.info({"version": _version(), "python": platform.python_version()})


def set_policies(census: Mapping[str, Mapping[str, int]]) -> None:
    """Publish a census (``clearance_core.folding.census``): every known state, zeros included."""
    for kind, states in census.items():
        for state, count in states.items():
            POLICIES.labels(kind=kind, state=state).set(count)


def forget(service: str) -> None:
    """A service that stopped here (or went back to standby) reports no revision or lag:
    its last values must not pass for current ones, nor hide that no process does its work
    (the alert rules read an absent ``clearance_revision`` so)."""
    REVISION.remove(service)
    CONSUMER_LAG.remove_by_labels({"service": service})


def forget_policies() -> None:
    """Only the active compiler holds the policies; a stopped one's census goes."""
    POLICIES.clear()


class _Liveness(Collector):
    """Read at scrape time from this process's service loops (probes.LOOPS): the age of
    each heartbeat and whether the connections are up, so a loop that stopped writing
    shows a growing age rather than a last value that looks fine."""

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        for service, age in probes.heartbeat_ages().items():
            families[0].add_metric([service], age)
        for target, up in probes.connections().items():
            families[1].add_metric([target], 1.0 if up else 0.0)
        yield from families

    @staticmethod
    def _families() -> list[GaugeMetricFamily]:
        return [
            GaugeMetricFamily(
                "clearance_heartbeat_age_seconds",
                "Seconds since each service of this process last wrote its heartbeat to "
                "Redis (since it started, before its first)", labels=["service"]),
            GaugeMetricFamily(
                "clearance_connection_up",
                "1 while every service of this process is connected to the target: nats "
                "(the client is connected), redis (a heartbeat written within 5 s)",
                labels=["target"]),
        ]


REGISTRY.register(_Liveness())
