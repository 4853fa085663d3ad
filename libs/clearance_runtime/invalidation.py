"""How cached decisions leave the cache: exact invalidation, narrowed invalidation, and
the sweep of dangling index members (the Lua the cache-invalidator and ``cache.clear``
run), and the entry header the narrowed invalidation reads.

A cached answer's blob starts with a small header — a 2-byte length, then msgpack
``[cluster | false, deciding policy's order | nil]`` — so that a policy or Group change
can drop, of its subjects' entries, only those whose answer it can change
(``clearance_core.folding.narrowing``) without the invalidator parsing whole answers. ``false``
marks a cluster that was not in the inventory when the answer was computed: such an
entry is always dropped.
"""

from __future__ import annotations

import msgspec
import redis.asyncio as aioredis

from clearance_core.folding.narrowing import Narrow
from clearance_runtime import keys
from clearance_runtime.luapack import as_str

_head = msgspec.msgpack.Encoder().encode
#: Longest header (a 2-byte length); a longer one (a huge cluster name) is replaced by
#: the "not in the inventory" header, which every narrowed invalidation drops.
_HEAD_MAX = 0xFFFF


def entry_blob(cluster: str | None, order: str | None, body: bytes) -> bytes:
    """A cached answer's blob: the header for ``cluster`` (None: not in the inventory)
    and ``order`` (of the deciding MonitorAccessPolicy; None: none decided), then the
    answer itself."""
    head = _head((False if cluster is None else cluster, order))
    if len(head) > _HEAD_MAX:
        head = _head((False, None))
    return len(head).to_bytes(2, "big") + head + body


def entry_body(blob: bytes) -> memoryview:
    """The answer of a blob made by :func:`entry_blob`."""
    return memoryview(blob)[2 + int.from_bytes(blob[:2], "big"):]


#: One call of :data:`APPLY`: "i" (INVALIDATE) or "n" (NARROWED), its keys, its arguments.
Call = tuple[str, list[str], list[str | bytes]]


def pack_calls(calls: list[Call]) -> bytes:
    """APPLY's argument. Lua's cmsgpack knows no bin type: a bytes argument (a narrowing)
    travels as a msgpack str, which a Lua string holds whatever its bytes."""
    return _head([(name, call_keys, [as_str(a) if type(a) is bytes else a for a in args])
                  for name, call_keys, args in calls])


def narrow_arg(narrow: Narrow) -> bytes:
    """NARROWED's argument for a narrowing."""
    clusters = None if narrow.clusters is None else sorted(narrow.clusters)
    return _head((clusters, narrow.after))


#: Of the entries in the given index sets (KEYS: users' and groups'), deletes those a
#: narrowing drops — ``clearance_core.folding.narrowing.Narrow.drops`` over each entry's header —
#: and every cached explanation; ARGV[1]: msgpack [clusters | nil, after | nil]. Moves no
#: revision: INVALIDATE, called next for the rest of the record, does. Strings compare
#: byte by byte: Lua's ``<`` follows the server's locale.
_NARROWED_BODY = f"""
local spec = cmsgpack.unpack(ARGV[1])
local clusters = nil
if type(spec[1]) == 'table' then
  clusters = {{}}
  for _, c in ipairs(spec[1]) do clusters[c] = true end
end
local after = spec[2]
if type(after) ~= 'string' then after = nil end
local function before(a, b)
  if a == b then return false end
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
local function kept(k)
  if string.sub(k, 1, {len(keys.ENTRY_PREFIX)}) ~= '{keys.ENTRY_PREFIX}' then return false end
  local v = redis.call('GET', k)
  if not v or #v < 2 then return false end
  local size = string.byte(v, 1) * 256 + string.byte(v, 2)
  local ok, head = pcall(cmsgpack.unpack, string.sub(v, 3, 2 + size))
  if not ok or type(head) ~= 'table' or type(head[1]) ~= 'string' then return false end
  if clusters and not clusters[head[1]] then return true end
  return after ~= nil and type(head[2]) == 'string' and before(head[2], after)
end
local n = 0
local touched = false
if not rev.cached then return n end
for _, idx in ipairs(KEYS) do
  for _, k in ipairs(redis.call('SMEMBERS', idx)) do
    if not kept(k) then
      n = n + redis.call('DEL', k)
      redis.call('ZREM', '{keys.CACHE_ALL}', k)
      redis.call('SREM', idx, k)
      touched = true
    end
  end
end
if touched then rev.cached = redis.call('EXISTS', '{keys.CACHE_ALL}') == 1 end
return n
"""


