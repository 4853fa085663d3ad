"""The library's stored families, declared once (``clearance_core.folding.families.Family``).

Each names its hash (:mod:`.keys`), its codec and whether the decision service mirrors
it. The compiler's transaction (:mod:`.changes`) decides from these which writes a
change record carries, and the mirror (:mod:`.mirror`) what it loads and how it reads
a record's values; the families the registered kinds declare
(``registry.KindSpec.families``) join them through :func:`every` with no code of
their own.
"""

from __future__ import annotations

import msgspec

from clearance_core.folding import registry
from clearance_core.folding.families import Family, json_text, same
from clearance_core.monitor.metricsource import CompiledSource
from clearance_core.monitor.policy import CompiledPolicy
from clearance_runtime.storage import inherit_store, keys

_msgpack = msgspec.msgpack.Encoder().encode
#: The one decoder of a cluster's labels (``clr:mc``'s values), wherever they are read.
decode_labels = msgspec.json.Decoder(dict[str, str]).decode
decode_users = msgspec.json.Decoder(list[str]).decode
decode_policy = msgspec.msgpack.Decoder(CompiledPolicy).decode
decode_source = msgspec.msgpack.Decoder(CompiledSource).decode


POLICIES = Family("policies", keys.POLICIES, _msgpack, decode_policy, mirrored=True)
POLICY_OBJECTS = Family("policy_objects", keys.POLICY_OBJECTS, bytes.decode, same)
SOURCE_OBJECTS = Family("source_objects", keys.SOURCE_OBJECTS, _msgpack, decode_source)
SOURCES = Family("sources", keys.SOURCES, _msgpack, decode_source, mirrored=True)
CLUSTERS = Family("clusters", keys.CLUSTERS, json_text, decode_labels, mirrored=True)
GROUPS = Family("groups", keys.GROUPS, json_text, decode_users, mirrored=True)
#: Compiled RBAC: encoded by ``rbac_store`` (its decoder needs the object key).
RBAC = Family("rbac", keys.RBAC, same, same, mirrored=True)
#: The library's families that hold values a fold writes one field at a time (the
#: inherited policies' are declared beside their encodings, in :mod:`.inherit_store`;
#: the rest of the layout, in :mod:`.keys`, is sets and markers).
LIBRARY: tuple[Family, ...] = (POLICIES, POLICY_OBJECTS, SOURCE_OBJECTS, SOURCES, CLUSTERS,
                               GROUPS, RBAC, *inherit_store.FAMILIES)


#: The library's keys (every str constant of :mod:`.keys`) and key families.
_TAKEN = frozenset(v for v in vars(keys).values() if isinstance(v, str)
                   and v.startswith("clr:"))
_TAKEN_PREFIXES = tuple(keys.prefix(family) for family in (
    keys.effective_in, keys.excluded_at, keys.cache_entry, keys.cache_trace,
    keys.cache_by_user, keys.cache_by_group, keys.cache_by_cluster, keys.cache_by_principal,
    keys.service))


def every() -> tuple[Family, ...]:
    """The library's families and those of the registered kinds."""
    return (*LIBRARY, *declared())


def declared() -> list[Family]:
    """The families the registered kinds declare (the library's not included); a
    ValueError if one claims a hash of the library's layout (:mod:`.keys`)."""
    found = registry.declared_families()
    for family in found:
        if family.key in _TAKEN or any(family.key.startswith(f) for f in _TAKEN_PREFIXES):
            raise ValueError(f"family {family.name!r}: {family.key!r} is the library's")
    return found


def mirrored() -> tuple[Family, ...]:
    return tuple(family for family in every() if family.mirrored)


_seen: dict[str, Family | None] = {}
_seen_at = [-1]


def mirrored_as(key: str) -> Family | None:
    """The mirrored family the hash ``key`` belongs to (None: not mirrored); memoised
    per key, since every write of a fold asks (one per Namespace target's cluster at
    most, for prefixed families)."""
    if _seen_at[0] != registry.generation():
        _seen.clear()
        _seen_at[0] = registry.generation()
    try:
        return _seen[key]
    except KeyError:
        found = next((f for f in mirrored() if f.covers(key)), None)
        if len(_seen) < 100_000:
            _seen[key] = found
        return found
