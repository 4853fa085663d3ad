-- invalidate: apply a sequence of invalidation calls — whole ("i") and narrowed ("n") —
-- in order, and advance the system revision as they complete.
--
-- KEYS[1]  clr:inval:rev  the system revision
-- KEYS[2]  clr:rev        the compiler's checkpoint (the revision never passes it)
-- KEYS[3]  clr:dci:all    every live cache entry
-- KEYS[4]  clr:inval:epoch  how many calls that name entries have run (each adds one)
-- KEYS[5…] the calls' index sets, each call's in turn (a call takes the next n)
-- ARGV[1]  the prefix of cached answers' keys (clr:dc3:; the narrowed call reads only
--          those, and drops every other member: cached explanations)
-- ARGV[2]  msgpack [[name, n, [arg, …]], …]: each call, its number of keys, its arguments
--   "i" (whole): the entries listed in its index sets go, and so do the sets.
--        arg 1: the revision it reaches (0: none); arg 2: "1" = every entry goes;
--        arg 3 (optional) > 0: its last arg 3 sets are cluster sets ("within") and, of
--        the other sets' (users', groups'), only the entries also in one of them go;
--        arg 4 (optional): the revision of the record before it in the same call: the
--        revision moves only once it got there, so a record whose call failed is never
--        passed by the calls queued after it (they still delete: more misses, never a
--        stale answer). The revision never passes the compiler's checkpoint: a record
--        read before the store was wiped for a rebuild must not announce a revision the
--        rebuilt state has not reached.
--   "n" (narrowed): of the entries in its sets (users', groups'), those the narrowing
--        drops (clearance_core.folding.narrowing.Narrow.drops over each entry's header) and every
--        cached explanation go; arg 1: msgpack [clusters | nil, after | nil]. Moves no
--        revision: the "i" call after it does.
-- Returns  each call's count of entries deleted; or an error, with the calls before the
--          failing one applied and the revision where they left it.
--
-- The epoch: every call that names entries (an index set, or every entry) adds one,
-- whether or not it found any to delete and whether or not it moves the revision, in
-- the same step as its deletions. A decision process reuses a reply it read from an
-- entry only while the epoch (with the revision and the build) is where it was when it
-- read it: the entry may have expired since, so whether this call deleted anything
-- cannot tell it whether its reply is still the answer. Counted per call, the epoch
-- ends where the same calls one by one would leave it.
--
-- The entries deleted are the members of the index sets in KEYS (or, for "every entry",
-- of clr:dci:all): which they are is known only inside the script, at the moment it runs
-- — read first and passed in, an entry stored in between would escape. Atomic: the
-- deletions of a call and the revision it reaches are one step for readers, so a
-- decision never sees a revision before its stale entries are gone.
--
-- The revisions and whether anything is cached are read once per script call, however
-- many calls it makes (three commands per record were a quarter of Valkey's time
-- applying a backlog), and the revision reached is written once: the same as each call
-- writing its own, since nothing else runs while a script does. With nothing cached (a
-- fresh install, a rebuild after the store was lost) no call has anything to delete:
-- every live entry is listed in clr:dci:all, and an entry stored later was computed from
-- a state that already holds the change (stores are fenced on the compiled state), so
-- the calls skip the index sets (dangling members are the sweep's). A call that removed
-- entries reads it again: the next call then does what it would alone.
local REVISION, COMPILED, ALL, EPOCH = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ENTRY_PREFIX = ARGV[1]
-- Keys per call of a variadic command: Lua's unpack takes a few thousand values at most.
local CHUNK = 1000

-- Strings compare byte by byte: Lua's `<` follows the server's locale.
local function before(a, b)
  if a == b then return false end
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local function narrowed(sets, args, rev)
  local spec = cmsgpack.unpack(args[1])
  local clusters = nil
  if type(spec[1]) == 'table' then
    clusters = {}
    for _, c in ipairs(spec[1]) do clusters[c] = true end
  end
  local after = spec[2]
  if type(after) ~= 'string' then after = nil end
  -- An entry's blob starts with a 2-byte length, then msgpack [cluster | false, order | nil].
  local function kept(k)
    if string.sub(k, 1, #ENTRY_PREFIX) ~= ENTRY_PREFIX then return false end
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
  for _, idx in ipairs(sets) do
    for _, k in ipairs(redis.call('SMEMBERS', idx)) do
      if not kept(k) then
        n = n + redis.call('DEL', k)
        redis.call('ZREM', ALL, k)
        redis.call('SREM', idx, k)
        touched = true
      end
    end
  end
  if touched then rev.cached = redis.call('EXISTS', ALL) == 1 end
  return n
end

local function invalidate(sets, args, rev)
  local n = 0
  local touched = false
  local within = tonumber(args[3] or '0')
  local subjects = #sets - within
  if not rev.cached then
    within, subjects = 0, 0
  end
  if within > 0 then
    -- One native intersection per (cluster, subject) pair: Valkey walks the smaller set,
    -- so the cost is the subjects named plus their entries about these clusters, never
    -- the cluster's other entries or the subjects' entries elsewhere. (Probing each
    -- cluster entry in every subject set cost entries x subjects calls: a quarter of a
    -- second for 50 entries and a change naming 500 groups and their 10,000 members.)
    for w = subjects + 1, #sets do
      if redis.call('SCARD', sets[w]) > 0 then
        for i = 1, subjects do
          for _, k in ipairs(redis.call('SINTER', sets[w], sets[i])) do
            touched = true
            n = n + redis.call('DEL', k)
            redis.call('ZREM', ALL, k)
            redis.call('SREM', sets[w], k)
            redis.call('SREM', sets[i], k)
          end
        end
      end
    end
    subjects = 0
  end
  -- Whole subjects: their entries (one SUNION, not one SMEMBERS per set), then the sets,
  -- a few calls per chunk of keys, not two per set: a policy change names its groups'
  -- members too, and two calls for each of them were most of Valkey's time applying a
  -- rebuild.
  for first = 1, subjects, CHUNK do
    local last = math.min(first + CHUNK - 1, subjects)
    local entries = redis.call('SUNION', unpack(sets, first, last))
    if #entries > 0 then touched = true end
    for at = 1, #entries, CHUNK do
      local chunk = {unpack(entries, at, math.min(at + CHUNK - 1, #entries))}
      n = n + redis.call('DEL', unpack(chunk))
      redis.call('ZREM', ALL, unpack(chunk))
    end
    redis.call('DEL', unpack(sets, first, last))
  end
  if args[2] == '1' and rev.cached then
    for _, k in ipairs(redis.call('ZRANGE', ALL, 0, -1)) do
      n = n + redis.call('DEL', k)
    end
    redis.call('DEL', ALL)
    touched = true
  end
  if touched then rev.cached = redis.call('EXISTS', ALL) == 1 end
  local revision = tonumber(args[1])
  local after = tonumber(args[4] or '0')
  if revision > rev.current and revision <= rev.compiled and rev.current >= after then
    rev.current, rev.text = revision, args[1]
  end
  return n
end

local calls = cmsgpack.unpack(ARGV[2])
-- The calls' keys must be exactly KEYS[5…]: checked before any deletion.
local wanted = 4
for _, call in ipairs(calls) do
  if type(call[2]) ~= 'number' or call[2] < 0 then
    return redis.error_reply('invalidate: a call without its number of keys')
  end
  wanted = wanted + call[2]
end
if wanted ~= #KEYS then
  return redis.error_reply('invalidate: the calls name ' .. (wanted - 4) ..
                           ' keys, KEYS holds ' .. (#KEYS - 4))
end

local rev = {current = tonumber(redis.call('GET', REVISION) or '0'),
             compiled = tonumber(redis.call('GET', COMPILED) or '0'),
             cached = redis.call('EXISTS', ALL) == 1}
local counts = {}
local named = 0
local ok, err = pcall(function()
  local at = 4
  for i, call in ipairs(calls) do
    local sets = {}
    for j = 1, call[2] do sets[j] = KEYS[at + j] end
    at = at + call[2]
    if call[2] > 0 or (call[1] ~= 'n' and call[3][2] == '1') then
      named = named + 1
    end
    if call[1] == 'n' then
      counts[i] = narrowed(sets, call[3], rev)
    else
      counts[i] = invalidate(sets, call[3], rev)
    end
  end
end)
-- The revision reached by the calls that completed, even when a later one failed (and
-- the epoch counting them, and the one that failed: it may have deleted some entries).
if rev.text then redis.call('SET', REVISION, rev.text) end
if named > 0 then redis.call('INCRBY', EPOCH, named) end
if not ok then
  if type(err) == 'table' then return err end
  return redis.error_reply(tostring(err))
end
return counts
