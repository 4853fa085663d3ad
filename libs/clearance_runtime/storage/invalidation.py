"""How cached decisions leave the cache: exact invalidation, narrowed invalidation, and
the sweep of dangling index members (``lua/invalidate.lua`` and ``lua/sweep.lua``, which
the cache-invalidator and ``cache.clear`` run), and the entry header the narrowed
invalidation reads.

A cached answer's blob starts with a small header — a 2-byte length, then msgpack
``[cluster | false, deciding policy's order | nil]`` — so that a policy or Group change
can drop, of its subjects' entries, only those whose answer it can change
(``clearance_core.folding.narrowing``) without the invalidator parsing whole answers. ``false``
marks a cluster that was not in the inventory when the answer was computed: such an
entry is always dropped.
"""

from __future__ import annotations

from typing import Any

import msgspec
import redis.asyncio as aioredis

from clearance_core.folding.narrowing import Narrow
from clearance_runtime.storage import keys, scripts
from clearance_runtime.storage.luapack import as_str

_head = msgspec.msgpack.Encoder().encode
#: Longest header (a 2-byte length); a longer one (a huge cluster name) is replaced by
#: the "not in the inventory" header, which every narrowed invalidation drops.
_HEAD_MAX = 0xFFFF


def entry_blob(cluster: str | None, order: str | None, body: bytes) -> bytes:
    """A cached answer's blob: the header for ``cluster`` (None: not in the inventory)
    and ``order`` (of the deciding MonitorAccessPolicy; None: none decided), then the
    answer itself."""
    head = _head((False if cluster is None else cluster, order))
    if len(head) > _HEAD_MAX:
        head = _head((False, None))
    return len(head).to_bytes(2, "big") + head + body


def entry_body(blob: bytes) -> memoryview:
    """The answer of a blob made by :func:`entry_blob`."""
    return memoryview(blob)[2 + int.from_bytes(blob[:2], "big"):]


#: One invalidation call: "i" (whole) or "n" (narrowed), its index sets, its arguments
#: (``lua/invalidate.lua`` says what each means).
Call = tuple[str, list[str], list[str | bytes]]

#: The invalidation script (``lua/invalidate.lua``): any number of calls, in order.
INVALIDATE = "invalidate"
#: The sweep of dangling index members (``lua/sweep.lua``).
SWEEP = "sweep"


def pack_calls(calls: list[Call]) -> tuple[list[str], list[str | bytes]]:
    """The invalidation script's KEYS and ARGV for ``calls``: the fixed keys, then each
    call's index sets in turn (every key a script touches arrives in KEYS); the calls
    themselves — each with its number of keys and its arguments — packed in one msgpack
    argument (one argument per call cost the invalidator more in redis-py than applying
    them). Lua's cmsgpack knows no bin type: a bytes argument (a narrowing) travels as a
    msgpack str, which a Lua string holds whatever its bytes."""
    script_keys = [keys.INVALIDATED_REV, keys.REV, keys.CACHE_ALL, keys.INVALIDATED_EPOCH]
    packed = []
    for name, call_keys, args in calls:
        script_keys += call_keys
        packed.append((name, len(call_keys),
                       [as_str(a) if type(a) is bytes else a for a in args]))
    return script_keys, [keys.ENTRY_PREFIX, _head(packed)]


def narrow_arg(narrow: Narrow) -> bytes:
    """A narrowed call's argument for a narrowing."""
    clusters = None if narrow.clusters is None else sorted(narrow.clusters)
    return _head((clusters, narrow.after))


class Invalidation:
    """The invalidation script bound to a connection: runs calls, in order, in one
    script call (:func:`pack_calls`)."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self._script = scripts.register(redis, INVALIDATE)

    async def apply(self, calls: list[Call], *, client: Any = None) -> Any:
        """Each call's count of entries deleted (queued on ``client``, a pipeline, when
        given: its reply is that list)."""
        script_keys, args = pack_calls(calls)
        return await self._script(keys=script_keys, args=args, client=client)


async def sweep(redis: aioredis.Redis, *, batch: int = 200) -> int:
    """Drop dangling members (expired or evicted entries) from every cache index set;
    returns how many. Index sets never expire, so without this they only grow. The
    keyspace is scanned from here, a page at a time, each page swept by one short script
    call: a scan inside a script would hold Valkey — the cache included — for all of it."""
    script = scripts.register(redis, SWEEP)
    removed, cursor = 0, 0
    while True:
        cursor, found = await redis.scan(cursor, match="clr:dci:[ugcpw]:*", count=batch)
        if found:
            removed += int(await script(keys=list(found)))
        if cursor == 0:
            return removed
