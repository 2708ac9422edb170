-- The helper of the scripts that take a grant's fields packed (MessagePack strings,
-- one after the other, in one argument).
-- unpack_fields(arg, want): the fields of arg when they are exactly `want` strings;
-- nil for a missing argument, another count, or a value that is not a string (the
-- nil a field too long for a header packs to). cmsgpack.unpack raises a Lua error on
-- bytes it cannot read; the scripts call it before their first write, so that error
-- too leaves everything as it was.
local function counted(...)
  return select('#', ...), {...}
end
local function unpack_fields(arg, want)
  -- select('#') counts every value unpacked, nils too (a table's length does not).
  local n, g = counted(cmsgpack.unpack(arg or ''))
  if n ~= want then return nil end
  for j = 1, want do
    if type(g[j]) ~= 'string' then return nil end
  end
  return g
end
