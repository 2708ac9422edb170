local credited = redis.call('HGET', KEYS[2], ARGV[1])
if credited then
  -- Credited before this write landed: the reward service left an empty mark; the
  -- token takes its place in the credited hash, never the pending one.
  if credited == '' then
    redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  end
  return 2
end
local n = redis.call('HLEN', KEYS[1])
if n >= tonumber(ARGV[3]) and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('EXPIRE', KEYS[1], ARGV[4])
end
return 1
