"""The inherited policies as the decision service's mirror holds them for the authoring
views (``effective``, ``reach``, ``simulate``, an AccessPolicy's status): the stored
values of the families only those views read, hash by hash, as the change records carry
them (:mod:`.mirror` applies them; :mod:`.inherit_reads` answers from them).

Checks read the effective policies, which the mirror keeps decoded on its own; what is
held here is read by a person's question, so it stays as stored and is decoded when
asked. ``generation`` moves with every value applied, and with every change of the
inventory (the mirror says so): a simulation index built at one generation is reused
until it moves.
"""

from __future__ import annotations

from collections.abc import Mapping

from clearance_core.inherit.authority import Authority, parse_namespaces
from clearance_runtime.storage.replies import blob, text

_EMPTY: Mapping[str, bytes] = {}


class InheritedState:
    def __init__(self) -> None:
        #: hash key -> field -> value as stored (a prefixed family: one hash per target).
        self._hashes: dict[str, dict[str, bytes]] = {}
        self.generation = 0
        #: CLEARANCE_ALLOW_UNSET and the admin namespaces the state was built with (they
        #: change only with a rebuild, which the mirror reloads).
        self.allow_unset = True
        self.authority = Authority()

    def put(self, key: str, field: str, value: bytes | str | None) -> None:
        """One field's new value (None: deleted)."""
        self.generation += 1
        held = self._hashes.get(key)
        if value is None:
            if held is not None:
                held.pop(field, None)
                if not held:
                    del self._hashes[key]
            return
        if held is None:
            held = self._hashes[key] = {}
        held[field] = blob(value)

    def moved(self) -> None:
        """Something a simulation index holds besides these hashes changed (the
        inventory)."""
        self.generation += 1

    def built_with(self, allow_unset: bytes | None, admins: bytes | None) -> None:
        """The settings the compiler recorded when it built the state (``clr:ap:unset``
        and ``clr:ap:admins``): no admins recorded is the default."""
        self.allow_unset = allow_unset != b"0"
        self.authority = Authority.of(parse_namespaces(text(admins))) if admins \
            else Authority()
        self.generation += 1

    def hash(self, key: str) -> Mapping[str, bytes]:
        """One hash's fields (read, never keep: the mirror changes it in place)."""
        return self._hashes.get(key, _EMPTY)
