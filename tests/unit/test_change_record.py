"""The change record a transaction seals: whom to invalidate and announce (each a Scope of
sorted lists), and the mirrored fields the event writes (once each, in order)."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from clearance_core.folding.fold import Affected
from clearance_core.folding.narrowing import Narrow
from clearance_runtime import keys
from clearance_runtime.changes import ChangeRecord, Scope, Transaction

NAMES = st.sets(st.text(max_size=6), max_size=5)
AFFECTED = st.builds(
    Affected, users=NAMES, groups=NAMES, clusters=NAMES, all=st.booleans(), within=NAMES,
    narrow=st.none() | st.builds(Narrow, clusters=st.none() | NAMES.map(frozenset),
                                 after=st.none() | st.text(max_size=4)),
    unknown=st.booleans())
HASHES = (keys.POLICIES, keys.GROUPS, keys.POLICY_OBJECTS, keys.effective_in("c1"),
          keys.RBAC)
WRITES = st.lists(st.tuples(st.sampled_from(("hset", "hdel", "sadd")),
                            st.sampled_from(HASHES), st.sampled_from(("f1", "f2", "f3"))),
                  max_size=12)


def scope(affected: Affected) -> Scope:
    return Scope(users=sorted(affected.users), groups=sorted(affected.groups),
                 clusters=sorted(affected.clusters), all=affected.all,
                 within=sorted(affected.within), narrow=affected.narrow,
                 unknown=affected.unknown)


@given(invalidate=AFFECTED, announce=AFFECTED, writes=WRITES)
def test_a_sealed_record_names_the_sorted_scopes_and_the_mirrored_fields_written(
        invalidate: Affected, announce: Affected, writes: list[tuple[str, str, str]]) -> None:
    tx = Transaction(7)
    tx.invalidate, tx.announce = invalidate, announce
    for op, key, field in writes:
        if op == "hset":
            tx._pipe.hset(key, field, b"v")
        elif op == "hdel":
            tx._pipe.hdel(key, field)
        else:
            tx._pipe.sadd(key, field)
    command_keys, (*commands, xadd) = tx.seal(kind="group", published_ms=12)
    assert len(commands) == len(writes)
    assert command_keys == [key for _, key, _ in writes] + [keys.CHANGES]
    assert xadd[:2] == ("XADD", "7-0")
    fields = dict(zip(xadd[2::2], xadd[3::2], strict=True))
    record = msgspec.json.decode(fields["r"], type=ChangeRecord)
    assert record == ChangeRecord(revision=7, invalidate=scope(invalidate),
                                  announce=scope(announce), kind="group", published_ms=12)
    mirrored = [(k, f) for op, k, f in writes
                if op != "sadd" and k not in (keys.POLICY_OBJECTS, keys.RBAC)]
    assert [tuple(w) for w in msgspec.json.decode(fields["w"])] == list(dict.fromkeys(mirrored))
