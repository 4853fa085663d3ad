"""Which failures are outages of the store or the bus (retry) and which are not.

README: Events: transient store/bus outages are retried; nothing else is. Anything
else raised while folding one object is that object's failure (it becomes invalid), so
the classification errs towards "not transient": retrying a deterministic failure is a
crash loop, while marking an object invalid during a real outage is impossible anyway
(the withdrawal cannot be written either, and that error is transient).
"""

from __future__ import annotations

import asyncio

import nats.errors
import redis.exceptions

from clearance_api.errors import LostSync

# Replies a healthy server gives while it cannot take writes for a while.
_TRANSIENT_REPLIES = ("OOM", "LOADING", "BUSY", "READONLY", "MASTERDOWN", "TRYAGAIN",
                      "CLUSTERDOWN", "NOREPLICAS", "MISCONF")


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, LostSync):
        return True  # not the object's fault: the writer restarts from the checkpoint
    if isinstance(exc, redis.exceptions.ResponseError):
        return str(exc).lstrip("-").upper().startswith(_TRANSIENT_REPLIES)
    if isinstance(exc, redis.exceptions.DataError | redis.exceptions.InvalidResponse):
        return False  # what was sent or received cannot be encoded: not an outage
    return isinstance(exc, redis.exceptions.RedisError | nats.errors.Error | OSError
                      | asyncio.TimeoutError | ConnectionError)
