-- Shared prelude of every stock script: gives back the stock of expired
-- reservation holds, on Redis time, so a client that crashed after reserving
-- loses nothing. KEYS[1] stock, KEYS[2] holds (zset order -> expiry ms),
-- KEYS[3] held (hash order -> quantity).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function reclaim(now)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 256)
  for _, order in ipairs(expired) do
    local q = tonumber(redis.call('HGET', KEYS[3], order) or '0')
    if q > 0 and redis.call('EXISTS', KEYS[1]) == 1 then
      redis.call('INCRBY', KEYS[1], q)
    end
    redis.call('HDEL', KEYS[3], order)
    redis.call('ZREM', KEYS[2], order)
  end
end
local now = now_ms()
reclaim(now)
