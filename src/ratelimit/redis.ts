/**
 * Rate-limit state shared by several instances: one Redis key per policy and key value, holding the
 * GCRA TAT (gcra.ts), read and written by one script for all of a request's policies, so a check is one atomic
 * round trip, all or nothing, and instances count against one budget. The clock is Redis's (`TIME`), so instances
 * whose clocks differ agree. Keys carry the deployment's prefix (with its {hash tag}: one Cluster slot) and the
 * SHA-256 of the key value, never the value itself (a client id or address has no place in a key listing); they
 * expire when the bucket is full.
 *
 * A check never hangs: a command (queued while connecting) fails after `timeout`, and is not retried; the
 * caller then applies the policy's `on_store_failure`.
 */
import { createHash } from 'node:crypto'
import { connectRedis, type RedisClient } from '../redis/connection.js'
import type { GcraOutcome, GcraParameters } from './gcra.js'

/**
 * The arithmetic of gcra.ts (`gcraAll`: one request against each of its route's policies, stored only if every one
 * admits), on Redis's clock; a TAT is stored with 3 decimals (Lua's tostring would round it). KEYS: one per policy;
 * ARGV: each policy's emission and tolerance. Returns four numbers a policy: admitted, remaining, retry after, reset.
 */
const SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local out, tats, nexts = {}, {}, {}
local admitted = true
for i = 1, #KEYS do
  local emission = tonumber(ARGV[2 * i - 1])
  local tolerance = tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
  if now > tat then tat = now end
  local nxt = tat + emission
  tats[i] = tat
  if nxt - now > tolerance + 0.01 then
    admitted = false
    out[4 * i - 3], out[4 * i - 2], out[4 * i - 1], out[4 * i] = 0, 0, math.ceil(nxt - tolerance - now), math.ceil(tat - now)
  else
    nexts[i] = nxt
    out[4 * i - 3], out[4 * i - 2], out[4 * i - 1], out[4 * i] = 1, math.floor((tolerance - (nxt - now) + 0.01) / emission), 0, math.ceil(nxt - now)
  end
end
for i = 1, #KEYS do
  if admitted then
    redis.call('SET', KEYS[i], string.format('%.3f', nexts[i]), 'PX', math.max(1, math.ceil(nexts[i] - now)))
  elseif out[4 * i - 3] == 1 then
    out[4 * i - 2], out[4 * i] = out[4 * i - 2] + 1, math.ceil(tats[i] - now)
  end
end
return out
`

type GcraClient = RedisClient & { portcullisGcraAll(keys: number, ...keysThenArgs: string[]): Promise<number[]> }

/** One policy's take, as the Redis store needs it. */
export interface RedisTake {
  readonly policy: string
  readonly key: string
  readonly parameters: GcraParameters
}

export class RedisBuckets {
  private readonly client: GcraClient

  constructor(url: string, private readonly prefix: string, timeoutMs: number, onError: (error: Error) => void) {
    // Queued while (re)connecting, but never longer than the timeout; no retries: the policy decides.
    const client = connectRedis(url, { enableOfflineQueue: true, commandTimeout: timeoutMs, maxRetriesPerRequest: 0 })
    client.on('error', onError)
    client.defineCommand('portcullisGcraAll', { lua: SCRIPT })
    this.client = client as GcraClient
  }

  /** The takes of one request, all or nothing, in one round trip (the keys share the prefix's hash tag: one slot). */
  async takeAll(takes: readonly RedisTake[]): Promise<GcraOutcome[]> {
    const keys = takes.map((take) => `${this.prefix}rl:${take.policy}:${createHash('sha256').update(take.key).digest('base64url')}`)
    const args = takes.flatMap((take) => [String(take.parameters.emissionMs), String(take.parameters.toleranceMs)])
    const out = await this.client.portcullisGcraAll(keys.length, ...keys, ...args)
    return takes.map((_, i) => ({ allowed: out[4 * i] === 1, tat: 0, remaining: out[4 * i + 1]!, retryAfterMs: out[4 * i + 2]!, resetMs: out[4 * i + 3]! }))
  }

  async close(): Promise<void> {
    await this.client.quit().catch(() => this.client.disconnect())
  }
}
