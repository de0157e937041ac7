-- Shared prelude of the fair lock. KEYS[1] lock, KEYS[2] queue (list of
-- tokens), KEYS[3] deadlines (zset token -> ms). Waiters whose slot deadline
-- passed (crashed, or gone without leaving) are dropped from the queue.
local function prune(now)
  local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  for _, t in ipairs(dead) do
    redis.call('LREM', KEYS[2], 0, t)
    redis.call('ZREM', KEYS[3], t)
  end
end
-- Wakes only the head of the queue, on its own channel.
local function wake_head(prefix)
  local head = redis.call('LINDEX', KEYS[2], 0)
  if head then redis.call('PUBLISH', prefix .. head, 'wake') end
end
