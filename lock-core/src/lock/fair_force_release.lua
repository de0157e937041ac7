-- Deletes a fair lock whoever holds it, then wakes the head of the queue.
-- KEYS[1..3] as in the prelude; ARGV[1] wake-up channel prefix
local deleted = redis.call('DEL', KEYS[1])
prune(now_ms())
wake_head(ARGV[1])
return deleted
