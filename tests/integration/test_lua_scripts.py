"""The Lua script library (``clearance_runtime/storage/lua/``), each script alone on a real Valkey:
its contract (inputs, effects, reply), its fence (a stale state writes nothing), its edge
cases (empty input, a huge batch, a malformed argument writes nothing). And the library
as a whole: the only home of Lua, every script used, every key a script touches passed
in KEYS, no keyspace scan inside a script; and the wipe, which scans from Python, keeps
every reader fenced while it runs."""

from __future__ import annotations

import ast
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
import redis
import redis.asyncio as aioredis

from clearance_api.errors import Unavailable
from clearance_core.folding.fold import Affected
from clearance_invalidator.app import Invalidator
from clearance_runtime.storage import keys, scripts
from clearance_runtime.storage.cache import DecisionCache, Entry, put_input
from clearance_runtime.storage.changes import ChangeRecord
from clearance_runtime.storage.commits import Batch, Committer, LostSync
from clearance_runtime.storage.invalidation import pack_calls
from clearance_runtime.storage.luapack import as_str
from clearance_runtime.storage.state import StateStore
from tests.conftest import Servers

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
_pack = msgspec.msgpack.Encoder().encode

#: Modules of the read model, which is being rebuilt without Lua (its snapshot and mirror
#: scripts go with it): the only ones still allowed to hold Lua. The list may only
#: shrink: a module on it that no longer holds Lua fails the test below.
STILL_INLINE: set[str] = set()


@pytest.fixture(scope="module")
def valkey(real_servers: Servers) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(real_servers.redis_url)
    yield client
    client.close()


@pytest.fixture
def empty(valkey: redis.Redis) -> redis.Redis:
    valkey.flushall()
    return valkey


def script(client: redis.Redis, name: str) -> Any:
    return client.register_script(scripts.source(name))


