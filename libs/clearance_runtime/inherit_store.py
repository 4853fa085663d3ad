"""How inherited AccessPolicies are stored (CONTRACT 6): the compiler's writes and the
encodings both sides share. Keys are in :mod:`.keys`.

* valid policies compiled (``clr:ap``), invalid ones by their error (``clr:ap:bad``),
  conditions as JSON (``clr:ap:st``);
* the effective policy of every materialised target: the Fleet, cluster sets and
  clusters in ``clr:eff``, a cluster's Namespace targets in ``clr:effns:<cluster>``, so
  one decision reads the two or three it needs (and a list every namespace of its
  cluster) in the snapshot's round trip;
* ``clr:ap:rev``, moved by every write here, tells readers holding a simulation index
  that it is stale.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import msgspec

from clearance_core.accesspolicy import CompiledAccessPolicy
from clearance_core.hierarchy import Target
from clearance_core.merge import EffectivePolicy
from clearance_core.wire import StatusCondition
from clearance_runtime import keys

_encode = msgspec.msgpack.Encoder().encode
_json = msgspec.json.Encoder().encode
_decode_policy = msgspec.msgpack.Decoder(CompiledAccessPolicy).decode
_decode_effective = msgspec.msgpack.Decoder(EffectivePolicy).decode
_decode_conditions = msgspec.json.Decoder(list[StatusCondition]).decode


def location(target: Target) -> tuple[str, str]:
    """(hash key, field) of a target's effective policy. The kind prefixes the field and
    the name is its whole remainder, so no name can collide with another target."""
    if target.kind == "Namespace" and target.cluster is not None:
        return keys.effective_in(target.cluster), target.name
    return keys.EFFECTIVE, f"{target.kind}/{target.name}"


def encode_effective(effective: EffectivePolicy) -> bytes:
    return _encode(effective)


def decode_effective(blob: bytes) -> EffectivePolicy:
    return _decode_effective(blob)


def decode_access_policy(blob: bytes) -> CompiledAccessPolicy:
    return _decode_policy(blob)


def decode_conditions(blob: bytes) -> list[StatusCondition]:
    return _decode_conditions(blob)


class _Commands(Protocol):
    def set(self, key: str, value: Any) -> None: ...
    def hset(self, key: str, field: str, value: Any) -> None: ...
    def hdel(self, key: str, field: str) -> None: ...


class InheritWrites:
    """The AccessPolicy part of the store's transaction (``Writes`` in the core)."""

    _pipe: _Commands
    seq: int
    _inherit_moved: bool = False

    def _moved(self) -> None:
        """``clr:ap:rev`` moves once per event, however many targets it rewrites."""
        if not self._inherit_moved:
            self._inherit_moved = True
            self._pipe.set(keys.INHERIT_REV, self.seq)

    def put_access_policy(self, key: str, policy: CompiledAccessPolicy | None,
                          error: str | None) -> None:
        if policy is None:
            self._pipe.hdel(keys.ACCESS_POLICIES, key)
        else:
            self._pipe.hset(keys.ACCESS_POLICIES, key, _encode(policy))
        if error is None:
            self._pipe.hdel(keys.ACCESS_INVALID, key)
        else:
            self._pipe.hset(keys.ACCESS_INVALID, key, error)
        self._moved()

    def put_effective(self, target: Target, effective: EffectivePolicy | None) -> None:
        hash_key, field = location(target)
        if effective is None:
            self._pipe.hdel(hash_key, field)
        else:
            self._pipe.hset(hash_key, field, _encode(effective))
        self._moved()

    def put_access_status(self, key: str, conditions: list[StatusCondition] | None) -> None:
        if conditions is None:
            self._pipe.hdel(keys.ACCESS_STATUS, key)
        else:
            self._pipe.hset(keys.ACCESS_STATUS, key, _json(conditions))


class Stored(msgspec.Struct, kw_only=True):
    """The AccessPolicy state as read back (a restart, or a reader's simulation index)."""

    policies: dict[str, CompiledAccessPolicy]
    invalid: dict[str, str]
    conditions: dict[str, list[StatusCondition]]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def stored(policies: Mapping[Any, Any], invalid: Mapping[Any, Any],
           conditions: Mapping[Any, Any]) -> Stored:
    """From the three hashes as HGETALL returns them."""
    return Stored(
        policies={_text(k): decode_access_policy(v) for k, v in policies.items()},
        invalid={_text(k): _text(v) for k, v in invalid.items()},
        conditions={_text(k): decode_conditions(v) for k, v in conditions.items()})
