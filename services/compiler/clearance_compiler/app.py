"""The compiler's consumer loop: a durable pull consumer positioned from Redis.

The Redis checkpoint ``clr:rev`` is the truth about where folding stands (it is written
in the same MULTI as the state), so at start the durable consumer ``clearance-compiler``
is (re)created to deliver from ``checkpoint + 1``. One consumer, in order: folding is
order-sensitive.

A store that lost its state (flushed, or restarted empty) is rebuilt from the stream's
first event. Its checkpoint alone cannot tell: events folded after a flush write it
again, onto an empty store. So a build starts by wiping every derived key and setting
``clr:built`` to the stream's last sequence, which no event's transaction writes; a store
without it holds part of the state at best, and is wiped and rebuilt. Checked at start
and before every batch. Decisions are ``unavailable`` while ``clr:built`` is missing or
ahead of the system revision (``health.rebuilding``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import nats.js.errors
import redis.asyncio as aioredis
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from clearance_api.wire import EVENTS_SUBJECTS
from clearance_compiler.folder import Folder
from clearance_core.inherit.authority import Authority
from clearance_runtime.messaging import bus
from clearance_runtime.messaging.checkpoints import Checkpoints
from clearance_runtime.messaging.jetstream import Topology
from clearance_runtime.messaging.pull import Pulled, Puller, open_puller
from clearance_runtime.process import health, logs, metrics, probes, retries
from clearance_runtime.storage.state import StateStore

log = logs.get(__name__)
DURABLE = "clearance-compiler"
#: Messages fetched, folded and committed together (at most; a fetch returns what is
#: pending). A batch also ends at ``folder.BATCH_BYTES``.
BATCH = 512
#: Seconds between censuses of policy states (a MonitorAccessPolicy expires with no event).
CENSUS_EVERY = 2.0
#: Seconds a request about the stream or the consumer waits for its answer before the
#: loop asks again (nats-py's default is 5 s). A request sent while a NATS node's loss
#: leaves them without a leader is lost, and waiting 5 s for it held the compiler up to
#: 5 s past the election (docs/robustness.md, "Fault suite").
CONTROL_TIMEOUT = 1.0
#: Seconds a consumer asked for may take to answer before it is deleted and asked for
#: anew (a JetStream leader election takes 4-9 s).
CREATE_PATIENCE = 15.0


class Compiler:
    def __init__(self, nc: Client, redis: aioredis.Redis, *, allow_unset: bool = True,
                 authority: Authority | None = None,
                 topology: Topology = bus.DEFAULT) -> None:
        self._nc = nc
        self._topology = topology
        self._js: JetStreamContext = nc.jetstream()
        #: For the stream's and the consumer's management: a lost request is asked again
        #: soon (``CONTROL_TIMEOUT``).
        self._control: JetStreamContext = nc.jetstream(timeout=CONTROL_TIMEOUT)
        #: The consumer asked for last, which has not answered a request yet, and since
        #: when it is awaited: asked for again as it is, not deleted first (``_subscribe``).
        self._creating: ConsumerConfig | None = None
        self._creating_since = 0.0
        self._r = redis
        self._store = StateStore(redis, allow_unset=allow_unset, authority=authority)
        self._folder = Folder(self._store, nc)
        self._position = 0
        #: The last message of the batch whose commit is in flight (acknowledged when it
        #: lands).
        self._unacked: Msg | None = None
        self._next_census = 0.0
        #: The committed checkpoint, recorded outside Valkey too (a failover to a
        #: lagging replica loses commits; decisions refuse a store behind this record).
        self._checkpoints = Checkpoints(self._js, replicas=topology.replicas)
        self._epoch: bytes | None = None

    async def run(self) -> None:
        """Consume for ever. An outage (or a store that changed under this loop:
        ``LostSync``) restarts the consumer from the checkpoint after the retry policy's
        back-off; any other error ends the run (folding contains every per-object failure,
        so it is a defect in the loop) and the supervisor restarts the service."""
        try:
            while True:
                await retries.forever("compiler", self._run_from_checkpoint)
        finally:
            await self._checkpoints.close()
            metrics.forget("compiler")
            metrics.forget_policies()

    async def _run_from_checkpoint(self) -> None:
        """Position the consumer at the checkpoint and fold until the state is lost."""
        await bus.ensure_stream(self._control, self._topology)
        checkpoint = await self._resume_from()
        self._epoch = await self._store.epoch()
        self._folder.building_until = _build_target(self._epoch)
        await self._note_behind(checkpoint)
        self._position = checkpoint
        self._store.expect(checkpoint)
        self._folder.reset()
        self._folder.committed = None
        log.info("compiler_starting", checkpoint=checkpoint)
        puller = await self._subscribe(checkpoint)
        try:
            await self._consume(puller)
        finally:
            if puller.answered:
                self._creating = None
            await puller.stop()

    async def _note_behind(self, checkpoint: int) -> None:
        """Log a store that holds less than this compiler committed (a failover to a
        replica that had not received the last commits): the replay from ``checkpoint``
        catches it up, and decisions are unavailable until it has."""
        record = await self._checkpoints.read()
        if record is not None and record[1] == self._epoch and record[0] > checkpoint:
            log.warning("compiled_state_behind", checkpoint=checkpoint, committed=record[0],
                        replaying=record[0] - checkpoint)

    async def _subscribe(self, checkpoint: int) -> Puller:
        """The consumer, (re)created to deliver from ``checkpoint + 1``, and its reader.

        A consumer asked for that has not answered yet (its creation timed out, or its
        requests found no responder) is asked for again as it is, not deleted first,
        for up to ``CREATE_PATIENCE`` seconds: a replicated consumer whose group lost a
        node can take longer to elect its leader than a request waits, and deleting it
        at each attempt started that election over (the compiler stalled up to 20 s
        after a node's loss). Asking again for the same consumer is safe: JetStream
        answers an identical creation with the consumer that exists, which has
        delivered nothing (no delivery reached this reader, and its first must be the
        consumer's first: ``fresh``)."""
        config = ConsumerConfig(
            durable_name=DURABLE,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE if checkpoint else DeliverPolicy.ALL,
            opt_start_seq=checkpoint + 1 if checkpoint else None,
            ack_policy=AckPolicy.ALL,
            ack_wait=60.0,
            max_ack_pending=4 * BATCH,
            filter_subject=EVENTS_SUBJECTS,
            # As many copies as the stream: its node lost, the consumer keeps its place.
            num_replicas=self._topology.replicas,
        )
        now = time.monotonic()
        if config != self._creating or now > self._creating_since + CREATE_PATIENCE:
            self._creating = None
            with contextlib.suppress(NotFoundError):
                await self._control.delete_consumer(self._topology.stream, DURABLE)
            self._creating, self._creating_since = config, now
        try:
            return await open_puller(self._control, self._topology.stream, config,
                                     batch=BATCH, fresh=True)
        except nats.js.errors.BadRequestError:
            self._creating = None  # refused: the next attempt starts from a deletion
            raise

    async def _resume_from(self) -> int:
        """The checkpoint to continue after; 0 once a store that lost its state (or never
        had any) has been wiped for a build from the first event."""
        checkpoint, built = await self._store.position()
        if built:
            return checkpoint or 0
        if checkpoint is not None:
            log.warning("compiled_state_partial", checkpoint=checkpoint)
        target = (await self._control.stream_info(self._topology.stream)).state.last_seq
        removed = await self._store.wipe(target)
        log.info("compiled_state_rebuilding", removed_keys=removed, until=target)
        return 0

    async def _in_sync(self) -> bool:
        """False when Redis no longer holds the state this loop built: flushed or
        restarted empty (``clr:built`` gone, even if a fold rewrote the checkpoint since),
        or restored to another checkpoint."""
        checkpoint, built = await self._store.position()
        return built and (checkpoint or 0) == self._position

    async def _consume(self, puller: Puller) -> None:
        # The puller keeps a request for the next batch open at the server, so the bus
        # delivers it while this one is folded and committed.
        try:
            while True:
                probes.turn("compiler")
                # A commit in flight means more events were waiting: they are on their
                # way, and the commit's report and acknowledgement wait for the next
                # read, so that read waits only briefly.
                msgs = await puller.next_batch(wait=0.05 if self._folder.sending else 1.0)
                if not await self._fold_batch(msgs):
                    return
        finally:
            self._folder.reset()
            self._unacked = None

    async def _fold_batch(self, msgs: list[Pulled]) -> bool:
        """Fold one batch read, then commit it: in the background while more events wait
        (the next read folds during the commit), else at once. False if the store lost
        this loop's state."""
        # Folded in memory in order, committed in one fenced script call with the
        # checkpoint at its last event, then acknowledged.
        lag = 0
        for msg, where in msgs:
            lag = where.pending
            if where.stream_seq > self._position:
                await self._folder.fold(where.stream_seq, msg.data, where.stored_ms,
                                        pending=lag)
        await self._folder.landed()  # the previous batch, if its commit is in flight
        # The landed commit's record and acknowledgement (NATS) and the check that the
        # store still holds this loop's state (Valkey) are independent: asked together,
        # a batch waits for one round trip instead of two in a row (a rebuild reads ~200
        # batches per 100,000 events, docs/performance.md).
        self._position = self._folder.committed or self._position
        recorded, in_sync = await asyncio.gather(self._record(), self._in_sync(),
                                                 return_exceptions=True)
        for outcome in (recorded, in_sync):
            if isinstance(outcome, BaseException):
                raise outcome
        if not in_sync:
            log.warning("compiled_state_lost", position=self._position)
            return False
        self._unacked = msgs[-1].msg if msgs else None
        if lag > 0:
            await self._folder.send()
        else:
            await self._folder.commit()
            await self._acknowledge()
        # Every batch beats: measured on a quiet machine, beating only every 0.25 s
        # through a backlog made a rebuild of 100,000 objects slower (5.8 s against 4.9 s:
        # the beat's round trip overlaps the pipelined commit in flight).
        await health.beat(self._r, "compiler", self._position, lag=lag, consumer=DURABLE)
        if time.monotonic() >= self._next_census:
            await self._report_census()
        return True

    async def _acknowledge(self) -> None:
        """After a commit landed: move the position and acknowledge what it holds
        (AckPolicy.ALL: the last message acknowledges every one before it)."""
        self._position = self._folder.committed or self._position
        await self._record()

    async def _record(self) -> None:
        """Record the position (outside Valkey) and acknowledge the messages it holds."""
        if self._epoch is not None and self._position:
            self._checkpoints.record(self._position, self._epoch)
        if self._unacked is not None:
            last, self._unacked = self._unacked, None
            await last.ack()

    async def _report_census(self) -> None:
        """Policies by state, for ``/metrics`` and for ``clearance.v1.status`` (which the
        decision service answers from the store)."""
        self._next_census = time.monotonic() + CENSUS_EVERY
        found = await self._folder.census(time.time())
        metrics.set_policies(found)
        await health.publish_census(self._r, found)


def _build_target(epoch: bytes | None) -> int:
    """The sequence a build (begun by this start, or by a compiler stopped before it
    ended) folds to while no decision is answered: ``clr:built``'s target; 0 (none)
    when the marker is gone or unreadable."""
    try:
        return health.build_target(epoch) if epoch is not None else 0
    except ValueError:
        return 0