#: Removes index members whose entry expired or was evicted, one index set at a time.
#: Atomic per set: an entry re-created by _PUT between a check and a removal would
#: otherwise lose its index membership.
SWEEP = """
local removed = 0
for _, idx in ipairs(KEYS) do
  for _, k in ipairs(redis.call('SMEMBERS', idx)) do
    if redis.call('EXISTS', k) == 0 then
      removed = removed + redis.call('SREM', idx, k)
    end
  end
end
return removed
"""

#: Deletes every entry listed in the given index sets (KEYS) and the sets themselves,
#: then advances the invalidated revision (ARGV[1]) — atomically. The system revision
#: never passes the compiler's checkpoint: a record read before the store was wiped for
#: a rebuild must not announce a revision the rebuilt state has not reached.
#: ARGV[3] (optional) > 0: the last ARGV[3] KEYS are cluster index sets ("within"), and
#: of the other sets (users and groups) only the entries also in one of them go.
#: ARGV[4] (optional): the revision of the record before this one in the same pipeline;
#: the revision moves only once it got there, so a record whose call failed is never
#: passed by the calls queued after it (they still delete: more misses, never a stale
#: answer).
#: Keys per call of a variadic command inside the scripts.
CHUNK = 1000
_INVALIDATE_BODY = f"""
local n = 0
local touched = false
local within = tonumber(ARGV[3] or '0')
local subjects = #KEYS - within
if not rev.cached then
  within, subjects = 0, 0
end
if within > 0 then
  -- One native intersection per (cluster, subject) pair: Valkey walks the smaller set,
  -- so the cost is the subjects named plus their entries about these clusters, never
  -- the cluster's other entries or the subjects' entries elsewhere. (Probing each
  -- cluster entry in every subject set cost entries x subjects calls: a quarter of a
  -- second for 50 entries and a change naming 500 groups and their 10,000 members.)
  for w = subjects + 1, #KEYS do
    if redis.call('SCARD', KEYS[w]) > 0 then
      for i = 1, subjects do
        for _, k in ipairs(redis.call('SINTER', KEYS[w], KEYS[i])) do
          touched = true
          n = n + redis.call('DEL', k)
          redis.call('ZREM', '{keys.CACHE_ALL}', k)
          redis.call('SREM', KEYS[w], k)
          redis.call('SREM', KEYS[i], k)
        end
      end
    end
  end
  subjects = 0
end
-- Whole subjects: their entries (one SUNION, not one SMEMBERS per set), then the sets,
-- a few calls per chunk of keys, not two per set: a policy change names its groups'
-- members too (reach_members), and two calls for each of them were most of Valkey's
-- time applying a rebuild. (Chunks: Lua's unpack takes a few thousand values at most.)
for first = 1, subjects, {CHUNK} do
  local last = math.min(first + {CHUNK} - 1, subjects)
  local entries = redis.call('SUNION', unpack(KEYS, first, last))
  if #entries > 0 then touched = true end
  for at = 1, #entries, {CHUNK} do
    local chunk = {{unpack(entries, at, math.min(at + {CHUNK} - 1, #entries))}}
    n = n + redis.call('DEL', unpack(chunk))
    redis.call('ZREM', '{keys.CACHE_ALL}', unpack(chunk))
  end
  redis.call('DEL', unpack(KEYS, first, last))
end
if ARGV[2] == '1' and rev.cached then
  for _, k in ipairs(redis.call('ZRANGE', '{keys.CACHE_ALL}', 0, -1)) do
    n = n + redis.call('DEL', k)
  end
  redis.call('DEL', '{keys.CACHE_ALL}')
  touched = true
end
if touched then rev.cached = redis.call('EXISTS', '{keys.CACHE_ALL}') == 1 end
local revision = tonumber(ARGV[1])
local after = tonumber(ARGV[4] or '0')
if revision > rev.current and revision <= rev.compiled and rev.current >= after then
  rev.current, rev.text = revision, ARGV[1]
end
return n
"""
#: What the calls of one script read once, however many calls it makes (three commands
#: per record were a quarter of Valkey's time applying a backlog): the revisions
#: INVALIDATE compares with, and whether any entry is cached at all; and the write of
#: the revision reached: the same as each call writing its own, since nothing else runs
#: while a script does. With nothing cached (a fresh install, a rebuild after the store
#: was lost) no call has anything to delete: every live entry is listed in
#: ``clr:dci:all`` (a member leaves it only with its entry, or once the entry's TTL, by
#: the server's clock, has passed), and an entry stored later was computed from a state
#: that already holds the change (stores are fenced on the compiled state), so they
#: delete nothing and skip the index sets (dangling members are the sweep's). A call
#: that removed entries reads it again: the next call then does what it would alone.
_PREAMBLE = f"""
local rev = {{current = tonumber(redis.call('GET', '{keys.INVALIDATED_REV}') or '0'),
             compiled = tonumber(redis.call('GET', '{keys.REV}') or '0'),
             cached = redis.call('EXISTS', '{keys.CACHE_ALL}') == 1}}
local function settle()
  if rev.text then redis.call('SET', '{keys.INVALIDATED_REV}', rev.text) end
end
"""
NARROWED = f"""
local function narrowed(KEYS, ARGV, rev)
{_NARROWED_BODY}end
{_PREAMBLE}
return narrowed(KEYS, ARGV, rev)
"""
INVALIDATE = f"""
local function invalidate(KEYS, ARGV, rev)
{_INVALIDATE_BODY}end
{_PREAMBLE}
local n = invalidate(KEYS, ARGV, rev)
settle()
return n
"""

