"""Which failures are outages of the store or the bus (retry) and which are not.

docs/api/events.md and docs/robustness.md: transient store/bus outages are retried; nothing
else is. Anything else raised while folding one object is that object's failure (it
becomes invalid), so the classification errs towards "not transient" for what the
*object* can cause — retrying a deterministic failure is a crash loop — and towards
"transient" for what the *store* does on its own: an object withdrawn because the store
was failing over is a wrong answer (a Deny withdrawn is an allow).

Classified by exception type, as redis-py parses the server's error code: redis-py
strips the code from the message (``ReadOnlyError("You can't write against a read only
replica.")``), so a message prefix alone misses the very errors a failover produces. The
code it strips is kept on ``status_code`` and checked too, for replies redis-py maps to
no class of its own.
"""

from __future__ import annotations

import asyncio

import nats.errors
import redis.exceptions as rx

from clearance_api.errors import LostSync

#: Server replies that say "not now": the server is a replica (READONLY), loading its
#: data (LOADING), busy with a script (BUSY), full (OOM), unable to persist (MISCONF) or
#: to reach its replicas (NOREPLICAS), or a cluster's slot moved or is down (MOVED, ASK,
#: TRYAGAIN, CLUSTERDOWN, MASTERDOWN).
OUTAGE_CODES = frozenset({"OOM", "LOADING", "BUSY", "READONLY", "MASTERDOWN", "TRYAGAIN",
                          "CLUSTERDOWN", "NOREPLICAS", "MISCONF", "MOVED", "ASK"})
#: The same, as the classes redis-py raises for them (and every connection or timeout
#: failure: a Sentinel client turns a READONLY from a demoted primary into one).
OUTAGE_TYPES: tuple[type[Exception], ...] = (
    rx.ConnectionError, rx.TimeoutError, rx.ReadOnlyError, rx.BusyLoadingError,
    rx.OutOfMemoryError, rx.TryAgainError, rx.ClusterDownError, rx.AskError,
)


def is_store_outage(exc: BaseException) -> bool:
    """Whether ``exc`` is the store refusing or failing for now, whatever was asked."""
    if isinstance(exc, OUTAGE_TYPES):
        return True
    if isinstance(exc, rx.ResponseError):
        code = getattr(exc, "status_code", None) or str(exc).lstrip("-").split(" ", 1)[0]
        return code.upper() in OUTAGE_CODES
    return False


def is_store_error(exc: BaseException) -> bool:
    """Whether the store raised ``exc`` (an outage or not): a commit refused so is blamed
    on its object only once the store is seen taking writes (the compiler's folder)."""
    return isinstance(exc, rx.RedisError)


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, LostSync):
        return True  # not the object's fault: the writer restarts from the checkpoint
    if is_store_outage(exc):
        return True
    if isinstance(exc, rx.ResponseError | rx.DataError | rx.InvalidResponse):
        return False  # what was sent cannot be stored or encoded: this command's own
    return isinstance(exc, rx.RedisError | nats.errors.Error | OSError
                      | asyncio.TimeoutError | ConnectionError)
