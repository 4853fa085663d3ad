"""The change record a transaction seals: whom to invalidate and announce (the fold's
``Affected``, its sets written sorted), and the new values of the mirrored fields the
event writes (once each, in the order first written, the last value written) unless
they are too large to carry."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from clearance_core.folding.fold import Affected
from clearance_core.folding.narrowing import Narrow
from clearance_runtime.storage import changes, keys
from clearance_runtime.storage.changes import ChangeRecord, Transaction

NAMES = st.sets(st.text(max_size=6), max_size=5)
AFFECTED = st.builds(
    Affected, users=NAMES, groups=NAMES, clusters=NAMES, all=st.booleans(), within=NAMES,
    narrow=st.none() | st.builds(Narrow, clusters=st.none() | NAMES.map(frozenset),
                                 after=st.none() | st.text(max_size=4)),
    unknown=st.booleans())
HASHES = (keys.POLICIES, keys.GROUPS, keys.POLICY_OBJECTS, keys.effective_in("c1"),
          keys.RBAC, keys.ACCESS_POLICIES, keys.CLUSTER_SETS, keys.ACCESS_STATUS)
WRITES = st.lists(st.tuples(st.sampled_from(("hset", "hdel", "sadd")),
                            st.sampled_from(HASHES), st.sampled_from(("f1", "f2", "f3"))),
                  max_size=12)


@given(invalidate=AFFECTED, announce=AFFECTED, writes=WRITES)
def test_a_sealed_record_names_the_sorted_scopes_and_the_mirrored_fields_written(
        invalidate: Affected, announce: Affected, writes: list[tuple[str, str, str]]) -> None:
    tx = Transaction(7)
    tx.invalidate, tx.announce = invalidate, announce
    expected: dict[tuple[str, str], Any] = {}
    for n, (op, key, field) in enumerate(writes):
        if op == "hset":
            tx._pipe.hset(key, field, b"v%d" % n)
        elif op == "hdel":
            tx._pipe.hdel(key, field)
        else:
            tx._pipe.sadd(key, field)
    tx.seal(kind="group", published_ms=12)
    *written, changes_key = tx.keys
    *commands, xadd = tx.commands
    assert written == [key for _, key, _ in writes] and len(commands) == len(writes)
    assert changes_key == keys.CHANGES and xadd[:2] == ("XADD", "7-0")
    fields = dict(zip(xadd[2::2], xadd[3::2], strict=True))
    # Sorted as written (a record reads the same whatever order the sets hold).
    assert sets_sorted(msgspec.json.decode(fields["r"]))
    record = msgspec.json.decode(fields["r"], type=ChangeRecord)
    assert record == ChangeRecord(revision=7, invalidate=invalidate,
                                  announce=announce, kind="group", published_ms=12)
    for n, (op, key, field) in enumerate(writes):
        if op != "sadd" and key != keys.POLICY_OBJECTS:
            # A cluster set's value is not carried: a mirror reads only which exist.
            value = (None if op == "hdel" else b"" if key == keys.CLUSTER_SETS
                     else b"v%d" % n)
            expected.setdefault((key, field), None)
            expected[key, field] = value
    assert [tuple(v) for v in msgspec.msgpack.decode(unwrapped(fields["v"]))] == [
        (k, f, v) for (k, f), v in expected.items()]


def sets_sorted(value: Any) -> bool:
    """Whether every array of names in a decoded record is sorted."""
    if isinstance(value, dict):
        return all(sets_sorted(v) for v in value.values())
    if isinstance(value, list):
        return all(isinstance(v, str) for v in value) and value == sorted(value)
    return True


def unwrapped(word: msgspec.Raw) -> bytes:
    """The blob a command word carries as a msgpack str (``luapack.as_str``)."""
    raw = bytes(word)
    head = {0xD9: 2, 0xDA: 3, 0xDB: 5}.get(raw[0], 1)
    return raw[head:]


def test_a_record_too_large_to_carry_its_values_says_so_by_leaving_them_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(changes, "VALUES_MAX_BYTES", 100)
    small, large = Transaction(1), Transaction(2)
    small.put_cluster("east", {"env": "prod"})
    large.put_cluster("east", {"env": "x" * 100})
    small.seal()
    large.seal()
    assert "v" in small.commands[-1] and "v" not in large.commands[-1]
