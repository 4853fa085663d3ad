-- cache_put: store cached decisions, each group only if the compiled state it was
-- computed from is still the current one.
--
-- KEYS[1]  clr:built      the rebuild marker
-- KEYS[2]  clr:rev        the compiler's checkpoint
-- KEYS[3]  clr:dci:all    every live entry, scored with its expiry (ms, server clock)
-- KEYS[4…] the entries' keys and the index sets they join, each once (ARGV refers to
--          them by position in KEYS)
-- ARGV[1]  msgpack [[state, [[key, blob, ttl_ms, [index, …]], …]], …]: groups of entries
--          computed from one state each ("<checkpoint>@<build>"); key and index are
--          positions in KEYS
-- Returns  per group, how many entries were written (0: its state moved on).
--
-- Atomic: the fence (state still "<clr:rev>@<clr:built>") and the writes it guards run
-- with nothing in between, so an invalidation can never be overtaken by a slow writer,
-- nor an answer computed before a wipe land in the rebuilt state. Stores of concurrent
-- requests travel together, but each group is fenced on its own state. One packed
-- argument rather than one per field: the client's per-argument work was a visible part
-- of a cache miss. clr:dci:all scores each entry with its expiry by the server's clock,
-- the one its PX follows: the invalidator skips its work when that set is empty and the
-- "all" invalidation deletes what it lists, so it must list every live entry whatever
-- the decision hosts' clocks say. Index sets carry no TTL (an evicted index would leave
-- live entries no invalidation reaches); only entries do.
local built = redis.call('GET', KEYS[1]) or ''
local state = (redis.call('GET', KEYS[2]) or '0') .. '@' .. built
local all = KEYS[3]
local groups = cmsgpack.unpack(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Every position names a key passed in KEYS (checked before any write: a bad argument
-- writes nothing).
for _, group in ipairs(groups) do
  for _, entry in ipairs(group[2]) do
    if KEYS[entry[1]] == nil or entry[1] < 4 then
      return redis.error_reply('cache_put: entry key position out of KEYS')
    end
    for _, index in ipairs(entry[4]) do
      if KEYS[index] == nil or index < 4 then
        return redis.error_reply('cache_put: index position out of KEYS')
      end
    end
  end
end
local stored = {}
for _, group in ipairs(groups) do
  local written = 0
  if group[1] == state then
    for _, entry in ipairs(group[2]) do
      local key, ttl = KEYS[entry[1]], entry[3]
      redis.call('SET', key, entry[2], 'PX', ttl)
      redis.call('ZADD', all, now + ttl, key)
      for _, index in ipairs(entry[4]) do
        redis.call('SADD', KEYS[index], key)
      end
      written = written + 1
    end
  end
  table.insert(stored, written)
end
return stored
