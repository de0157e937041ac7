-- Takes ARGV[1] units if at least that many are available. With KEYS[4]
-- (an operation id key), the first outcome is remembered for ARGV[2] ms and
-- replayed to retries.
-- Returns {status, value, replayed}: status 1 = done (value = available
-- after), 0 = sold out (value = available), -1 = unknown item.
local n = tonumber(ARGV[1])
if KEYS[4] then
  local prev = redis.call('GET', KEYS[4])
  if prev then
    local sep = string.find(prev, ':', 1, true)
    return {tonumber(string.sub(prev, 1, sep - 1)), tonumber(string.sub(prev, sep + 1)), 1}
  end
end
local avail = available()
if not avail then return {-1, 0, 0} end
local status = 0
if avail >= n then
  redis.call('DECRBY', KEYS[1], n)
  avail = avail - n
  status = 1
end
if KEYS[4] then
  redis.call('SET', KEYS[4], status .. ':' .. string.format('%d', avail), 'PX', ARGV[2])
end
return {status, avail, 0}
