-- Shared prelude: fencing tokens. KEYS[FENCE] is the counter key.
-- A counter that expired restarts from Redis time in microseconds, which is
-- above anything it handed out before (one grant per microsecond is far
-- beyond what one key sees), so tokens stay monotonic.
local function next_fence(key, ttl_ms)
  local fence
  if redis.call('EXISTS', key) == 1 then
    fence = redis.call('INCR', key)
  else
    local t = redis.call('TIME')
    fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', key, string.format('%d', fence))
  end
  redis.call('PEXPIRE', key, ttl_ms)
  return fence
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
