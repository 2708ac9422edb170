if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  local cap = tonumber(ARGV[3])
  -- Past the cap in fields, count the pending ones: a credited token (or a mark) holds
  -- no place. Over the cap the new field is taken back in the same step.
  if redis.call('HLEN', KEYS[1]) > cap then
    local pending = 0
    for _, v in ipairs(redis.call('HVALS', KEYS[1])) do
      if string.sub(v, 1, 1) ~= '!' then pending = pending + 1 end
    end
    if pending > cap then
      redis.call('HDEL', KEYS[1], ARGV[1])
      return 0
    end
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
