-- Shared prelude: fencing tokens. KEYS[FENCE] is the counter key.
-- Each token is above the last one and at least Redis's time in
-- microseconds. The time is the floor for a counter that expired, and for
-- one a failover lost: a replica promoted before it had the last increment
-- still hands out tokens above every one issued before the failover, as
-- long as the new master's clock is past the time of that last grant (a
-- failover takes far longer than the clocks of two servers differ).
local function next_fence(key, ttl_ms)
  local t = redis.call('TIME')
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local fence = tonumber(redis.call('GET', key) or '0') + 1
  if fence < floor then fence = floor end
  redis.call('SET', key, string.format('%d', fence), 'PX', ttl_ms)
  return fence
end
-- The fencing token of a holding kept in a hash (field 'fence'): issued
-- at its first grant; a re-entry gets the token the owner already holds,
-- which the resource has seen and still admits.
local function holding_fence(hash, key, ttl_ms)
  local fence = tonumber(redis.call('HGET', hash, 'fence') or '')
  if not fence then
    fence = next_fence(key, ttl_ms)
    redis.call('HSET', hash, 'fence', string.format('%d', fence))
  end
  return fence
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
