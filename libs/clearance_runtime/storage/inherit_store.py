"""How inherited AccessPolicies are stored (docs/guide/inherited.md): the compiler's writes and the
encodings both sides share. Keys are in :mod:`.keys`.

* valid policies compiled (``clr:ap``), invalid ones by their error (``clr:ap:bad``),
  conditions as JSON (``clr:ap:st``);
* the effective policy of every materialised target: the Fleet, cluster sets and
  clusters in ``clr:eff``, a cluster's Namespace targets in ``clr:effns:<cluster>``, so
  one decision reads the two or three it needs (and a list every namespace of its
  cluster) in the snapshot's round trip;
* the ManagedClusterSetBindings (``clr:mcsb``), which decide which policies take part;
* each policy that takes no part, where it was aimed and why: ``clr:ap:out`` by policy
  (the compiler's, reloaded on a restart) and ``clr:apx:<target>`` by target (what
  ``effective`` reads, a hash per target on the path);
* ``clr:ap:rev``, moved by every write here, tells readers holding a simulation index
  that it is stale.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import msgspec

from clearance_api.wire import ExcludedPolicy, StatusCondition
from clearance_core.inherit.accesspolicy import CompiledAccessPolicy
from clearance_core.inherit.hierarchy import Target
from clearance_core.inherit.merge import EffectivePolicy
from clearance_core.inherit.status import ExcludedAt
from clearance_runtime.storage import keys
from clearance_runtime.storage.replies import blob, text

_encode = msgspec.msgpack.Encoder().encode
_json = msgspec.json.Encoder().encode
_decode_policy = msgspec.msgpack.Decoder(CompiledAccessPolicy).decode
_decode_effective = msgspec.msgpack.Decoder(EffectivePolicy).decode
_decode_conditions = msgspec.json.Decoder(list[StatusCondition]).decode
_decode_excluded_at = msgspec.msgpack.Decoder(ExcludedAt).decode
_decode_excluded = msgspec.json.Decoder(ExcludedPolicy).decode
_decode_binding = msgspec.json.Decoder(tuple[str, str, str]).decode


def location(target: Target) -> tuple[str, str]:
    """(hash key, field) of a target's effective policy. The kind prefixes the field and
    the name is its whole remainder, so no name can collide with another target."""
    if target.kind == "Namespace" and target.cluster is not None:
        return keys.effective_in(target.cluster), target.name
    return keys.EFFECTIVE, f"{target.kind}/{target.name}"


def excluded_key(target: Target) -> str:
    """The hash of the policies aimed at ``target`` that take no part: the target as JSON,
    so no two targets share one whatever their names hold."""
    return keys.excluded_at(_json([target.kind, target.cluster or "", target.name]).decode())


def binding_field(namespace: str, name: str) -> str:
    return _json([namespace, name]).decode()


def decode_excluded(blob: bytes) -> ExcludedPolicy:
    return _decode_excluded(blob)


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

    def put_cluster_set_binding(self, namespace: str, name: str,
                                cluster_set: str | None) -> None:
        field = binding_field(namespace, name)
        if cluster_set is None:
            self._pipe.hdel(keys.BINDINGS, field)
        else:
            self._pipe.hset(keys.BINDINGS, field,
                            _json([namespace, name, cluster_set]).decode())
        self._moved()  # readers' simulation indexes hold the bindings

    def put_excluded(self, key: str, previous: ExcludedAt | None,
                     new: ExcludedAt | None) -> None:
        if previous is not None and (new is None or new.target != previous.target):
            self._pipe.hdel(excluded_key(previous.target), key)
        if new is None:
            self._pipe.hdel(keys.EXCLUDED, key)
        else:
            self._pipe.hset(keys.EXCLUDED, key, _encode(new))
            self._pipe.hset(excluded_key(new.target), key, _json(new.entry).decode())


class Stored(msgspec.Struct, kw_only=True):
    """The AccessPolicy state as read back (a restart, or a reader's simulation index)."""

    policies: dict[str, CompiledAccessPolicy]
    invalid: dict[str, str]
    conditions: dict[str, list[StatusCondition]]
    bindings: dict[tuple[str, str], str] = {}
    excluded: dict[str, ExcludedAt] = {}


def stored(policies: Mapping[Any, Any], invalid: Mapping[Any, Any],
           conditions: Mapping[Any, Any], bindings: Mapping[Any, Any] | None = None,
           excluded: Mapping[Any, Any] | None = None) -> Stored:
    """From the hashes as HGETALL returns them."""
    found = [_decode_binding(blob(v)) for v in (bindings or {}).values()]
    return Stored(
        policies={text(k): decode_access_policy(v) for k, v in policies.items()},
        invalid={text(k): text(v) for k, v in invalid.items()},
        conditions={text(k): decode_conditions(v) for k, v in conditions.items()},
        bindings={(namespace, name): set_name for namespace, name, set_name in found},
        excluded={text(k): _decode_excluded_at(blob(v))
                  for k, v in (excluded or {}).items()})
