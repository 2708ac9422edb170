-- `n` writes; `skip[i]`, when set, is write i's error (its due entry failed): both
-- come from the prelude (write_many_prelude.lua or index_many_prelude.lua).
local cap, ttl = tonumber(ARGV[1]), ARGV[2]
local armed = {}
local out = {}
local function failed(r)
  return type(r) == 'table' and r.err
end
for i = 1, n do
  local h = KEYS[i]
  local f, v = ARGV[2 * i + 1], ARGV[2 * i + 2]
  local added = skip[i] or redis.pcall('HSETNX', h, f, v)
  if skip[i] then
    out[i] = skip[i]
  elseif failed(added) then
    out[i] = added.err
  elseif added == 1 then
    local n = redis.pcall('HLEN', h)
    if not failed(n) and n > cap then
      -- Past the cap in fields: count the pending ones (credited fields hold no place).
      local vals = redis.pcall('HVALS', h)
      if failed(vals) then
        n = vals
      else
        n = 0
        for _, x in ipairs(vals) do
          if string.sub(x, 1, 1) ~= '!' then n = n + 1 end
        end
      end
    end
    if failed(n) then
      out[i] = n.err
    elseif n > cap then
      redis.pcall('HDEL', h, f)
      out[i] = 0
    else
      if not armed[h] then
        redis.pcall('EXPIRE', h, ttl)
        armed[h] = true
      end
      out[i] = 1
    end
  else
    local held = redis.pcall('HGET', h, f)
    if failed(held) then
      out[i] = held.err
    elseif held == '!' then
      local w = redis.pcall('HSET', h, f, '!' .. v)
      if failed(w) then out[i] = w.err else out[i] = 2 end
    elseif held and string.sub(held, 1, 1) == '!' then
      out[i] = 2
    else
      if held ~= v then redis.pcall('HSET', h, f, v) end
      out[i] = 1
    end
  end
end
return out
