"""A stored family: one hash of compiled state, declared once.

A :class:`Family` says everything the runtime needs to store, reload, carry and mirror
the values one kind's fold writes — the hash it lives in, how a value is encoded and
decoded, whether the decision service mirrors it, whether the compiler's model holds it
— and, for a family a kind declares outside the library, whose cached answers a change
of one value concerns and what it contributes to the state checks read. The compiler's
transaction (``Writes.put``), its model load, the mirror's load and apply and the
change records' values are all driven by these declarations, so a new kind's family is
one declaration next to its fold, which writes it with :func:`store` (the recipe:
ARCHITECTURE.md, "How to add a kind").

Pure: a family names its hash as a string and its codecs as functions; the runtime
does the I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from clearance_core.folding.fold import Affected

if TYPE_CHECKING:  # the model names Family in its Writes protocol
    from clearance_core.folding.model import Model, Writes

#: A value as stored (bytes, or a str for JSON text: a command word either way).
Encoded = bytes | str
#: Whose cached answers a change of one field concerns: (field, old value or None, new
#: value or None) -> the audience (both ``invalidate`` and ``announce``).
Concerns = Callable[[str, Any, Any], Affected]
#: What one stored value adds to the cluster labels checks read: (cluster, labels) —
#: merged over the ManagedCluster's own labels, for a cluster in the inventory only.
LabelsOf = Callable[[str, Any], tuple[str, Mapping[str, str]]]


@dataclass(frozen=True)
class Family:
    """One hash of compiled state (``key``; with ``prefix``, every hash whose name
    starts with it: one per cluster, say)."""

    name: str
    key: str
    encode: Callable[[Any], Encoded]
    decode: Callable[[bytes], Any]
    #: The decision service's mirror follows it (the change records carry its values).
    mirrored: bool = False
    #: Of a mirrored family, a mirror needs only which fields exist: a record carries an
    #: empty value (the values themselves are read by the compiler only).
    presence_only: bool = False
    prefix: bool = False
    #: A declared family's invalidation rule, applied by ``Writes.put`` (None: the fold
    #: sets the audiences itself, as the library's folds do).
    concerns: Concerns | None = None
    #: A declared family's contribution to the labels checks read (mirror and offline).
    labels: LabelsOf | None = None

    def covers(self, key: str) -> bool:
        """Whether ``key`` is one of this family's hashes."""
        return key.startswith(self.key) if self.prefix else key == self.key


_json = msgspec.json.Encoder().encode


def json_text(value: Any) -> str:
    """The encoder of a family stored as JSON: UTF-8 text, so it travels as a str command
    word (no msgpack head to build)."""
    return _json(value).decode()


def same(value: Any) -> Any:
    """The codec of a family stored as given (already encoded, or text)."""
    return value


def store(model: Model, tx: Writes, family: Family, field: str, value: Any) -> Any:
    """Write one field of a family a kind declares (``value`` None: deleted): on the
    transaction, in the compiler's model (``Model.stored``, where a restarted compiler
    finds it again), and — by the family's ``concerns`` rule — in the change's two
    audiences. Returns the previous value."""
    held = model.stored.setdefault(family.name, {})
    old = held.pop(field, None)
    if value is not None:
        held[field] = value
    tx.put(family, field, value)
    if family.concerns is not None and old != value:
        concerned = family.concerns(field, old, value)
        tx.invalidate.update(concerned)
        tx.announce.update(concerned.copy())
    return old


def labels_with(own: Mapping[str, Mapping[str, str]], stored: Mapping[str, Mapping[str, Any]],
                declared: Iterable[Family]) -> Mapping[str, Mapping[str, str]]:
    """The cluster labels checks read: each cluster's own (``own``, the inventory's)
    with what the ``declared`` families' values (``stored``: family name -> field ->
    value) add merged over them, by family name then field (a later one wins a key both
    set); a cluster outside the inventory gains none (a family cannot make a cluster
    known). The decision service's mirror keeps the same view, value by value."""
    found = sorted((family.name, field, family.labels(field, value))
                   for family in declared if family.labels is not None
                   for field, value in stored.get(family.name, {}).items())
    added: dict[str, dict[str, str]] = {}
    for _, _, (cluster, labels) in found:
        if cluster in own:
            added.setdefault(cluster, {}).update(labels)
    if not added:
        return own
    return {cluster: {**labels, **added[cluster]} if cluster in added else labels
            for cluster, labels in own.items()}
