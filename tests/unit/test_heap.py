"""A service's start settles the collector: what it imported is frozen, young
collections are rarer (``clearance_runtime.process.heap``)."""

from __future__ import annotations

import subprocess
import sys


def test_settle_freezes_the_imports_and_raises_the_thresholds() -> None:
    # In a child process: freezing is for the life of the process.
    code = ("import gc, clearance_runtime.process.heap as h; h.settle(); "
            "print(gc.get_freeze_count() > 1000, gc.get_threshold() == h.THRESHOLDS, "
            "gc.isenabled())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["True", "True", "True"]
