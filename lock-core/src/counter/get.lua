-- Returns the available stock, or -1 for an unknown item.
local s = redis.call('GET', KEYS[1])
if not s then return -1 end
return tonumber(s)
