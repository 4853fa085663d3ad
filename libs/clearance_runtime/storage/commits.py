"""Batch commits: the writes of many consecutive events in one fenced script call.

The compiler folds a batch of stream messages in memory, in order, each into its own
:class:`~clearance_runtime.storage.changes.Transaction` (its writes and its change record), and
commits the whole batch with the checkpoint moved to the batch's last sequence in one
Lua script: one round trip instead of one per event. What readers see is unchanged:
every event keeps its change record (``<revision>-0``), so the cache-invalidator, the
mirrors and ``clearance.decisions.changed`` still hear of each event on its own.

Atomic, and fenced as strongly as a single event: the script first compares ``clr:rev``
with the checkpoint this writer last left and writes nothing when it moved (another
compiler, a flush, a restore: :class:`LostSync`), then applies every command. Redis runs
a script to its end without interleaving, and a compiler killed before or during the
call either reached Redis with the whole batch or not at all: never half a batch, and a
restart resumes after the last checkpoint written, so no event is applied twice.

The script is ``lua/commit.lua``. The commands travel as one msgpack argument (decoded by
the script's ``cmsgpack``): packing tens of thousands of separate arguments was most of
a batch's cost on the client. Their words are recorded ready for it (``changes.word``),
and their keys apart, for ``KEYS`` (one per command, in order), so that the script
touches no key it was not given.
"""

from __future__ import annotations

from typing import Any

import msgspec
import redis.asyncio as aioredis
import redis.exceptions

from clearance_api.errors import LostSync
from clearance_runtime.storage import keys, scripts
from clearance_runtime.storage.changes import Transaction

_pack = msgspec.msgpack.Encoder().encode


#: How the script's error starts when the fence refused the batch.
_LOST_SYNC = "CLEARANCE_LOST_SYNC"


class Batch:
    """The sealed writes of consecutive events, to commit together."""

    def __init__(self) -> None:
        #: The key of each command, and each command without its key, in order: each
        #: event's transaction records into them (``changes._Recorder``).
        self._keys: list[str] = []
        self._commands: list[tuple[Any, ...]] = []
        #: The sequence of the last event added (None: empty).
        self.last: int | None = None
        self.events = 0

    def __len__(self) -> int:
        return self.events

    def event(self, seq: int, *, kind: str = "",
              published_ms: int | None = None) -> _EventScope:
        """One event's transaction (``with batch.event(...) as tx``); its writes and
        change record join the batch when the block ends normally, and nothing of it
        does if the block raises."""
        return _EventScope(self, Transaction(seq, self._keys, self._commands), kind,
                           published_ms)

    def _add(self, tx: Transaction, kind: str, published_ms: int | None) -> None:
        tx.seal(kind=kind, published_ms=published_ms)
        self.last = tx.seq
        self.events += 1

    def _drop_since(self, recorded: int) -> None:
        """Forget the commands recorded since the batch held ``recorded`` of them."""
        del self._keys[recorded:]
        del self._commands[recorded:]

    def script_input(self) -> tuple[list[str], bytes]:
        """The commit script's KEYS (``clr:rev`` first, then the key of each command in
        turn) and its command list: the events' commands, without their keys, then the
        checkpoint."""
        assert self.last is not None
        return ([keys.REV, *self._keys, keys.REV],
                _pack([*self._commands, ("SET", str(self.last))]))


class _EventScope:
    """The ``with`` block of one event (a plain class: ``contextlib.contextmanager``'s
    generator cost more per event than the rest of folding a small object). Its
    transaction records into the batch's lists, and what it recorded goes again if the
    block raises."""

    __slots__ = ("_batch", "_kind", "_published_ms", "_recorded", "_tx")

    def __init__(self, batch: Batch, tx: Transaction, kind: str,
                 published_ms: int | None) -> None:
        self._batch, self._tx, self._kind, self._published_ms = batch, tx, kind, published_ms
        self._recorded = len(batch._keys)

    def __enter__(self) -> Transaction:
        return self._tx

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self._batch._add(self._tx, self._kind, self._published_ms)
        else:
            self._batch._drop_since(self._recorded)


class Committer:
    """Runs the commit script, fenced on the checkpoint, and moves the fence along."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self._script = scripts.register(redis, "commit")
        self.expected: int | None = None

    async def commit(self, batch: Batch) -> None:
        """Apply ``batch`` atomically with its checkpoint; :class:`LostSync` (nothing
        written) when ``clr:rev`` is no longer where this writer left it."""
        if batch.last is None:
            return
        fence = "" if self.expected is None else str(self.expected)
        try:
            script_keys, commands = batch.script_input()
            await self._script(keys=script_keys, args=[fence, commands])
        except redis.exceptions.ResponseError as exc:
            if str(exc).startswith(_LOST_SYNC):
                raise LostSync(f"checkpoint moved: {exc}") from None
            raise
        if self.expected is not None:
            self.expected = batch.last
