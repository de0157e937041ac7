-- GCRA over several quotas, all or nothing, on Redis time.
-- KEYS[i]: quota i's state, "<last us> <debt>": at Redis time <last us>
-- the caller's theoretical arrival time was <debt> ticks ahead.
-- ARGV[1]: cost (-n: at most n, as for the fixed window); ARGV[3i-1],
-- ARGV[3i], ARGV[3i+1]: the emission interval
-- (period / limit, rounded up to a whole tick) and the burst window, in
-- ticks, and ticks per microsecond (1000: ticks are nanoseconds; 1: ticks
-- are microseconds, for windows whose nanoseconds would not be exact in a
-- Lua number). Every number here is an integer below 2^53, so exact.
-- Returns "allowed quota remaining reset retry cost": whether allowed, the
-- deciding quota (0-based), remaining, reset and retry in us, the cost decided,
-- as one string (read in one step by the client, unlike an array).
local cost = tonumber(ARGV[1])
local at_most = cost < 0
if at_most then cost = -cost end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- floor(a / b) for integers, exactly.
local function div(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

-- One quota, the common case: the steps below for one key, without the
-- tables and closures they take for several (a fifth of the script's time
-- in Redis).
if #KEYS == 1 then
  local interval = tonumber(ARGV[2])
  local window = tonumber(ARGV[3])
  local per_us = tonumber(ARGV[4])
  local debt = 0
  local s = redis.call('GET', KEYS[1])
  if s then
    local last, d = string.match(s, '^(%d+) (%d+)$')
    if last then
      debt = tonumber(d) - (now - tonumber(last)) * per_us
      if debt < 0 then debt = 0 end
    end
  end
  if at_most then
    cost = math.max(math.min(cost, div(window - debt, interval)), 1)
  end
  local after = debt + cost * interval
  local allowed, retry = 1, 0
  if after > window then
    allowed, retry = 0, after - window
  elseif cost > 0 then
    debt = after
    redis.call('SET', KEYS[1], string.format('%d %d', now, debt),
               'PX', div(debt + 1000 * per_us - 1, 1000 * per_us))
  end
  return string.format('%d 0 %d %d %d %d', allowed, div(window - debt, interval),
                       div(debt + per_us - 1, per_us), div(retry + per_us - 1, per_us), cost)
end

local function answer(allowed, quota, remaining, reset, retry, cost)
  return string.format('%d %d %d %d %d %d', allowed, quota, remaining, reset, retry, cost)
end

-- ceil(ticks / per_us), in microseconds.
local function micros(ticks, per_us)
  return div(ticks + per_us - 1, per_us)
end

local st = {}
for i = 1, #KEYS do
  local interval = tonumber(ARGV[3 * i - 1])
  local window = tonumber(ARGV[3 * i])
  local per_us = tonumber(ARGV[3 * i + 1])
  local debt = 0
  local s = redis.call('GET', KEYS[i])
  if s then
    local last, d = string.match(s, '^(%d+) (%d+)$')
    if last then
      -- Far past: the product may not be exact, but is then far above d.
      debt = tonumber(d) - (now - tonumber(last)) * per_us
      if debt < 0 then debt = 0 end
    end
  end
  st[i] = {interval = interval, window = window, per_us = per_us, debt = debt}
  if at_most then
    -- As many as the quota with the least room has room for.
    cost = math.min(cost, div(window - debt, interval))
  end
end
if at_most then cost = math.max(cost, 1) end
local allowed = 1
for i = 1, #KEYS do
  local s = st[i]
  s.after = s.debt + cost * s.interval
  s.retry = 0
  if s.after > s.window then
    allowed = 0
    s.retry = s.after - s.window
  end
end
local best
for i = 1, #KEYS do
  local s = st[i]
  if allowed == 1 then
    if cost > 0 then
      s.debt = s.after
      -- Kept until the debt is paid off: then it is a fresh caller's.
      redis.call('SET', KEYS[i], string.format('%d %d', now, s.debt),
                 'PX', div(s.debt + 1000 * s.per_us - 1, 1000 * s.per_us))
    end
    s.left = div(s.window - s.debt, s.interval)
    if best == nil or s.left < st[best].left then best = i end
  elseif s.retry > 0 and (best == nil or s.retry > st[best].retry) then
    best = i
  end
end
local s = st[best]
return answer(allowed, best - 1, div(s.window - s.debt, s.interval),
              micros(s.debt, s.per_us), micros(s.retry, s.per_us), cost)
