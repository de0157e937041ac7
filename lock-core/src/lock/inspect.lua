-- Who holds a lock, for operators: {taken, ms until the first lease ends
-- (-1: none), holder token or owner}, or nothing when it is free.
-- KEYS[1] lock key; ARGV[1] how the kind keeps it: 'string' (plain,
-- fair), 'hash' (reentrant), 'zset' (semaphore: permits taken)
if ARGV[1] == 'zset' then
  local now = now_ms()
  local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
  if #live == 0 then return false end
  return {#live / 2, tonumber(live[2]) - now, live[1]}
end
local holder
if ARGV[1] == 'hash' then
  holder = redis.call('HGET', KEYS[1], 'owner')
else
  holder = redis.call('GET', KEYS[1])
end
if not holder then return false end
return {1, redis.call('PTTL', KEYS[1]), holder}
