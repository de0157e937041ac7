-- Who holds a lock, for operators: {taken, ms until the first lease ends
-- (-1: none), holder token or owner}, or nothing when it is free.
-- KEYS[1] lock key; ARGV[1] how the kind keeps it: 'string' (plain),
-- 'fair' (KEYS[2] the holding: its owner when
-- it has one), 'hash' (reentrant), 'zset' (semaphore: permits taken), 'rw'
-- (read-write: acquisitions; the writer's owner, or a reader's)
if ARGV[1] == 'zset' then
  local now = now_ms()
  local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
  if #live == 0 then return false end
  return {#live / 2, tonumber(live[2]) - now, live[1]}
end
if ARGV[1] == 'rw' then
  local holds = tonumber(redis.call('HGET', KEYS[1], 'holds') or '0')
  if holds <= 0 then return false end
  local holder = redis.call('HGET', KEYS[1], 'writer')
  if not holder then
    local fields = redis.call('HGETALL', KEYS[1])
    for i = 1, #fields, 2 do
      if string.sub(fields[i], 1, 4) == 'own:' then
        holder = string.sub(fields[i], 5)
        break
      end
    end
  end
  return {holds, redis.call('PTTL', KEYS[1]), holder or ''}
end
local holder
if ARGV[1] == 'hash' then
  holder = redis.call('HGET', KEYS[1], 'owner')
else
  holder = redis.call('GET', KEYS[1])
end
if not holder then return false end
if ARGV[1] == 'fair' and redis.call('HGET', KEYS[2], 'holding') == holder then
  holder = redis.call('HGET', KEYS[2], 'owner') or holder
end
return {1, redis.call('PTTL', KEYS[1]), holder}
