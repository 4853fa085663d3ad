-- cache_put: store cached decisions, each group only if the compiled state it was
-- computed from is still the current one.
--
-- KEYS[1]  clr:built      the rebuild marker
-- KEYS[2]  clr:rev        the compiler's checkpoint
-- KEYS[3]  clr:dci:all    every live entry, scored with its expiry (ms, server clock)
-- KEYS[4…] for each entry in ARGV's order: its key, then the n index sets it joins
-- ARGV[1]  msgpack [[state, [[blob, ttl_ms, n], …]], …]: groups of entries computed from
--          one state each ("<checkpoint>@<build>")
-- Returns  per group, how many entries were written (0: its state moved on).
--
-- Atomic: the fence (state still "<clr:rev>@<clr:built>") and the writes it guards run
-- with nothing in between, so an invalidation can never be overtaken by a slow writer,
-- nor an answer computed before a wipe land in the rebuilt state. Stores of concurrent
-- requests travel together, but each group is fenced on its own state. One packed
-- argument rather than one per field: the client's per-argument work was a visible part
-- of a cache miss (the keys are the arguments left; in order, not each once: looking
-- each up to pass it once cost the client more than the few it saved). clr:dci:all
-- scores each entry with its expiry by the server's clock, the one its PX follows: the
-- invalidator skips its work when that set is empty and the "all" invalidation deletes
-- what it lists, so it must list every live entry whatever the decision hosts' clocks
-- say. Index sets carry no TTL (an evicted index would leave live entries no
-- invalidation reaches); only entries do.
local built = redis.call('GET', KEYS[1]) or ''
local state = (redis.call('GET', KEYS[2]) or '0') .. '@' .. built
local all = KEYS[3]
local groups = cmsgpack.unpack(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The entries account for exactly KEYS[4…] (checked before any write: an entry written
-- without one of its index sets would escape invalidation).
local wanted = 3
for _, group in ipairs(groups) do
  for _, entry in ipairs(group[2]) do
    if type(entry[3]) ~= 'number' or entry[3] < 0 then
      return redis.error_reply('cache_put: an entry without its number of index sets')
    end
    wanted = wanted + 1 + entry[3]
  end
end
if wanted ~= #KEYS then
  return redis.error_reply('cache_put: the entries name ' .. (wanted - 3) ..
                           ' keys, KEYS holds ' .. (#KEYS - 3))
end
local stored = {}
local at = 4
for _, group in ipairs(groups) do
  local written = 0
  local fresh = group[1] == state
  for _, entry in ipairs(group[2]) do
    if fresh then
      local key, ttl = KEYS[at], entry[2]
      redis.call('SET', key, entry[1], 'PX', ttl)
      redis.call('ZADD', all, now + ttl, key)
      for i = at + 1, at + entry[3] do
        redis.call('SADD', KEYS[i], key)
      end
      written = written + 1
    end
    at = at + 1 + entry[3]
  end
  table.insert(stored, written)
end
return stored
