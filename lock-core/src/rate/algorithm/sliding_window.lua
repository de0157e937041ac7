-- Sliding window over several quotas, all or nothing. Windows are aligned to
-- Redis time; the previous window counts in proportion to its overlap with
-- the last period.
-- KEYS[i]: hash {w = window index, c = current count, p = previous count}.
-- ARGV[1]: cost (-n: at most n, as for the fixed window); ARGV[2i],
-- ARGV[2i+1]: limit, period in ms.
-- Returns "allowed quota remaining reset retry cost": whether allowed, the
-- deciding quota (0-based), remaining, reset and retry in us, the cost decided,
-- as one string (read in one step by the client, unlike an array).
local function answer(allowed, quota, remaining, reset, retry, cost)
  return string.format('%d %d %d %d %d %d', allowed, quota, remaining, reset, retry, cost)
end
local cost = tonumber(ARGV[1])
local at_most = cost < 0
if at_most then cost = -cost end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if #KEYS == 1 then
  -- One quota (the common case): the same rules as below, inline and
  -- without tables. Tables cost Redis more than the commands themselves,
  -- and so do local functions (a closure per call), hence the repetition.
  local key, limit, period = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3])
  local win = math.floor(now / period)
  local elapsed = now - win * period
  local h = redis.call('HMGET', key, 'w', 'c', 'p')
  local w, c, p = tonumber(h[1]), tonumber(h[2]) or 0, tonumber(h[3]) or 0
  if w == nil or w < win - 1 then
    c, p = 0, 0
  elseif w == win - 1 then
    c, p = 0, c
  end
  local est = p * (period - elapsed) / period + c
  if at_most then
    cost = math.max(math.min(cost, math.floor(limit - est + 1e-9)), 1)
  end
  local allowed, retry = 1, 0
  if est + cost > limit + 1e-9 then
    allowed = 0
    if c + cost > limit then
      retry = (period - elapsed) + math.ceil(period * (1 - (limit - cost) / c))
    else
      retry = math.ceil(period * (1 - (limit - cost - c) / p)) - elapsed
    end
    if retry < 1 then retry = 1 end
  elseif cost > 0 then
    c = c + cost
    est = est + cost
    redis.call('HSET', key, 'w', win, 'c', c, 'p', p)
    redis.call('PEXPIRE', key, 2 * period)
  end
  local remaining = math.floor(limit - est + 1e-9)
  if remaining < 0 then remaining = 0 end
  local reset = 0
  if c > 0 then
    reset = 2 * period - elapsed
  elseif p > 0 then
    reset = period - elapsed
  end
  return answer(allowed, 0, remaining, reset * 1000, retry * 1000, cost)
end
local st = {}
for i = 1, #KEYS do
  local limit, period = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local win = math.floor(now / period)
  local elapsed = now - win * period
  local h = redis.call('HMGET', KEYS[i], 'w', 'c', 'p')
  local w, c, p = tonumber(h[1]), tonumber(h[2]) or 0, tonumber(h[3]) or 0
  if w == nil or w < win - 1 then
    c, p = 0, 0
  elseif w == win - 1 then
    c, p = 0, c
  end
  local est = p * (period - elapsed) / period + c
  st[i] = {limit = limit, period = period, win = win, elapsed = elapsed,
           c = c, p = p, est = est, retry = 0}
  if at_most then
    -- As many as the quota with the least room has room for.
    cost = math.min(cost, math.floor(limit - est + 1e-9))
  end
end
if at_most then cost = math.max(cost, 1) end
local allowed = 1
for i = 1, #KEYS do
  local s = st[i]
  local limit, period, elapsed, c, p, est = s.limit, s.period, s.elapsed, s.c, s.p, s.est
  local retry = 0
  if est + cost > limit + 1e-9 then
    allowed = 0
    if c + cost > limit then
      -- Wait for the next window, then for this window's weight to fade.
      retry = (period - elapsed) + math.ceil(period * (1 - (limit - cost) / c))
    else
      retry = math.ceil(period * (1 - (limit - cost - c) / p)) - elapsed
    end
    if retry < 1 then retry = 1 end
  end
  s.retry = retry
end
local best
for i = 1, #KEYS do
  local s = st[i]
  if allowed == 1 then
    if cost > 0 then
      s.c = s.c + cost
      s.est = s.est + cost
      redis.call('HSET', KEYS[i], 'w', s.win, 'c', s.c, 'p', s.p)
      redis.call('PEXPIRE', KEYS[i], 2 * s.period)
    end
    if best == nil or s.limit - s.est < st[best].limit - st[best].est then best = i end
  elseif s.retry > 0 and (best == nil or s.retry > st[best].retry) then
    best = i
  end
end
local s = st[best]
local remaining = math.floor(s.limit - s.est + 1e-9)
if remaining < 0 then remaining = 0 end
local reset = 0
if s.c > 0 then
  reset = 2 * s.period - s.elapsed
elseif s.p > 0 then
  reset = s.period - s.elapsed
end
return answer(allowed, best - 1, remaining, reset * 1000, s.retry * 1000, cost)
