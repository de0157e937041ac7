-- Holds ARGV[1] units for the order KEYS[4] for ARGV[2] ms.
-- Returns {status, a, b}: 1 = held (a = available after, b = hold ms),
-- 2 = this order already holds (a = its quantity, b = ms left),
-- 3 = this order was already confirmed, 0 = sold out (a = available),
-- -1 = unknown item.
local order = ARGV[3]
if redis.call('GET', KEYS[4]) == 'confirmed' then return {3, 0, 0} end
local expiry = redis.call('ZSCORE', KEYS[2], order)
if expiry then
  return {2, tonumber(redis.call('HGET', KEYS[3], order) or '0'), tonumber(expiry) - now}
end
local avail = available()
if not avail then return {-1, 0, 0} end
local n = tonumber(ARGV[1])
if avail < n then return {0, avail, 0} end
local hold = tonumber(ARGV[2])
redis.call('ZADD', KEYS[2], now + hold, order)
redis.call('HSET', KEYS[3], order, ARGV[1])
redis.call('HINCRBY', KEYS[3], '{total}', n)
tidy()
return {1, avail - n, hold}
