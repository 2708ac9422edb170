-- The prelude every record script starts with (the Rust side puts it first).
-- A record is one string of ten lines: amount, scene, user, type, activity, state,
-- lease, owner, clean, result.
-- rec_parse(v): the ten lines of a record, or nil when v is not one.
-- rec_join(r): the record of ten lines.
-- failed(r): whether a redis.pcall answer is an error.
-- bad_budget(spent, hold): whether a budget must be refused before any write.
-- now: Redis's clock (TIME), in ms.
local function rec_parse(v)
  if type(v) ~= 'string' then return nil end
  -- One pattern match splits the ten lines.
  local a, b, c, d, e, f, g, h, i, j = string.match(v,
    '^(%d+)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n(.*)$')
  if not a then return nil end
  return {a, b, c, d, e, f, g, h, i, j}
end
local function rec_join(r)
  return table.concat(r, '\n', 1, 10)
end
-- A redis.pcall answer that is an error (a status reply is a table too).
local function failed(r)
  return type(r) == 'table' and r.err ~= nil
end
-- Whether a budget's `spent` is not an integer HINCRBY takes (no leading zeros, no
-- -0, 17 characters at most) or its `hold` not a number (HMGET answers false for a
-- field that is not there).
local function bad_budget(spent, hold)
  if spent and spent ~= '0' and not (#spent <= 17 and string.match(spent, '^%-?[1-9]%d*$')) then
    return true
  end
  return hold and not tonumber(hold)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
