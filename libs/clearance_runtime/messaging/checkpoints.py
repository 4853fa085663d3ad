"""The compiler's committed checkpoint, kept outside Valkey: the NATS key-value bucket
``CLEARANCE_CHECKPOINTS``, key ``compiler``, value ``"<checkpoint> <epoch>"`` (the epoch
is the build marker ``clr:built``: which rebuild of the state the checkpoint is in).

Valkey replicates asynchronously, so after a failover the store may hold less than the
compiler committed; the store cannot say so itself. This record can: it is written after
each commit lands (JetStream stores it on disk, with as many copies as the event stream:
``CLEARANCE_JETSTREAM_REPLICAS``), and the decision processes read it (:mod:`.highwater`)
to refuse a store that is behind it — a process just started has answered nothing yet,
and would otherwise trust the store.

Best effort on both sides: a record that cannot be written or read is logged and
skipped (the store's own fence and each process's marks still hold); it never stops
or slows folding or answering. The compiler hands each record to a writer task and goes
on (a write waits for nobody: during a NATS leader election a put waited 5 s for its
reply, and the compiler with it); the writer keeps only the latest record, so records
still land in order. Each write and read gives up after :data:`TIMEOUT`.
"""

from __future__ import annotations

import asyncio
import contextlib

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from clearance_runtime.messaging import jetstream
from clearance_runtime.process import logs

log = logs.get(__name__)
BUCKET = "CLEARANCE_CHECKPOINTS"
STREAM = f"KV_{BUCKET}"
KEY = "compiler"
#: Seconds one write or read of the record may take (nats-py's own is 5 s).
TIMEOUT = 1.0
#: Seconds between two attempts at a record that could not be written.
RETRY = 0.5


class Checkpoints:
    def __init__(self, js: JetStreamContext, *, replicas: int = 1) -> None:
        self._js = js
        self._replicas = replicas
        self._kv: KeyValue | None = None
        self._reconciled = False
        #: The last record written, and the latest handed over (not written yet).
        self._written: tuple[int, bytes] | None = None
        self._wanted: tuple[int, bytes] | None = None
        self._writer: asyncio.Task[None] | None = None

    async def _bucket(self, *, create: bool) -> KeyValue | None:
        """The bucket (None: there is none and ``create`` is false). The writer's first
        use brings an existing bucket to this deployment's replica count."""
        if self._kv is None:
            try:
                self._kv = await self._js.key_value(BUCKET)
            except nats.js.errors.BucketNotFoundError:
                if not create:
                    return None
                self._kv = await self._js.create_key_value(bucket=BUCKET, history=1,
                                                           replicas=self._replicas)
                self._reconciled = True
        if create and not self._reconciled:
            try:
                await jetstream.reconcile(self._js, STREAM, replicas=self._replicas)
            except jetstream.ReplicasRefused as exc:  # the record still counts
                log.warning("checkpoint_bucket_replicas", error=str(exc))
            self._reconciled = True
        return self._kv

    def record(self, checkpoint: int, epoch: bytes) -> None:
        """Record the compiler's committed checkpoint in ``epoch`` (after its commit
        landed), in the background: the latest record handed over is written."""
        self._wanted = (checkpoint, epoch)
        if self._wanted != self._written and (self._writer is None or self._writer.done()):
            self._writer = asyncio.create_task(self._write())

    async def _write(self) -> None:
        while self._wanted is not None and self._wanted != self._written:
            checkpoint, epoch = wanted = self._wanted
            try:
                async with asyncio.timeout(TIMEOUT):
                    kv = await self._bucket(create=True)
                    assert kv is not None
                    await kv.put(KEY, b"%d %s" % (checkpoint, epoch))
                self._written = wanted
            except (nats.errors.Error, OSError, TimeoutError) as exc:
                log.warning("checkpoint_record_failed", checkpoint=checkpoint,
                            error=str(exc) or type(exc).__name__)
                await asyncio.sleep(RETRY)

    async def close(self) -> None:
        """Stop the writer (a record not written by now is skipped)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    async def read(self) -> tuple[int, bytes] | None:
        """The compiler's last record (None: none, or unreadable now)."""
        try:
            async with asyncio.timeout(TIMEOUT):
                kv = await self._bucket(create=False)
                if kv is None:
                    return None
                entry = await kv.get(KEY)
        except nats.js.errors.KeyNotFoundError:
            return None
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            log.warning("checkpoint_read_failed", error=str(exc) or type(exc).__name__)
            return None
        return parse(entry.value)


def parse(value: bytes | None) -> tuple[int, bytes] | None:
    """``"<checkpoint> <epoch>"`` (None: anything else)."""
    head, _, epoch = (value or b"").partition(b" ")
    if not head.isdigit() or not epoch:
        return None
    return int(head), epoch
