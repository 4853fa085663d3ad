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
  ``effective`` reads, a hash per target on the path).

Every hash but ``clr:ap:out`` is a mirrored :class:`Family` declared here: the change
records carry its values, and the decision service answers ``effective``, ``reach``,
``simulate`` and an AccessPolicy's status from its mirror (``reading.inherit_reads``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import msgspec

from clearance_api.wire import ExcludedPolicy, StatusCondition
from clearance_core.folding.families import Family, json_text, same
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


def decode_binding(blob: bytes) -> tuple[str, str, str]:
    """A stored ManagedClusterSetBinding: (namespace, name, the set it names)."""
    return _decode_binding(blob)


ACCESS_POLICIES = Family("access_policies", keys.ACCESS_POLICIES, _encode,
                         decode_access_policy, mirrored=True)
ACCESS_INVALID = Family("access_invalid", keys.ACCESS_INVALID, same, bytes.decode,
                        mirrored=True)
ACCESS_STATUS = Family("access_status", keys.ACCESS_STATUS, json_text, decode_conditions,
                       mirrored=True)
BINDINGS = Family("bindings", keys.BINDINGS, json_text, decode_binding, mirrored=True)
#: Which cluster sets exist: only the fields count (every value is "").
CLUSTER_SETS = Family("cluster_sets", keys.CLUSTER_SETS, same, same, mirrored=True,
                      presence_only=True)
EFFECTIVE = Family("effective", keys.EFFECTIVE, _encode, same, mirrored=True)
#: One hash per cluster (``location``): its Namespace targets' effective policies.
EFFECTIVE_IN = Family("effective_in", keys.prefix(keys.effective_in), _encode, same,
                      mirrored=True, prefix=True)
#: One hash per target (``excluded_key``): the policies aimed at it that take no part.
EXCLUDED_AT = Family("excluded_at", keys.prefix(keys.excluded_at), json_text,
                     decode_excluded, mirrored=True, prefix=True)
#: By policy, where one that takes no part was aimed: the compiler's own record (no
#: reader but a restarted compiler).
EXCLUDED = Family("excluded", keys.EXCLUDED, _encode, _decode_excluded_at)
#: The families above.
FAMILIES = (ACCESS_POLICIES, ACCESS_INVALID, ACCESS_STATUS, BINDINGS, CLUSTER_SETS,
            EFFECTIVE, EFFECTIVE_IN, EXCLUDED_AT, EXCLUDED)


class _Puts(Protocol):
    """What the mixin below needs of the transaction it joins (``changes.Transaction``)."""

    def put(self, family: Family, field: str, value: Any, *,
            key: str | None = None) -> None: ...


class InheritWrites:
    """The AccessPolicy part of the store's transaction (``Writes`` in the core): each
    write one field of a family above, through the transaction's ``put``."""

    def put_access_policy(self: _Puts, key: str, policy: CompiledAccessPolicy | None,
                          error: str | None) -> None:
        self.put(ACCESS_POLICIES, key, policy)
        self.put(ACCESS_INVALID, key, error)

    def put_effective(self: _Puts, target: Target, effective: EffectivePolicy | None) -> None:
        hash_key, field = location(target)
        family = EFFECTIVE if hash_key == keys.EFFECTIVE else EFFECTIVE_IN
        self.put(family, field, effective, key=hash_key)

    def put_access_status(self: _Puts, key: str, conditions: list[StatusCondition] | None) -> None:
        self.put(ACCESS_STATUS, key, conditions)

    def put_cluster_set_binding(self: _Puts, namespace: str, name: str,
                                cluster_set: str | None) -> None:
        self.put(BINDINGS, binding_field(namespace, name),
                 None if cluster_set is None else [namespace, name, cluster_set])

    def put_excluded(self: _Puts, key: str, previous: ExcludedAt | None,
                     new: ExcludedAt | None) -> None:
        if previous is not None and (new is None or new.target != previous.target):
            self.put(EXCLUDED_AT, key, None, key=excluded_key(previous.target))
        self.put(EXCLUDED, key, new)
        if new is not None:
            self.put(EXCLUDED_AT, key, new.entry, key=excluded_key(new.target))


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
    found = [decode_binding(blob(v)) for v in (bindings or {}).values()]
    return Stored(
        policies={text(k): decode_access_policy(v) for k, v in policies.items()},
        invalid={text(k): text(v) for k, v in invalid.items()},
        conditions={text(k): decode_conditions(v) for k, v in conditions.items()},
        bindings={(namespace, name): set_name for namespace, name, set_name in found},
        excluded={text(k): _decode_excluded_at(blob(v))
                  for k, v in (excluded or {}).items()})
