-- cache_size: how many cached decisions are live.
--
-- KEYS[1]  clr:dci:all    every entry, scored with its expiry (ms, server clock)
-- ARGV     none
-- Returns  the number of live entries.
--
-- Forgets the members whose entry has expired, by the server's clock (the one the
-- entries' PX follows), then counts the rest: atomic, so the count is of one moment.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
