"""Replies recently read from the decision cache, reused while the cache stands still.

A cached check cost the decision process more in its own work than in its Valkey read:
decoding the body, two digests for its cache key, unpacking the entry and encoding the
reply were about 9 µs of its 16 (docs/performance.md). The same request asked again
while nothing was invalidated gets the same reply, byte for byte; this keeps those
replies, by the request's bytes, and hands them back without any of that work.

It stays exact. Every check of an event-loop iteration still shares one lookup (the
cache's MGET, :meth:`DecisionCache.lookup`), which reads the cache's *position*: the
system revision, the build and the invalidation epoch. A kept reply is reused only when
that lookup reads the position the lookup that found its entry read: then no
invalidation call ran in between (each call that names entries moves the epoch, in the
same script step as its deletions, whether or not it found the entry, which may have
expired meanwhile), the state was not rebuilt, and the reply's revision is still the
system's — the reply is the one the entry would give. It is never reused past its
answer's validity limit (the next notBefore/notAfter), nor longer than the cache's TTL
after it was read. Anything else (another position, a limit passed) is answered as any
request is, from the cache or the mirror.

Only requests answered from the cache on the fast path are kept: a principal named
(no token), no ``min_revision``, no explanation, and no ``request_id`` (the request's
bytes are the key: each id would be a reply of its own, kept for nothing). The same
bytes are the same question, so a kept reply never answers another request. At most
``size`` replies are kept, the least recently read first out, and at most
:data:`MAX_BYTES` of bodies and replies: a request padded to a megabyte (whitespace, a
long list of groups) is never kept (over :data:`LARGEST`), so no caller can grow the
process by sending large questions the cache answers.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

#: (system revision, build, invalidation epoch): ``cache.Looked.position``.
Position = tuple[int, bytes | None, bytes | None]

#: Bytes of request bodies and replies kept at most (a typical pair: 300-600 bytes).
MAX_BYTES = 16 << 20
#: A body and its reply longer than this together are not kept.
LARGEST = 4096


class Kept(NamedTuple):
    """A reply as encoded, where the cache stood when its entry was read, its decision
    (for the hit counters) and the moment it stops being reusable (POSIX seconds)."""

    reply: bytes
    position: Position
    decision: str
    until: float


class Recent:
    """At most ``size`` replies by request body (0: none kept), each reusable for at
    most ``ttl_seconds`` after it was read."""

    def __init__(self, size: int, ttl_seconds: float) -> None:
        self._size = size if ttl_seconds > 0 else 0
        self._ttl = ttl_seconds
        self._kept: OrderedDict[bytes, Kept] = OrderedDict()
        self._bytes = 0

    @property
    def enabled(self) -> bool:
        return self._size > 0

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def weight(self) -> int:
        """Bytes of the bodies and replies kept."""
        return self._bytes

    def get(self, body: bytes) -> Kept | None:
        """The reply kept for ``body`` (whether it may be reused: :func:`reusable`)."""
        return self._kept.get(body)

    def keep(self, body: bytes, reply: bytes, position: Position, decision: str, *,
             valid_until: float | None, now: float) -> None:
        """Keep ``reply``, read from the cache at ``position`` at ``now``, for ``body``."""
        weight = len(body) + len(reply)
        if self._size <= 0 or weight > LARGEST:
            return
        until = now + self._ttl
        if valid_until is not None and valid_until < until:
            until = valid_until
        kept = self._kept
        old = kept.pop(body, None)
        if old is not None:
            self._bytes -= len(body) + len(old.reply)
        while kept and (len(kept) >= self._size or self._bytes + weight > MAX_BYTES):
            gone, was = kept.popitem(last=False)
            self._bytes -= len(gone) + len(was.reply)
        kept[body] = Kept(reply, position, decision, until)
        self._bytes += weight

    def drop(self) -> None:
        self._kept.clear()
        self._bytes = 0


def reusable(kept: Kept, position: Position, now: float) -> bool:
    """Whether ``kept`` is the reply at ``position`` (read by this iteration's lookup)."""
    return kept.position == position and now < kept.until
