"""The decision process's high-water mark: never an answer from a store behind what it
has already answered from.

Valkey replicates asynchronously. After a failover to a replica that had not received
the last commits (or to a primary that came back empty and was rebuilt, then demoted),
the store is *behind*: its checkpoint ``clr:rev`` and system revision ``clr:irev`` are
lower than before, until the compiler notices and replays the stream onto it. A mirror
or a cache answering from it then would answer from an older revision — a Deny lifted
again, a revision going back. So each decision process keeps the highest checkpoint and
system revision it has answered from (per build: ``clr:built``, the compiler's epoch),
and a read that finds the store below them is ``unavailable`` (a retryable error) until
the store is caught up.

The compiler also records its committed checkpoint and epoch outside Valkey, in the NATS
key-value bucket ``CLEARANCE_CHECKPOINTS`` (:mod:`.checkpoints`): that record is the
floor of a process that has not answered yet (one just started), and it names the
epoch in force, so a store rolled back to an *older build* is refused too.

Reads run concurrently, and a read that started before a newer answer was given may
return an older state without anything being wrong: each read compares what it found
with the marks as they stood when it was *issued* (:meth:`HighWater.floor`), so only a
store that went back between two reads in sequence is refused.
"""

from __future__ import annotations

from typing import NamedTuple

from clearance_api.errors import Unavailable
from clearance_runtime.process import metrics
from clearance_runtime.process.health import Probe

#: Replaced builds remembered (each is a few dozen bytes; rebuilds are rare).
LEFT_KEPT = 16


class Floor(NamedTuple):
    """The marks as they stood when a read was issued."""

    epoch: bytes | None
    rev: int
    revision: int
    #: The compiler's record (:mod:`.checkpoints`): its epoch and committed checkpoint.
    recorded_epoch: bytes | None
    recorded_rev: int


class HighWater:
    def __init__(self) -> None:
        self.epoch: bytes | None = None
        self.rev = 0
        self.revision = 0
        self.recorded_epoch: bytes | None = None
        self.recorded_rev = 0
        #: Builds answered from and then replaced (a store back on one went back).
        self.left: set[bytes] = set()
        #: Reads refused because the store was behind (tests and metrics read it).
        self.refused = 0

    def floor(self) -> Floor:
        return Floor(self.epoch, self.rev, self.revision, self.recorded_epoch,
                     self.recorded_rev)

    def record(self, rev: int, epoch: bytes) -> None:
        """The compiler's latest record (read from the bucket)."""
        self.recorded_rev, self.recorded_epoch = rev, epoch

    def reached(self, built: bytes | None, rev: int) -> None:
        """A mirror reached checkpoint ``rev`` of ``built`` (it answers from there on)."""
        if built is not None and built == self.epoch:
            self.rev = max(self.rev, rev)

    def check(self, probe: Probe, floor: Floor) -> None:
        """Raise ``Unavailable`` if the store, as ``probe`` read it, is behind ``floor``;
        else raise the marks to it. A store being rebuilt (``clr:built`` gone or new) is
        not judged here: ``health.rebuilding`` holds it unavailable until it is whole
        again, at a revision no lower than any answered before the rebuild began."""
        why = self._behind(probe, floor)
        if why is not None:
            self.refused += 1
            metrics.STORE_BEHIND.inc()
            raise Unavailable(f"the state store is behind: {why}; it is being caught up "
                              f"from the stream")
        if probe.built is None:
            return
        rev = int(probe.rev)
        if probe.built != self.epoch:  # a new build: its marks start from what it holds
            if self.epoch is not None:
                self.left = (self.left | {self.epoch}) - {probe.built}
                if len(self.left) > LEFT_KEPT:
                    self.left = set(list(self.left)[-LEFT_KEPT:])
            self.epoch, self.rev, self.revision = probe.built, rev, probe.revision
        else:
            self.rev, self.revision = max(self.rev, rev), max(self.revision, probe.revision)

    def behind(self, probe: Probe) -> str | None:
        """Why the store, as ``probe`` read it, is behind the marks now (None: it is
        not) — for readiness; changes nothing and counts no refusal."""
        return self._behind(probe, self.floor())

    def _behind(self, probe: Probe, floor: Floor) -> str | None:
        if probe.built is None:
            return None
        rev = int(probe.rev)
        if floor.recorded_epoch is not None:
            if probe.built != floor.recorded_epoch and probe.built in self.left:
                # A build this process answered from and then saw replaced, which the
                # compiler has not committed to since: a store rolled back to it. (A
                # build never seen is a new one: health.rebuilding holds it until whole.)
                return "it holds an older build than the compiler's last commit"
            if probe.built == floor.recorded_epoch and rev < floor.recorded_rev:
                return f"checkpoint {rev} is below the compiler's committed {floor.recorded_rev}"
        if probe.built == floor.epoch and (rev < floor.rev or probe.revision < floor.revision):
            return (f"revision {probe.revision} (checkpoint {rev}) is below "
                    f"{floor.revision} (checkpoint {floor.rev}) already answered")
        return None
