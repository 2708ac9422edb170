local items = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, m in ipairs(items) do
  redis.call('ZADD', KEYS[1], 'XX', ARGV[3], m)
end
return items
