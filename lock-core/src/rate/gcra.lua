-- GCRA over several quotas, all or nothing, on Redis time in microseconds.
-- KEYS[i]: theoretical arrival time (TAT) of quota i, in us.
-- ARGV[1]: cost; ARGV[2i], ARGV[2i+1]: emission interval in us (period /
-- limit, rounded down) and the burst window in us (limit * interval).
-- Returns {allowed, deciding quota (0-based), remaining, reset us, retry us}.
local cost = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if #KEYS == 1 then
  -- One quota (the common case): the same rules as below, inline and
  -- without tables. Tables cost Redis more than the commands themselves,
  -- and so do local functions (a closure per call), hence the repetition.
  local key, interval, period = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3])
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  local new_tat = tat + cost * interval
  local allow_at = new_tat - period
  if allow_at > now then
    local remaining = math.floor((now + period - tat) / interval)
    if remaining < 0 then remaining = 0 end
    return {0, 0, remaining, tat - now, allow_at - now}
  end
  if cost > 0 then
    redis.call('SET', key, string.format('%d', new_tat),
               'PX', math.ceil((new_tat - now) / 1000))
  end
  return {1, 0, math.floor((now + period - new_tat) / interval), new_tat - now, 0}
end
local st = {}
local allowed = 1
for i = 1, #KEYS do
  local interval, period = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
  if tat < now then tat = now end
  local new_tat = tat + cost * interval
  local allow_at = new_tat - period
  local retry = 0
  if allow_at > now then
    allowed = 0
    retry = allow_at - now
  end
  st[i] = {interval = interval, period = period, tat = tat, new_tat = new_tat, retry = retry}
end
local best
for i = 1, #KEYS do
  local s = st[i]
  if allowed == 1 then
    if cost > 0 then
      redis.call('SET', KEYS[i], string.format('%d', s.new_tat),
                 'PX', math.ceil((s.new_tat - now) / 1000))
    end
    s.tat = s.new_tat
    s.left = math.floor((now + s.period - s.tat) / s.interval)
    if best == nil or s.left < st[best].left then best = i end
  elseif s.retry > 0 and (best == nil or s.retry > st[best].retry) then
    best = i
  end
end
local s = st[best]
local remaining = math.floor((now + s.period - s.tat) / s.interval)
if remaining < 0 then remaining = 0 end
return {allowed, best - 1, remaining, s.tat - now, s.retry}
