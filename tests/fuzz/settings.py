"""Hypothesis settings of the in-suite fuzz tests: deterministic, no example database.

``derandomize`` makes every run draw the same inputs (CI stays reproducible; the
``dev.py fuzz`` runner explores with other seeds). Shrinking is off by default — every
example runs against a live system, and a failure prints its inputs in full — and on with
``CLEARANCE_FUZZ_SHRINK=1`` when hunting a minimal input.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

PHASES = (Phase.explicit, Phase.generate) + (
    (Phase.shrink,) if os.environ.get("CLEARANCE_FUZZ_SHRINK") == "1" else ())


def fuzz(max_examples: int) -> settings:
    return settings(max_examples=max_examples, derandomize=True, database=None,
                    deadline=None, phases=PHASES, print_blob=False,
                    suppress_health_check=list(HealthCheck))
