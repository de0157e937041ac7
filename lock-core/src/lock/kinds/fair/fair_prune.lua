-- Shared prelude of the fair lock. KEYS[1] lock, KEYS[2] queue (list of
-- tokens), KEYS[3] deadlines (zset token -> ms), KEYS[4] terms (hash token ->
-- "<lease ms> <1 when a fencing token is wanted, else 0>[ <owner>]"), KEYS[5] fencing
-- counter, KEYS[6] handoff counter, KEYS[7] the holding, for a lock taken
-- by an owner (a reentrant fair lock) or with a fencing token: a hash with
-- the holder's token ('holding', valid only while it is the lock's value),
-- the fencing token it was granted ('fence', when one was asked for), and
-- for an owner 'owner' and one 'acq:<token>' field per live acquisition of
-- that owner. Waiters whose
-- slot deadline passed (crashed, or gone without leaving) are dropped from
-- the queue.
local function prune(now)
  local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  for _, t in ipairs(dead) do
    redis.call('LREM', KEYS[2], 0, t)
    redis.call('ZREM', KEYS[3], t)
    redis.call('HDEL', KEYS[4], t)
  end
end
-- The handoff counter's value: every handoff takes the next number, and a
-- busy answer carries the number reached so far, so a waiter can tell a
-- handoff made after its last answer (its own) from one made before it
-- (since lost: that answer would otherwise have said the lock was its own).
-- Records that `token` of `owner` ('' for none) now holds the lock, with
-- fencing token `fence` (0: none asked for). A grant seen again (a retried
-- attempt, a re-entry) answers the token of this grant, never the shared
-- counter's value, which other kinds of the same name move on.
local function hold(token, owner, ms, fence)
  redis.call('DEL', KEYS[7])
  if owner ~= '' then
    redis.call('HSET', KEYS[7], 'holding', token, 'owner', owner, 'acq:' .. token, 1)
  end
  if fence > 0 then
    redis.call('HSET', KEYS[7], 'holding', token, 'fence', string.format('%d', fence))
  end
  if owner ~= '' or fence > 0 then redis.call('PEXPIRE', KEYS[7], ms) end
end
-- Whether the lock's holder `holder` is an owner's holding (KEYS[7]).
local function owned(holder)
  return holder and redis.call('HGET', KEYS[7], 'holding') == holder
    and redis.call('HEXISTS', KEYS[7], 'owner') == 1
end
-- The fencing token that `holder`'s grant carries, if it is recorded.
local function granted_fence(holder)
  if redis.call('HGET', KEYS[7], 'holding') ~= holder then return nil end
  return tonumber(redis.call('HGET', KEYS[7], 'fence') or '')
end
local function handoffs()
  return tonumber(redis.call('GET', KEYS[6]) or '0')
end
-- The lock is free: hands it to the head of the queue, with the fencing
-- token the head asked for, and tells only the head, on its own channel:
-- 'held:<handoff number>:<fencing token>' (0 when none was asked for). The
-- head then holds the lock without another round trip. The lock is set for
-- the head's lease but at most `claim` ms, until the head confirms its
-- lease: a head that crashed or stopped in line blocks the lock no longer
-- than that. A head without terms is only woken ('wake') and comes for the
-- lock itself.
local function hand_over(prefix, fence_ttl, claim)
  local head = redis.call('LINDEX', KEYS[2], 0)
  if not head then return end
  local terms = redis.call('HGET', KEYS[4], head)
  local lease, fencing, owner
  if terms then lease, fencing, owner = string.match(terms, '^(%d+) ([01]) ?(.*)$') end
  if not lease then
    redis.call('PUBLISH', prefix .. head, 'wake')
    return
  end
  redis.call('SET', KEYS[1], head, 'PX', math.min(tonumber(lease), tonumber(claim)))
  local fence = 0
  if fencing == '1' then fence = next_fence(KEYS[5], fence_ttl) end
  hold(head, owner, lease, fence)
  redis.call('LPOP', KEYS[2])
  redis.call('ZREM', KEYS[3], head)
  redis.call('HDEL', KEYS[4], head)
  -- Restarts from Redis time when it expired, like the fencing counter, so
  -- a waiter never sees a number go back.
  local number = next_fence(KEYS[6], fence_ttl)
  redis.call('PUBLISH', prefix .. head, string.format('held:%d:%d', number, fence))
end
