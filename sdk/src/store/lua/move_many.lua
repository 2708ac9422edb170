local expired = {}
local out = {}
for i = 2, #ARGV do
  local pending, credited = KEYS[2 * i - 3], KEYS[2 * i - 2]
  local v = redis.call('HGET', pending, ARGV[i])
  if v then
    redis.call('HSET', credited, ARGV[i], v)
    redis.call('HDEL', pending, ARGV[i])
    out[#out + 1] = 1
  else
    -- Not stored yet (its write still retrying): an empty mark, so the late write
    -- lands here instead of in the pending hash.
    redis.call('HSETNX', credited, ARGV[i], '')
    out[#out + 1] = 0
  end
  if not expired[credited] then
    redis.call('EXPIRE', credited, ARGV[1])
    expired[credited] = true
  end
end
return out
