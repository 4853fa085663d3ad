"""Leases on NATS itself, so single-writer services can run as replicas.

The compiler (and the watcher, per source) must have exactly one active copy: two
compilers delete each other's durable consumer and race on the checkpoint. During a
rolling update, or with ``replicas: 2`` for quick failover, every copy calls
:meth:`Lease.hold`; one holds the lease key in the JetStream key-value bucket
(``CLEARANCE_LEASES`` unless ``CLEARANCE_LEASE_BUCKET`` says otherwise, with
``CLEARANCE_JETSTREAM_REPLICAS`` copies) and works, the others wait as standbys.

* Acquire: ``create`` succeeds only while the key is absent.
* Renew every ``renew`` seconds with a compare-and-set on the revision the holder wrote
  last; a failed compare means another copy holds it now (unless the key still holds
  this holder's id: a renewal that timed out during an election but landed): stop
  working at once.
* The bucket's max age is ``ttl``: a holder that dies (kill -9) stops renewing and its key
  expires, so a standby takes over within ``ttl + renew`` seconds — at once when the
  dead holder was of the same machine (same host name and boot) and its process is gone,
  as when a pod's container or a local process is restarted (``_take_from_the_dead``).
* A holder that cannot renew stops working ``ttl - 2 * renew`` after its last renewal
  (self-fencing: every wait and every attempt is cut to that deadline), ``2 * renew``
  before its key can expire, so two holders never work at once. A paused holder
  (SIGSTOP) cannot fence itself; the compiler's commits are also fenced on the Redis
  checkpoint, so its late writes are refused (state.py).
* The defaults (``ttl`` 15 s, ``renew`` 3 s: fencing after 9 s without a renewal)
  outlast a JetStream leader election (~7 s measured on a 3-node cluster), so losing the
  node that leads the bucket does not cost the lease.
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
from clearance_runtime.messaging import jetstream
from clearance_runtime.messaging.jetstream import Topology
from clearance_runtime.process import health, logs, probes, retries

log = logs.get(__name__)
BUCKET = jetstream.DEFAULT_LEASE_BUCKET
TTL, RENEW = 15.0, 3.0
#: Seconds before another attempt after a renewal or an acquisition that failed (not
#: refused: the bucket did not answer). Waiting a whole ``renew`` left up to 3 s between
#: the bucket's new leader and the next attempt, and a holder's last attempts before its
#: fence could come too late.
RETRY = 0.5


def _boot_id() -> str:
    """This machine's boot (Linux: shared by its containers); "" elsewhere, where a dead
    holder's lease is only ever waited out."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            return boot.read().strip().replace("-", "")[:12]
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's: alive
    return True


_HOST, _BOOT = socket.gethostname(), _boot_id()


