"""The garbage collector's settings for a long-running service.

CPython's cyclic collector runs a young collection every 700 net allocations of
container objects, and every so often a full one that walks every object the process
holds. A service starts by importing ~1,500 modules (the Kubernetes client alone brings
thousands of classes) that live for ever, and then holds its compiled state: the
compiler's model of a fleet grows by hundreds of thousands of objects. Walking them
again and again found nothing to free and cost 3-15% of folding a fresh fleet
(measured: 9-44 ms of GC per 2,700 events, ~95 µs of CPU per event; with the settings
below 4 ms and ~83 µs).

So once the process has imported what it runs (`clearance run`, `clearance up`,
`clearance console`), what it holds then is frozen (moved to
a generation the collector never walks) and young collections run every 10,000
allocations instead of 700. Reference counting still frees every object that is not in
a cycle at once; cycles (an exception and its traceback, mostly) wait a little longer.
"""

from __future__ import annotations

import gc

#: (young, middle, old) thresholds: a young collection every 10,000 net container
#: allocations; the middle and old generations every 10 collections of the one below.
THRESHOLDS = (10_000, 10, 10)


def settle() -> None:
    """Collect once, freeze what survives (imports, settings) and raise the thresholds.
    Call after the service's modules are imported, before it starts work."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
