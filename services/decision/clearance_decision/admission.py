"""Which answers earn a place in the shared cache while it is being scanned.

Storing an answer is not free: its entry and its index memberships cost Valkey ~13 µs
and the decision process ~5 µs of CPU per answer (docs/performance.md, "Stores a scan
does not pay for"), about a fifth of an uncached check end to end. The cache repays that
only when the question comes back. Under a *scan* — a flood of distinct questions: a new
dashboard listing every item once, a nightly job asking about every user, a load test —
almost none does, and every store is cost without gain.

So each decision process watches its own hit ratio. While, over the last window of at
least :data:`WINDOW_SECONDS` (or as soon as a window holds that many seconds' worth),
it missed at least ``scan_misses`` questions a second and fewer than
:data:`HIT_FLOOR` of its lookups hit, it stores an answer only when its
question is seen for the second time: a *doorkeeper* remembers the cache keys of recent
misses (as TinyLFU's admission does), so a question asked again is stored then and hit
from the third time on, and the hit ratio this brings back ends the scan.

Nothing about an answer changes: a skipped store only means the next identical question
is evaluated again from the mirror (its reply says ``"cached": false``). Exactness never
depends on an entry being there. Outside a scan (the window too slow, or hitting) every
answer is stored as before, so a process asked at a human pace behaves exactly as one
without admission. ``scan_misses`` 0 stores every answer always.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: The shortest window the hit ratio is judged over (seconds).
WINDOW_SECONDS = 0.25
#: Below this share of lookups hitting, a fast enough window is a scan.
HIT_FLOOR = 0.2
#: Cache keys of recent misses the doorkeeper remembers, per generation (two are kept:
#: the current one and the one before, so a key is remembered for 1-2 generations).
REMEMBERED = 1 << 16


class Admission:
    """``admit(key)``: whether to store the answer cached under ``key`` now;
    ``counted(hits, misses)``: lookups as they are answered."""

    def __init__(self, scan_misses: int, *,
                 clock: Callable[[], float] = time.monotonic,
                 remembered: int = REMEMBERED) -> None:
        self._scan_misses = scan_misses
        self._clock = clock
        self._remembered = remembered
        self._since = clock()
        self._hits = 0
        self._misses = 0
        #: Whether the last window judged was a scan.
        self.scanning = False
        self._seen: set[int] = set()
        self._older: set[int] = set()
        #: Answers not stored because their question was new during a scan.
        self.skipped = 0

    @property
    def enabled(self) -> bool:
        return self._scan_misses > 0

    def counted(self, hits: int, misses: int) -> None:
        """Lookups answered: ``hits`` from the cache, ``misses`` evaluated."""
        if self._scan_misses <= 0:
            return
        self._hits += hits
        self._misses += misses
        now = self._clock()
        # An idle stretch inside the window lowers its rate: a window spanning a pause
        # is judged by what it held over its whole length. A window that already holds
        # a whole window's misses, hardly any hit, is judged at once: a scan is found
        # within its first few hundred questions, not a window later.
        elapsed = max(now - self._since, WINDOW_SECONDS)
        looked = self._hits + self._misses
        scan = self._misses >= self._scan_misses * elapsed \
            and self._hits < HIT_FLOOR * looked
        if now - self._since < WINDOW_SECONDS and (self.scanning or not scan):
            return
        self.scanning = scan
        self._since, self._hits, self._misses = now, 0, 0

    def admit(self, key: str) -> bool:
        """Whether to store the answer cached under ``key``. Every key asked is
        remembered, scan or not, so a scan that starts finds the questions just asked
        already seen."""
        if self._scan_misses <= 0:
            return True
        digest = hash(key)
        seen = digest in self._seen or digest in self._older
        if not seen:
            if len(self._seen) >= self._remembered:
                self._older, self._seen = self._seen, set()
            self._seen.add(digest)
        if seen or not self.scanning:
            return True
        self.skipped += 1
        return False
