/**
 * The Lua scripts of the Redis store (redis.ts), one per step that must be atomic across instances:
 * upsert with its indexes, consume (the compare-and-set of codes, device codes and refresh rotation),
 * destroy, revokeByGrantId, and the reads and purge that must see one consistent state. Every script
 * gets the key prefix as ARGV[1] and the caller's clock where time matters; Redis' own clock is never used.
 */
/** Shared by every script: ARGV[1] is the prefix. `remove` deletes one artifact with its index entries. */
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
`

export const SCRIPTS = {
  // KEYS[1] the artifact; ARGV prefix, kind, id, value, expiresAt, px, hasGrant, grantId, hasUserCode, userCode.
  // Replaces the value, the expiry and the consumed mark, and moves the index entries with the value.
  storeUpsert: `
local kind, id, px = ARGV[2], ARGV[3], tonumber(ARGV[6])
local old = redis.call('HMGET', KEYS[1], 'g', 'u')
if old[1] and not (ARGV[7] == '1' and old[1] == ARGV[8]) then redis.call('SREM', prefix .. 'g:' .. old[1], kind .. ':' .. id) end
if old[2] and not (ARGV[9] == '1' and old[2] == ARGV[10]) then redis.call('SREM', prefix .. 'u:' .. old[2], id) end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'v', ARGV[4], 'e', ARGV[5])
if ARGV[7] == '1' then
  local index = prefix .. 'g:' .. ARGV[8]
  redis.call('HSET', KEYS[1], 'g', ARGV[8])
  redis.call('SADD', index, kind .. ':' .. id)
  extend(index, px)
end
if ARGV[9] == '1' then
  local index = prefix .. 'u:' .. ARGV[10]
  redis.call('HSET', KEYS[1], 'u', ARGV[10])
  redis.call('SADD', index, id)
  extend(index, px)
end
redis.call('PEXPIRE', KEYS[1], px)
local byKind = prefix .. 'k:' .. kind
redis.call('ZADD', byKind, ARGV[5], id)
extend(byKind, px)
return 1`,
  // KEYS[1] the artifact; ARGV prefix, now. The compare-and-set of single-use codes and refresh rotation.
  storeConsume: `
local f = redis.call('HMGET', KEYS[1], 'e', 'c')
if not f[1] or f[2] or tonumber(f[1]) <= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'c', ARGV[2])
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
