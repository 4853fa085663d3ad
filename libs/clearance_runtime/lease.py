"""Leases on NATS itself, so single-writer services can run as replicas.

The compiler (and the watcher, per source) must have exactly one active copy: two
compilers delete each other's durable consumer and race on the checkpoint. During a
rolling update, or with ``replicas: 2`` for quick failover, every copy calls
:meth:`Lease.hold`; one holds the lease key in the JetStream key-value bucket
``CLEARANCE_LEASES`` and works, the others wait as standbys.

* Acquire: ``create`` succeeds only while the key is absent.
* Renew every ``renew`` seconds with a compare-and-set on the revision the holder wrote
  last; a failed compare means another copy holds it now: stop working at once.
* The bucket's max age is ``ttl``: a holder that dies (kill -9) stops renewing and its key
  expires, so a standby takes over within ``ttl + renew`` seconds.
* A holder that cannot reach NATS stops working before its key can expire
  (self-fencing after ``ttl - 2 * renew``), so two holders never work at once. A paused
  holder (SIGSTOP) cannot fence itself; the compiler's commits are also fenced on the
  Redis checkpoint, so its late writes are refused (state.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from clearance_api.errors import LeaseLost
from clearance_runtime import health, logs, probes, retries

log = logs.get(__name__)
BUCKET = "CLEARANCE_LEASES"


class Lease:
    def __init__(self, js: JetStreamContext, name: str, *, service: str,
                 ttl: float = 5.0, renew: float = 1.0) -> None:
        self._js = js
        self.name = name
        self._service = service
        self._ttl, self._renew = ttl, renew
        self.holder = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.held = False

    async def hold(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``work`` whenever this copy holds the lease; wait as a standby otherwise."""
        kv = await self._bucket()
        while True:
            revision = await self._acquire(kv)
            self.held = True
            log.info("lease_acquired", lease=self.name, holder=self.holder)
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(self._keep(kv, revision))
                    group.create_task(work())
                return  # work ended by itself
            except* LeaseLost as lost:
                log.warning("lease_lost", lease=self.name, reason=str(lost.exceptions[0]))
            finally:
                self.held = False
                with contextlib.suppress(Exception):  # a clean stop hands over at once
                    async with asyncio.timeout(0.5):
                        await kv.delete(self.name, last=self._last)

    async def _bucket(self) -> KeyValue:
        async def bucket() -> KeyValue:
            try:
                return await self._js.key_value(BUCKET)
            except nats.js.errors.BucketNotFoundError:
                return await self._js.create_key_value(bucket=BUCKET, ttl=self._ttl, history=1)

        return await retries.forever("lease bucket", bucket, lease=self.name)

    async def _acquire(self, kv: KeyValue) -> int:
        # No stop_if_asked() here: this runs in the task that owned the TaskGroup of a
        # lease just lost, and Python 3.11's TaskGroup leaves that task's cancelling()
        # count raised when a child (``_keep``: LeaseLost) fails while it exits.
        while True:
            probes.beat(self._service, 0, 0)  # a standby is alive, just not active
            try:
                self._last = await kv.create(self.name, self.holder.encode())
                return self._last
            except nats.js.errors.KeyWrongLastSequenceError:
                pass  # held by another copy
            except (nats.errors.Error, OSError) as exc:
                log.warning("lease_acquire_retrying", lease=self.name, error=str(exc))
            await asyncio.sleep(self._renew)

    async def _keep(self, kv: KeyValue, revision: int) -> None:
        loop = asyncio.get_running_loop()
        renewed = loop.time()
        self._last = revision
        while True:
            health.stop_if_asked()  # an update may have swallowed a stop
            await asyncio.sleep(self._renew)
            try:
                # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a
                # cancellation that arrives as the update completes, and this loop would
                # then never end (a stop hung on it).
                async with asyncio.timeout(self._renew):
                    self._last = await kv.update(self.name, self.holder.encode(),
                                                 last=self._last)
                renewed = loop.time()
            except nats.js.errors.KeyWrongLastSequenceError:
                raise LeaseLost("another copy holds the lease") from None
            except (nats.errors.Error, OSError, TimeoutError) as exc:
                if loop.time() - renewed > self._ttl - 2 * self._renew:
                    raise LeaseLost(f"not renewed in time: {exc!r}") from None
                log.warning("lease_renew_retrying", lease=self.name, error=str(exc))

    _last: int = 0
