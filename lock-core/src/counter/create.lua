-- Creates the item with ARGV[1] units if it does not exist. Returns 1 when
-- it was created, 0 when it existed (its stock is left as it is).
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
