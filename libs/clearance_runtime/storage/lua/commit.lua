-- commit: the writes of a batch of events and its checkpoint, all or nothing, fenced on
-- the checkpoint this writer last left.
--
-- KEYS[1]  clr:rev        the compiler's checkpoint (the fence)
-- KEYS[2…] the key of each command, in turn (the last: clr:rev, for the checkpoint)
-- ARGV[1]  the expected checkpoint ("" = unfenced)
-- ARGV[2]  msgpack [[command, word, …], …]: each write command without its key; the
--          batch's checkpoint last
-- Returns  1; or the error "CLEARANCE_LOST_SYNC at <rev>, expected <fence>" having
--          written nothing.
--
-- Atomic: Valkey runs a script to its end without interleaving, and the fence and the
-- number of keys are checked before the first write, so a refused or malformed batch
-- writes nothing and a compiler killed before or during the call either reached the
-- store with the whole batch or not at all. One packed argument: packing tens of
-- thousands of separate ones was most of a batch's cost on the client.
if ARGV[1] ~= '' then
  local current = redis.call('GET', KEYS[1]) or '0'
  if current ~= ARGV[1] then
    return redis.error_reply('CLEARANCE_LOST_SYNC at ' .. current .. ', expected ' .. ARGV[1])
  end
end
local commands = cmsgpack.unpack(ARGV[2])
if #commands ~= #KEYS - 1 then
  return redis.error_reply('commit: ' .. #commands .. ' commands, KEYS holds ' ..
                           (#KEYS - 1) .. ' keys for them')
end
for i, command in ipairs(commands) do
  redis.call(command[1], KEYS[i + 1], unpack(command, 2))
end
return 1
