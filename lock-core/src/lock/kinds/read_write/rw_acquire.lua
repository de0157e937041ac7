-- Read-write lock: a hash with the mode ('read' or 'write'), the writer's
-- owner, how many acquisitions hold it ('holds'), how many of them write
-- ('writes'), each owner's count ('own:<owner>') and one field per live
-- acquisition ('acq:<token>' = '<r|w>:<owner>'); one lease for the whole
-- hash, as for the reentrant lock. Writers that wait are kept apart in a
-- zset (token -> deadline of their place): while one waits, readers that
-- hold nothing yet are refused, so writers are not starved.
-- KEYS[1] lock hash, KEYS[2] waiting writers, KEYS[3] fencing counter
-- ARGV[1] token, ARGV[2] lease ms, ARGV[3] "1" for a fencing token,
-- ARGV[4] fencing counter TTL ms, ARGV[5] owner, ARGV[6] 'r' or 'w',
-- ARGV[7] how long a waiting writer's place is kept without a retry (ms)
-- Returns {1, fence or 0} when taken, {0, ms to retry in or -1}.
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local token, owner, side = ARGV[1], ARGV[5], ARGV[6]
local mode = redis.call('HGET', KEYS[1], 'mode')
local mine = tonumber(redis.call('HGET', KEYS[1], 'own:' .. owner) or '0')
local granted
if mode == 'write' then
  -- Only the writer's owner, for more writes or reads of its own.
  granted = redis.call('HGET', KEYS[1], 'writer') == owner
elseif side == 'r' then
  -- An owner that already reads re-enters even past waiting writers,
  -- which wait for it: refusing it would deadlock the two.
  granted = mine > 0 or redis.call('ZCARD', KEYS[2]) == 0
else
  -- Free, or read only by this owner (it upgrades).
  granted = mine == tonumber(redis.call('HGET', KEYS[1], 'holds') or '0')
end
if not granted then
  if side == 'w' then
    local slot = tonumber(ARGV[7])
    redis.call('ZADD', KEYS[2], now + slot, token)
    redis.call('PEXPIRE', KEYS[2], 2 * slot)
  end
  local ttl = redis.call('PTTL', KEYS[1])
  if side == 'r' and mode ~= 'write' then
    -- Held back only by waiting writers: try again when the first place
    -- lapses (a crashed writer's does, and nothing announces it), or
    -- when the lock's lease ends, whichever comes first.
    local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    if first[2] then
      local lapses = tonumber(first[2]) - now
      if ttl < 0 or lapses < ttl then ttl = lapses end
    end
  end
  -- Held by others without expiry, or free and held back by no one we
  -- know of: no hint.
  if ttl < 0 then ttl = -1 end
  return {0, ttl}
end
if side == 'w' then
  redis.call('HSET', KEYS[1], 'mode', 'write', 'writer', owner)
  redis.call('HINCRBY', KEYS[1], 'writes', 1)
  redis.call('ZREM', KEYS[2], token)
elseif not mode then
  redis.call('HSET', KEYS[1], 'mode', 'read')
end
redis.call('HSET', KEYS[1], 'acq:' .. token, side .. ':' .. owner)
redis.call('HINCRBY', KEYS[1], 'own:' .. owner, 1)
redis.call('HINCRBY', KEYS[1], 'holds', 1)
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if side == 'w' and ARGV[3] == '1' then
  -- One token per write holding, as for the reentrant lock.
  return {1, holding_fence(KEYS[1], KEYS[3], ARGV[4])}
end
return {1, 0}
