"""The one retry policy: how every loop waits out a failure, on stamina.

Whatever waits out a failure — the first connection to NATS, a publish waiting for its
ack, the compiler's and the invalidator's loops, the lease bucket, a Kubernetes watch, a
service the supervisor restarts — goes through :func:`forever`:

* **What** is retried is a predicate on the error: by default
  :func:`clearance_runtime.process.outages.is_transient` (store and bus outages); the supervisor
  and the Kubernetes source take :func:`any_error` (one service's defect, or one kind's
  API failure, must not end the others). Anything else is raised at once.
* **How long** to wait is one of two schedules, both exponential with jitter and without
  an end: :data:`OUTAGE` for the store and the bus, :data:`FAILURE` for failures that may
  last (a restarted service, an API server that refuses).
* Every retry is logged (``retrying``, with what, the error and the wait) and counted in
  ``clearance_retries_total{what}``.
* A cancellation (a stop) ends the wait at once: the back-off is an ``asyncio.sleep``.

Periodic work is not a retry and keeps its own clock: heartbeats, renewing a lease and a
standby's polls for it, the manifest directory's poll, waiting for a revision.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import stamina
import stamina.instrumentation
from prometheus_client import Counter

from clearance_runtime.process import logs, probes
from clearance_runtime.process.outages import is_transient

log = logs.get(__name__)
T = TypeVar("T")

RETRIES = Counter(
    "clearance_retries_total", "Attempts retried after a failure, by what was retried",
    ["what"],
)


@dataclass(frozen=True)
class Backoff:
    """Seconds before the first retry (plus up to as much jitter), doubling up to ``most``."""

    first: float
    most: float


#: Store and bus outages: a retry at most 0.5 s after the server is back, as the compiler's
#: and the invalidator's fixed 0.5 s did. A 2 s cap measured slower recoveries in the fault
#: suite (Valkey restarts 1.3-1.8 s against 0.7-1.0 s); retrying a local server twice a
#: second costs nothing.
OUTAGE = Backoff(first=0.1, most=0.5)
#: A service restarted after an unexpected error (its traceback is logged each time), an
#: API server that refuses: slower, as these may well last.
FAILURE = Backoff(first=0.5, most=10.0)


def any_error(exc: BaseException) -> bool:
    """Every error, never a cancellation (nor KeyboardInterrupt, SystemExit)."""
    return isinstance(exc, Exception)


# What is being retried, and the context to log with it: stamina's hooks run in the
# retrying task, but know the retried block only as "<context block>".
_RETRYING: contextvars.ContextVar[tuple[str, dict[str, Any]]] = contextvars.ContextVar(
    "retrying", default=("?", {}))


def _describe(exc: BaseException) -> str:
    text = str(exc)
    # An ApiException's str() carries the response's headers and body: the status suffices.
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        text = f"{status} {getattr(exc, 'reason', '')}".strip()
    return f"{type(exc).__name__}: {text}"[:500]


def _on_retry(details: stamina.instrumentation.RetryDetails) -> None:
    what, context = _RETRYING.get()
    RETRIES.labels(what=what).inc()
    # A loop waiting out an outage is alive: liveness must not restart it mid-failover.
    probes.turn()
    log.warning("retrying", what=what, **context, error=_describe(details.caused_by),
                attempt=details.retry_num, retry_in=round(details.wait_for, 2))


# Instead of stamina's defaults: their Prometheus counter is labelled by retry number,
# which grows without bound under retries for ever.
stamina.instrumentation.set_on_retry_hooks([_on_retry])


async def forever(what: str, call: Callable[[], Awaitable[T]], *,
                  on: Callable[[BaseException], bool] = is_transient,
                  backoff: Backoff = OUTAGE, **context: Any) -> T:
    """``await call()`` until it returns, retrying the errors ``on`` accepts after
    ``backoff``; any other error is raised. ``what`` names the retry in the log line and
    the counter (keep it low-cardinality); ``context`` only goes into the log line."""
    # The first attempt runs outside stamina: setting up its retry state costs ~20 µs,
    # a tenth of a publish's round trip, and nearly every call succeeds at once.
    try:
        return await call()
    except BaseException as exc:
        if not on(exc):
            raise
        failed: BaseException | None = exc
    token = _RETRYING.set((what, context))
    try:
        async for attempt in stamina.retry_context(
            on=on, attempts=None, timeout=None, wait_initial=backoff.first,
            wait_max=backoff.most, wait_jitter=backoff.first,
        ):
            with attempt:
                if failed is not None:
                    # stamina's first attempt is the one that just failed: it is logged,
                    # counted and waited for like every later one.
                    first, failed = failed, None
                    raise first
                return await call()
    finally:
        _RETRYING.reset(token)
    raise AssertionError("unreachable: retried without an end")
