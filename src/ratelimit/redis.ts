/**
 * Rate-limit state shared by several instances: one Redis key per policy and key value, holding the
 * GCRA TAT (gcra.ts), read and written by one script, so a check is one atomic round trip and instances
 * count against one budget. The clock is Redis's (`TIME`), so instances whose clocks differ agree. Keys
 * carry the deployment's prefix (with its {hash tag}: one Cluster slot) and the SHA-256 of the key value, never
 * the value itself (a client id or address has no place in a key listing); they expire when the bucket is full.
 *
 * A check never hangs: a command (queued while connecting) fails after `timeout`, and is not retried; the
 * caller then applies the policy's `on_store_failure`.
 */
import { createHash } from 'node:crypto'
import { connectRedis, type RedisClient } from '../redis/connection.js'
import type { GcraOutcome, GcraParameters } from './gcra.js'

/** The arithmetic of gcra.ts, on Redis's clock; the TAT is stored with 3 decimals (Lua's tostring would round it). */
const SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local emission = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local stored = tonumber(redis.call('GET', KEYS[1]) or '0')
local tat = stored
if now > tat then tat = now end
local nxt = tat + emission
if nxt - now > tolerance + 0.01 then
  return {0, 0, math.ceil(nxt - tolerance - now), math.ceil(tat - now)}
end
redis.call('SET', KEYS[1], string.format('%.3f', nxt), 'PX', math.max(1, math.ceil(nxt - now)))
return {1, math.floor((tolerance - (nxt - now) + 0.01) / emission), 0, math.ceil(nxt - now)}
`

type GcraClient = RedisClient & { portcullisGcra(key: string, emission: string, tolerance: string): Promise<[number, number, number, number]> }

export class RedisBuckets {
  private readonly client: GcraClient

  constructor(url: string, private readonly prefix: string, timeoutMs: number, onError: (error: Error) => void) {
    // Queued while (re)connecting, but never longer than the timeout; no retries: the policy decides.
    const client = connectRedis(url, { enableOfflineQueue: true, commandTimeout: timeoutMs, maxRetriesPerRequest: 0 })
    client.on('error', onError)
    client.defineCommand('portcullisGcra', { numberOfKeys: 1, lua: SCRIPT })
    this.client = client as GcraClient
  }

  async take(policy: string, value: string, parameters: GcraParameters): Promise<GcraOutcome> {
    const key = `${this.prefix}rl:${policy}:${createHash('sha256').update(value).digest('base64url')}`
    const [allowed, remaining, retryAfterMs, resetMs] = await this.client.portcullisGcra(key, String(parameters.emissionMs), String(parameters.toleranceMs))
    return { allowed: allowed === 1, tat: 0, remaining, retryAfterMs, resetMs }
  }

  async close(): Promise<void> {
    await this.client.quit().catch(() => this.client.disconnect())
  }
}
