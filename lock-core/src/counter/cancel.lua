-- Gives the order KEYS[4]'s held units back.
-- Returns {status, available}: 1 = cancelled, 2 = already confirmed,
-- 0 = no live hold.
local order = ARGV[1]
if redis.call('ZSCORE', KEYS[2], order) then
  local q = tonumber(redis.call('HGET', KEYS[3], order) or '0')
  redis.call('ZREM', KEYS[2], order)
  redis.call('HDEL', KEYS[3], order)
  redis.call('HINCRBY', KEYS[3], '{total}', -q)
  tidy()
  return {1, available() or 0}
end
if redis.call('GET', KEYS[4]) == 'confirmed' then return {2, 0} end
return {0, 0}
