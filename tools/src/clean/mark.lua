-- Re-arms holder ARGV[1] of the mark KEYS[1] for ARGV[2] seconds of Redis's clock,
-- and the whole key's TTL with it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], ARGV[1], now + tonumber(ARGV[2]) * 1000)
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
