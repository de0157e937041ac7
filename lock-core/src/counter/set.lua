-- Sets the available stock to ARGV[1] (creating the item); live holds stay
-- held. Returns 1, or -2 when on hand would pass 2^53 - 1.
local on_hand = tonumber(ARGV[1]) + held_total()
if on_hand > MAX then return -2 end
redis.call('SET', KEYS[1], string.format('%d', on_hand))
return 1