def _leading_comment(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return lines


def _code(name: str) -> str:
    """The script without its comments."""
    return "\n".join(line.split("--", 1)[0] for line in scripts.source(name).splitlines())


# The library ----------------------------------------------------------------------------


def _modules() -> Iterator[tuple[str, str]]:
    for top in ("libs", "services"):
        for path in sorted((ROOT / top).rglob("*.py")):
            yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")


def test_no_python_module_holds_lua() -> None:
    holding = {name for name, text in _modules() if "redis.call" in text}
    assert holding <= STILL_INLINE, f"Lua belongs in clearance_runtime/storage/lua/: {holding}"
    assert holding == STILL_INLINE, f"no longer holding Lua, drop from the list: " \
                                    f"{STILL_INLINE - holding}"


def test_every_script_is_used_by_some_module() -> None:
    # A script is named by a string literal (scripts.register(redis, "<name>"), or a
    # constant holding it) in a module, other than the loader, that uses the loader.
    literals: set[str] = set()
    for name, text in _modules():
        if name.endswith("clearance_runtime/storage/scripts.py") or "scripts.register(" not in text:
            continue
        literals |= {node.value for node in ast.walk(ast.parse(text))
                     if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert scripts.names(), "the library is empty"
    unused = [name for name in scripts.names() if name not in literals]
    assert not unused, f"scripts no module runs: {unused}"


@pytest.mark.parametrize("name", scripts.names())
def test_each_script_documents_itself_names_no_key_and_scans_nothing(
        valkey: redis.Redis, name: str) -> None:
    text = scripts.source(name)
    assert text.startswith(f"-- {name}: "), "a header comment: what it does"
    header = "\n".join(_leading_comment(text))
    for part in ("KEYS", "ARGV", "Returns", "tomic"):
        assert part in header, f"the header says {part}"
    code = _code(name)
    assert "clr:" not in code, "every key arrives in KEYS: none is spelt in the script"
    assert not re.search(r"['\"](SCAN|KEYS)['\"]", code, re.IGNORECASE), "no keyspace scan"
    # It compiles (SCRIPT LOAD parses it).
    assert valkey.script_load(text)


# cache_put ----------------------------------------------------------------------------


def _put(client: redis.Redis, groups: list[tuple[str, list[Entry]]]) -> list[int]:
    script_keys, packed = put_input(groups)
    return [int(n) for n in script(client, "cache_put")(keys=script_keys, args=[packed])]


def _entry(digest: str, *indexes: str, ttl_ms: int = 60_000) -> Entry:
    return Entry(key=keys.cache_entry(digest), blob=b"\x00\xffanswer " + digest.encode(),
                 ttl_ms=ttl_ms, indexes=indexes)


def test_cache_put_writes_the_entries_of_the_current_state_with_their_indexes(
        empty: redis.Redis) -> None:
    empty.mset({keys.REV: 7, keys.BUILT: "7:b"})
    alice, ops = keys.cache_by_user("alice"), keys.cache_by_group("ops")
    before_ms = int(empty.time()[0]) * 1000
    assert _put(empty, [("7@7:b", [_entry("a", alice, ops), _entry("b", ops)])]) == [2]
    assert empty.get(keys.cache_entry("a")) == b"\x00\xffanswer a"  # any bytes survive
    assert 0 < empty.pttl(keys.cache_entry("a")) <= 60_000
    assert empty.smembers(alice) == {keys.cache_entry("a").encode()}
    assert empty.smembers(ops) == {keys.cache_entry("a").encode(), keys.cache_entry("b").encode()}
    assert empty.ttl(ops) == -1  # index sets never expire
    scores = dict(empty.zrange(keys.CACHE_ALL, 0, -1, withscores=True))
    assert set(scores) == {keys.cache_entry("a").encode(), keys.cache_entry("b").encode()}
    # Scored with the expiry by the server's clock.
    assert all(before_ms + 60_000 <= s <= before_ms + 62_000 for s in scores.values())


def test_cache_put_fences_each_group_on_its_own_state(empty: redis.Redis) -> None:
    empty.mset({keys.REV: 7, keys.BUILT: "7:new"})
    user = keys.cache_by_user("u")
    stored = _put(empty, [("6@7:new", [_entry("older", user)]),     # the state moved on
                          ("7@7:new", [_entry("fresh", user)]),
                          ("7@7:old", [_entry("wiped", user)])])    # same rev, other build
    assert stored == [0, 1, 0]
    assert not empty.exists(keys.cache_entry("older"), keys.cache_entry("wiped"))
    assert empty.smembers(user) == {keys.cache_entry("fresh").encode()}
    assert empty.zcard(keys.CACHE_ALL) == 1


def test_cache_put_writes_nothing_on_a_lost_store(empty: redis.Redis) -> None:
    # Flushed: no marker, no checkpoint, so not the state the answer was computed from.
    assert _put(empty, [("3@3:b", [_entry("x", keys.cache_by_user("u"))])]) == [0]
    assert empty.keys("*") == []


def test_cache_put_edge_cases_empty_and_huge(empty: redis.Redis) -> None:
    empty.mset({keys.REV: 1, keys.BUILT: "1:b"})
    assert _put(empty, []) == []
    assert _put(empty, [("1@1:b", [])]) == [0]
    # 5,000 entries in one call, sharing 50 group sets and each in a set of its own.
    many = [_entry(f"e{i}", keys.cache_by_group(f"g{i % 50}"), keys.cache_by_user(f"u{i}"))
            for i in range(5000)]
    assert _put(empty, [("1@1:b", many)]) == [5000]
    assert empty.zcard(keys.CACHE_ALL) == 5000
    assert sum(empty.scard(keys.cache_by_group(f"g{g}")) for g in range(50)) == 5000
    assert empty.smembers(keys.cache_by_user("u4999")) == {keys.cache_entry("e4999").encode()}


def test_cache_put_refuses_keys_its_entries_do_not_account_for_and_writes_nothing(
        empty: redis.Redis) -> None:
    empty.mset({keys.REV: 1, keys.BUILT: "1:b"})
    entry, index = keys.cache_entry("a"), keys.cache_by_user("u")
    fixed = [keys.BUILT, keys.REV, keys.CACHE_ALL]
    for script_keys, entries in (
            ([*fixed, entry], [[as_str(b"x"), 1000, 1]]),            # its index is missing
            ([*fixed, entry, index, index], [[as_str(b"x"), 1000, 1]]),  # one too many
            ([*fixed, entry, index], [[as_str(b"x"), 1000, -1]]),
            ([*fixed, entry, index], [[as_str(b"x"), 1000]])):        # no count at all
        packed = _pack([["1@1:b", entries]])
        with pytest.raises(redis.exceptions.ResponseError, match="cache_put"):
            script(empty, "cache_put")(keys=script_keys, args=[packed])
        assert not empty.exists(entry, index, keys.CACHE_ALL)


async def test_the_decision_cache_stores_through_the_script(clean_servers: Servers) -> None:
    r = aioredis.from_url(clean_servers.redis_url)
    try:
        await r.mset({keys.REV: 2, keys.BUILT: "2:b", keys.INVALIDATED_REV: 2})
        cache = DecisionCache(r, ttl_seconds=60)
        assert await cache.store("2@2:b", [_entry("a", keys.cache_by_user("u"))]) == 1
        assert await cache.store("1@2:b", [_entry("b", keys.cache_by_user("u"))]) == 0
        assert await cache.entries() == 1
        looked = await cache.lookup([keys.cache_entry("a"), keys.cache_entry("b")])
        assert looked.blobs == [b"\x00\xffanswer a", None]
    finally:
        await r.aclose()


# cache_size ---------------------------------------------------------------------------


def test_cache_size_forgets_expired_members_and_counts_the_rest(empty: redis.Redis) -> None:
    now_ms = int(empty.time()[0]) * 1000
    empty.zadd(keys.CACHE_ALL, {"clr:dc3:gone": now_ms - 1000, "clr:dc3:live": now_ms + 60_000,
                                "clr:dc3:later": now_ms + 3_600_000})
    assert script(empty, "cache_size")(keys=[keys.CACHE_ALL]) == 2
    assert set(empty.zrange(keys.CACHE_ALL, 0, -1)) == {b"clr:dc3:live", b"clr:dc3:later"}
    empty.delete(keys.CACHE_ALL)
    assert script(empty, "cache_size")(keys=[keys.CACHE_ALL]) == 0  # empty: nothing cached


# commit -------------------------------------------------------------------------------


def _commit(client: redis.Redis, fence: str, script_keys: list[str],
            commands: list[Any]) -> Any:
    return script(client, "commit")(keys=script_keys, args=[fence, _pack(commands)])


def test_commit_applies_every_command_in_order_then_the_checkpoint(empty: redis.Redis) -> None:
    empty.set(keys.REV, 4)
    script_keys = [keys.REV, keys.POLICIES, "clr:test:set:a", keys.POLICIES,
                   keys.POLICIES, keys.CHANGES, keys.REV]
    assert _commit(empty, "4", script_keys, [
        ("HSET", "ns/p", as_str(b"\x00blob")),
        ("SADD", "ns/p"),
        ("HSET", "ns/q", "x"),
        ("HDEL", "ns/q"),                           # in order: the set, then the delete
        ("XADD", "5-0", "r", "{}"),
        ("SET", "5"),
    ]) == 1
    assert empty.hgetall(keys.POLICIES) == {b"ns/p": b"\x00blob"}
    assert empty.smembers("clr:test:set:a") == {b"ns/p"}
    assert [entry_id for entry_id, _ in empty.xrange(keys.CHANGES)] == [b"5-0"]
    assert empty.get(keys.REV) == b"5"


def test_commit_fenced_on_a_moved_checkpoint_writes_nothing(empty: redis.Redis) -> None:
    empty.set(keys.REV, 9)  # another writer got there
    with pytest.raises(redis.exceptions.ResponseError,
                       match=r"^CLEARANCE_LOST_SYNC at 9, expected 4"):
        _commit(empty, "4", [keys.REV, keys.POLICIES, keys.REV],
                [("HSET", "ns/p", "x"), ("SET", "5")])
    assert empty.keys("*") == [keys.REV.encode()]
    assert empty.get(keys.REV) == b"9"
    # A flushed store reads as checkpoint 0: a writer fenced elsewhere is refused too.
    empty.flushall()
    with pytest.raises(redis.exceptions.ResponseError, match="at 0, expected 4"):
        _commit(empty, "4", [keys.REV, keys.REV], [("SET", "5")])
    assert empty.keys("*") == []


def test_commit_refuses_keys_its_commands_do_not_account_for_and_writes_nothing(
        empty: redis.Redis) -> None:
    commands = [("HSET", "ns/p", "x"), ("SADD", "m"), ("SET", "5")]
    for script_keys in ([keys.REV, keys.POLICIES, keys.REV],                 # one short
                        [keys.REV, keys.POLICIES, keys.NAMESPACES, keys.REV, keys.REV]):
        with pytest.raises(redis.exceptions.ResponseError, match="KEYS holds"):
            _commit(empty, "", script_keys, commands)
        assert empty.keys("*") == []


def test_commit_edge_cases_only_a_checkpoint_and_a_huge_batch(empty: redis.Redis) -> None:
    assert _commit(empty, "", [keys.REV, keys.REV], [("SET", "1")]) == 1  # no writes
    assert empty.keys("*") == [keys.REV.encode()]
    # 20,000 commands on 20,000 keys of their own (a Group listing 20,000 users).
    users = [f"clr:test:member:user-{n}" for n in range(20_000)]
    commands = [("SADD", "team")] * len(users)
    assert _commit(empty, "1", [keys.REV, *users, keys.REV], [*commands, ("SET", "2")]) == 1
    assert empty.get(keys.REV) == b"2"
    assert empty.smembers(users[0]) == empty.smembers(users[-1]) == {b"team"}
    assert len(empty.keys("clr:test:member:*")) == 20_000


async def test_a_batch_passes_each_commands_key_and_commits_through_the_script(
        clean_servers: Servers) -> None:
    r = aioredis.from_url(clean_servers.redis_url)
    try:
        batch = Batch()
        for seq in (1, 2, 3):
            with batch.event(seq, kind="group") as tx:
                tx.put_group(f"g{seq}", None, ["alice", f"bob{seq}"])
        script_keys, _ = batch.script_input()
        assert script_keys[0] == script_keys[-1] == keys.REV
        assert {keys.GROUPS, keys.CHANGES} <= set(script_keys)
        committer = Committer(r)
        committer.expected = 0
        await committer.commit(batch)
        assert await r.get(keys.REV) == b"3"
        assert set(await r.hkeys(keys.GROUPS)) == {b"g1", b"g2", b"g3"}
        assert len(await r.xrange(keys.CHANGES)) == 3
        committer.expected = 2  # as if another writer had moved it
        again = Batch()
        with again.event(4) as tx:
            tx.put_group("g4", None, ["carol"])
        with pytest.raises(LostSync):
            await committer.commit(again)
        assert not await r.hexists(keys.GROUPS, "g4")
    finally:
        await r.aclose()


# invalidate (its calls' semantics: test_apply_calls.py, test_invalidate_within.py) -----


def test_invalidate_refuses_keys_its_calls_do_not_account_for(empty: redis.Redis) -> None:
    empty.set(keys.REV, 5)
    empty.set(keys.cache_entry("a"), b"x")
    empty.zadd(keys.CACHE_ALL, {keys.cache_entry("a"): 0})
    empty.sadd(keys.cache_by_user("a"), keys.cache_entry("a"))
    script_keys, args = pack_calls([("i", [keys.cache_by_user("a")], ["5", "0"])])
    for wrong in (script_keys[:-1], [*script_keys, keys.cache_by_user("b")]):
        with pytest.raises(redis.exceptions.ResponseError, match="KEYS holds"):
            script(empty, "invalidate")(keys=wrong, args=args)
        assert empty.exists(keys.cache_entry("a"))
        assert empty.get(keys.INVALIDATED_REV) is None
    assert script(empty, "invalidate")(keys=script_keys, args=args) == [1]
    assert empty.get(keys.INVALIDATED_REV) == b"5"


def test_invalidate_with_no_calls_changes_nothing(empty: redis.Redis) -> None:
    empty.mset({keys.REV: 5, keys.INVALIDATED_REV: 3})
    script_keys, args = pack_calls([])
    assert script(empty, "invalidate")(keys=script_keys, args=args) == []
    assert empty.get(keys.INVALIDATED_REV) == b"3"


def test_invalidate_every_entry_and_a_principal(empty: redis.Redis) -> None:
    empty.set(keys.REV, 5)
    for n in range(3):
        empty.set(keys.cache_entry(f"e{n}"), b"x")
        empty.zadd(keys.CACHE_ALL, {keys.cache_entry(f"e{n}"): 0})
    empty.sadd(keys.cache_by_principal("p"), keys.cache_entry("e0"))
    one = pack_calls([("i", [keys.cache_by_principal("p")], ["0", "0"])])
    assert script(empty, "invalidate")(keys=one[0], args=one[1]) == [1]
    every = pack_calls([("i", [], ["0", "1"])])
    assert script(empty, "invalidate")(keys=every[0], args=every[1]) == [2]
    # Revision "0": none moved; the epoch counts both calls (a clear is an invalidation).
    assert sorted(empty.keys("*")) == [keys.INVALIDATED_EPOCH.encode(), keys.REV.encode()]
    assert empty.get(keys.INVALIDATED_EPOCH) == b"2"


def test_the_epoch_moves_with_every_call_that_names_entries(empty: redis.Redis) -> None:
    """Whether or not it deletes anything (the entry a decision process read may have
    expired since), and whether or not it moves the revision; a call naming no entry
    (an event that concerns no cached answer) leaves it."""
    empty.mset({keys.REV: 5, keys.INVALIDATED_REV: 3})
    calls = pack_calls([("i", [keys.cache_by_user("nobody")], ["4", "0"]),
                        ("i", [], ["5", "0"])])
    assert script(empty, "invalidate")(keys=calls[0], args=calls[1]) == [0, 0]
    assert empty.get(keys.INVALIDATED_EPOCH) == b"1"
    assert empty.get(keys.INVALIDATED_REV) == b"5"
    replayed = pack_calls([("i", [keys.cache_by_group("g")], ["4", "0"])])
    assert script(empty, "invalidate")(keys=replayed[0], args=replayed[1]) == [0]
    assert empty.get(keys.INVALIDATED_EPOCH) == b"2"  # the revision stayed at 5


# sweep --------------------------------------------------------------------------------


def test_sweep_drops_dangling_members_and_keeps_live_ones(empty: redis.Redis) -> None:
    live, gone = keys.cache_entry("live"), keys.cache_entry("gone")
    empty.set(live, b"x")
    empty.sadd(keys.cache_by_user("a"), live, gone)
    empty.sadd(keys.cache_by_group("g"), gone)
    sweep = script(empty, "sweep")
    assert sweep(keys=[keys.cache_by_user("a"), keys.cache_by_group("g")]) == 2
    assert empty.smembers(keys.cache_by_user("a")) == {live.encode()}
    assert not empty.exists(keys.cache_by_group("g"))  # emptied: Valkey drops the set
    assert sweep(keys=[keys.cache_by_user("a")]) == 0
    assert sweep(keys=[]) == 0


# wipe (no script: scanned from Python) -------------------------------------------------


@pytest.fixture
async def aredis(clean_servers: Servers) -> AsyncIterator[aioredis.Redis]:
    r = aioredis.from_url(clean_servers.redis_url)
    yield r
    await r.aclose()


async def _fill_state(r: aioredis.Redis, count: int) -> None:
    """A built store with ``count`` derived keys of every family, operational keys and a
    key that is not Clearance's."""
    await r.mset({keys.REV: 9, keys.BUILT: "9:old", keys.INVALIDATED_REV: 9,
                  "other:key": "kept"})
    await r.hset(keys.service("compiler"), "revision", 9)
    await r.hset(keys.STATS, "hits", 3)
    await r.xadd(keys.CHANGES, {"r": "{}"}, id="9-0")
    async with r.pipeline(transaction=False) as pipe:
        for n in range(count):
            pipe.sadd(f"clr:test:set:u{n}", "ns/p")
            pipe.set(keys.cache_entry(f"d{n}"), b"x", px=600_000)
            pipe.zadd(keys.CACHE_ALL, {keys.cache_entry(f"d{n}"): 0})
        await pipe.execute()


async def test_wipe_deletes_every_derived_key_page_by_page_and_marks_the_build(
        aredis: aioredis.Redis) -> None:
    await _fill_state(aredis, 3000)  # 6,000 keys and more: several SCAN pages
    removed = await StateStore(aredis).wipe(12)
    assert removed == 6000 + 5     # the entries, the index sets, and the five fixed keys
    left = {k.decode() for k in await aredis.keys("*")}
    assert left == {keys.service("compiler"), keys.STATS, "other:key", keys.BUILT,
                    keys.ALLOW_UNSET, keys.ADMIN_NAMESPACES, keys.LAYOUT_KEY}
    assert (await aredis.get(keys.BUILT) or b"").startswith(b"12:")
    assert await StateStore(aredis).position() == (None, True)
    assert await aredis.hget(keys.STATS, "hits") == b"3"


async def test_while_a_wipe_scans_every_reader_sees_a_lost_store(
        aredis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    await _fill_state(aredis, 2500)
    await aredis.set(keys.BUILT, "0:old")   # a state whose readers need no revision
    await aredis.mset({keys.REV: 0, keys.INVALIDATED_REV: 0})
    cache = DecisionCache(aredis, ttl_seconds=60)
    assert (await cache.lookup([keys.cache_entry("d1")])).blobs == [b"x"]
    seen: list[Any] = []
    real_scan = aredis.scan

    async def scan_and_read(*args: Any, **kwargs: Any) -> Any:
        # Mid-wipe, part of the old state still there: nothing of it may be served,
        # and a store computed from it is refused.
        with pytest.raises(Unavailable, match="lost"):
            await cache.lookup([keys.cache_entry("d2499")])
        seen.append(await cache.store("0@0:old", [_entry("late", keys.cache_by_user("u"))]))
        seen.append((await StateStore(aredis).position())[1])
        return await real_scan(*args, **kwargs)

    monkeypatch.setattr(aredis, "scan", scan_and_read)
    await StateStore(aredis).wipe(0)
    assert len(seen) >= 2 * 3 and not any(seen)   # several pages; refused, not built
    assert not await aredis.exists(keys.cache_entry("late"), keys.cache_entry("d2499"))
    assert (await cache.lookup([keys.cache_entry("d1")])).blobs == [None]


async def test_a_wipe_killed_half_way_leaves_a_lost_store_the_next_wipe_finishes(
        aredis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    await _fill_state(aredis, 2500)
    real_scan = aredis.scan
    pages = 0

    async def scan_then_die(*args: Any, **kwargs: Any) -> Any:
        nonlocal pages
        pages += 1
        if pages == 2:
            raise redis.exceptions.ConnectionError("the compiler died here")
        return await real_scan(*args, **kwargs)

    monkeypatch.setattr(aredis, "scan", scan_then_die)
    with pytest.raises(redis.exceptions.ConnectionError):
        await StateStore(aredis).wipe(4)
    assert await StateStore(aredis).position() == (None, False)  # rebuilt on restart
    assert await aredis.dbsize() > 1000                           # one page went
    monkeypatch.setattr(aredis, "scan", real_scan)
    await StateStore(aredis).wipe(4)
    assert not await aredis.keys("clr:pidx:*") and not await aredis.keys("clr:dc3:*")
    assert (await StateStore(aredis).position())[1]



# the invalidator's reads of several records ------------------------------------------


async def _backlog(r: aioredis.Redis, *, cached: bool) -> None:
    """Records 1..3 (2 names user "a"), and — ``cached`` — an answer cached for "a"."""
    encode = msgspec.json.Encoder().encode
    await r.mset({keys.REV: 3, keys.BUILT: "3:b"})
    for seq in (1, 2, 3):
        scope = Affected(users={"a"}) if seq == 2 else Affected()
        await r.xadd(keys.CHANGES, {"r": encode(ChangeRecord(revision=seq, invalidate=scope))},
                     id=f"{seq}-0")
    entry = keys.cache_entry("a")
    await r.sadd(keys.cache_by_user("a"), entry)  # dangling unless cached
    if cached:
        await r.set(entry, b"x", px=60_000)
        await r.zadd(keys.CACHE_ALL, {entry: 0})


@pytest.mark.parametrize("cached", [True, False])
async def test_a_backlog_read_deletes_what_is_cached_and_reaches_its_last_record(
        clean_servers: Servers, aredis: aioredis.Redis, cached: bool) -> None:
    await _backlog(aredis, cached=cached)
    nc = await nats.connect(clean_servers.nats_url)
    try:
        await Invalidator(nc, aredis)._step()
        assert await aredis.get(keys.INVALIDATED_REV) == b"3"
        assert not await aredis.exists(keys.cache_entry("a"))
        # Cached, the answer and its index set went; with nothing cached the set names
        # no live entry, and is left to the sweep.
        assert bool(await aredis.exists(keys.cache_by_user("a"))) is not cached
    finally:
        await nc.close()
