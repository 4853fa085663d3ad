"""One connection of a client's pool kept for the decision cache's lookup, its MGET sent
and read directly.

Every cached check's batch makes one MGET (``DecisionCache._mget``: the cache's position
and the batch's entries). Through redis-py's client a command costs ~36 µs of CPU in
this process (the pool's lock, the retry wrapper, its observability recorders); sent
on a connection the client's own pool handed out, ~17 (measured on this machine, see
docs/performance.md) — a visible part of a cached check, and of its latency when one
check at a time arrives.

Only the fast case is done here: one lookup at a time on the kept connection. A lookup
made while another is in flight, and any failure (the connection dropped, a timeout, a
failover), go the client's way — its pool, its retries, its reconnection to the current
primary — after the kept connection is disconnected and given back, so the next lookup
takes a fresh one. Cancelled half way, the connection is dropped as well: a reply left
unread must never be taken for the next command's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection


class DirectMget:
    def __init__(self, redis: aioredis.Redis) -> None:
        self._r = redis
        self._connection: AbstractConnection | None = None
        self._busy = False

    async def mget(self, keys: Sequence[str]) -> list[Any]:
        """The values of ``keys`` (None: absent), as ``Redis.mget`` returns them."""
        if self._busy:
            return list(await self._r.mget(keys))
        self._busy = True
        try:
            connection = self._connection
            if connection is None:
                connection = self._connection = \
                    await self._r.connection_pool.get_connection()  # type: ignore[no-untyped-call]
            # Its health checked as the client's own commands are (a PING when idle long).
            await connection.send_packed_command(connection.pack_command("MGET", *keys))
            return list(await connection.read_response())
        except Exception:
            await self._drop()
            return list(await self._r.mget(keys))  # the client's way, retries and all
        except BaseException:
            await self._drop()
            raise
        finally:
            self._busy = False

    async def _drop(self) -> None:
        """Disconnect the kept connection and give it back to its pool."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        with contextlib.suppress(Exception):
            await connection.disconnect()
        with contextlib.suppress(Exception):
            await self._r.connection_pool.release(connection)

    async def close(self) -> None:
        await self._drop()
