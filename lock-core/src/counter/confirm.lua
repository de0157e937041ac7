-- Makes the order KEYS[4]'s hold final; remembers that for ARGV[1] ms.
-- Returns 1 = confirmed, 2 = already confirmed, 0 = no live hold.
local order = ARGV[2]
if redis.call('ZSCORE', KEYS[2], order) then
  redis.call('ZREM', KEYS[2], order)
  redis.call('HDEL', KEYS[3], order)
  redis.call('SET', KEYS[4], 'confirmed', 'PX', ARGV[1])
  return 1
end
if redis.call('GET', KEYS[4]) == 'confirmed' then return 2 end
return 0
