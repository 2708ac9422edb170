if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  -- A new field: over the cap it is taken back in the same step, so nobody sees it.
  if redis.call('HLEN', KEYS[1]) > tonumber(ARGV[3]) then
    redis.call('HDEL', KEYS[1], ARGV[1])
    return 0
  end
  redis.call('EXPIRE', KEYS[1], ARGV[4])
  return 1
end
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held == '!' then
  -- Credited before this write landed: the service left a mark; the token takes its
  -- place, credited, never pending.
  redis.call('HSET', KEYS[1], ARGV[1], '!' .. ARGV[2])
  return 2
end
if string.sub(held, 1, 1) == '!' then return 2 end
if held ~= ARGV[2] then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 1
