"""Prometheus metrics of every process, served on ``CLEARANCE_METRICS_PORT`` (probes.py)."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram

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
    "clearance_consumer_lag", "Messages not yet processed by a consumer", ["consumer"]
)
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
MALFORMED = Counter("clearance_malformed_total", "Malformed inputs skipped, by where", ["where"])
RBAC_INDEX_UPDATES = Counter(
    "clearance_rbac_index_updates_total",
    "Decision service RBAC index updates: objects applied from the change log (delta), "
    "or full rebuilds from the store (rebuild)", ["how"],
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
