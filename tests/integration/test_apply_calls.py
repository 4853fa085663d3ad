"""The invalidator applies a read of change records as a few calls of the invalidation
script (``lua/invalidate.lua``), each running many whole ("i") and narrowed ("n") calls
in order. On a real Valkey: any sequence of calls leaves the store exactly as the same
calls made one by one, with the same counts — the deletions, the index sets, the revision
(which moves only past the record before it) — whatever the cache holds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clearance_core.folding.narrowing import Narrow
from clearance_runtime.storage import keys, scripts
from clearance_runtime.storage.invalidation import Call, entry_blob, narrow_arg, pack_calls
from tests.conftest import Servers

CLUSTERS = ("east", "west", "ü:*")
SUBJECTS = tuple(keys.cache_by_user(u) for u in ("alice", "b,ob", "c\\d é")) + \
    tuple(keys.cache_by_group(g) for g in ("ops", "dev*"))


@pytest.fixture(scope="module")
def valkey(real_servers: Servers) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(real_servers.redis_url)
    yield client
    client.close()


def _apply(valkey: redis.Redis, calls: list[Call]) -> list[int]:
    """Each call's count, the calls run in one script call."""
    script_keys, args = pack_calls(calls)
    script = valkey.register_script(scripts.source("invalidate"))
    return [int(n) for n in script(keys=script_keys, args=args)]


entries = st.lists(st.tuples(
    st.sampled_from((*CLUSTERS, None)),                 # the answer's cluster
    st.one_of(st.none(), st.sampled_from(("0a", "0b", "1a"))),  # deciding policy order
    st.sets(st.sampled_from(SUBJECTS), max_size=3),     # the subject sets holding it
), max_size=25)

invalidate_calls = st.builds(
    lambda subjects, within, revision, every, after: (
        "i", [*subjects, *(keys.cache_by_cluster(c) for c in within)],
        [str(revision), "1" if every else "0", str(len(within) if subjects else 0),
         str(after)]),
    st.lists(st.sampled_from(SUBJECTS), max_size=3, unique=True),
    st.lists(st.sampled_from(CLUSTERS), max_size=2, unique=True),
    st.integers(0, 12), st.booleans(), st.integers(0, 12))

narrowed_calls = st.builds(
    lambda subjects, clusters, after: ("n", subjects, [narrow_arg(Narrow(
        clusters=None if clusters is None else frozenset(clusters), after=after))]),
    st.lists(st.sampled_from(SUBJECTS), min_size=1, max_size=3, unique=True),
    st.one_of(st.none(), st.sets(st.sampled_from(CLUSTERS))),
    st.one_of(st.none(), st.sampled_from(("0a", "0b", "1a", "1b"))))


def _fill(valkey: redis.Redis, cache: list[Any], compiled: int, applied: int) -> None:
    valkey.flushall()
    valkey.set(keys.REV, compiled)
    valkey.set(keys.INVALIDATED_REV, applied)
    for n, (cluster, order, subjects) in enumerate(cache):
        key = f"{keys.ENTRY_PREFIX}{n}"
        valkey.set(key, entry_blob(cluster, order, b"answer"))
        valkey.zadd(keys.CACHE_ALL, {key: 0})
        if cluster is not None:
            valkey.sadd(keys.cache_by_cluster(cluster), key)
        for subject in subjects:
            valkey.sadd(subject, key)


def _dump(valkey: redis.Redis) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for key in valkey.keys("*"):
        kind = valkey.type(key)
        out[key] = (valkey.get(key) if kind == b"string" else
                    sorted(valkey.smembers(key)) if kind == b"set" else
                    valkey.zrange(key, 0, -1))
    return out


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cache=entries, calls=st.lists(st.one_of(invalidate_calls, narrowed_calls),
                                     min_size=1, max_size=8),
       compiled=st.integers(0, 12), applied=st.integers(0, 12))
def test_calls_in_one_script_do_what_they_do_one_by_one(
        valkey: redis.Redis, cache: list[Any], calls: list[Call], compiled: int,
        applied: int) -> None:
    _fill(valkey, cache, compiled, applied)
    one_by_one = [_apply(valkey, [call])[0] for call in calls]
    expected = _dump(valkey)

    _fill(valkey, cache, compiled, applied)
    together = _apply(valkey, calls)
    assert together == one_by_one
    assert _dump(valkey) == expected


def _without(state: dict[Any, Any], gone: set[bytes], sets: set[bytes]) -> dict[Any, Any]:
    """``state`` once the entries ``gone`` and the index sets ``sets`` are deleted (the
    other sets keep their members: dangling ones are the sweep's)."""
    out = {key: value for key, value in state.items() if key not in gone | sets}
    if keys.CACHE_ALL.encode() in out:
        kept = [k for k in out[keys.CACHE_ALL.encode()] if k not in gone]
        out[keys.CACHE_ALL.encode()] = kept
        if not kept:
            del out[keys.CACHE_ALL.encode()]
    return out


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cache=entries, subjects=st.lists(st.sampled_from(SUBJECTS), max_size=5, unique=True))
def test_invalidating_whole_subjects_deletes_exactly_their_entries_and_sets(
        valkey: redis.Redis, cache: list[Any], subjects: list[str]) -> None:
    _fill(valkey, cache, compiled=5, applied=0)
    before = _dump(valkey)
    [removed] = _apply(valkey, [("i", subjects, ["3", "0", "0", "0"])])
    gone = {f"{keys.ENTRY_PREFIX}{n}".encode() for n, (_, _, held) in enumerate(cache)
            if held & set(subjects)}
    expected = _without(before, gone, {s.encode() for s in subjects})
    expected[keys.INVALIDATED_REV.encode()] = b"3"
    if subjects:  # a call naming entries moves the epoch, whatever it deleted
        expected[keys.INVALIDATED_EPOCH.encode()] = b"1"
    assert removed == len(gone)
    assert _dump(valkey) == expected


