-- Makes the order KEYS[4]'s hold final: its units are sold. Remembers that
-- for ARGV[1] ms.
-- Returns 1 = confirmed, 2 = already confirmed, 0 = no live hold.
local order = ARGV[2]
if redis.call('ZSCORE', KEYS[2], order) then
  local q = tonumber(redis.call('HGET', KEYS[3], order) or '0')
  redis.call('ZREM', KEYS[2], order)
  redis.call('HDEL', KEYS[3], order)
  redis.call('HINCRBY', KEYS[3], '{total}', -q)
  if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('DECRBY', KEYS[1], q) end
  redis.call('SET', KEYS[4], 'confirmed', 'PX', ARGV[1])
  tidy()
  return 1
end
if redis.call('GET', KEYS[4]) == 'confirmed' then return 2 end
return 0
