"""A cluster's label change drops, of that cluster's cached answers, exactly those of the
subjects it names (and their members: an entry can sit in several subject sets), and
keeps the index sets consistent with what is left. On a real Valkey: the script is the
thing under test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clearance_runtime.storage import keys, scripts
from clearance_runtime.storage.invalidation import pack_calls
from tests.conftest import Servers

CLUSTERS = ("east", "west", "north")


@pytest.fixture(scope="module")
def valkey(real_servers: Servers) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(real_servers.redis_url)
    yield client
    client.close()


fleets = st.fixed_dictionaries({
    # entry number -> its cluster
    "entries": st.lists(st.sampled_from(CLUSTERS), max_size=40),
    # subject sets: entry numbers (some beyond the entries: dangling members)
    "subjects": st.lists(st.sets(st.integers(0, 45)), min_size=1, max_size=5),
    "within": st.sets(st.sampled_from(CLUSTERS), min_size=1),
})


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fleet=fleets)
def test_exactly_the_subjects_entries_about_the_cluster_go(
        valkey: redis.Redis, fleet: dict[str, object]) -> None:
    entries: list[str] = fleet["entries"]  # type: ignore[assignment]
    subjects: list[set[int]] = fleet["subjects"]  # type: ignore[assignment]
    within: set[str] = fleet["within"]  # type: ignore[assignment]
    valkey.flushall()
    key = [f"{keys.ENTRY_PREFIX}{i}" for i in range(46)]
    for i, where in enumerate(entries):
        valkey.set(key[i], b"answer")
        valkey.sadd(keys.cache_by_cluster(where), key[i])
        valkey.zadd(keys.CACHE_ALL, {key[i]: 0})
    names = [keys.cache_by_group(f"g{n}:*,\\ é") for n in range(len(subjects))]
    for name, members in zip(names, subjects, strict=True):
        for i in members:
            valkey.sadd(name, key[i])
    clusters = sorted(within)

    script_keys, args = pack_calls(
        [("i", [*names, *(keys.cache_by_cluster(c) for c in clusters)],
          ["0", "0", str(len(clusters))])])
    [removed] = valkey.register_script(scripts.source("invalidate"))(keys=script_keys,
                                                                     args=args)

    named = set().union(*subjects)
    gone = {i for i, where in enumerate(entries) if where in within and i in named}
    assert removed == len(gone)
    for i, where in enumerate(entries):
        assert bool(valkey.exists(key[i])) == (i not in gone), (i, where)
        assert valkey.sismember(keys.cache_by_cluster(where), key[i]) == (i not in gone)
    assert {int(k.decode().rsplit(":", 1)[1]) for k in valkey.zrange(keys.CACHE_ALL, 0, -1)} \
        == set(range(len(entries))) - gone
    # The subject sets keep every other member (the sweep drops dangling ones later).
    for name, members in zip(names, subjects, strict=True):
        left = {int(k.decode().rsplit(":", 1)[1]) for k in valkey.smembers(name)}
        assert left >= members - gone
