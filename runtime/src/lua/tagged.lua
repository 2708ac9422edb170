local __tag = table.remove(ARGV)
local __r = (function()
--[[body]]
end)()
if type(__r) == 'table' and __r.err then return __r end
if type(__r) == 'table' and __r.ok then return {__tag, __r.ok} end
return {__tag, __r}