#: Many INVALIDATE and NARROWED calls in one script call, in order (ARGV[1]: msgpack list
#: of [name, keys, args], name "i" or "n", every key and argument a string); returns
#: each call's count. The same code as the single calls, run as functions: applying a
#: read of change records as one call per record cost the invalidator more in
#: redis-py's pipeline (packing each call, parsing each reply) than everything else.
#: A call that fails stops the script with the calls before it applied and the revision
#: where they left it: each call moves it only after its own deletions, and only past
#: the record before it.
APPLY = f"""
local function invalidate(KEYS, ARGV, rev)
{_INVALIDATE_BODY}end
local function narrowed(KEYS, ARGV, rev)
{_NARROWED_BODY}end
{_PREAMBLE}
local counts = {{}}
local ok, err = pcall(function()
  for i, call in ipairs(cmsgpack.unpack(ARGV[1])) do
    if call[1] == 'n' then
      counts[i] = narrowed(call[2], call[3], rev)
    else
      counts[i] = invalidate(call[2], call[3], rev)
    end
  end
end)
-- The revision reached by the calls that completed, even when a later one failed.
settle()
if not ok then
  if type(err) == 'table' then return err end
  return redis.error_reply(tostring(err))
end
return counts
"""




async def sweep(redis: aioredis.Redis, *, batch: int = 200) -> int:
    """Drop dangling members (expired or evicted entries) from every cache index set;
    returns how many. Index sets never expire, so without this they only grow."""
    script = redis.register_script(SWEEP)
    removed, cursor = 0, 0
    while True:
        cursor, found = await redis.scan(cursor, match="clr:dci:[ugcpw]:*", count=batch)
        if found:
            removed += int(await script(keys=list(found)))
        if cursor == 0:
            return removed
