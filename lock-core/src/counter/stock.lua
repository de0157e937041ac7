-- Shared prelude of every stock script.
-- KEYS[1] stock: the units on hand (not sold: available or held).
-- KEYS[2] holds: zset order -> expiry (Redis time, ms).
-- KEYS[3] held: hash order -> quantity, and '{total}' -> the sum of the
-- live holds (no order is named so: names have no braces).
-- Available = on hand - total. A hold that expired is dropped from the
-- total, which gives its units back, however many expired at once. The
-- hold keys expire with their last hold: an item nobody touches keeps no
-- hold past its time, and its units are available again all the same.
local MAX = 9007199254740991

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local now = now_ms()

local function held_total()
  return tonumber(redis.call('HGET', KEYS[3], '{total}') or '0')
end

-- The hold keys live as long as their last hold; none without a hold.
local function tidy()
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', KEYS[2], KEYS[3])
  else
    local until_ms = tonumber(last[2]) + 1
    redis.call('PEXPIREAT', KEYS[2], until_ms)
    redis.call('PEXPIREAT', KEYS[3], until_ms)
  end
end

-- Drops every expired hold from the total, a thousand at a time (the most
-- one command takes here). Each hold is dropped once, so the work is paid
-- for by the reservations that made it.
local function reclaim()
  local dropped = false
  while true do
    local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
    if #expired == 0 then break end
    dropped = true
    local quantities = redis.call('HMGET', KEYS[3], unpack(expired))
    local back = 0
    for i = 1, #quantities do back = back + (tonumber(quantities[i]) or 0) end
    redis.call('HDEL', KEYS[3], unpack(expired))
    redis.call('ZREM', KEYS[2], unpack(expired))
    redis.call('HINCRBY', KEYS[3], '{total}', -back)
  end
  if dropped then tidy() end
end
reclaim()

-- Available stock, or nil for an unknown item.
local function available()
  local s = redis.call('GET', KEYS[1])
  if not s then return nil end
  return tonumber(s) - held_total()
end