class Lease:
    def __init__(self, js: JetStreamContext, name: str, *, service: str,
                 ttl: float = TTL, renew: float = RENEW,
                 topology: Topology = jetstream.DEFAULT, reconcile: bool = True) -> None:
        if ttl < 3 * renew:
            raise ValueError(f"lease ttl {ttl} s must be at least 3 x renew ({renew} s)")
        self._js = js
        self.name = name
        self._service = service
        self._ttl, self._renew = ttl, renew
        self._topology = topology
        self._reconcile = reconcile  # False: a user that may not update the bucket
        # Host, boot, pid and a random part: the pid second to last (tests read it).
        self.holder = f"{_HOST}-{_BOOT}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
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
        name, replicas = self._topology.lease_bucket, self._topology.replicas

        async def bucket() -> KeyValue:
            try:
                kv = await self._js.key_value(name)
            except nats.js.errors.BucketNotFoundError:
                return await self._js.create_key_value(bucket=name, ttl=self._ttl,
                                                       history=1, replicas=replicas)
            # An existing bucket takes this deployment's replicas and TTL (a bucket made
            # with the old 5 s TTL would expire a lease during an election).
            config = await jetstream.reconcile(self._js, self._topology.lease_stream,
                                               replicas=replicas, max_age=self._ttl,
                                               update=self._reconcile)
            self._fit(config.max_age)
            return kv

        return await retries.forever("lease bucket", bucket, lease=self.name)

    async def _take_from_the_dead(self, kv: KeyValue) -> int | None:
        """The lease, taken over from a holder known dead: one of this machine (same host
        name, same boot) whose process is gone, or that had this very pid (a container
        restarted in its pod: the same name and pid, the old process necessarily gone).
        A restarted compiler then resumes at once instead of waiting out the TTL (15 s
        by default, to outlast an election). The compare-and-set on the dead holder's
        revision fails if anyone wrote the key since; None when not taken."""
        entry = await kv.get(self.name)
        held = (entry.value or b"").decode(errors="replace").rsplit("-", 3)
        if (len(held) != 4 or not _BOOT or held[0] != _HOST or held[1] != _BOOT
                or not held[2].isdigit() or entry.revision is None):
            return None
        pid = int(held[2])
        if pid != os.getpid() and _alive(pid):
            return None
        revision = await kv.update(self.name, self.holder.encode(), last=entry.revision)
        log.info("lease_taken_from_dead_holder", lease=self.name, dead=held[2])
        return revision

    def _fit(self, max_age: float | None) -> None:
        """Fence by the bucket's TTL when it is shorter than this copy's (left by another
        setting, for the compiler to reconcile): a key expires by the bucket's clock, and
        this copy must stop before it can."""
        if max_age and max_age < self._ttl:
            log.warning("lease_ttl_shorter", lease=self.name, bucket_ttl=max_age,
                        configured=self._ttl)
            self._ttl, self._renew = max_age, min(self._renew, max_age / 3)

    async def _acquire(self, kv: KeyValue) -> int:
        # No stop_if_asked() here: this runs in the task that owned the TaskGroup of a
        # lease just lost, and Python 3.11's TaskGroup leaves that task's cancelling()
        # count raised when a child (``_keep``: LeaseLost) fails while it exits.
        while True:
            probes.turn(self._service)  # a standby is alive, just not active
            try:
                self._last = await kv.create(self.name, self.holder.encode())
                return self._last
            except nats.js.errors.KeyWrongLastSequenceError:
                # Held by another copy: unless a dead one of this machine holds it.
                with contextlib.suppress(nats.errors.Error, OSError):
                    taken = await self._take_from_the_dead(kv)
                    if taken is not None:
                        self._last = taken
                        return taken
            except (nats.errors.Error, OSError) as exc:
                log.warning("lease_acquire_retrying", lease=self.name, error=str(exc))
                await asyncio.sleep(min(self._renew, RETRY))
                continue
            await asyncio.sleep(self._renew)

    async def _keep(self, kv: KeyValue, revision: int) -> None:
        loop = asyncio.get_running_loop()
        # Stop working at this time unless renewed before: 2 x renew before the key can
        # expire (it was stored before the reply that moved the deadline arrived).
        fence = loop.time() + self._ttl - 2 * self._renew
        self._last = revision
        wait = self._renew
        while True:
            health.stop_if_asked()  # an update may have swallowed a stop
            await asyncio.sleep(max(min(wait, fence - loop.time()), 0.0))
            try:
                # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a
                # cancellation that arrives as the update completes, and this loop would
                # then never end (a stop hung on it). Never past the fence.
                async with asyncio.timeout(max(min(self._renew, fence - loop.time()), 0.01)):
                    self._last = await self._renew_once(kv)
                fence = loop.time() + self._ttl - 2 * self._renew
                wait = self._renew
            except nats.js.errors.KeyWrongLastSequenceError:
                raise LeaseLost("another copy holds the lease") from None
            except (nats.errors.Error, OSError, TimeoutError) as exc:
                if loop.time() >= fence:
                    raise LeaseLost(f"not renewed in time: {exc!r}") from None
                log.warning("lease_renew_retrying", lease=self.name, error=str(exc))
                wait = min(self._renew, RETRY)

    async def _renew_once(self, kv: KeyValue) -> int:
        """Renew on the revision written last; the key's revision now. A renewal that
        timed out may still have landed (a reply lost in a leader election): the key then
        holds this holder's id at a later revision, which is still this lease."""
        try:
            return await kv.update(self.name, self.holder.encode(), last=self._last)
        except nats.js.errors.KeyWrongLastSequenceError as wrong:
            try:
                entry = await kv.get(self.name)
            except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
                # expired or deleted: not this holder's any more
                raise wrong from None
            if entry.value != self.holder.encode() or entry.revision is None:
                raise
            log.info("lease_renewal_landed_late", lease=self.name, revision=entry.revision)
            return await kv.update(self.name, self.holder.encode(), last=entry.revision)

    _last: int = 0
