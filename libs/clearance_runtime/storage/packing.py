"""Commands packed by hiredis (C) instead of redis-py's Python packer.

redis.asyncio packs every argument in Python: a cache invalidation naming 10,500 index
sets (a cluster label change reaching 500 Groups and their members) spent 10 ms packing
one script call, about as long as Valkey took to run it; hiredis packs the same command
in 1.5 ms. hiredis is already a dependency (redis-py's reply parser).

A large last argument (the compiler's batch commit carries its commands as one msgpack
argument of ~750 kB) is not copied into the packed command: hiredis copies one that
large at under 1 GB/s (0.86 ms for 750 kB, ~1.7 us per event folded), so it travels as a
chunk of its own after the rest, which hiredis packs (as redis-py's packer does with any
argument over its buffer cutoff).

hiredis takes str, bytes, int and float, encoding str as UTF-8 like redis-py's encoder
and failing the same way on unencodable text; anything else it refuses (a bool, None)
goes to redis-py's packer, which raises its own DataError as before.
"""

from __future__ import annotations

from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection

#: A last argument of at least this many bytes travels as its own chunk (see above; up
#: to ~10 kB hiredis packs at over 10 GB/s).
LARGE = 16 << 10


class _HiredisPacking(AbstractConnection):
    def pack_command(self, *args: Any) -> list[bytes]:
        head = args[0]
        # Like redis-py: a command name such as "CONFIG GET" travels as two arguments.
        if (isinstance(head, str) and " " in head) or (isinstance(head, bytes) and b" " in head):
            args = (*head.split(), *args[1:])
        last = args[-1]
        try:
            if type(last) is bytes and len(last) >= LARGE and len(args) > 1:
                return _with_large_last(args, last)
            return [hiredis.pack_command(args)]
        except TypeError:
            return super().pack_command(*args)


def _with_large_last(args: tuple[Any, ...], last: bytes) -> list[bytes]:
    """The command in three chunks: its other arguments packed by hiredis (under the
    whole command's count: RESP's ``*<count>`` line, then each argument as ``$<length>``
    and its bytes), the large last argument as it is, and its line's end."""
    rest = hiredis.pack_command(args[:-1])
    counted = rest.index(b"\r\n") + 2  # past hiredis's own "*<count>" line
    return [b"".join((b"*%d\r\n" % len(args), memoryview(rest)[counted:],
                      b"$%d\r\n" % len(last))), last, b"\r\n"]


_classes: dict[type[Any], type[Any]] = {}


def use_hiredis_packing(client: aioredis.Redis) -> aioredis.Redis:
    """Make ``client``'s new connections pack commands with hiredis (TCP, TLS or Unix
    socket alike: the pool's own connection class gains the packer). Returns it."""
    pool = client.connection_pool
    base = pool.connection_class
    if not issubclass(base, _HiredisPacking):
        if base not in _classes:
            _classes[base] = type(f"Hiredis{base.__name__}", (_HiredisPacking, base), {})
        pool.connection_class = _classes[base]
    return client
