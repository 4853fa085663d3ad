"""The cached forms of a check's answer and of its explanation.

An answer is cached under ``clr:dc3:<digest>`` behind the header the narrowed
invalidation reads (its cluster, if in the inventory, and its deciding policy's order:
``clearance_runtime.storage.invalidation``), with the moment it stops holding. Its explanation
(the trace) is cached apart, under ``clr:dt3:<digest>``, and only when an explanation was
asked: it lists every candidate policy, consulted or not, so a policy change alters it
where the answer itself holds, and a narrowed invalidation always drops it. Apart, it
also leaves answers small (a trace is most of an explained answer's bytes: 1.2 KB of 1.3
KB with six candidates, 260 bytes compressed) and their reads cheap.

A batch of many checks that all missed is cached whole, under ``clr:db3:<digest>``
(``Decider``): one write instead of one per answer.

All carry their validity limit (the next notBefore/notAfter of a candidate, POSIX
seconds), checked when read by the clock that evaluated them: Redis expires an entry by
its own clock, a moment after the write reached it, so its TTL alone would let an allow
outlive a ``notAfter`` by that much.
"""

from __future__ import annotations

import zlib

import msgspec

from clearance_api.wire import CheckResult, TraceStep
from clearance_runtime.storage.invalidation import entry_blob, entry_body


class Stored(msgspec.Struct, array_like=True):
    """A cached answer without its trace, and the moment it stops holding (None: no
    validity boundary ahead)."""

    result: CheckResult
    valid_until: float | None = None


class StoredBatch(msgspec.Struct, array_like=True):
    """A whole batch's answers without their traces, and the moment the first of them
    stops holding."""

    results: list[CheckResult]
    valid_until: float | None = None


class StoredTrace(msgspec.Struct, array_like=True):
    """A cached explanation, compressed, and the moment it stops holding."""

    valid_until: float | None
    trace: bytes


_encode = msgspec.msgpack.Encoder().encode
_decode_stored = msgspec.msgpack.Decoder(Stored).decode
_decode_stored_trace = msgspec.msgpack.Decoder(StoredTrace).decode
_decode_stored_batch = msgspec.msgpack.Decoder(StoredBatch).decode
_decode_trace = msgspec.msgpack.Decoder(list[TraceStep]).decode


def pack(result: CheckResult, valid_until: float | None, *, cluster: str | None,
         order: str | None) -> bytes:
    """A cached answer (its trace left out) about ``cluster`` (None: not in the
    inventory), decided by the MonitorAccessPolicy of ``order`` (None: by none)."""
    bare = msgspec.structs.replace(result, trace=msgspec.UNSET)
    return entry_blob(cluster, order, _encode(Stored(bare, valid_until)))


def unpack(blob: bytes, now: float) -> CheckResult | None:
    """The cached answer, or None if a validity boundary has passed since it was
    computed (the entry is about to expire: a miss)."""
    held = unpack_until(blob, now)
    return None if held is None else held[0]


def unpack_until(blob: bytes, now: float) -> tuple[CheckResult, float | None] | None:
    """The cached answer and the moment it stops holding (None: no boundary ahead), or
    None if that moment has passed."""
    stored = _decode_stored(entry_body(blob))
    if stored.valid_until is not None and now >= stored.valid_until:
        return None
    stored.result.cached = True
    return stored.result, stored.valid_until


def pack_batch(results: list[CheckResult], valid_until: float | None) -> bytes:
    """A whole batch's answers (traces left out), behind the header of an answer about
    no cluster in the inventory: every narrowed invalidation that reaches it drops it."""
    bare = [msgspec.structs.replace(r, trace=msgspec.UNSET) for r in results]
    return entry_blob(None, None, _encode(StoredBatch(bare, valid_until)))


def unpack_batch(blob: bytes, now: float) -> list[CheckResult] | None:
    """A whole batch's cached answers, or None past the first one's validity."""
    stored = _decode_stored_batch(entry_body(blob))
    if stored.valid_until is not None and now >= stored.valid_until:
        return None
    for result in stored.results:
        result.cached = True
    return stored.results


def pack_trace(trace: list[TraceStep], valid_until: float | None) -> bytes:
    return _encode(StoredTrace(valid_until, zlib.compress(_encode(trace), 1)))


def unpack_trace(blob: bytes, now: float) -> list[TraceStep] | None:
    """The cached explanation, or None past its validity."""
    stored = _decode_stored_trace(blob)
    if stored.valid_until is not None and now >= stored.valid_until:
        return None
    return _decode_trace(zlib.decompress(stored.trace))
