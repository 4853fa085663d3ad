-- trim: drop the change records applied long enough ago.
--
-- KEYS[1]  clr:inval:rev  the system revision (the last record applied)
-- KEYS[2]  clr:rev        the compiler's checkpoint
-- KEYS[3]  clr:changes    the change records (ids "<revision>-0")
-- ARGV[1]  how many revisions of applied records to keep (decision replicas follow them)
-- Returns  how many records were trimmed.
--
-- Trims up to the system revision *as stored*, atomically with reading it: after a
-- rebuild wiped the store, the invalidator's own last revision may be far ahead of the
-- records the compiler is writing again, and trimming to it would drop them unapplied.
local applied = tonumber(redis.call('GET', KEYS[1]) or '0')
local minid = tonumber(redis.call('GET', KEYS[2]) or '0') - tonumber(ARGV[1]) + 1
if applied + 1 < minid then minid = applied + 1 end
if minid <= 1 then return 0 end
return redis.call('XTRIM', KEYS[3], 'MINID', minid .. '-0')
