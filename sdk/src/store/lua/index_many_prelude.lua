local n, skip = #KEYS / 2, {}
for i = 1, n do
  local z = redis.pcall('ZADD', KEYS[n + i], 'NX', ARGV[2 * n + 2 * i + 1], ARGV[2 * n + 2 * i + 2])
  if type(z) == 'table' and z.err then skip[i] = z.err end
end
