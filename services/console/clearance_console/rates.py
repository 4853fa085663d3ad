"""Counting over time: per-second buckets for rates and sparklines, latency samples for
percentiles. Pure (the caller passes the clock), so properties can check it.

A bucket is one whole second of the caller's clock; only the last ``span`` seconds are
kept, so memory is bounded however long the console runs and however busy the bus is.
"""

from __future__ import annotations

import math
from collections import deque


class Counter:
    """Occurrences per second over the last ``span`` seconds, and the total ever."""

    def __init__(self, span: int = 60) -> None:
        self.span = span
        self.total = 0
        self._buckets: deque[tuple[int, int]] = deque()  # (second, count), ascending

    def add(self, now: float, count: int = 1) -> None:
        second = math.floor(now)
        self.total += count
        if self._buckets and self._buckets[-1][0] == second:
            self._buckets[-1] = (second, self._buckets[-1][1] + count)
        elif self._buckets and self._buckets[-1][0] > second:
            # A clock that stepped back: count it in the newest bucket rather than
            # reorder history (monotonic clocks never do; this keeps the deque sorted).
            last, seen = self._buckets[-1]
            self._buckets[-1] = (last, seen + count)
        else:
            self._buckets.append((second, count))
        self._trim(second)

    def _trim(self, second: int) -> None:
        while self._buckets and self._buckets[0][0] <= second - self.span:
            self._buckets.popleft()

    def history(self, now: float) -> list[int]:
        """Counts of the last ``span`` whole seconds, oldest first, the current
        (incomplete) second last."""
        second = math.floor(now)
        self._trim(second)
        counts = dict(self._buckets)
        return [counts.get(s, 0) for s in range(second - self.span + 1, second + 1)]

    def rate(self, now: float, window: int = 10) -> float:
        """Mean occurrences per second over the ``window`` complete seconds before the
        current one (the current second is still filling, so it would read low)."""
        window = max(1, min(window, self.span - 1))
        return sum(self.history(now)[-window - 1:-1]) / window


class Samples:
    """The latency samples of the last ``span`` seconds (at most ``most`` of them)."""

    def __init__(self, span: float = 60.0, most: int = 10_000) -> None:
        self.span = span
        self._samples: deque[tuple[float, float]] = deque(maxlen=most)

    def add(self, now: float, value: float) -> None:
        self._samples.append((now, value))

    def values(self, now: float) -> list[float]:
        while self._samples and self._samples[0][0] < now - self.span:
            self._samples.popleft()
        return [value for _, value in self._samples]

    def summary(self, now: float) -> dict[str, float | int | None]:
        """Count, p50, p95, p99 and max of the window (nearest-rank percentiles; None
        when there is no sample)."""
        values = sorted(self.values(now))
        return {"count": len(values), "p50": percentile(values, 50),
                "p95": percentile(values, 95), "p99": percentile(values, 99),
                "max": values[-1] if values else None}


def percentile(ordered: list[float], pct: float) -> float | None:
    """Nearest-rank percentile of an ascending list: the smallest value with at least
    ``pct`` percent of the values at or below it."""
    if not ordered:
        return None
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]
