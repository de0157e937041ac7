-- Adds ARGV[1] units. Returns the available stock, -1 for an unknown item,
-- -2 when on hand would pass 2^53 - 1 (nothing is added).
local s = redis.call('GET', KEYS[1])
if not s then return -1 end
local on_hand = tonumber(s) + tonumber(ARGV[1])
if on_hand > MAX then return -2 end
redis.call('SET', KEYS[1], string.format('%d', on_hand))
return on_hand - held_total()
