local cap, ttl = tonumber(ARGV[1]), ARGV[2]
local lens = {}
local armed = {}
local out = {}
local function failed(r)
  return type(r) == 'table' and r.err
end
for i = 1, #KEYS / 2 do
  local p, c = KEYS[2 * i - 1], KEYS[2 * i]
  local f, v = ARGV[2 * i + 1], ARGV[2 * i + 2]
  local credited = redis.pcall('HGET', c, f)
  if failed(credited) then
    out[i] = credited.err
  elseif credited then
    local r = 2
    if credited == '' then
      local w = redis.pcall('HSET', c, f, v)
      if failed(w) then r = w.err end
    end
    out[i] = r
  else
    local n = lens[p]
    if n == nil then n = redis.pcall('HLEN', p) end
    if failed(n) then
      out[i] = n.err
    else
      local held = 0
      if n >= cap then held = redis.pcall('HEXISTS', p, f) end
      if failed(held) then
        out[i] = held.err
      elseif n >= cap and held == 0 then
        lens[p] = n
        out[i] = 0
      else
        local added = redis.pcall('HSET', p, f, v)
        if failed(added) then
          out[i] = added.err
        else
          if added == 1 and not armed[p] then
            redis.pcall('EXPIRE', p, ttl)
            armed[p] = true
          end
          lens[p] = n + added
          out[i] = 1
        end
      end
    end
  end
end
return out
