/**
 * The Lua scripts of the Redis store (redis.ts), one per step that must be atomic across instances:
 * upsert with its indexes, consume (the compare-and-set of codes and device codes), consume-and-write
 * (refresh rotation) and its undo, destroy, revokeByGrantId, and the reads and purge that must see one consistent state. Every script
 * gets the key prefix as ARGV[1] and the caller's clock where time matters; Redis' own clock is never used.
 */
/**
 * Shared by every script: ARGV[1] is the prefix. `remove` deletes one artifact with its index entries; `put`
 * writes one with them.
 */
export const PRELUDE = `
local prefix = ARGV[1]
local function artifact(kind, id) return prefix .. 'a:' .. kind .. ':' .. id end
local function extend(key, px) if redis.call('PTTL', key) < px then redis.call('PEXPIRE', key, px) end end
local function remove(kind, id)
  local key = artifact(kind, id)
  local f = redis.call('HMGET', key, 'v', 'e', 'c', 'g', 'u')
  redis.call('ZREM', prefix .. 'k:' .. kind, id)
  if not f[1] then return nil end
  redis.call('DEL', key)
  if f[4] then redis.call('SREM', prefix .. 'g:' .. f[4], kind .. ':' .. id) end
  if f[5] then redis.call('SREM', prefix .. 'u:' .. f[5], id) end
  return {kind, id, f[1], f[2], f[3] or ''}
end
-- Replaces the value, the expiry and the consumed mark, and moves the index entries with the value.
-- grantId and userCode are '' when the value has none.
local function put(kind, id, value, expiresAt, px, grantId, userCode)
  local key = artifact(kind, id)
  local old = redis.call('HMGET', key, 'g', 'u')
  if old[1] and old[1] ~= grantId then redis.call('SREM', prefix .. 'g:' .. old[1], kind .. ':' .. id) end
  if old[2] and old[2] ~= userCode then redis.call('SREM', prefix .. 'u:' .. old[2], id) end
  redis.call('DEL', key)
  redis.call('HSET', key, 'v', value, 'e', expiresAt)
  if grantId ~= '' then
    local index = prefix .. 'g:' .. grantId
    redis.call('HSET', key, 'g', grantId)
    redis.call('SADD', index, kind .. ':' .. id)
    extend(index, px)
  end
  if userCode ~= '' then
    local index = prefix .. 'u:' .. userCode
    redis.call('HSET', key, 'u', userCode)
    redis.call('SADD', index, id)
    extend(index, px)
  end
  redis.call('PEXPIRE', key, px)
  local byKind = prefix .. 'k:' .. kind
  redis.call('ZADD', byKind, expiresAt, id)
  extend(byKind, px)
end
`

export const SCRIPTS = {
  // KEYS[1] the artifact; ARGV prefix, kind, id, value, expiresAt, px, grantId or '', userCode or ''.
  storeUpsert: `
put(ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7], ARGV[8])
return 1`,
  // KEYS[1] the artifact; ARGV prefix, now. The compare-and-set of single-use codes.
  storeConsume: `
local f = redis.call('HMGET', KEYS[1], 'e', 'c')
if not f[1] or f[2] or tonumber(f[1]) <= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'c', ARGV[2])
return 1`,
  // KEYS[1] the artifact; ARGV prefix, now, rotation id, required kind or '', required id, then 7 per write: kind,
  // id, value, expiresAt, px, grantId or '', userCode or ''. Consume and writes in one step; 'r' names the
  // rotation, so that storeUndoConsume can take back this one and no other.
  storeConsumeAndWrite: `
local now = tonumber(ARGV[2])
local f = redis.call('HMGET', KEYS[1], 'e', 'c')
if not f[1] or f[2] or tonumber(f[1]) <= now then return 0 end
if ARGV[4] ~= '' then
  local e = redis.call('HGET', artifact(ARGV[4], ARGV[5]), 'e')
  if not e or tonumber(e) <= now then return 0 end
end
redis.call('HSET', KEYS[1], 'c', ARGV[2], 'r', ARGV[3])
for i = 6, #ARGV, 7 do put(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], tonumber(ARGV[i + 4]), ARGV[i + 5], ARGV[i + 6]) end
return 1`,
  // KEYS[1] the artifact; ARGV prefix, rotation id, then kind, id of each write. Undoes storeConsumeAndWrite
  // when that rotation is the one that consumed the artifact (otherwise nothing): unconsumed, writes deleted.
  storeUndoConsume: `
if redis.call('HGET', KEYS[1], 'r') ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], 'c', 'r')
for i = 3, #ARGV, 2 do remove(ARGV[i], ARGV[i + 1]) end
return 1`,
  // KEYS[1] the artifact; ARGV prefix, kind, id.
  storeDestroy: `
remove(ARGV[2], ARGV[3])
return 1`,
  // KEYS[1] the grant's index, KEYS[2] its grant artifact; ARGV prefix, grantId. Flat records of 5 fields.
  storeRevoke: `
local out = {}
local function add(record) if record then for _, field in ipairs(record) do out[#out + 1] = field end end end
for _, member in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local at = string.find(member, ':', 1, true)
  local kind, id = string.sub(member, 1, at - 1), string.sub(member, at + 1)
  if redis.call('HGET', artifact(kind, id), 'g') == ARGV[2] then add(remove(kind, id)) end
end
add(remove('grant', ARGV[2]))
redis.call('DEL', KEYS[1])
return out`,
  // KEYS[1] the user code's index; ARGV prefix, userCode, now. {value, consumedAt or ''}, or nil.
  storeFindByUserCode: `
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local f = redis.call('HMGET', artifact('device_code', id), 'v', 'e', 'c', 'u')
  if f[1] and f[4] == ARGV[2] and tonumber(f[2]) > tonumber(ARGV[3]) then return {f[1], f[3] or ''} end
end
return nil`,
  // KEYS[1] the kind's index; ARGV prefix, kind, now. Flat records of 4 fields: id, value, expiresAt, consumedAt.
  storeList: `
local now, out = tonumber(ARGV[3]), {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[3], '+inf')) do
  local f = redis.call('HMGET', artifact(ARGV[2], id), 'v', 'e', 'c')
  if f[1] and tonumber(f[2]) > now then
    out[#out + 1] = id; out[#out + 1] = f[1]; out[#out + 1] = f[2]; out[#out + 1] = f[3] or ''
  end
end
return out`,
  // KEYS[1] the kind's index; ARGV prefix, kind, now, batch. {deleted, index entries looked at}.
  storePurge: `
local now, count = tonumber(ARGV[3]), 0
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[3], 'LIMIT', 0, tonumber(ARGV[4]))
for _, id in ipairs(ids) do
  local e = redis.call('HGET', artifact(ARGV[2], id), 'e')
  if not e then redis.call('ZREM', KEYS[1], id)
  elseif tonumber(e) <= now then remove(ARGV[2], id); count = count + 1
  else redis.call('ZADD', KEYS[1], e, id) end
end
return {count, #ids}`,
} as const
