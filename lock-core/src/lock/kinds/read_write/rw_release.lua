-- Releases one acquisition of a read-write lock (see rw_acquire.lua), or
-- takes a writer that gave up out of the waiting set. Waiters are woken
-- when the lock is free or goes back from write to read, and when a
-- waiting writer leaves (readers it held back may go on). The last
-- released acquisition is remembered, as for the plain lock.
-- KEYS[1] lock hash, KEYS[2] waiting writers, KEYS[3] the key that remembers this token's release
-- ARGV[1] token, ARGV[2] wake-up channel, ARGV[3] how long to remember (ms)
local token = ARGV[1]
local held = redis.call('HGET', KEYS[1], 'acq:' .. token)
if not held then
  if redis.call('ZREM', KEYS[2], token) == 1 then
    redis.call('PUBLISH', ARGV[2], 'released')
    return 0
  end
  if redis.call('GET', KEYS[3]) == token then return 1 end
  return 0
end
local side, owner = string.sub(held, 1, 1), string.sub(held, 3)
redis.call('HDEL', KEYS[1], 'acq:' .. token)
redis.call('SET', KEYS[3], token, 'PX', ARGV[3])
if redis.call('HINCRBY', KEYS[1], 'own:' .. owner, -1) <= 0 then
  redis.call('HDEL', KEYS[1], 'own:' .. owner)
end
if redis.call('HINCRBY', KEYS[1], 'holds', -1) <= 0 then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
if side == 'w' and redis.call('HINCRBY', KEYS[1], 'writes', -1) <= 0 then
  -- The owner's reads remain: the lock is read again.
  redis.call('HDEL', KEYS[1], 'writes', 'writer', 'fence')
  redis.call('HSET', KEYS[1], 'mode', 'read')
  redis.call('PUBLISH', ARGV[2], 'released')
end
return 1
