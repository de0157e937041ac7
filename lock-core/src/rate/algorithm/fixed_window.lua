-- Fixed window over several quotas, all or nothing.
-- KEYS[i]: the counter of quota i (window starts at its first hit).
-- ARGV[1]: cost (0 = just look; -n: at most n, as many as every quota has
-- room for, or one when none has); ARGV[2i], ARGV[2i+1]: limit, period in ms.
-- Returns "allowed quota remaining reset retry cost": whether allowed, the
-- deciding quota (0-based), remaining, reset and retry in us, the cost decided,
-- as one string (read in one step by the client, unlike an array).
local function answer(allowed, quota, remaining, reset, retry, cost)
  return string.format('%d %d %d %d %d %d', allowed, quota, remaining, reset, retry, cost)
end
-- Redis keeps a key while its clock (whole milliseconds) is at its expiry, so
-- a PTTL of 0 counts as gone: a window then lasts exactly its period, and a
-- refusal's PTTL t is always enough to wait.
-- Arguments go back to Redis as the strings they came in: a Lua number
-- handed to redis.call is formatted with sprintf, which costs Redis more than
-- the INCRBY itself.
local cost, arg = tonumber(ARGV[1]), ARGV[1]
local at_most = cost < 0
if at_most then cost = -cost end
if #KEYS == 1 then
  -- One quota (the common case): the same rules as below, inline and
  -- without tables. Tables cost Redis more than the commands themselves,
  -- and so do local functions (a closure per call), hence the repetition.
  local key, limit = KEYS[1], tonumber(ARGV[2])
  local ttl = redis.call('PTTL', key)
  local count, fresh = 0, false
  if ttl == -2 or ttl == 0 then
    ttl, fresh = 0, true
    if cost > 0 then ttl = tonumber(ARGV[3]) end
  else
    count = tonumber(redis.call('GET', key))
    if ttl == -1 then
      redis.call('PEXPIRE', key, ARGV[3])
      ttl = tonumber(ARGV[3])
    end
  end
  if at_most then
    cost = math.max(math.min(cost, limit - count), 1)
    arg = cost
  end
  if count + cost > limit then
    local remaining = limit - count
    if remaining < 0 then remaining = 0 end
    return answer(0, 0, remaining, ttl * 1000, ttl * 1000, cost)
  end
  if fresh and cost > 0 then
    redis.call('SET', key, arg, 'PX', ARGV[3])
    count = cost
  elseif cost > 0 then
    count = redis.call('INCRBY', key, arg)
  end
  return answer(1, 0, limit - count, ttl * 1000, 0, cost)
end
local counts, ttls, limits, fresh = {}, {}, {}, {}
if at_most then
  -- As many as the quota with the least room has room for.
  local most = cost
  for i = 1, #KEYS do
    local ttl = redis.call('PTTL', KEYS[i])
    local count = 0
    if ttl ~= -2 and ttl ~= 0 then count = tonumber(redis.call('GET', KEYS[i]) or '0') end
    most = math.min(most, tonumber(ARGV[2 * i]) - count)
  end
  cost = math.max(most, 1)
  arg = cost
end
local allowed = 1
for i = 1, #KEYS do
  local limit, period = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local count = tonumber(redis.call('GET', KEYS[i]) or '0')
  local ttl = redis.call('PTTL', KEYS[i])
  fresh[i] = ttl == -2 or ttl == 0
  if fresh[i] then
    count, ttl = 0, 0
    if cost > 0 then ttl = period end
  elseif ttl == -1 then
    -- A counter without a TTL would block forever: repair it.
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i + 1])
    ttl = period
  end
  counts[i], ttls[i], limits[i] = count, ttl, limit
  if count + cost > limit then allowed = 0 end
end
local best
if allowed == 1 then
  for i = 1, #KEYS do
    if fresh[i] and cost > 0 then
      redis.call('SET', KEYS[i], arg, 'PX', ARGV[2 * i + 1])
      counts[i] = cost
    elseif cost > 0 then
      counts[i] = redis.call('INCRBY', KEYS[i], arg)
    end
    if best == nil or limits[i] - counts[i] < limits[best] - counts[best] then best = i end
  end
  return answer(1, best - 1, limits[best] - counts[best], ttls[best] * 1000, 0,
                cost)
end
for i = 1, #KEYS do
  if counts[i] + cost > limits[i] and (best == nil or ttls[i] > ttls[best]) then best = i end
end
local remaining = limits[best] - counts[best]
if remaining < 0 then remaining = 0 end
return answer(0, best - 1, remaining, ttls[best] * 1000, ttls[best] * 1000, cost)