def test_thousands_of_subjects_and_entries_go_in_chunks(valkey: redis.Redis) -> None:
    # More sets and entries than one variadic call may take in Lua (unpack's limit is a
    # few thousand values): 2,500 users, each with its own entry and one shared by all.
    valkey.flushall()
    valkey.set(keys.REV, 9)
    users = [keys.cache_by_user(f"u{n}") for n in range(2500)]
    shared = f"{keys.ENTRY_PREFIX}shared"
    valkey.set(shared, b"x")
    for n, index in enumerate(users):
        own = f"{keys.ENTRY_PREFIX}{n}"
        valkey.set(own, b"x")
        valkey.zadd(keys.CACHE_ALL, {own: 0, shared: 0})
        valkey.sadd(index, own, shared)
    valkey.sadd(keys.cache_by_group("kept"), shared)
    [removed] = _apply(valkey, [("i", users, ["9", "0", "0", "0"])])
    assert removed == 2501
    assert sorted(valkey.keys("*")) == sorted(
        [keys.REV.encode(), keys.INVALIDATED_REV.encode(), keys.INVALIDATED_EPOCH.encode(),
         keys.cache_by_group("kept").encode()])


def test_a_failing_call_keeps_what_the_calls_before_it_did(valkey: redis.Redis) -> None:
    # The revision is read once and written once per script call: when the third call
    # fails (its index key holds a string), the revision is still where the second left
    # it, and the entries the first two deleted stay deleted; the third's never went.
    valkey.flushall()
    valkey.set(keys.REV, 9)
    for user in ("a", "b", "c"):
        entry = f"{keys.ENTRY_PREFIX}{user}"
        valkey.set(entry, b"x")
        valkey.zadd(keys.CACHE_ALL, {entry: 0})
        valkey.sadd(keys.cache_by_user(user), entry)
    valkey.set(keys.cache_by_user("broken"), b"not a set")
    calls: list[Call] = [
        ("i", [keys.cache_by_user("a")], ["4", "0", "0", "0"]),
        ("i", [keys.cache_by_user("b")], ["5", "0", "0", "4"]),
        ("i", [keys.cache_by_user("broken"), keys.cache_by_user("c")], ["6", "0", "0", "5"]),
    ]
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        _apply(valkey, calls)
    assert valkey.get(keys.INVALIDATED_REV) == b"5"
    assert not valkey.exists(f"{keys.ENTRY_PREFIX}a", f"{keys.ENTRY_PREFIX}b")
    assert valkey.exists(f"{keys.ENTRY_PREFIX}c")


def test_with_nothing_cached_the_calls_only_move_the_revision(valkey: redis.Redis) -> None:
    # A rebuild on an empty cache: no entry is listed in clr:dci:all, so the calls skip
    # their deletions (index sets holding only dangling members stay for the sweep).
    valkey.flushall()
    valkey.set(keys.REV, 9)
    valkey.sadd(keys.cache_by_user("a"), f"{keys.ENTRY_PREFIX}expired")
    calls: list[Call] = [
        ("n", [keys.cache_by_user("a")], [narrow_arg(Narrow(clusters=None, after=None))]),
        ("i", [keys.cache_by_user("a")], ["7", "0", "0", "0"]),
        ("i", [keys.cache_by_group("g")], ["8", "1", "0", "7"]),
    ]
    assert _apply(valkey, calls) == [0, 0, 0]
    assert valkey.get(keys.INVALIDATED_REV) == b"8"
    assert valkey.smembers(keys.cache_by_user("a")) == {f"{keys.ENTRY_PREFIX}expired".encode()}


def test_a_call_that_empties_the_cache_leaves_the_next_as_it_would_be_alone(
        valkey: redis.Redis) -> None:
    # The first call deletes the last entry; the second names a set that still lists it
    # (dangling now): like the same call made alone, it leaves that set to the sweep.
    valkey.flushall()
    valkey.set(keys.REV, 9)
    entry = f"{keys.ENTRY_PREFIX}only"
    valkey.set(entry, b"x")
    valkey.zadd(keys.CACHE_ALL, {entry: 0})
    valkey.sadd(keys.cache_by_user("a"), entry)
    valkey.sadd(keys.cache_by_group("g"), entry)
    calls: list[Call] = [
        ("i", [keys.cache_by_user("a")], ["7", "0", "0", "0"]),
        ("i", [keys.cache_by_group("g")], ["8", "0", "0", "7"]),
    ]
    assert _apply(valkey, calls) == [1, 0]
    assert not valkey.exists(entry, keys.CACHE_ALL, keys.cache_by_user("a"))
    assert valkey.smembers(keys.cache_by_group("g")) == {entry.encode()}
