"""The compiler's committed checkpoint, kept outside Valkey: the NATS key-value bucket
``CLEARANCE_CHECKPOINTS``, key ``compiler``, value ``"<checkpoint> <epoch>"`` (the epoch
is the build marker ``clr:built``: which rebuild of the state the checkpoint is in).

Valkey replicates asynchronously, so after a failover the store may hold less than the
compiler committed; the store cannot say so itself. This record can: it is written after
each commit lands (JetStream stores it on disk, replicated with the stream), and the
decision processes read it (:mod:`.highwater`) to refuse a store that is behind it — a
process just started has answered nothing yet, and would otherwise trust the store.

Best effort on both sides: a record that cannot be written or read is logged and
skipped (the store's own fence and each process's marks still hold); it never stops
folding or answering.
"""

from __future__ import annotations

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from clearance_runtime.process import logs

log = logs.get(__name__)
BUCKET = "CLEARANCE_CHECKPOINTS"
KEY = "compiler"


class Checkpoints:
    def __init__(self, js: JetStreamContext) -> None:
        self._js = js
        self._kv: KeyValue | None = None
        #: The last record written (not written again while unchanged).
        self._written: tuple[int, bytes] | None = None

    async def _bucket(self, *, create: bool) -> KeyValue | None:
        if self._kv is None:
            try:
                self._kv = await self._js.key_value(BUCKET)
            except nats.js.errors.BucketNotFoundError:
                if not create:
                    return None
                self._kv = await self._js.create_key_value(bucket=BUCKET, history=1)
        return self._kv

    async def record(self, checkpoint: int, epoch: bytes) -> None:
        """Record the compiler's committed checkpoint in ``epoch`` (after its commit
        landed)."""
        if self._written == (checkpoint, epoch):
            return
        try:
            kv = await self._bucket(create=True)
            assert kv is not None
            await kv.put(KEY, b"%d %s" % (checkpoint, epoch))
            self._written = (checkpoint, epoch)
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            log.warning("checkpoint_record_failed", checkpoint=checkpoint, error=str(exc))

    async def read(self) -> tuple[int, bytes] | None:
        """The compiler's last record (None: none, or unreadable now)."""
        try:
            kv = await self._bucket(create=False)
            if kv is None:
                return None
            entry = await kv.get(KEY)
        except nats.js.errors.KeyNotFoundError:
            return None
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            log.warning("checkpoint_read_failed", error=str(exc))
            return None
        return parse(entry.value)


def parse(value: bytes | None) -> tuple[int, bytes] | None:
    """``"<checkpoint> <epoch>"`` (None: anything else)."""
    head, _, epoch = (value or b"").partition(b" ")
    if not head.isdigit() or not epoch:
        return None
    return int(head), epoch

