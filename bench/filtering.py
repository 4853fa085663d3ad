"""Filtering throughput: Clearance's compiled filters against a plain list comprehension.

The baseline is the least a filter could cost in Python: one precompiled regex applied to
each item's name in a list comprehension. Clearance applies a namespace filter (the
namespace rule), a name filter with wildcards and exclusions, and a label filter.
"""

from __future__ import annotations

import re
import time
from typing import Any

from clearance_api.wire import ListItem
from clearance_core.inherit.govern import Governing
from clearance_core.monitor.filters import RuleView, compile_filter
from clearance_core.questions.listing import visible_items

RESOURCES = [
    {"type": "namespaces", "visibility": "filtered",
     "filters": {"names": {"allowed": ["app-*", "team-?"], "denied": ["app-secret"]}}},
    {"type": "pods", "visibility": "filtered",
     "filters": {"names": {"allowed": ["web-*", "api-*"], "denied": ["*-canary"]},
                 "labels": {"tier": "frontend"}}},
]


def pods(n: int) -> list[ListItem]:
    prefixes = ("web", "api", "db", "worker")
    return [
        ListItem(name=f"{prefixes[i % 4]}-{i}" + ("-canary" if i % 17 == 0 else ""),
                 namespace=("app-shop", "kube-system", "team-a", "app-secret")[i % 4],
                 labels={"tier": "frontend" if i % 3 else "backend", "app": f"a{i % 13}"})
        for i in range(n)
    ]


def best_of(fn: Any, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def measure(n: int) -> dict[str, float]:
    items = pods(n)
    view = RuleView.of([compile_filter(r) for r in RESOURCES])
    pattern = re.compile(r"(?:web|api)-.*")
    repeat = max(5, 1_000_000 // n)  # small lists: more runs, or noise decides
    baseline = best_of(lambda: [i for i in items if pattern.fullmatch(i.name)], repeat)
    clearance = best_of(lambda: visible_items(Governing([view]), "pods", items), repeat)
    return {
        "items": n,
        "visible": len(visible_items(Governing([view]), "pods", items)),
        "clearance_items_per_s": n / clearance,
        "baseline_items_per_s": n / baseline,
        "ratio": baseline / clearance,
    }
