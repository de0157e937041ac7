-- Fair lock: taken only when free and this waiter is first in line.
-- KEYS[1..6] as in the prelude
-- ARGV[1] token, ARGV[2] lease ms, ARGV[3] "1" for a fencing token,
-- ARGV[4] fencing counter TTL ms, ARGV[5] slot ms (how long a place in line
-- is kept without a retry), ARGV[6] wake-up channel prefix, ARGV[7] claim
-- ms (see hand_over), ARGV[8] owner ('' for none: a lock nobody re-enters)
-- Returns {1, fence or 0} when taken, {0, PTTL of the holder or -1 when
-- queued behind others, handoffs so far}.
local now = now_ms()
prune(now)
local token = ARGV[1]
-- Taken already (handed over, or re-entered): the fencing token, when
-- asked for, is the one the holding was granted (see hold); a holding
-- granted without one gets one now, kept for its later re-entries.
local function held()
  if ARGV[3] ~= '1' then return {1, 0} end
  return {1, holding_fence(KEYS[7], KEYS[5], ARGV[4])}
end
local holder = redis.call('GET', KEYS[1])
if holder == token then
  -- Handed over to us while this attempt was on its way, or its message was
  -- lost. The lease counts from now, after the caller sent this attempt.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  -- Its record (an owner's acquisitions, its fencing token) lives as
  -- long as the lock.
  if redis.call('HGET', KEYS[7], 'holding') == token then
    redis.call('PEXPIRE', KEYS[7], ARGV[2])
  end
  if ARGV[3] == '1' and not granted_fence(token) then
    -- Not recorded (granted without a fencing token): record it now.
    redis.call('HSET', KEYS[7], 'holding', token)
    redis.call('PEXPIRE', KEYS[7], ARGV[2])
  end
  return held()
end
local owner = ARGV[8]
if owner ~= '' and owned(holder) and redis.call('HGET', KEYS[7], 'owner') == owner then
  -- The owner re-enters, without queueing: one lease for all its
  -- acquisitions, never shortened; the fencing token of its holding.
  redis.call('HSET', KEYS[7], 'acq:' .. token, 1)
  for _, key in ipairs({KEYS[1], KEYS[7]}) do
    if redis.call('PTTL', key) < tonumber(ARGV[2]) then redis.call('PEXPIRE', key, ARGV[2]) end
  end
  if redis.call('ZREM', KEYS[3], token) == 1 then
    redis.call('LREM', KEYS[2], 0, token)
    redis.call('HDEL', KEYS[4], token)
  end
  return held()
end
local head = redis.call('LINDEX', KEYS[2], 0)
local free = not holder
if free and (not head or head == token) then
  redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
  local fence = 0
  if ARGV[3] == '1' then fence = next_fence(KEYS[5], ARGV[4]) end
  hold(token, owner, ARGV[2], fence)
  if head == token then redis.call('LPOP', KEYS[2]) end
  redis.call('ZREM', KEYS[3], token)
  redis.call('HDEL', KEYS[4], token)
  return {1, fence}
end
if not redis.call('ZSCORE', KEYS[3], token) then
  redis.call('RPUSH', KEYS[2], token)
end
local slot = tonumber(ARGV[5])
redis.call('ZADD', KEYS[3], now + slot, token)
local terms = ARGV[2] .. ' ' .. ARGV[3]
if owner ~= '' then terms = terms .. ' ' .. owner end
redis.call('HSET', KEYS[4], token, terms)
for i = 2, 4 do redis.call('PEXPIRE', KEYS[i], 2 * slot) end
if free then
  -- The head has not come for it yet: hand it over.
  hand_over(ARGV[6], ARGV[4], ARGV[7])
end
local ttl = redis.call('PTTL', KEYS[1])
-- Still free (the head was only woken): wait in line.
if ttl == -2 then ttl = -1 end
return {0, ttl, handoffs()}
