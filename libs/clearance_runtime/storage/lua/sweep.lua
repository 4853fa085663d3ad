-- sweep: drop the members of cache index sets whose entry expired or was evicted.
--
-- KEYS     the index sets to sweep (clr:dci:[ugcpw]:…)
-- ARGV     none
-- Returns  how many members were removed.
--
-- The entry keys probed are the members of the sets in KEYS: which they are is known
-- only inside the script, at the moment it runs (passing them in would need a read of
-- each set first, and a member added in between would be missed). Atomic per call: an
-- entry re-created by cache_put between the probe and the removal would otherwise lose
-- its index membership, and then escape invalidation.
local removed = 0
for _, idx in ipairs(KEYS) do
  for _, k in ipairs(redis.call('SMEMBERS', idx)) do
    if redis.call('EXISTS', k) == 0 then
      removed = removed + redis.call('SREM', idx, k)
    end
  end
end
return removed
